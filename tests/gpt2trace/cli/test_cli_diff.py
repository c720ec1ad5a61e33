"""`gpt2trace diff A B`: the sentences and tables in 80 columns, JSON to a file and to stdout, and bad input (exit
2, one line naming the file or option, nothing written)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
CONTIGUOUS = SAMPLES / "small_2ranks_sp_contiguous.parquet"
INTERLEAVED = SAMPLES / "small_2ranks_sp_interleaved.parquet"


def invoke(app, *args):
    return CliRunner().invoke(app, [os.fspath(a) for a in args], env={"COLUMNS": "80"})


def one_line_error(r, *needles: str) -> None:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exc_info)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_sentences_and_tables_fit_80_columns(app):
    r = invoke(app, "diff", CONTIGUOUS, INTERLEAVED, "--top", "5")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "B is 1.12x faster per step (72 -> 64.2 ms median step)" in out
    assert "Layout: sp_split contiguous -> interleaved" in out
    assert "Time per step and rank, by impact (ms)" in out and "POP factors" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_json_to_a_file_and_to_stdout(app, tmp_path):
    out = tmp_path / "d.json"
    r = invoke(app, "diff", CONTIGUOUS, INTERLEAVED, "--json", out)
    assert r.exit_code == 0 and f"JSON: {out}" in r.stderr.replace("\n", "")
    d = json.loads(out.read_text())
    assert d["layout"] == {"sp_split": ["contiguous", "interleaved"]}
    assert {"a", "b", "step_s", "changes", "pop", "sentences"} <= set(d)
    r = invoke(app, "diff", CONTIGUOUS, INTERLEAVED, "--json", "-", "--steps", "2:6")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["sentences"][0].startswith("B is ")


@pytest.fixture(scope="module")
def no_steps(tmp_path_factory) -> Path:
    """Records without any phase: no step to compare."""
    path = tmp_path_factory.mktemp("nosteps") / "nosteps.parquet"
    syn.write(syn.from_records([syn.state(0, 0, 0, 1, 1), syn.kernel(0, 0, 0, 1, "matmul_forward", None, 0)]), path)
    return path


BAD = {
    "missing B": (lambda tmp, ns: [CONTIGUOUS, tmp / "nope.parquet"], ("nope.parquet", "does not exist")),
    "directory": (lambda tmp, ns: [tmp, CONTIGUOUS], ("is a directory",)),
    "not a trace": (lambda tmp, ns: [CONTIGUOUS, _garbage(tmp)], ("garbage.parquet",)),
    "no steps": (lambda tmp, ns: [ns, CONTIGUOUS], ("nosteps.parquet", "has no analyzed step")),
    "steps beyond B": (lambda tmp, ns: [CONTIGUOUS, INTERLEAVED, "--steps", "100:200"], ("--steps",)),
    "bad steps": (lambda tmp, ns: [CONTIGUOUS, INTERLEAVED, "--steps", "x"], ("--steps",)),
    "json = input": (lambda tmp, ns: [CONTIGUOUS, INTERLEAVED, "--json", INTERLEAVED], ("--json",)),
    "json in a missing folder": (lambda tmp, ns: [CONTIGUOUS, INTERLEAVED, "--json", tmp / "no" / "d.json"],
                                 ("--json",)),
}


def _garbage(tmp: Path) -> Path:
    path = tmp / "garbage.parquet"
    path.write_bytes(b"PAR1 this is not parquet at all")
    return path


@pytest.mark.parametrize("case", BAD)
def test_bad_input_one_line_exit_2(app, tmp_path, no_steps, case):
    make, needles = BAD[case]
    before = {p: p.read_bytes() for p in (CONTIGUOUS, INTERLEAVED)}
    one_line_error(invoke(app, "diff", *make(tmp_path, no_steps)), *needles)
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["garbage.parquet"])


def test_traces_of_two_models_say_so_first(app):
    # tiny_2threads: L=2 C=32 V=200 context 32 on 1 rank; small_2ranks_pp2_1f1b: L=4 C=128 V=512 context 128 on
    # 2 pipeline stages; neither recomputes (the tiny one's trace records no recompute at all: off, not "none")
    r = invoke(app, "diff", SAMPLES / "tiny_2threads.parquet", SAMPLES / "small_2ranks_pp2_1f1b.parquet")
    assert r.exit_code == 0, r.output
    lines = " ".join(r.stdout.split())                                 # lines folded at 80 columns, joined
    first = lines.split("B: ", 1)[1].split(" ", 1)[1]                  # after the A: and B: lines
    assert first.startswith("A and B ran different models (n_layer 2 -> 4, n_embd 32 -> 128, vocab_size 200 -> "
                            "512, max_seq_len 32 -> 128)")
    assert "Layout: ranks 1 -> 2" in lines and "recompute" not in lines
    d = json.loads(invoke(app, "diff", SAMPLES / "tiny_2threads.parquet", SAMPLES / "small_2ranks_pp2_1f1b.parquet",
                          "--json", "-").stdout)
    assert d["sentences"][0].startswith("A and B ran different models (")
    assert d["models"]["n_layer"] == [2, 4] and "recompute" not in d["layout"]
