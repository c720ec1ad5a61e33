"""Tables in an 80-column terminal: they fit, or stack; a number or a name is never cut (rich's `…`); every
label says what it is (rank and thread spelled out, what a layer `all` / `none` means)."""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpt2trace.cli.tables import Col, pack, print_table
from gpt2trace.testing import synthetic as syn


def _printed(width: int, *args, **kwargs) -> str:
    out = Console(width=width, record=True, markup=False, emoji=False, highlight=False, file=io.StringIO())
    print_table(out, *args, **kwargs)
    return out.export_text()


MPI_COLS = [Col("call", label=True, bare=True), Col("count"), Col("bytes"), Col("total s"), Col("wait s"),
            Col("transfer s"), Col("GB/s"), Col("hidden share")]
MPI_ROW = ("MPI_Allreduce", "24", "413,124,608", "0.01234", "0.003001", "0.00012", "133.3", "12.5%")


def test_a_table_that_fits_is_a_table():
    text = _printed(200, "MPI calls", MPI_COLS, [MPI_ROW])
    assert "┃ call" in text and "413,124,608" in text and "…" not in text


def test_a_table_too_wide_stacks_and_keeps_every_number_whole():
    # widths (widest cell or header word): 13 + 5 + 11 + 7 + 8 + 8 + 5 + 6 = 63, plus the box's 3 per column and
    # 1 = 88 > 80, and the label (13) has no space to wrap at: stacked.
    text = _printed(80, "MPI calls", MPI_COLS, [MPI_ROW])
    assert "┃" not in text and "…" not in text
    lines = [line.rstrip() for line in text.splitlines()]
    assert lines[:2] == ["MPI calls", "  MPI_Allreduce"]                 # a bare label shows without its header
    pairs = " ".join(lines[2:])
    for header, value in zip([c.header for c in MPI_COLS[1:]], MPI_ROW[1:]):
        assert f"{header} {value}" in pairs
    assert max(len(line) for line in lines) <= 80


@pytest.mark.parametrize("width,stacked", [(87, True), (88, False)])
def test_a_table_stacks_exactly_when_it_does_not_fit(width, stacked):
    text = _printed(width, "MPI calls", MPI_COLS, [MPI_ROW])      # 88 columns wide as a table (above)
    assert ("┃" not in text) == stacked and max(len(line.rstrip()) for line in text.splitlines()) <= width


def test_long_labels_wrap_at_spaces_before_the_table_stacks():
    cols = [Col("finding", label=True), Col("lost s")]
    rows = [("matmul_backward layer 11 across the threads of rank 3", "0.0005964")]
    text = _printed(40, "t", cols, rows)
    assert "┃" in text and "0.0005964" in text and "matmul_backward" in text and "…" not in text


def test_pack_never_splits_an_item():
    items = ["a 1", "bb 22", "ccc 333"]
    assert pack(items, 11) == ["a 1   bb 22", "ccc 333"]       # 3 + 3 + 5 = 11 fits; 11 + 3 + 7 does not
    assert pack(items, 10) == items
    assert pack(["a-very-long-item"], 4) == ["a-very-long-item"]           # alone on its line, the console folds it


# --- the analyze command at 80 columns -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    path = tmp_path_factory.mktemp("t4") / "four-ranks.parquet"
    syn.write(syn.generate(syn.SyntheticConfig(ranks=4, threads=2, steps=3, layers=2, late_rank=(1, 1.5))), path)
    return path


def _analyze(app, width: int, *args) -> str:
    r = CliRunner(env={"COLUMNS": str(width)}).invoke(app, ["analyze", *map(str, args)])
    assert r.exit_code == 0, r.output
    return r.stdout


def test_analyze_fits_80_columns_and_cuts_nothing(app, trace_file):
    text = _analyze(app, 80, trace_file, "--top", "50")
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    assert "…" not in text
    # whole numbers and names that used to be cut: the Allreduce's 4 x 4,000,000 bytes (2 ranks' gradients of
    # the synthetic model), the longest kernel names
    assert "bytes 16,000,000" in text
    for name in ("crossentropy_backward", "layernorm_backward", "attention_backward"):
        assert name in text


def test_slowest_and_layer_are_spelled_out(app, trace_file):
    result = json.loads(CliRunner().invoke(app, ["analyze", str(trace_file), "--json", "-", "--top", "50"]).stdout)
    text = " ".join(_analyze(app, 80, trace_file, "--top", "50").split())
    # rank 1 is late (late_rank=(1, 1.5)): the top row is matmul_forward over all layers (JSON layer None),
    # across ranks, slowest rank 1
    top = result["imbalance"][0]
    assert (top["kernel"], top["layer"], top["scope"], top["slowest"]) == ("matmul_forward", None, "ranks", "1")
    assert "matmul_forward, layer all, across ranks, slowest rank 1 " in text
    # a thread row's 'rank.thread' 1.1 is "rank 1 thread 1", never the number 1.1
    assert any(r["scope"] == "threads" and r["slowest"] == "1.1" for r in result["imbalance"])
    assert "across threads of rank 1, slowest rank 1 thread 1" in text and "slowest 1.1" not in text
    # in root causes and kernels a layer None is a kernel outside the blocks, and the output says so
    assert any(r["layer"] is None for r in result["root_causes"])
    assert "layer none: a kernel outside the transformer blocks" in text


def test_model_factors_at_80_columns(app, trace_file, four_ranks):
    text = _analyze(app, 80, trace_file, four_ranks, "--top", "1")
    table = text[text.index("Model factors"):]
    assert "…" not in table
    for header in ("trace 1", "trace 2", "Useful duration (ideal, max) (s)", "Communication efficiency",
                   "Computation scalability", "Threads per process"):
        assert header in table
    assert f"trace 1: {trace_file}" in table.replace("\n", "") and f"trace 2: {four_ranks}" in table.replace("\n", "")


def test_export_says_every_file_it_writes(app, trace_file, tmp_path):
    r = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["export", str(trace_file), "-o", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    said = r.stdout.replace("\n", "")
    for suffix in (".prv", ".pcf", ".row", ".gpt2trace.json"):
        assert f"{tmp_path / 'p'}{suffix}" in said and (tmp_path / f"p{suffix}").is_file()
