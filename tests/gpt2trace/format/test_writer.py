"""Parts and their merge: records_table's nulls and dictionaries, atomic parts, the states the merge builds, merge,
recover; parts of earlier versions; a full disk and file names that are not UTF-8."""
from __future__ import annotations

import contextlib
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.parts import (
    BLOCKS,
    KERNEL_CALL,
    KIND_CODES,
    NULL,
    PART_KINDS,
    PartWindow,
    part_layout,
    records_table,
    with_window,
)
from gpt2trace.format.reader import load
from gpt2trace.format.writer import PartWriter, clear_unfinished, merge_parts, part_files, parts_dir, recover

SCHEMA = S.arrow_schema({S.META_RUN: b'{"model": {"n_layer": 2}}'})


def _part(names: list[str], name_codes: list[int], start: int = 0, rank: int = 0,
          schema: pa.Schema = SCHEMA) -> pa.Table:
    """A part as the tracer makes it, of the window [start, start + 10) on one thread: a kernel call per name code,
    each of region [start, start + 5) and one block [start, start + 5) of the main thread. The merge makes 2 states
    of it (the main thread Running in its blocks, then in Python to the window's end) and one kernel record per
    call: 2 + n records."""
    n = len(name_codes)
    cols = {
        S.KIND: np.full(n, KIND_CODES[KERNEL_CALL]), S.RANK: np.full(n, rank, np.int32),
        S.THREAD: np.zeros(n, np.int32), S.START_NS: np.full(n, start, np.int64),
        S.END_NS: np.full(n, start + 5, np.int64), S.NAME: np.array(name_codes, np.int32),
        S.STEP: np.full(n, start // 10), BLOCKS: np.tile([start, start + 5, 0], (n, 1)),
    }
    layout = with_window(part_layout(schema, 1), PartWindow(rank, start, start + 10, threads=1))
    return records_table(cols, pa.array(names, pa.string()), layout, kinds=PART_KINDS)


def _earlier_part(names: list[str], name_codes: list[int], start: int = 0) -> pa.Table:
    """A part as earlier versions wrote it: its two state records and one kernel record per name code."""
    n = len(name_codes)
    cols = {
        S.KIND: np.array([KIND_CODES["state"]] * 2 + [KIND_CODES["kernel"]] * n),
        S.RANK: np.zeros(n + 2, np.int32), S.THREAD: np.zeros(n + 2, np.int32),
        S.START_NS: np.array([start, start + 5] + [start] * n, np.int64),
        S.END_NS: np.array([start + 5, start + 10] + [start + 5] * n, np.int64),
        S.STATE: np.array([1, 5] + [NULL] * n), S.NAME: np.array([NULL, NULL] + name_codes),
        S.STEP: np.array([NULL, NULL] + [start // 10] * n), S.VALUE: np.full(n + 2, np.nan),
    }
    return records_table(cols, pa.array(names), SCHEMA)


def test_records_table_types_and_nulls():
    t = _earlier_part(["matmul_forward", "gelu_forward"], [1, 0])
    assert t.schema.equals(SCHEMA, check_metadata=True)
    assert t.column(S.KIND).to_pylist() == ["state", "state", "kernel", "kernel"]
    assert t.column(S.NAME).to_pylist() == [None, None, "gelu_forward", "matmul_forward"]
    assert t.column(S.STATE).to_pylist() == [1, 5, None, None]
    assert t.column(S.STEP).null_count == 2 and t.column(S.VALUE).null_count == 4
    assert t.column(S.LAYER).null_count == 4                 # a column not given is all null


def test_parts_are_atomic_and_hidden_temporaries_are_ignored(tmp_path):
    trace = tmp_path / "trace.parquet"
    writer = PartWriter(trace, rank=3)
    writer.write(_part(["a"], [0], start=0, rank=3))
    writer.write(_part(["a", "b"], [1], start=10, rank=3))
    rank_dir = parts_dir(trace) / "rank00003"
    assert sorted(p.name for p in rank_dir.iterdir()) == ["00000000.arrow", "00000001.arrow"]
    # what a SIGKILL in the middle of writing part 2 leaves: a half-written hidden temporary
    (rank_dir / ".00000002.arrow.tmp").write_bytes(b"ARROW1 half a part")
    assert [p.name for p in part_files(parts_dir(trace))] == ["00000000.arrow", "00000001.arrow"]
    read = ds.dataset(parts_dir(trace), format="arrow").to_table()                   # what a user reads after a crash
    # the raw events: a kernel call in each part (its kernel records and the states are the merge's)
    assert read.column(S.KIND).to_pylist() == [KERNEL_CALL] * 2 and read.column(BLOCKS).to_pylist() == [
        [0, 5, 0], [10, 15, 0]]
    assert sorted(set(read.column(S.NAME).to_pylist()) - {None}) == ["a", "b"]
    assert writer.bytes == sum(p.stat().st_size for p in part_files(parts_dir(trace)))


def test_merge_unifies_dictionaries_keeps_order_and_metadata(tmp_path):
    trace = tmp_path / "trace.parquet"
    w0, w1 = PartWriter(trace, 0), PartWriter(trace, 1)
    w0.write(_part(["a"], [0], start=0))
    w0.write(_part(["a", "b"], [1, 0], start=10))          # the dictionary grew: b appeared
    w1.write(_part(["c"], [0], start=0, rank=1))
    merged = merge_parts(trace, extra_metadata={S.META_CLOCK: b'{"source": "CLOCK_MONOTONIC"}'})
    assert merged.records == 3 + 4 + 3 and merged.ranks == 2 and not parts_dir(trace).exists()
    assert merged.steps is None                              # no counter records: no complete step
    merged = pq.read_table(trace)
    assert merged.schema.equals(S.arrow_schema(), check_metadata=False)
    assert set(merged.schema.metadata) == {S.META_VERSION, S.META_RUN, S.META_CLOCK}   # no part window
    assert merged.column(S.KIND).chunk(0).dictionary.to_pylist() == list(S.Kind.ALL)  # no `kernel_call`
    # one row group per rank (no group holds two ranks), each with one dictionary: rank 0's parts unified
    assert merged.column(S.NAME).num_chunks == 2
    assert merged.column(S.NAME).chunk(0).dictionary.to_pylist() == ["a", "b"]
    # in (rank, start) order: rank 0's kernel at 0 ns, then its two at 10 ns (in part order), then rank 1's
    assert [n for n in merged.column(S.NAME).to_pylist() if n] == ["a", "b", "a", "c"]
    assert merged.column(S.RANK).to_pylist() == [0] * 7 + [1] * 3
    starts = merged.column(S.START_NS).to_pylist()
    assert starts[:7] == sorted(starts[:7]) and starts[7:] == sorted(starts[7:])
    assert load(trace).run == {"model": {"n_layer": 2}} and load(trace).clock == {"source": "CLOCK_MONOTONIC"}


def test_parquet_parts_of_an_earlier_version_are_still_merged(tmp_path):
    trace = tmp_path / "trace.parquet"
    rank_dir = parts_dir(trace) / "rank00000"
    rank_dir.mkdir(parents=True)
    pq.write_table(_earlier_part(["old"], [0], start=0), rank_dir / "00000000.parquet")   # as earlier versions wrote
    assert not clear_unfinished(trace)                       # a finished part, whatever its format, is kept
    merged = recover(trace)
    # 2 states + 1 kernel named "old"
    assert merged.records == 3 and [n for n in pq.read_table(trace).column(S.NAME).to_pylist() if n] == ["old"]


def test_parts_of_version_2_merge_with_a_null_tag(tmp_path):
    # rank 0's part as version 2 wrote it (no `tag` column, its states in it), rank 1's of this version with a
    # tagged MPI_Send [3, 4): the merged file has the current columns and version; the old part's records read
    # with a null tag
    trace = tmp_path / "trace.parquet"
    old = _earlier_part(["a"], [0])
    old = old.drop_columns([S.TAG]).replace_schema_metadata({**SCHEMA.metadata, S.META_VERSION: b"2"})
    rank_dir = parts_dir(trace) / "rank00000"
    rank_dir.mkdir(parents=True)
    with open(rank_dir / "00000000.arrow", "wb") as f, pa.ipc.new_file(f, old.schema) as w:
        w.write_table(old)
    cols = {S.KIND: np.array([KIND_CODES["comm"]]), S.RANK: np.array([1]), S.THREAD: np.array([0]),
            S.START_NS: np.array([3]), S.END_NS: np.array([4]), S.NAME: np.array([0]), S.PEER: np.array([0]),
            S.BYTES: np.array([64]), S.TAG: np.array([9]), S.STATE: np.array([S.State.BLOCKING_SEND])}
    layout = with_window(part_layout(SCHEMA, 1), PartWindow(1, 0, 10, 1))
    PartWriter(trace, 1).write(records_table(cols, pa.array(["MPI_Send"]), layout, kinds=PART_KINDS))
    merged = recover(trace)
    # rank 1: Running [0, 3), Blocking Send [3, 4), Running [4, 10) and the send
    assert merged.records == 3 + 4
    table = pq.read_table(trace)
    assert table.schema.names == list(S.FIELDS)
    assert table.schema.metadata[S.META_VERSION] == str(S.SCHEMA_VERSION).encode()
    # rank 0's three records, then rank 1's by start (at 3 ns its state, then the send: states come first)
    assert table.column(S.TAG).to_pylist() == [None] * 3 + [None, None, 9, None]
    assert table.column(S.STATE).to_pylist()[3:] == [S.State.RUNNING, S.State.BLOCKING_SEND, None, S.State.RUNNING]


def test_a_damaged_part_is_named_and_nothing_is_written(tmp_path):
    trace = tmp_path / "trace.parquet"
    writer = PartWriter(trace, 0)
    writer.write(_part(["a"], [0]))
    damaged = writer.write(_part(["b"], [0], start=10))
    damaged.write_bytes(damaged.read_bytes()[:100])          # cut short by something other than us
    with pytest.raises(TraceError, match=r"00000001.arrow: not a readable trace part .*move it out") as err:
        recover(trace)
    assert "\n" not in str(err.value) and not trace.exists() and len(part_files(parts_dir(trace))) == 2


def test_the_merge_builds_the_states_of_each_part(tmp_path):
    # a part of the window [0, 100) on 2 threads: a matmul_forward call of region [10, 60) with the main thread's
    # block [12, 40) and the worker's [15, 50); a dataload phase [70, 90) with an MPI_Bcast [75, 80) in it
    trace = tmp_path / "trace.parquet"
    c, p, m = (KIND_CODES[x] for x in (KERNEL_CALL, S.Kind.PHASE, S.Kind.COMM))
    cols = {S.KIND: np.array([c, p, m]), S.RANK: np.zeros(3, np.int32), S.THREAD: np.zeros(3, np.int32),
            S.START_NS: np.array([10, 70, 75]), S.END_NS: np.array([60, 90, 80]), S.NAME: np.array([0, 1, 2]),
            S.STEP: np.array([3, 3, 3]), S.LAYER: np.array([1, NULL, NULL]),
            S.STATE: np.array([NULL, NULL, S.State.GROUP_COMMUNICATION]),
            BLOCKS: np.array([[12, 40, 0, 15, 50, 1], [NULL] * 6, [NULL] * 6])}
    names = pa.array(["matmul_forward", "dataload", "MPI_Bcast"])
    layout = with_window(part_layout(SCHEMA, 2), PartWindow(0, 0, 100, 2))
    PartWriter(trace, 0).write(records_table(cols, names, layout, kinds=PART_KINDS))
    merged = merge_parts(trace)
    R, F, Y, I, O, G = (S.State.RUNNING, S.State.SCHEDULING_FORK_JOIN, S.State.SYNCHRONIZATION, S.State.IDLE,
                        S.State.IO, S.State.GROUP_COMMUNICATION)
    trace_ = load(trace)
    states = trace_.records(S.Kind.STATE).to_pandas().sort_values([S.THREAD, S.START_NS])
    assert states[[S.THREAD, S.START_NS, S.END_NS, S.STATE]].values.tolist() == [
        [0, 0, 10, R], [0, 10, 12, F], [0, 12, 40, R], [0, 40, 60, Y], [0, 60, 70, R],    # waits for the worker
        [0, 70, 75, O], [0, 75, 80, G], [0, 80, 90, O], [0, 90, 100, R],                  # I/O around the Bcast
        [1, 0, 10, I], [1, 10, 15, F], [1, 15, 50, R], [1, 50, 60, Y], [1, 60, 100, I]]
    kernels = trace_.records(S.Kind.KERNEL).to_pandas()
    assert kernels[[S.THREAD, S.START_NS, S.END_NS, S.NAME, S.STEP, S.LAYER]].values.tolist() == [
        [0, 12, 40, "matmul_forward", 3, 1], [1, 15, 50, "matmul_forward", 3, 1]]
    # 14 states, a kernel record per block, the phase and the call; the kernel call row is gone, and only states
    # have a state
    assert merged.records == 14 + 2 + 2
    table = pq.read_table(trace)
    assert BLOCKS not in table.column_names and KERNEL_CALL not in table.column(S.KIND).to_pylist()
    assert table.filter(pc.equal(table.column(S.KIND), S.Kind.COMM)).column(S.STATE).null_count == 1


@pytest.mark.parametrize("damage,says", [
    (lambda cols, meta: cols[BLOCKS].__setitem__((0, 2), 1), "a block of thread 1 but only 1 threads"),
    (lambda cols, meta: cols[S.KIND].__setitem__(0, len(PART_KINDS)), "records of a kind a part cannot hold"),
    (lambda cols, meta: meta.__setitem__(b"gpt2trace.part_window", b'{"rank": "x"}'), "window metadata is damaged"),
])
def test_a_part_whose_events_do_not_fit_together_is_named(tmp_path, damage, says):
    # a part we did not write: thread indices, kinds or a window that the merge cannot hold
    trace = tmp_path / "trace.parquet"
    cols = {S.KIND: np.array([KIND_CODES[KERNEL_CALL]]), S.RANK: np.zeros(1, np.int32),
            S.THREAD: np.zeros(1, np.int32), S.START_NS: np.array([0]), S.END_NS: np.array([5]),
            S.NAME: np.array([0]), BLOCKS: np.array([[1, 4, 0]])}
    layout = with_window(part_layout(SCHEMA, 1), PartWindow(0, 0, 10, 1))
    meta = dict(layout.metadata)
    damage(cols, meta)
    table = records_table(cols, pa.array(["k"]), layout.with_metadata(meta), kinds=(*PART_KINDS, "bogus"))
    PartWriter(trace, 0).write(table)
    with pytest.raises(TraceError, match=rf"00000000.arrow: not a readable trace part \(.*{says}.*\); move it out"):
        recover(trace)
    assert not trace.exists() and part_files(parts_dir(trace))


def test_merge_without_parts_names_the_directory(tmp_path):
    with pytest.raises(TraceError, match=r"trace.parquet.parts: no trace parts to merge"):
        merge_parts(tmp_path / "trace.parquet")


def test_recover_from_the_trace_or_its_parts_directory(tmp_path):
    for name in ("a.parquet", "b.parquet"):
        trace = tmp_path / name
        PartWriter(trace, 0).write(_part(["k"], [0]))
        arg = trace if name == "a.parquet" else parts_dir(trace)
        merged = recover(arg)
        assert (merged.path, merged.records) == (trace, 3) and load(trace).num_rows == 3
    with pytest.raises(TraceError, match=r"a.parquet.parts: no parts directory to recover .*a.parquet is already "
                                         r"a complete trace \(3 records\)"):
        recover(tmp_path / "a.parquet")
    with pytest.raises(TraceError, match="check the path"):
        recover(tmp_path / "never.parquet")


@pytest.mark.parametrize("content,says", [
    (b"", "is not a complete trace either"),                            # what a crash may leave
    (b"PAR1 garbage PAR1", "is not a complete trace either"),
    (None, "is a Parquet file but not a gpt2trace trace"),               # plain Parquet, no schema version
])
def test_recover_says_what_a_file_without_parts_is(tmp_path, content, says):
    trace = tmp_path / "x.parquet"
    if content is None:
        pq.write_table(pa.table({"a": [1]}), trace)
    else:
        trace.write_bytes(content)
    with pytest.raises(TraceError, match=says) as err:
        recover(trace)
    assert "already" not in str(err.value) and "\n" not in str(err.value)


def test_a_parts_folder_without_a_finished_part_is_nothing_to_recover_and_blocks_nothing(tmp_path):
    trace = tmp_path / "trace.parquet"
    rank_dir = parts_dir(trace) / "rank00000"
    rank_dir.mkdir(parents=True)
    (rank_dir / ".00000000.arrow.tmp").write_bytes(b"ARROW1 cut off by a kill")
    with pytest.raises(TraceError, match="holds no finished part: the run stopped before it wrote its first one"):
        recover(trace)
    assert clear_unfinished(trace) and not parts_dir(trace).exists()
    PartWriter(trace, 0).write(_part(["k"], [0]))
    assert not clear_unfinished(trace) and part_files(parts_dir(trace))   # a finished part is never removed


def test_merge_on_a_full_disk_leaves_the_parts_and_no_temporary(tmp_path, small_fs):
    disk = small_fs(64)                                      # 64 KiB: room for the parts, not for parts + merge
    trace = disk / "trace.parquet"
    writer = PartWriter(trace, 0)
    big = [f"kernel_{i:04d}_" + "x" * 200 for i in range(60)]  # incompressible enough: ~20 KiB a part
    written = []
    try:
        for k in range(100):
            writer.write(_part(big, list(range(60)), start=10 * k))
            written.append(k)
    except OutputError as exc:                              # the disk filled up while writing a part
        assert "No space left on device" in str(exc) and "00000" in str(exc)
    assert written and len(part_files(parts_dir(trace))) == len(written)
    assert not list(parts_dir(trace).rglob(".*"))           # the failed part's temporary is gone
    before = {p: p.stat().st_size for p in part_files(parts_dir(trace))}
    _fill(disk / "filler")                                  # the parts' room left over could hold the merged file
    with pytest.raises(OutputError, match=r"cannot write .*trace.parquet: No space left on device; its parts are kept"):
        recover(trace)
    assert not trace.exists() and not list(disk.glob(".*"))  # no half-written trace, no temporary
    assert {p: p.stat().st_size for p in part_files(parts_dir(trace))} == before


def test_parts_and_merge_with_a_file_name_that_is_not_utf8(tmp_path):
    trace = tmp_path / os.fsdecode(b"caf\xe9.parquet")       # Latin-1 bytes: legal on Linux, not UTF-8
    PartWriter(trace, 0).write(_part(["k"], [0]))
    merged = recover(trace)
    assert merged.records == 3 and os.listdir(os.fsencode(tmp_path)) == [b"caf\xe9.parquet"]
    with open(trace, "rb") as f:
        assert pq.read_table(f).num_rows == 3


def test_drift_correction_keeps_times_at_or_after_the_origin(tmp_path):
    # rank 1's clock runs fast: slope 1e-3 from t_ref = -10 000 ns (its start estimate, before the origin). Its
    # states [0, 5) and [5, 10) (built on its times as recorded) map to t - round(1e-3 * (t + 10 000)): 0 -> -10
    # (kept at 0), 5 -> -5 (kept at 0), 10 -> 0. Clamped at the origin, the two states still tile the span without
    # a gap or an overlap.
    trace = tmp_path / "trace.parquet"
    PartWriter(trace, 0).write(_part(["k"], [0], start=0, rank=0))
    PartWriter(trace, 1).write(_part(["k"], [0], start=0, rank=1))
    merge_parts(trace, drift={1: (1e-3, -10_000)})
    states = load(trace).records(S.Kind.STATE).to_pandas()
    rank1 = states[states[S.RANK] == 1].sort_values(S.START_NS)
    assert rank1[[S.START_NS, S.END_NS]].values.tolist() == [[0, 0], [0, 0]]
    assert (states[S.START_NS] >= 0).all()


def test_merge_lists_every_ranks_communicators(tmp_path):
    # each rank's parts list the communicators it belongs to; the merged trace lists them all
    from gpt2trace.format import communicators as comms
    trace = tmp_path / "trace.parquet"
    world = comms.world([0, 1, 2, 3])
    for rank, group in ((0, comms.Communicator(4, "sp", (0, 1))), (2, comms.Communicator(6, "sp", (2, 3)))):
        schema = SCHEMA.with_metadata({**SCHEMA.metadata, **comms.to_metadata([world, group])})
        PartWriter(trace, rank).write(_part(["a"], [0], rank=rank, schema=schema))
    merge_parts(trace)
    assert sorted(load(trace).communicators) == [0, 4, 6]


def _fill(path):
    """Take every byte left on path's file system."""
    with open(path, "wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            while f.write(b"\0" * 4096):
                pass
