import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from rich.console import Console
from typer.testing import CliRunner

from gpt2trace.cli.analyze import render_critical_path
from gpt2trace.format import schema
from gpt2trace.format.schema import KIND, State
from gpt2trace.testing import grid_trace
from gpt2trace.testing import synthetic as syn


def _run(app, *args):
    return CliRunner().invoke(app, ["analyze", *map(str, args)])


def test_tables_and_findings(app, trace_file):
    r = _run(app, trace_file, "--top", "3")
    assert r.exit_code == 0, r.output
    for title in ("Summary", "POP efficiencies", "Load imbalance", "MPI calls", "Root causes", "Findings"):
        assert title in r.stdout


def test_json_to_stdout(app, trace_file):
    r = _run(app, trace_file, "--json", "-", "--steps", "1:3", "--peak-gflops", "100")
    assert r.exit_code == 0
    out = json.loads(r.stdout)
    assert out["summary"]["steps"] == 2 and out["summary"]["peak_gflops_per_core"] == 100
    assert 0 < out["pop"]["parallel_efficiency"] <= 1
    assert out["root_causes"][0]["rank"] == 1                  # the late rank


def test_json_file_and_several_traces(app, trace_file, tmp_path):
    dest = tmp_path / "out.json"
    r = _run(app, trace_file, trace_file, "--json", dest)
    assert r.exit_code == 0 and "Model factors" in r.stdout
    out = json.loads(dest.read_text())
    assert len(out["traces"]) == 2 and out["scaling"][1]["speedup"] == pytest.approx(1.0)


def test_help_names_the_paraver_formats(app):
    r = CliRunner().invoke(app, ["analyze", "--help"], terminal_width=200)
    assert r.exit_code == 0 and ".prv/.prv.gz" in r.stdout


def test_model_factors_tell_traces_apart(app, tmp_path):
    # Two traces whose paths differ only at the very end: the table numbers them and names each in full.
    paths = []
    for ranks in (1, 2):
        path = tmp_path / "a_rather_long_directory_name_for_the_runs" / f"run_with_two_threads_{ranks}.parquet"
        path.parent.mkdir(exist_ok=True)
        syn.write(syn.generate(syn.SyntheticConfig(ranks=ranks, threads=2, steps=3, layers=1)), path)
        paths.append(path)
    r = _run(app, *paths)
    assert r.exit_code == 0, r.output
    table = r.stdout[r.stdout.index("Model factors"):]
    for i, path in enumerate(paths, 1):
        assert f"trace {i}: {path}" in table
    for label in ("Serialization efficiency", "Transfer efficiency", "Serial region efficiency",
                  "Parallel region efficiency", "Useful duration (ideal, max)", "need hardware counters"):
        assert label in table, label


def _overlapping(path):
    recs = [syn.state(0, 0, 0, 2, State.RUNNING), syn.state(0, 0, 1, 3, State.IDLE)]
    pq.write_table(syn.from_records(recs), path)


BAD = [
    ("not parquet", lambda p: p.write_text("hello"), "not a Parquet file"),
    ("missing columns", lambda p: pq.write_table(pa.table({KIND: ["state"]}), p), "missing required column"),
    ("unknown version", lambda p: pq.write_table(syn.from_records(
        [syn.state(0, 0, 0, 1, State.RUNNING)]).replace_schema_metadata({schema.META_VERSION: b"7"}), p),
     "schema version 7 is not supported"),
    ("empty", lambda p: pq.write_table(syn.from_records([]), p), "the trace is empty"),
    ("overlapping states", _overlapping, "state records overlap on rank.thread 0.0 at 1.000000000 s"),
]


@pytest.mark.parametrize("case,make,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_one_line_exit_2(app, tmp_path, case, make, message):
    path = tmp_path / "bad.parquet"
    make(path)
    r = _run(app, path)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in r.stderr and str(path) in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("args,message", [(["--steps", "x:y"], "--steps 'x:y'"),
                                          (["--steps", "7:9"], "--steps 7:9 selects no step")])
def test_bad_options_exit_2(app, trace_file, args, message):
    r = _run(app, trace_file, *args)
    assert r.exit_code == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_missing_file_is_a_usage_error(app, tmp_path):
    r = _run(app, tmp_path / "nope.parquet")
    assert r.exit_code == 2 and "does not exist" in r.output and "Traceback" not in r.output


def test_critical_path_table_fits_80_columns(app, trace_file):
    r = _run(app, trace_file)
    assert r.exit_code == 0, r.output
    assert "Critical path" in r.stdout and "On the critical path" in r.stdout
    out = json.loads(_run(app, trace_file, "--json", "-").stdout)["critical_path"]
    # the path tiles the analyzed window: its length is the window's time
    assert out["length_s"] == pytest.approx(out["window_s"]) and out["clock_violations"] == 0
    console = Console(width=80, record=True, file=io.StringIO())
    render_critical_path(console, out, top=10)
    text = console.export_text()
    assert "rank switches" in text and max(len(line) for line in text.splitlines()) <= 80


def test_degrees_and_communication_per_dimension_fit_80_columns(app, tmp_path):
    # gpt2trace/testing/grid_trace.py: tp 2 x dp 2, both steps analyzed (hand-checked in tests/analysis)
    path = tmp_path / "tp_dp.parquet"
    syn.write(grid_trace.tp_dp_trace(tp_s=0.5), path)
    r = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["analyze", str(path), "--steps", "0:2"])
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80 and "…" not in text
    assert "parallel dimensions" in text and "dp 2 x tp 2 x pp 1 x sp 1" in text
    table = text[text.index("Communication per parallel dimension"):text.index("Communication per group")]
    # stacked at 80 columns: each row's labels, then its numbers; tp first (2 s per step of a mean rank)
    assert table.index("dimension tp") < table.index("dimension dp,") < table.index("dimension dp x tp")
    assert "calls/step 4" in table and "bytes/call (median) 1,000,000" in table and "MPI ms/step 2000" in table
    assert "share of step 20.0%" in table and "wait ms/step 500" in table
    out = json.loads(CliRunner().invoke(app, ["analyze", str(path), "--steps", "0:2", "--json", "-"]).stdout)
    assert [d["dimension"] for d in out["comm_dimensions"]] == ["tp", "dp", "dp x tp"]
    assert out["comm_dimensions"][2]["bytes_per_call"] is None       # the barrier moves no bytes
    assert out["summary"]["degrees"] == "dp 2 x tp 2 x pp 1 x sp 1"


def test_task_section_fits_80_columns(app, tmp_path):
    # gpt2trace/testing/synthetic_tasks.hand_built: numbers worked out in tests/analysis/test_tasks.py (one step:
    # 5 tasks, 75 us of task time, critical path 45 us of a 48 us runtime, scheduling 10 of 140 us of thread time)
    from gpt2trace.testing import synthetic_tasks as tk
    path = tmp_path / "tasks.parquet"
    syn.write(tk.task_table(*tk.hand_built()), path)
    r = CliRunner(env={"COLUMNS": "80"}).invoke(app, ["analyze", str(path)])
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80 and "…" not in text
    section = text[text.index("Tasks (sums over"):text.index("Findings")]
    for row in ("tasks, threads per rank", "5, 2", "4.5e-05 s", "4.8e-05 s", "1.067x", "1.667", "7.1%",
                "2 us, 10 us", "25.0%", "16.7%"):
        assert row in section, row
    assert section.index("On the task graph's critical paths") < section.index("Task sizes")
    paths = section[section.index("On the task graph's critical paths"):section.index("Task sizes")]
    assert paths.index("matmul_forward") < paths.index("gelu_forward") < paths.index("residual_forward")
    assert "66.7%" in paths                                  # matmul_forward: 30 of the path's 45 us
    assert "Tasks are too fine" in text and "Tasks are too coarse" in text
    out = json.loads(CliRunner().invoke(app, ["analyze", str(path), "--json", "-"]).stdout)
    assert out["tasks"]["totals"]["critical_path_s"] == pytest.approx(45e-6)


def test_fork_join_output_has_no_task_section(app, trace_file):
    r = _run(app, trace_file)
    assert r.exit_code == 0 and "Tasks (sums over" not in r.stdout
