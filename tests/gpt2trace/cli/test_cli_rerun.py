"""`gpt2trace rerun`: real reruns of the tiny sample runs (one rank in the process, two under a real mpiexec), what
they print, the new trace's configuration; every bad input one line, exit 2, before any training and with nothing
written."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import typer

from gpt2trace.format.schema import META_RUN
from gpt2trace.format.writer import parts_dir
from gpt2trace.run.rerun import SETTINGS
from gpt2trace.testing.invariants import check_trace
from tests.gpt2trace.cli.test_bad_input import assert_one_line_error, invoke

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
RERUN = [sys.executable, "-m", "gpt2trace", "rerun"]


def _sample(tmp: Path, name: str) -> Path:
    path = tmp / f"{name}.parquet"
    shutil.copy(SAMPLES / f"{name}.parquet", path)
    return path


def _run_of(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[META_RUN])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_one_rank_rerun_trains_the_stored_run_changed_and_says_what_changed(tmp_path):
    # The tiny 1-thread sample (10 steps, B=4) again with 3 steps of B=2: trained in this process, then diffed.
    trace = _sample(tmp_path, "tiny_1thread")
    before = _digest(trace)
    r = subprocess.run([*RERUN, trace, "--set", "steps=3", "--set", "B=2", "-o", tmp_path / "new.parquet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"rerunning {trace} (--set steps=3, --set B=2) -> {tmp_path / 'new.parquet'}")
    assert f"what changed from {trace} to {tmp_path / 'new.parquet'}:" in r.stdout
    assert "Time per step and rank, by impact (ms)" in r.stdout and "POP factors" in r.stdout
    stored, new = _run_of(trace), _run_of(tmp_path / "new.parquet")
    assert (new["train"]["steps"], new["train"]["batch_size"]) == (3, 2)
    for part in ("model", "train", "parallel"):          # everything else as the first run had it
        assert {k: v for k, v in new[part].items() if k in stored[part] and k not in ("steps", "batch_size")} == \
            {k: v for k, v in stored[part].items() if k not in ("steps", "batch_size")}
    check_trace(tmp_path / "new.parquet", threads=1, steps=3, tokens=2 * 32)
    assert _digest(trace) == before                      # the first trace untouched


def test_a_two_rank_rerun_runs_under_mpiexec(tmp_path):
    # The 2-rank allreduce sample with the overlapping gradient sync, 3 steps: this command again on 2 ranks
    # under mpiexec (training only), the comparison here.
    trace = _sample(tmp_path, "tiny_2ranks_allreduce")
    r = subprocess.run([*RERUN, trace, "--set", "dp-sync=overlap", "--set", "steps=3", "-o", "b.parquet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "starting 2 ranks under mpiexec" in r.stdout
    assert r.stdout.count("what changed from") == 1      # one comparison, by this process
    assert "Layout: dp_sync allreduce -> overlap" in r.stdout
    new = _run_of(tmp_path / "b.parquet")
    assert (new["parallel"]["ranks"], new["parallel"]["dp_sync"], new["train"]["steps"]) == (2, "overlap", 3)
    names = set(pq.read_table(tmp_path / "b.parquet", columns=["name"]).column("name").to_pylist())
    assert "MPI_Iallreduce" in names and "MPI_Waitall" in names
    assert not parts_dir(tmp_path / "b.parquet").exists()


def test_fewer_ranks_run_in_the_process(tmp_path):
    trace = _sample(tmp_path, "tiny_2ranks_allreduce")
    r = subprocess.run([*RERUN, trace, "--set", "ranks=1", "--set", "steps=2", "-o", "one.parquet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "mpiexec" not in r.stdout and "ranks 2 -> 1" in r.stdout    # the diff's layout line
    assert _run_of(tmp_path / "one.parquet")["parallel"]["ranks"] == 1


def _no_run(tmp: Path) -> Path:
    table = pq.read_table(SAMPLES / "tiny_1thread.parquet")
    path = tmp / "imported.parquet"
    pq.write_table(table.replace_schema_metadata({k: v for k, v in table.schema.metadata.items()
                                                  if k != META_RUN}), path)
    return path


def _resumed(tmp: Path) -> Path:
    table = pq.read_table(SAMPLES / "tiny_1thread.parquet")
    run = json.loads(table.schema.metadata[META_RUN])
    run = {**run, "resume": "ck.bin", "train": {**run["train"], "start_step": 5}}
    path = tmp / "resumed.parquet"
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, META_RUN: json.dumps(run).encode()}), path)
    return path


def _no_steps(tmp: Path, rows: int) -> Path:
    """tiny_1thread's run configuration over its first `rows` records only, as a `--steps 0` run leaves its trace
    (one state record; rows=0: an empty trace)."""
    table = pq.read_table(SAMPLES / "tiny_1thread.parquet")
    run = json.loads(table.schema.metadata[META_RUN])
    run = {**run, "train": {**run["train"], "steps": 0}}
    path = tmp / f"steps0_{rows}.parquet"
    pq.write_table(table.slice(0, rows).replace_schema_metadata({**table.schema.metadata,
                                                                 META_RUN: json.dumps(run).encode()}), path)
    return path


def _prv_without_its_json(tmp: Path, copy_prv) -> Path:
    prv = copy_prv(tmp)
    (tmp / "run.gpt2trace.json").unlink()
    return prv


BAD = {
    "no =": (lambda t, tmp, c: [t, "--set", "dp-sync"], "--set dp-sync: expected OPTION=VALUE"),
    "no such option": (lambda t, tmp, c: [t, "--set", "speed=11"], "--set speed=11: `gpt2trace run` has no option "
                                                                    "--speed"),
    "not for a rerun": (lambda t, tmp, c: [t, "--set", "save=x.bin"], "--set save=x.bin: --save is not for a rerun"),
    "bad choice": (lambda t, tmp, c: [t, "--set", "dp-sync=fast"], "--set dp-sync=fast: must be one of allreduce, "
                                                                   "reduce-bcast, overlap, zero1"),
    "bad number": (lambda t, tmp, c: [t, "--set", "lr=fast"], "--set lr=fast: must be a number"),
    "out of range": (lambda t, tmp, c: [t, "--set", "B=0"], "--set B=0: must be an integer >= 1"),
    "short option": (lambda t, tmp, c: [t, "--set", "T=33", "--set", "model=tiny"],
                     "--set T=33: exceeds the model's context (max_seq_len 32)"),
    "no longer fits": (lambda t, tmp, c: [t, "--set", "ranks=3", "--set", "sp=2"],
                       "--set sp=2: must divide the 3 ranks"),
    "bad network": (lambda t, tmp, c: [t, "--set", "emulate-network=nodes=2,link=inf,latency=1us"],
                    "--set emulate-network=nodes=2,link=inf,latency=1us: link inf: give a finite bandwidth"),
    "network key twice": (lambda t, tmp, c: [t, "--set", "emulate-network=nodes=2,link=1Gb/s,latency=1us,link=9Gb/s"],
                          "--set emulate-network=nodes=2,link=1Gb/s,latency=1us,link=9Gb/s: link given more than "
                          "once; give each key once"),
    "bad steps": (lambda t, tmp, c: [t, "--set", "steps=2", "--steps", "x:y"], "--steps 'x:y': expected A:B"),
    "no run configuration": (lambda t, tmp, c: [_no_run(tmp)], "imported.parquet: holds no run configuration"),
    "prv without its json": (lambda t, tmp, c: [_prv_without_its_json(tmp, c)], "run.prv: holds no run "
                                                                                "configuration"),
    "resumed": (lambda t, tmp, c: [_resumed(tmp)], "resumed.parquet: its run continued the checkpoint ck.bin"),
    "synthetic": (lambda t, tmp, c: ["{synthetic}"], "is a synthetic trace"),
    # nothing to compare the rerun with, or the rerun would train nothing to compare: said before it trains, the
    # file named once
    "a --steps 0 run": (lambda t, tmp, c: [_no_steps(tmp, 1)], "steps0_1.parquet: has no analyzed step with a time"),
    "an empty trace": (lambda t, tmp, c: [_no_steps(tmp, 0), "--set", "steps=2"],
                       "steps0_0.parquet: the trace is empty (no records)"),
    "no step trained": (lambda t, tmp, c: [t, "--set", "steps=0"], "with --set steps=0: the rerun would train 0 "
                                                                   "step(s), none to compare"),
    "no step in --steps": (lambda t, tmp, c: [t, "--set", "steps=3", "--steps", "5:8"],
                           "the rerun would train 3 step(s), none in --steps 5:8 to compare"),
    "output is the input": (lambda t, tmp, c: [t, "-o", t], "-o"),
    "output exists": (lambda t, tmp, c: [t, "-o", tmp / "old.parquet"], "old.parquet: exists; rerun writes a new "
                                                                        "trace and replaces none"),
    "default output exists": (lambda t, tmp, c: [tmp / "x.parquet"], "the new trace "),
    "output folder missing": (lambda t, tmp, c: [t, "-o", tmp / "no" / "new.parquet"], "-o"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_one_line_before_any_training(app, tmp_path, trace_file, copy_prv, case):
    trace = _sample(tmp_path, "tiny_1thread")
    (tmp_path / "old.parquet").write_bytes(b"an earlier rerun")
    shutil.copy(trace, tmp_path / "x.parquet")
    (tmp_path / "x.rerun.parquet").write_bytes(b"an earlier rerun")
    argv, says = BAD[case]
    args = [str(trace_file) if a == "{synthetic}" else a for a in argv(trace, tmp_path, copy_prv)]
    if "-o" not in args:
        args += ["-o", tmp_path / "new.parquet"] if case != "default output exists" else []
    before = sorted(p.name for p in tmp_path.iterdir())
    r = invoke(app, "rerun", *args)
    line = assert_one_line_error(r, says)
    assert line.count(".parquet: ") <= 1, line                          # a file named once
    assert sorted(p.name for p in tmp_path.iterdir()) == before          # nothing written, no parts folder
    assert (tmp_path / "old.parquet").read_bytes() == b"an earlier rerun"


def test_every_setting_is_an_option_of_run_and_the_rest_are_refused(app):
    from gpt2trace.cli.rerun import _run_options
    run_command = typer.main.get_command(app).commands["run"]       # the command Typer built, not the table
    assert {(p.name, "/".join(p.opts)) for p in run_command.params if p.name != "help"} == \
        set(_run_options().values())                 # every spelling rerun reads is one run accepts
    params = {param for param, _ in _run_options().values()}
    assert set(SETTINGS) <= params                   # the rerun's names are run's own
    assert params - set(SETTINGS) == {"save", "save_every", "resume", "metrics_json", "trace", "no_trace"}
    r = invoke(app, "rerun", "--help")
    assert "--set" in r.stdout and "--train-only" not in r.stdout      # the ranks' own option stays hidden
