"""A task graph's log through the tracer: written raw in the part, decoded by the merge into task records (with
their ids, blocks and predecessors), a kernel record per task body, and the runtime's thread states (Running in
bodies, Scheduling inside the runtime, Idle while waiting), with hand-computed expectations."""
from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np

from gpt2trace.format import schema as S
from gpt2trace.format.reader import check_states, load
from gpt2trace.format.writer import merge_parts
from gpt2trace.record.tracer import Tracer

ORIGIN = 1_000_000
WORKER_TID = 900_001
R, SCHED, IDLE = int(S.State.RUNNING), int(S.State.SCHEDULING_FORK_JOIN), int(S.State.IDLE)


def _log(main: int) -> SimpleNamespace:
    """Three tasks on two threads: blocks 0 and 1 of a matmul (main, worker), then a gelu on the worker that
    depends on both; the main thread waits from 205 to the graph's end (310), the worker from 195 to 206."""
    def a(*v):
        return np.array(v, dtype=np.int64)
    return SimpleNamespace(
        names=("matmul_forward", "gelu_forward"), task=a(0, 1, 2), kernel=a(0, 0, 1), layer=a(0, 0, 0),
        block=a(0, 1, 0), tid=a(main, WORKER_TID, WORKER_TID),
        pick_ns=ORIGIN + a(100, 100, 206), start_ns=ORIGIN + a(105, 110, 210), end_ns=ORIGIN + a(200, 190, 300),
        done_ns=ORIGIN + a(205, 195, 305), pred_offsets=a(0, 0, 0, 2), preds=a(0, 1),
        idle=np.array([[main, ORIGIN + 205, ORIGIN + 310], [WORKER_TID, ORIGIN + 195, ORIGIN + 206]], np.int64))


def test_a_task_graph_becomes_task_records_kernel_records_and_runtime_states(tmp_path):
    path = tmp_path / "trace.parquet"
    tracer = Tracer(path, 0, 2, {S.META_RUN: b'{"parallel": {"schedule": "tasks"}}'}, origin_ns=ORIGIN,
                    flush_every_s=1e9)
    tracer._window_start = ORIGIN
    main = threading.get_ident()
    tracer.begin_step(0)
    tracer.tasks(_log(main))
    tracer.counter("loss", 1.0)
    tracer.end_step(0)
    tracer._cut(ORIGIN + 400, None)            # the window [0, 400): hand-chosen, instead of the clock's
    merge_parts(path)
    trace = load(path)
    tasks = trace.records(S.Kind.TASK).to_pandas().sort_values(S.TASK)
    assert tasks[[S.TASK, S.THREAD, S.START_NS, S.END_NS, S.NAME, S.BLOCK, S.LAYER, S.STEP]].values.tolist() == [
        [0, 0, 105, 200, "matmul_forward", 0, 0, 0], [1, 1, 110, 190, "matmul_forward", 1, 0, 0],
        [2, 1, 210, 300, "gelu_forward", 0, 0, 0]]
    assert [list(p) for p in tasks[S.PREDS]] == [[], [], [0, 1]]
    kernels = trace.records(S.Kind.KERNEL).to_pandas().sort_values(S.START_NS)
    assert kernels[[S.THREAD, S.START_NS, S.END_NS, S.NAME]].values.tolist() == [
        [0, 105, 200, "matmul_forward"], [1, 110, 190, "matmul_forward"], [1, 210, 300, "gelu_forward"]]
    st = trace.records(S.Kind.STATE).to_pandas().sort_values([S.THREAD, S.START_NS])
    got = {t: g[[S.START_NS, S.END_NS, S.STATE]].values.tolist() for t, g in st.groupby(S.THREAD)}
    # the graph runs over [100, 310) (first task taken .. last wait ended); outside it the main thread runs Python
    # and the worker is idle, as in a fork-join trace; the window ends at 400
    assert got[0] == [[0, 100, R], [100, 105, SCHED], [105, 200, R], [200, 205, SCHED], [205, 310, IDLE],
                      [310, 400, R]]
    assert got[1] == [[0, 100, IDLE], [100, 110, SCHED], [110, 190, R], [190, 195, SCHED], [195, 206, IDLE],
                      [206, 210, SCHED], [210, 300, R], [300, 310, SCHED], [310, 400, IDLE]]
    assert check_states(trace) == []
