"""`gpt2trace info TRACE [--json]` and the gpt2trace.format.info.trace_info it prints."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpt2trace.cli.main import app
from gpt2trace.format import schema as S
from gpt2trace.format.info import trace_info
from gpt2trace.format.reader import load
from gpt2trace.testing.invariants import records


def _info(*args):
    return CliRunner().invoke(app, ["info", *map(str, args)])


def test_trace_info_of_a_real_trace(real_trace):
    rt = real_trace(2, 3, 1)
    info = trace_info(load(rt.path))
    assert info["schema_version"] == S.SCHEMA_VERSION and info["ranks"] == 1
    assert info["threads_per_rank"] == {"0": 2}
    assert (info["steps"], info["first_step"], info["last_step"]) == (3, 0, 2)
    assert info["records"] == sum(info["records_per_kind"].values()) == pq.read_metadata(rt.path).num_rows
    # per step the trainer's 4 counters, and in each sampled step (the first, then one every --memory-every
    # seconds: these steps take milliseconds) the resident memory at the end of its 5 phases (dataload, forward,
    # backward, grad_sync, optimizer)
    counters = records(load(rt.path), S.Kind.COUNTER)
    sampled = counters[counters[S.NAME] == S.Counter.RSS_BYTES][S.STEP].nunique()
    assert sampled >= 1 and info["records_per_kind"]["counter"] == 3 * len(S.Counter.PER_STEP) + 5 * sampled
    assert info["records_per_kind"]["comm"] == 0
    assert info["start_ns"] == 0 and info["duration_s"] == pytest.approx(info["end_ns"] / 1e9)
    assert info["run"]["train"]["steps"] == 3 and info["machine"]["cores"] >= 1
    assert info["bytes"] == rt.path.stat().st_size


def test_table_and_json(real_trace):
    rt = real_trace(2, 3, 1)
    r = _info(rt.path)
    assert r.exit_code == 0, r.output
    for text in ("schema version", "rank 0: 2", "3 (0..2)", "L=2 NH=4 C=32", "threading layer"):
        assert text in r.stdout, text
    r = _info(rt.path, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == json.loads(json.dumps(trace_info(load(rt.path))))


def test_a_trace_of_zero_steps(real_trace):
    info = trace_info(load(real_trace(1, 0, 1).path))
    assert info["steps"] == 0 and info["first_step"] is None and info["threads_per_rank"] == {"0": 1}


BAD = [
    ("missing", lambda p: None, "no such trace file"),
    ("not parquet", lambda p: p.write_text("step,loss\n"), "not a Parquet file"),
    ("future version", lambda p: pq.write_table(pa.table({S.KIND: ["state"]}).replace_schema_metadata(
        {S.META_VERSION: b"99"}), p), "trace schema version 99 is not supported"),
    ("missing columns", lambda p: pq.write_table(pa.table({S.KIND: ["state"]}), p), "missing required column"),
]


@pytest.mark.parametrize("case,make,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, make, message):
    path = tmp_path / "trace.parquet"
    make(path)
    r = _info(path)
    assert r.exit_code == 2 and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and str(path) in lines[0], r.stderr


@pytest.mark.parametrize("case,make,message", BAD, ids=[b[0] for b in BAD])
def test_json_errors_are_one_line_on_stderr_and_nothing_on_stdout(tmp_path, case, make, message):
    # A script reading `info --json` gets either a JSON object on stdout and exit 0, or exit 2, an empty stdout
    # and one line on stderr.
    path = tmp_path / "trace.parquet"
    make(path)
    r = _info(path, "--json")
    assert r.exit_code == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr


def test_help_names_the_paraver_formats():
    r = CliRunner().invoke(app, ["info", "--help"], terminal_width=200)
    assert r.exit_code == 0 and ".prv/.prv.gz" in r.stdout


def test_communicators_of_a_sequence_parallel_trace():
    # sample_traces/small_2ranks_sp_contiguous.parquet: 2 ranks, --sp 2: the world and the sequence group (the
    # 1st Split of the run: id 1 x 2 ranks + lowest rank 0 = 2), both over ranks 0 and 1
    from pathlib import Path
    sample = Path(__file__).resolve().parents[3] / "sample_traces" / "small_2ranks_sp_contiguous.parquet"
    r = _info(sample, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["communicators"] == [{"id": 0, "name": "world", "ranks": [0, 1]},
                                                     {"id": 2, "name": "sp", "ranks": [0, 1]}]
    r = _info(sample)
    assert "sp (id 2): ranks 0 1" in r.stdout and "sequence groups of 2 (contiguous split" in r.stdout
