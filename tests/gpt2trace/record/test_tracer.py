"""The Tracer as the training loop drives it, with hand-filled kernel slots: one Parquet part per step,
thread numbering, phases, counters, MPI calls (the comm sink), the flush phase, merge."""
from __future__ import annotations

import threading

import pyarrow.parquet as pq
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.reader import check_states, load
from gpt2trace.format.writer import merge_parts, parts_dir
from gpt2trace.record.tracer import FLUSH_PHASE, Tracer

WORKER_TID, OTHER_TID = 900_001, 900_002   # fake OS thread ids; the main thread's is the real one
ORIGIN = 1_000_000


def _kernel(tracer, name, layer, enter, exit_, *blocks):
    """A kernel call as the launcher makes it: a slot, filled as the Numba kernel would fill it."""
    slot = tracer.recorder.slot(name, layer)
    slot[0, :2] = ORIGIN + enter, ORIGIN + exit_
    for t, (s, e, tid) in enumerate(blocks):
        slot[1 + t] = ORIGIN + s, ORIGIN + e, tid


@pytest.fixture
def tracer(tmp_path):
    t = Tracer(tmp_path / "trace.parquet", rank=0, nthreads=2, metadata={S.META_RUN: b'{"model": {}}'},
               origin_ns=ORIGIN)
    # Clock reads are monotonic_ns; the windows here are forced onto small times for readable numbers.
    t._window_start = ORIGIN
    return t


def _step(tracer, step, main):
    tracer.begin_step(step)
    with tracer.phase("dataload"):
        pass
    with tracer.phase("forward"):
        _kernel(tracer, "matmul_forward", 0, 10, 60, (12, 40, main), (15, 50, WORKER_TID))
    tracer.counter("loss", 2.5 - step)
    tracer.end_step(step)


def test_a_part_per_step_and_thread_numbering(tracer, tmp_path):
    main = threading.get_native_id()
    _step(tracer, 0, main)
    _step(tracer, 1, main)
    files = sorted((parts_dir(tmp_path / "trace.parquet") / "rank00000").iterdir())
    assert [f.name for f in files] == ["00000000.parquet", "00000001.parquet"]
    part0 = pq.read_table(files[0]).to_pandas()
    kernels = part0[part0[S.KIND] == S.Kind.KERNEL]
    # the main thread's OS id is thread 0, the first worker seen is thread 1; times are ns since the origin
    assert kernels[[S.THREAD, S.START_NS, S.END_NS]].values.tolist() == [[0, 12, 40], [1, 15, 50]]
    assert kernels[S.NAME].tolist() == ["matmul_forward"] * 2 and kernels[S.STEP].tolist() == [0, 0]
    assert kernels[S.LAYER].tolist() == [0, 0] and kernels[S.MICROSTEP].tolist() == [0, 0]
    counters = part0[part0[S.KIND] == S.Kind.COUNTER]
    assert counters[[S.NAME, S.STEP, S.VALUE]].values.tolist() == [["loss", 0, 2.5]]
    # rows grouped by kind, each kind in (thread, start) order
    assert list(dict.fromkeys(part0[S.KIND])) == [S.Kind.STATE, S.Kind.KERNEL, S.Kind.PHASE, S.Kind.COUNTER]
    part1 = pq.read_table(files[1]).to_pandas()
    flush = part1[part1[S.NAME] == FLUSH_PHASE]
    assert len(flush) == 1 and flush[S.STEP].isna().all() and FLUSH_PHASE in S.PHASES


def test_new_worker_threads_get_the_next_index(tracer):
    main = threading.get_native_id()
    tracer.begin_step(0)
    _kernel(tracer, "gelu_forward", 1, 10, 60, (12, 40, OTHER_TID), (15, 50, WORKER_TID))
    _kernel(tracer, "gelu_forward", 1, 70, 90, (71, 80, main), (72, 85, OTHER_TID))
    table = tracer._window_table(*tracer.recorder.take(), (ORIGIN, ORIGIN + 100)).to_pandas()
    k = table[table[S.KIND] == S.Kind.KERNEL].sort_values(S.START_NS)
    # first appearance: OTHER_TID (block 0 of the first call) -> 1, WORKER_TID -> 2
    assert k[S.THREAD].tolist() == [1, 2, 0, 1]
    assert sorted(table[table[S.KIND] == S.Kind.STATE][S.THREAD].unique()) == [0, 1, 2]


def test_mpi_call_inside_dataload(tracer):
    # dataload [5, 40) with an MPI_Scatter [10, 30) in it: the main thread is in I/O, Group Communication,
    # I/O; the comm record keeps bytes, root and sequence number
    main = threading.get_native_id()
    tracer.begin_step(0)
    tracer._phases.append(("dataload", ORIGIN + 5, ORIGIN + 40, 0, 0))
    tracer.comm("MPI_Scatter", ORIGIN + 10, ORIGIN + 30, 4096, 0, 7, S.State.GROUP_COMMUNICATION)
    _kernel(tracer, "encoder_forward", -1, 50, 60, (50, 60, main), (51, 59, WORKER_TID))
    table = tracer._window_table(*tracer.recorder.take(), (ORIGIN, ORIGIN + 100)).to_pandas()
    st = table[(table[S.KIND] == S.Kind.STATE) & (table[S.THREAD] == 0)]
    assert st[[S.START_NS, S.END_NS, S.STATE]].values.tolist() == [
        [0, 5, S.State.RUNNING], [5, 10, S.State.IO], [10, 30, S.State.GROUP_COMMUNICATION],
        [30, 40, S.State.IO], [40, 50, S.State.RUNNING], [50, 60, S.State.RUNNING], [60, 100, S.State.RUNNING]]
    comm = table[table[S.KIND] == S.Kind.COMM]
    assert comm[[S.NAME, S.BYTES, S.PEER, S.SEQ, S.STEP]].values.tolist() == [["MPI_Scatter", 4096, 0, 7, 0]]
    kernel = table[table[S.KIND] == S.Kind.KERNEL]
    assert kernel[S.LAYER].isna().all()              # layer -1 (outside the transformer blocks) is null


def test_close_and_merge_make_a_valid_trace(tracer, tmp_path):
    main = threading.get_native_id()
    for step in range(3):
        _step(tracer, step, main)
    tracer.close()
    path = tmp_path / "trace.parquet"
    assert merge_parts(path) == tracer.records
    assert not parts_dir(path).exists()
    trace = load(path)
    assert check_states(trace) == [] and trace.run == {"model": {}}
    assert trace.records(S.Kind.COUNTER).column(S.VALUE).to_pylist() == [2.5, 1.5, 0.5]
