"""The task runtime: every task starts after its predecessors are done, at 1, 2 and 3 threads; the log it hands
over; communication tasks (started in submission order, on the main thread, done when their test says so)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from trainer.tasks.log import TaskLog
from trainer.tasks.regions import IN, INOUT, OUT
from trainer.tasks.runtime import Runtime


def _check_order(log: TaskLog, earlier: dict[int, int] | None = None) -> None:
    """Every predecessor (in this log, or done before it: `earlier`) was done before the task was picked."""
    done = dict(earlier or {})
    done.update(zip(log.task.tolist(), log.done_ns.tolist()))
    for i in range(len(log)):
        for p in log.predecessors(i).tolist():
            assert done[p] <= log.pick_ns[i], (int(log.task[i]), p)
    assert (log.pick_ns <= log.start_ns).all() and (log.start_ns <= log.end_ns).all()
    assert (log.end_ns <= log.done_ns).all()


def _random_graph(rt: Runtime, seed: int, n: int = 120):
    """n tasks on 16 slots of 8 bytes: each reads or writes 1-3 neighbouring slots, and sleeps (releasing the GIL,
    as the Numba kernels do) 0-200 us. Returns the slots' ids, as submitted, to rebuild the expected graph."""
    rng = np.random.default_rng(seed)
    submitted = []
    for t in range(n):
        s0 = int(rng.integers(0, 16))
        s1 = min(16, s0 + int(rng.integers(1, 4)))
        mode = int(rng.choice([IN, OUT, INOUT]))
        rt.submit(time.sleep, (float(rng.integers(0, 200)) * 1e-6,), [(8 * s0, 8 * s1, mode)], "sleep", -1, t)
        submitted.append((s0, s1, mode))
    return submitted


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_every_task_starts_after_its_predecessors(nthreads):
    rt = Runtime(nthreads)
    try:
        _random_graph(rt, seed=nthreads)
        rt.taskwait()
        log = rt.log.take()
    finally:
        rt.close()
    assert sorted(log.task.tolist()) == list(range(120))          # each task ran once
    assert log.names == ("sleep",) and (log.kernel == 0).all() and (log.layer == -1).all()
    assert log.pred_offsets[-1] == len(log.preds) > 0
    _check_order(log)
    # the threads that ran tasks: the main thread and the workers, no others
    tids = set(log.tid.tolist())
    assert len(tids) <= nthreads
    if nthreads == 1:
        assert tids == {threading.get_ident()}
    # idle intervals are well formed and on those threads
    assert (log.idle[:, 1] <= log.idle[:, 2]).all()


def test_workers_run_tasks_at_once():
    # 6 independent 20 ms sleeps on 3 threads: ~40 ms, not 120 ms (a serial runtime would take 120)
    rt = Runtime(3)
    try:
        t0 = time.monotonic()
        for b in range(6):
            rt.submit(time.sleep, (0.02,), [(8 * b, 8 * b + 8, OUT)], "sleep", -1, b)
        rt.taskwait()
        wall = time.monotonic() - t0
        log = rt.log.take()
    finally:
        rt.close()
    assert len(set(log.tid.tolist())) == 3
    assert wall < 0.1


def test_each_log_gets_the_idle_intervals_of_its_own_taskwait():
    # a worker waits before the first task of each taskwait's graph (the main thread is still submitting)
    rt = Runtime(2)
    try:
        logs = []
        for _ in range(2):
            time.sleep(0.01)                       # the worker sleeps on an empty queue meanwhile
            rt.submit(time.sleep, (0.005,), [(0, 8, OUT)], "a", 0, 0)
            rt.submit(time.sleep, (0.005,), [(8, 16, OUT)], "a", 0, 1)
            rt.taskwait()
            logs.append(rt.log.take())
    finally:
        rt.close()
    main = threading.get_ident()
    for log in logs:
        workers = log.idle[log.idle[:, 0] != main]
        assert len(workers) >= 1 and (workers[:, 2] - workers[:, 1]).max() >= 5_000_000     # >= 5 of the 10 ms


def test_the_log_numbers_tasks_over_the_whole_run_and_keeps_names_stable():
    rt = Runtime(2)
    try:
        rt.submit(time.sleep, (0,), [(0, 8, OUT)], "a", 0, 0)
        rt.taskwait()
        first = rt.log.take()
        rt.submit(time.sleep, (0,), [(0, 8, IN)], "b", 1, 0)
        rt.submit(time.sleep, (0,), [(0, 8, OUT)], "a", 1, 1)
        rt.taskwait()
        second = rt.log.take()
    finally:
        rt.close()
    assert first.task.tolist() == [0] and sorted(second.task.tolist()) == [1, 2]
    assert second.names == ("a", "b")
    by_id = dict(zip(second.task.tolist(), range(len(second))))
    assert second.kernel[by_id[1]] == 1 and second.kernel[by_id[2]] == 0
    # the map was cleared at the taskwait: task 1 does not depend on task 0; task 2 (WAR) depends on task 1
    assert second.predecessors(by_id[1]).tolist() == []
    assert second.predecessors(by_id[2]).tolist() == [1]


def test_an_error_in_a_task_is_raised_by_the_taskwait_after_the_graph_drains():
    def boom():
        raise ZeroDivisionError("in a task")
    rt = Runtime(2)
    try:
        rt.submit(boom, (), [(0, 8, OUT)], "boom", -1, 0)
        rt.submit(time.sleep, (0,), [(0, 8, IN)], "after", -1, 0)
        with pytest.raises(ZeroDivisionError, match="in a task"):
            rt.taskwait()
        assert len(rt.log.take()) == 2
    finally:
        rt.close()


class _FakeRequest:
    """A nonblocking call that completes on its `polls`-th test; records the thread of every call."""
    def __init__(self, polls: int, calls: list):
        self.left, self.calls = polls, calls

    def test(self) -> bool:
        self.calls.append(("test", threading.get_ident()))
        self.left -= 1
        return self.left <= 0


def test_communication_tasks_start_in_submission_order_on_the_main_thread_and_hold_their_successors():
    calls, started = [], []
    rt = Runtime(3)
    try:
        def post(name, polls):
            def start():
                started.append((name, threading.get_ident()))
                return _FakeRequest(polls, calls)
            return start
        # comm 0 waits for a 30 ms compute task; comm 1's input is ready at once, yet it must start after comm 0
        rt.submit(time.sleep, (0.03,), [(0, 8, OUT)], "compute", 0, 0)
        c0 = rt.submit_comm(post("c0", 3), lambda r: r.test(), [(0, 8, INOUT)], "MPI_Iallreduce", 0)
        c1 = rt.submit_comm(post("c1", 1), lambda r: r.test(), [(8, 16, INOUT)], "MPI_Iallreduce", 1)
        after = rt.submit(time.sleep, (0,), [(0, 8, IN)], "update", 0, 0)
        rt.taskwait()
        log = rt.log.take()
    finally:
        rt.close()
    main = threading.get_ident()
    assert [name for name, _ in started] == ["c0", "c1"]
    assert all(tid == main for _, tid in started) and all(tid == main for _, tid in calls)
    row = dict(zip(log.task.tolist(), range(len(log))))
    # the update followed c0's completion (its third test), not its posting
    assert log.start_ns[row[after.id]] >= log.done_ns[row[c0.id]]
    assert log.predecessors(row[after.id]).tolist() == [c0.id]
    assert log.polls == 2           # c0 needed 3 tests (2 failed), c1 one
    assert log.names[log.kernel[row[c1.id]]] == "MPI_Iallreduce"
    _check_order(log)


def test_closing_drops_the_tasks_not_started():
    # a run stopped inside a step: close() returns after the running task, not after the rest of the graph
    rt = Runtime(2)
    for b in range(20):
        rt.submit(time.sleep, (0.02,), [(0, 8, INOUT)], "chain", -1, b)       # a chain: one at a time
    time.sleep(0.03)
    t0 = time.monotonic()
    rt.close()
    assert time.monotonic() - t0 < 0.1          # the whole chain would take 0.4 s
