import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import reader, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace, check_states, load
from gpt2trace.format.schema import END_NS, KIND, NAME, RANK, START_NS, STATE, STEP, THREAD, State
from gpt2trace.testing import synthetic as syn


def _write(tmp_path, table, name="t.parquet"):
    path = tmp_path / name
    pq.write_table(table, path)
    return path


def _hand_made(**overrides):
    """Only the required columns, plain types (strings, int64), no metadata: what a user writes by hand."""
    cols = {KIND: ["state", "state", "kernel"], RANK: [0, 0, 0], THREAD: [0, 0, 0], START_NS: [0, 5, 0],
            END_NS: [5, 9, 5], STATE: [1, 13, None], NAME: [None, None, "matmul_forward"]}
    cols.update(overrides)
    return pa.table(cols)


def test_load_synthetic_round_trip(tmp_path):
    table = syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=2, layers=1))
    path = tmp_path / "trace.parquet"
    syn.write(table, path, row_group_size=300)            # several row groups: dictionaries to unify
    trace = load(path)
    assert trace.version == schema.SCHEMA_VERSION and trace.path == path
    assert trace.table.schema.equals(schema.arrow_schema(), check_metadata=False)
    assert trace.table.num_rows == table.num_rows
    assert trace.run["parallel"] == {"ranks": 2, "threads": 2}
    assert trace.peak["gflops_per_core"] == 50.0 and trace.machine is None and trace.clock is None
    assert trace.to_pandas()[KIND].value_counts()["state"] > 0
    assert check_states(trace) == []


def test_hand_made_trace_is_cast_and_completed(tmp_path):
    trace = load(_write(tmp_path, _hand_made()))
    assert trace.version == schema.SCHEMA_VERSION           # no version in the metadata: read as the current one
    for name, typ in schema.FIELDS.items():
        assert trace.table.schema.field(name).type == typ
    assert trace.table.column(STEP).null_count == 3         # optional columns added as nulls


# (what is wrong, how to make it, the message it gives)
BAD = [
    ("not parquet", lambda p: p.write_text("step,loss\n1,2\n"), "not a Parquet file"),
    ("missing columns", lambda p: pq.write_table(pa.table({KIND: ["state"], RANK: [0]}), p),
     "missing required column(s) thread, start_ns, end_ns, state, name"),
    ("unknown version", lambda p: pq.write_table(_hand_made().replace_schema_metadata(
        {schema.META_VERSION: b"99"}), p), "trace schema version 99 is not supported (this gpt2trace reads "
                                          "versions 1, 2, 3, 4)"),
    ("empty", lambda p: pq.write_table(_hand_made().slice(0, 0), p), "the trace is empty"),
    ("bad type", lambda p: pq.write_table(_hand_made(**{RANK: ["a", "b", "c"]}), p),
     "column 'rank' has type string, which does not cast to int32"),
    ("unknown kind", lambda p: pq.write_table(_hand_made(**{KIND: ["state", "state", "event"]}), p),
     "unknown record kind(s) event"),
    ("end before start", lambda p: pq.write_table(_hand_made(**{END_NS: [5, 4, 5]}), p), "end before they start"),
    ("task without id", lambda p: pq.write_table(_hand_made(**{KIND: ["state", "state", "task"]}), p),
     "1 task record(s) without a 'task' id"),
    ("bad metadata", lambda p: pq.write_table(_hand_made().replace_schema_metadata({schema.META_RUN: b"{"}), p),
     "metadata gpt2trace.run is not valid JSON"),
]


@pytest.mark.parametrize("case,make,message", BAD, ids=[b[0] for b in BAD])
def test_bad_traces(tmp_path, case, make, message):
    path = tmp_path / "bad.parquet"
    make(path)
    with pytest.raises(TraceError) as err:
        load(path)
    text = str(err.value)
    assert message in text and str(path) in text and "\n" not in text


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        load(tmp_path / "nope.parquet")


def test_overlapping_states_name_the_thread_and_time():
    recs = [syn.state(0, 0, 0, 2, State.RUNNING), syn.state(1, 1, 0, 2, State.RUNNING),
            syn.state(1, 1, 1.5, 3, State.IDLE)]
    with pytest.raises(TraceError, match=r"overlap on rank.thread 1.1 at 1.500000000 s"):
        check_states(Trace.from_table(syn.from_records(recs)))


def test_gaps_are_warnings():
    recs = [syn.state(0, 0, 0, 1, State.RUNNING), syn.state(0, 0, 2, 3, State.RUNNING)]
    warnings = check_states(Trace.from_table(syn.from_records(recs)))
    assert len(warnings) == 1 and "1 gap(s)" in warnings[0] and "rank.thread 0.0 at 1.000000000 s" in warnings[0]


def test_metadata_json(tmp_path):
    meta = {schema.META_CLOCK: json.dumps({"source": "CLOCK_MONOTONIC"}).encode()}
    trace = Trace.from_table(syn.from_records([syn.state(0, 0, 0, 1, State.RUNNING)], meta))
    assert trace.clock == {"source": "CLOCK_MONOTONIC"} and trace.run is None


def test_task_columns_round_trip(tmp_path):
    """A task trace's list column survives Parquet, the split by kind, the full table and pandas."""
    from gpt2trace.testing import synthetic_tasks as tk
    path = tmp_path / "tasks.parquet"
    syn.write(tk.task_table(*tk.hand_built()), path)
    trace = load(path)
    tasks = trace.records(schema.Kind.TASK)
    assert tasks.schema.field(schema.PREDS).equals(schema.arrow_schema().field(schema.PREDS), check_metadata=True)
    assert tasks.column(schema.PREDS).to_pylist() == [[], [0], [], [1], [2, 3]]    # by thread, then time
    assert schema.PREDS not in trace.records(schema.Kind.KERNEL).column_names      # null for the whole kind
    df = trace.to_pandas()
    assert df[df[KIND] == "task"][schema.BLOCK].tolist() == [0, 0, 1, 1, 0]
    assert df[df[KIND] == "kernel"][schema.PREDS].isna().all()
    assert schema.schedule(trace.run) == schema.Schedule.TASKS and schema.schedule(None) == schema.Schedule.FORKJOIN


@pytest.mark.parametrize("group_rows", [7, 40, 1000])
@pytest.mark.parametrize("rows", [1, 5, 16, 33, 10_000])
def test_streamed_tables_hold_pieces_not_row_groups(tmp_path, monkeypatch, group_rows, rows):
    """The exports' reading: every record once, in order, in tables of `rows`, and no column chunk longer than a
    piece, whether the row groups are smaller or larger than the pieces and the tables."""
    monkeypatch.setattr(reader, "PIECE_ROWS", 16)
    table = syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=2, layers=1))
    path = tmp_path / "trace.parquet"
    syn.write(table, path, row_group_size=group_rows)
    columns = [RANK, START_NS, NAME]
    tables = list(reader.streamed_tables(reader.open_parquet(path, streamed=True), columns, rows))
    assert [t.num_rows for t in tables[:-1]] == [rows] * (len(tables) - 1) and 0 < tables[-1].num_rows <= rows
    assert pa.concat_tables(tables).equals(pq.read_table(path, columns=columns))
    assert max(len(chunk) for t in tables for c in t.columns for chunk in c.chunks) <= min(rows, 16)
    no_columns = reader.streamed_tables(reader.open_parquet(path, streamed=True), [], rows)
    assert sum(t.num_rows for t in no_columns) == table.num_rows
