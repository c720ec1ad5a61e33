"""The Tracer as the training loop drives it, with hand-filled kernel slots: parts cut at step ends (every step,
or by time), thread numbering, phases, counters (the resident memory at phase ends too), MPI calls (the comm
sink), the flush phase, dropping a step cut short, a failing writer, merge; a fixed scenario's merged trace against
the one the tracer wrote when it built the states itself."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import raw_part
from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError
from gpt2trace.format.parts import BLOCKS, KERNEL_CALL, PartWindow, complete
from gpt2trace.format.raw_window import RankDecoder
from gpt2trace.format.reader import check_states, load
from gpt2trace.format.writer import merge_parts, part_files, parts_dir
from gpt2trace.record.tracer import FLUSH_PHASE, RSS_COUNTER, Tracer
from tests.gpt2trace.record.scenario import merged_scenario

WORKER_TID, OTHER_TID = 900_001, 900_002   # fake thread ids; the main thread's is the real one
ORIGIN = 1_000_000


def _kernel(tracer, name, layer, enter, exit_, *blocks):
    """A kernel call as the launcher makes it: a slot, filled as the Numba kernel would fill it."""
    slot = tracer.recorder.slot(tracer.recorder.kernel_key(name) + layer)
    slot[0, :2] = ORIGIN + enter, ORIGIN + exit_
    for t, (s, e, tid) in enumerate(blocks):
        slot[1 + t] = ORIGIN + s, ORIGIN + e, tid


def _tracer(path, flush_every_s: float = 0.0) -> Tracer:
    t = Tracer(path, rank=0, nthreads=2, metadata={S.META_RUN: b'{"model": {}}'}, origin_ns=ORIGIN,
               flush_every_s=flush_every_s)
    # Clock reads are monotonic_ns; the windows here are forced onto small times for readable numbers.
    t._window_start = ORIGIN
    return t


@pytest.fixture
def tracer(tmp_path):
    return _tracer(tmp_path / "trace.parquet")


def _part(tracer, end: int) -> pa.Table:
    """The open window (everything recorded, up to ORIGIN + end) as the tracer writes it and the merge decodes it:
    a part of raw events."""
    window, _ = tracer._close_window(ORIGIN + end, None)
    data = np.frombuffer(b"".join(memoryview(b).cast("B") for b in raw_part.buffers(window, tracer._metadata_json)),
                         np.uint8)
    return RankDecoder().window(*raw_part.read(data))


def _decoded(files) -> list[pa.Table]:
    """A rank's parts as the merge decodes them, in order."""
    decoder = RankDecoder()
    return [raw_part.decoded(f, decoder) for f in files]


def _step(tracer, step, main):
    tracer.begin_step(step)
    with tracer.phase("dataload"):
        pass
    with tracer.phase("forward"):
        _kernel(tracer, "matmul_forward", 0, 10, 60, (12, 40, main), (15, 50, WORKER_TID))
    tracer.counter("loss", 2.5 - step)
    tracer.end_step(step)


def test_a_part_per_step_and_thread_numbering(tracer, tmp_path):
    main = threading.get_ident()
    _step(tracer, 0, main)
    _step(tracer, 1, main)
    # flush_every_s=0: each step's part is on disk when end_step returns
    files = sorted((parts_dir(tmp_path / "trace.parquet") / "rank00000").iterdir())
    assert [f.name for f in files] == ["00000000.raw", "00000001.raw"]
    decoded = _decoded(files)
    part0 = decoded[0].to_pandas()
    # raw events only, grouped by kind: the kernel call, phases, counters; no kernel record, no state
    assert list(dict.fromkeys(part0[S.KIND])) == [KERNEL_CALL, S.Kind.PHASE, S.Kind.COUNTER]
    call = part0[part0[S.KIND] == KERNEL_CALL]
    # its region on the main thread, and its blocks (start, end, thread): the main thread's id is thread 0, the
    # first worker seen is thread 1; times are ns since the origin
    assert call[[S.THREAD, S.START_NS, S.END_NS, S.NAME, S.STEP, S.LAYER, S.MICROSTEP]].values.tolist() == [
        [0, 10, 60, "matmul_forward", 0, 0, 0]]
    assert call[BLOCKS].map(list).tolist() == [[12, 40, 0, 15, 50, 1]]
    kernels = complete(decoded[0]).to_pandas()
    kernels = kernels[kernels[S.KIND] == S.Kind.KERNEL]
    assert kernels[[S.THREAD, S.START_NS, S.END_NS]].values.tolist() == [[0, 12, 40], [1, 15, 50]]
    assert kernels[S.NAME].tolist() == ["matmul_forward"] * 2 and kernels[S.STEP].tolist() == [0, 0]
    assert kernels[S.LAYER].tolist() == [0, 0] and kernels[S.MICROSTEP].tolist() == [0, 0]
    counters = part0[part0[S.KIND] == S.Kind.COUNTER]
    # the resident memory at the end of each phase (dataload, forward; with its step and micro-batch), then the loss
    got = counters[[S.NAME, S.STEP, S.MICROSTEP]].astype(object)
    assert got.where(got.notna(), None).values.tolist() == [["rss_bytes", 0, 0], ["rss_bytes", 0, 0],
                                                            ["loss", 0, None]]
    phases = part0[(part0[S.KIND] == S.Kind.PHASE) & (part0[S.NAME] != FLUSH_PHASE)]
    rss = counters[counters[S.NAME] == RSS_COUNTER]
    assert rss[S.START_NS].tolist() == phases[S.END_NS].tolist() == rss[S.END_NS].tolist()
    # this test process holds at least its Python and NumPy: tens of MB, far below a TB
    assert (rss[S.VALUE] > 10e6).all() and (rss[S.VALUE] < 1e12).all()
    assert counters[counters[S.NAME] == "loss"][S.VALUE].tolist() == [2.5]
    # the window the merge builds the states over: from the origin to step 0's end, for the 2 threads
    window = PartWindow.of(decoded[0].schema)
    assert (window.rank, window.start_ns, window.threads) == (0, 0, 2) and window.end_ns >= 60
    part1 = decoded[1].to_pandas()
    flush = part1[part1[S.NAME] == FLUSH_PHASE]
    assert len(flush) == 1 and flush[S.STEP].isna().all() and FLUSH_PHASE in S.PHASES


def _rss_steps(tracer, end: int) -> list[tuple]:
    """(phase, step, micro-batch) of each phase end that sampled the resident memory in the open window."""
    part = _part(tracer, end).to_pandas()
    rss = part[(part[S.KIND] == S.Kind.COUNTER) & (part[S.NAME] == RSS_COUNTER)]
    ends = part[part[S.KIND] == S.Kind.PHASE].set_index(S.END_NS)[S.NAME]
    return [(ends[t], int(s), int(m)) for t, s, m in zip(rss[S.START_NS], rss[S.STEP], rss[S.MICROSTEP])]


def _micro_step(tracer, step, checkpoint=False):
    tracer.begin_step(step)
    for micro in (0, 1):
        tracer.microstep(micro)
        with tracer.phase("forward"):
            pass
    if checkpoint:
        with tracer.phase("checkpoint", nbytes=10):
            pass
    tracer.end_step(step)


@pytest.mark.parametrize("every_s, sampled", [(0.0, [0, 1, 2]), (3600.0, [0])])   # every step; the first only
def test_memory_is_sampled_at_every_phase_end_of_the_steps_due(tmp_path, every_s, sampled):
    tracer = Tracer(tmp_path / "trace.parquet", rank=0, nthreads=2, metadata={}, flush_every_s=1e9,
                    memory_every_s=every_s)
    for step in range(3):
        _micro_step(tracer, step, checkpoint=step == 2)
    # a sampled step has every micro-batch's phase end; a checkpoint is sampled whichever step it is in
    want = [("forward", s, m) for s in sampled for m in (0, 1)]
    assert _rss_steps(tracer, time.monotonic_ns() - ORIGIN) == [*want, ("checkpoint", 2, 1)]
    tracer.close()


def test_a_step_is_sampled_again_once_memory_every_s_has_passed(tmp_path):
    tracer = Tracer(tmp_path / "trace.parquet", rank=0, nthreads=2, metadata={}, flush_every_s=1e9,
                    memory_every_s=0.05)
    _micro_step(tracer, 0)
    _micro_step(tracer, 1)            # begins well within 50 ms of step 0
    time.sleep(0.06)
    _micro_step(tracer, 2)
    assert [s for _, s, _ in _rss_steps(tracer, time.monotonic_ns() - ORIGIN)] == [0, 0, 2, 2]
    tracer.close()


def test_new_worker_threads_get_the_next_index(tracer):
    main = threading.get_ident()
    tracer.begin_step(0)
    _kernel(tracer, "gelu_forward", 1, 10, 60, (12, 40, OTHER_TID), (15, 50, WORKER_TID))
    _kernel(tracer, "gelu_forward", 1, 70, 90, (71, 80, main), (72, 85, OTHER_TID))
    part = _part(tracer, 100)
    table = complete(part).to_pandas()
    k = table[table[S.KIND] == S.Kind.KERNEL].sort_values(S.START_NS)
    # first appearance: OTHER_TID (block 0 of the first call) -> 1, WORKER_TID -> 2
    assert k[S.THREAD].tolist() == [1, 2, 0, 1]
    assert PartWindow.of(part.schema).threads == 3           # the states are built for the 3 threads seen
    assert sorted(table[table[S.KIND] == S.Kind.STATE][S.THREAD].unique()) == [0, 1, 2]


def test_mpi_call_inside_dataload(tracer):
    # dataload [5, 40) with an MPI_Scatter [10, 30) in it: the main thread is in I/O, Group Communication,
    # I/O; the comm record keeps bytes, root and sequence number
    main = threading.get_ident()
    tracer.begin_step(0)
    tracer._phases.add("dataload", (ORIGIN + 5, ORIGIN + 40, 0, 0, -1))   # no bytes
    tracer.comm("MPI_Scatter", ORIGIN + 10, ORIGIN + 30, 4096, 0, 7, S.State.GROUP_COMMUNICATION)
    _kernel(tracer, "encoder_forward", -1, 50, 60, (50, 60, main), (51, 59, WORKER_TID))
    table = complete(_part(tracer, 100)).to_pandas()
    st = table[(table[S.KIND] == S.Kind.STATE) & (table[S.THREAD] == 0)]
    assert st[[S.START_NS, S.END_NS, S.STATE]].values.tolist() == [
        [0, 5, S.State.RUNNING], [5, 10, S.State.IO], [10, 30, S.State.GROUP_COMMUNICATION],
        [30, 40, S.State.IO], [40, 50, S.State.RUNNING], [50, 60, S.State.RUNNING], [60, 100, S.State.RUNNING]]
    comm = table[table[S.KIND] == S.Kind.COMM]
    assert comm[[S.NAME, S.BYTES, S.PEER, S.SEQ, S.STEP]].values.tolist() == [["MPI_Scatter", 4096, 0, 7, 0]]
    kernel = table[table[S.KIND] == S.Kind.KERNEL]
    assert kernel[S.LAYER].isna().all()              # layer -1 (outside the transformer blocks) is null


def test_point_to_point_calls_keep_their_tag_and_micro_batch(tracer):
    # micro-batch 1 of step 0: an MPI_Recv [10, 30) from world rank 2 with tag 7, then an MPI_Send [40, 45) to rank 3
    # with tag 0 on communicator 5; the main thread is Waiting a message, then in Blocking Send; a tag is written
    # as it is (0 too), and null where the call has none (the collective)
    tracer.begin_step(0)
    tracer.microstep(1)
    tracer.comm("MPI_Recv", ORIGIN + 10, ORIGIN + 30, 512, 2, None, S.State.WAITING_A_MESSAGE, 5, tag=7)
    tracer.comm("MPI_Send", ORIGIN + 40, ORIGIN + 45, 256, 3, None, S.State.BLOCKING_SEND, 5, tag=0)
    tracer.comm("MPI_Allreduce", ORIGIN + 50, ORIGIN + 60, 8, None, 0, S.State.GROUP_COMMUNICATION)
    part = _part(tracer, 100)
    # in the part, each MPI call carries the main thread's state during it (the merge makes it a state record)
    assert part.column(S.STATE).to_pylist() == [S.State.WAITING_A_MESSAGE, S.State.BLOCKING_SEND,
                                                S.State.GROUP_COMMUNICATION]
    table = complete(part)
    assert table.schema.field(S.TAG).type == S.FIELDS[S.TAG]
    comm = table.filter(pc.equal(table.column(S.KIND), S.Kind.COMM))
    cols = [S.NAME, S.PEER, S.BYTES, S.TAG, S.SEQ, S.MICROSTEP, S.COMMUNICATOR]
    assert [list(r.values()) for r in comm.select(cols).to_pylist()] == [
        ["MPI_Recv", 2, 512, 7, None, 1, 5], ["MPI_Send", 3, 256, 0, None, 1, 5],
        ["MPI_Allreduce", None, 8, None, 0, 1, 0]]
    df = table.to_pandas()
    st = df[(df[S.KIND] == S.Kind.STATE) & (df[S.THREAD] == 0)]
    assert st[[S.START_NS, S.END_NS, S.STATE]].values.tolist()[:4] == [
        [0, 10, S.State.RUNNING], [10, 30, S.State.WAITING_A_MESSAGE], [30, 40, S.State.RUNNING],
        [40, 45, S.State.BLOCKING_SEND]]


def test_close_and_merge_make_a_valid_trace(tracer, tmp_path):
    main = threading.get_ident()
    for step in range(3):
        _step(tracer, step, main)
    tracer.close()
    path = tmp_path / "trace.parquet"
    merged = merge_parts(path)
    # one kernel call a step, of 2 blocks: the merge made 2 kernel records of each
    trace = load(path)
    assert trace.records(S.Kind.KERNEL).num_rows == 6
    assert merged.steps == (0, 2) == tracer.steps_written
    assert not parts_dir(path).exists()
    assert check_states(trace) == [] and trace.run == {"model": {}}
    counters = trace.records(S.Kind.COUNTER).to_pandas()
    assert counters[counters[S.NAME] == "loss"][S.VALUE].tolist() == [2.5, 1.5, 0.5]


def test_parts_are_cut_by_time_at_step_ends(tmp_path):
    # flush_every_s=1e9 (31 years, from the forced window start): no step end is due, so nothing reaches the
    # disk until close, which writes one part with all three steps
    tracer = _tracer(tmp_path / "trace.parquet", flush_every_s=1e9)
    main = threading.get_ident()
    for step in range(3):
        _step(tracer, step, main)
    assert not parts_dir(tmp_path / "trace.parquet").exists()     # made with the first part, not before
    tracer.close()
    files = part_files(parts_dir(tmp_path / "trace.parquet"))
    assert len(files) == 1 and tracer.steps_written == (0, 2)
    part = _decoded(files)[0].to_pandas()
    assert part[part[S.KIND] == S.Kind.COUNTER][S.STEP].tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]   # rss x 2, loss
    # one trace_flush phase per step end, each in the window after it (here: the same, only window)
    assert (part[S.NAME] == FLUSH_PHASE).sum() == 3


def test_a_step_cut_short_is_dropped(tracer, tmp_path):
    # step 1 stops after its first kernel (an error, a second Ctrl-C): close(whole_run=False) keeps step 0
    # only, and the trace ends where step 0 ended
    main = threading.get_ident()
    _step(tracer, 0, main)
    step0_end = time.monotonic_ns() - ORIGIN
    tracer.begin_step(1)
    with tracer.phase("forward"):
        _kernel(tracer, "matmul_forward", 0, step0_end + 10, step0_end + 60, (step0_end + 12, step0_end + 40, main))
    tracer.close(whole_run=False)
    path = tmp_path / "trace.parquet"
    merge_parts(path)
    trace = load(path)
    assert set(trace.records(S.Kind.KERNEL).column(S.STEP).to_pylist()) == {0}
    assert set(trace.records(S.Kind.PHASE).column(S.STEP).to_pylist()) == {0}
    # step 0's loss and its two phase ends' resident memory; not the memory at the end of step 1's forward
    assert trace.records(S.Kind.COUNTER).num_rows == 3 and check_states(trace) == []
    # the last step's trace_flush phase would be in the next window, which is not written
    assert FLUSH_PHASE not in trace.records(S.Kind.PHASE).column(S.NAME).to_pylist()


def test_a_failing_writer_is_raised_on_the_loops_thread(tmp_path, readonly_dir):
    tracer = _tracer(readonly_dir / "trace.parquet")      # a read-only file system: the first part fails
    main = threading.get_ident()
    # flush_every_s=0: step 0's part is written (and fails) before end_step returns
    with pytest.raises(OutputError, match=r"cannot write the trace part .*00000000.raw: Read-only file system"):
        _step(tracer, 0, main)
    with pytest.raises(OutputError):                       # close says so too, and nothing was left behind
        tracer.close()
    assert list(readonly_dir.iterdir()) == []


def test_the_merged_trace_is_the_one_the_tracer_made_when_it_built_the_states(tmp_path):
    # The fixed scenario (scenario.py: 2 ranks, 3 windows each, a step cut short, a drift correction) recorded and
    # merged, against its merged trace as the tracer of commit 8e60312 wrote it, which built each window's states
    # on its writer thread: record by record (up to row order), the same trace.
    reference = pq.read_table(Path(__file__).parent / "data" / "scenario_reference.parquet")
    # written in schema version 3: the columns added since are null on every record of a fork-join run
    added = [f for f in S.arrow_schema() if f.name not in reference.column_names]
    for f in added:
        reference = reference.append_column(f, pa.nulls(reference.num_rows, f.type))
    reference = reference.replace_schema_metadata({**reference.schema.metadata,
                                                    S.META_VERSION: str(S.SCHEMA_VERSION).encode()})
    assert [f.name for f in added] == [S.TASK, S.BLOCK, S.PREDS]
    got = pq.read_table(merged_scenario(tmp_path / "trace.parquet"))
    assert got.schema.equals(reference.schema, check_metadata=True)
    assert got.num_rows == reference.num_rows == 786
    def rows(table):                                  # dictionaries decoded, so rows sort by every column
        plain = table.cast(pa.schema([pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else
                                               f.type) for f in table.schema]))
        return plain.sort_by([(c, "ascending") for c in S.FIELDS if c not in S.LIST_COLUMNS]).to_pylist()
    assert rows(got) == rows(reference)
    trace = load(tmp_path / "trace.parquet")
    assert check_states(trace) == [] and set(trace.records(S.Kind.STATE).column(S.THREAD).to_pylist()) == {0, 1, 2}
