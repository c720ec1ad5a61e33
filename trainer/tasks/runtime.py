"""A dependency-driven task runtime in the spirit of OmpSs-2/Nanos6: tasks with data dependencies, a ready queue,
`nthreads` workers (the main thread and nthreads - 1 helper threads), a taskwait, and communication tasks driven by
the main thread in the spirit of TAMPI.

The main thread submits tasks in program order (the model's kernel calls, cut into blocks by trainer.tasks.tiling);
each task's predecessors come from the regions it declares (trainer.tasks.regions). A task body may return the
(start, end) times of its work as read inside it (the kernels' trace slots, without the GIL); otherwise its Python
call is timed. A task whose predecessors are
all done is ready; any worker takes the oldest ready task (FIFO) and runs its body, a Numba kernel that releases
the GIL, so workers compute at once. Helper threads work from the first submission; the main thread joins them at
a taskwait, which returns when every submitted task is done.

Communication tasks (`submit_comm`): MPI stays FUNNELED, only the main thread calls it. Such a task goes to the
main thread's own queue; its body posts a nonblocking call and returns the request; the task then stays in flight
(its successors waiting) until MPI_Test, called by the main thread between tasks, finds the request complete.
Collectives must start in the same order on every rank, so communication tasks start in submission order (one
whose predecessors finished early waits for the ones submitted before it to have started).
"""
from __future__ import annotations

import heapq
import threading
import time
from collections import deque

from trainer.tasks.log import LogBuilder
from trainer.tasks.regions import DependencyMap

# How long the main thread sleeps between MPI_Test rounds while requests are in flight and no task is ready.
POLL_S = 20e-6


class Task:
    __slots__ = ("id", "fn", "args", "kernel", "layer", "block", "comm", "pending", "succ", "done", "preds",
                 "submit_ns", "pick_ns", "start_ns", "end_ns", "test", "request", "comm_seq")

    def __init__(self, tid: int, fn, args: tuple, kernel: int, layer: int, block: int, comm: bool = False):
        self.id, self.fn, self.args = tid, fn, args
        self.kernel, self.layer, self.block, self.comm = kernel, layer, block, comm
        self.pending, self.succ, self.done = 0, [], False
        self.preds: tuple[int, ...] = ()
        self.submit_ns = self.pick_ns = self.start_ns = self.end_ns = 0
        self.test = self.request = None     # a communication task's test and its request in flight
        self.comm_seq = -1


class Runtime:
    def __init__(self, nthreads: int):
        if nthreads < 1:
            raise ValueError("a task runtime needs at least one thread")
        self.nthreads = nthreads
        self.deps = DependencyMap()
        self.log = LogBuilder()
        self._cond = threading.Condition(threading.RLock())   # RLock: Condition's ownership check is cheap
        self._sleeping = 0          # workers waiting for a ready task: only then is a notify needed
        self._ready: deque[Task] = deque()
        self._main_ready: list[tuple[int, Task]] = []      # communication tasks by comm_seq
        self._comm_submitted = 0
        self._comm_started = 0
        self._in_flight: list[Task] = []
        self._unfinished = 0
        self._next_id = 0
        self._error: BaseException | None = None
        self._stop = False
        self._workers = [threading.Thread(target=self._work, name=f"task-worker-{i + 1}", daemon=True)
                         for i in range(nthreads - 1)]
        for w in self._workers:
            w.start()

    # -- submission (main thread) -----------------------------------------------------------------------------
    def submit(self, fn, args: tuple, accesses, kernel: str, layer: int, block: int) -> Task:
        """A task running fn(*args) once its predecessors are done; `accesses`: (lo, hi, IN/OUT/INOUT)
        byte ranges (trainer.tasks.regions.Region)."""
        return self._submit(Task(self._next_id, fn, args, self.log.name_index(kernel), layer, block), accesses)

    def submit_comm(self, start, test, accesses, name: str, layer: int) -> Task:
        """A communication task: `start()` posts a nonblocking MPI call and returns its request, `test(request)`
        says whether it completed. Both are called on the main thread only."""
        t = Task(self._next_id, start, (), self.log.name_index(name), layer, 0, comm=True)
        t.test = test
        t.comm_seq = self._comm_submitted
        self._comm_submitted += 1
        return self._submit(t, accesses)

    def _submit(self, task: Task, accesses) -> Task:
        self._next_id += 1
        preds: set[Task] = set()
        self.deps.add(task, accesses, preds)
        task.preds = tuple(p.id for p in preds)
        task.submit_ns = time.monotonic_ns()
        with self._cond:
            n = 0
            for p in preds:
                if not p.done:
                    p.succ.append(task)
                    n += 1
            task.pending = n
            self._unfinished += 1
            if n == 0:
                self._make_ready(task)
                if self._sleeping:
                    self._cond.notify()
        return task

    def _make_ready(self, task: Task) -> None:   # under the lock
        if task.comm:
            heapq.heappush(self._main_ready, (task.comm_seq, task))
        else:
            self._ready.append(task)

    # -- execution ----------------------------------------------------------------------------------------------
    def _finish(self, task: Task, tid: int) -> None:   # under the lock
        task.done = True
        released = 0
        for s in task.succ:
            s.pending -= 1
            if s.pending == 0:
                self._make_ready(s)
                released += 1
        task.succ = None
        self._unfinished -= 1
        done = time.monotonic_ns()
        self.log.rows.append((task.id, task.kernel, task.layer, task.block, tid, task.submit_ns, task.pick_ns,
                              task.start_ns, task.end_ns, done))
        self.log.pred_counts.append(len(task.preds))
        self.log.preds.extend(task.preds)
        task.fn = task.args = task.test = task.request = None      # the views and requests it held
        if released or self._unfinished == 0:
            self._cond.notify_all()

    def _run(self, task: Task, tid: int) -> None:
        start = time.monotonic_ns()
        inside = None
        try:
            inside = task.fn(*task.args)
        except BaseException as e:      # raised again by the taskwait; the graph still drains
            if self._error is None:
                self._error = e
        # a kernel task returns its (entry, exit) read inside the kernel without the GIL: releasing and retaking
        # the GIL around it is the runtime's time, not the task's
        task.start_ns, task.end_ns = inside if inside is not None else (start, time.monotonic_ns())
        with self._cond:
            self._finish(task, tid)

    def _work(self) -> None:
        tid = threading.get_ident()
        cond, ready = self._cond, self._ready
        while True:
            with cond:
                if not ready and not self._stop:
                    t0 = time.monotonic_ns()
                    self._sleeping += 1
                    while not ready and not self._stop:
                        cond.wait()
                    self._sleeping -= 1
                    if not self._stop:
                        self.log.idle.append((tid, t0, time.monotonic_ns()))   # this taskwait's log
                if self._stop:      # closing (the run ended, or stopped inside a step): leave the rest
                    return
                task = ready.popleft()
                task.pick_ns = time.monotonic_ns()
            self._run(task, tid)

    def _start_comm(self, task: Task) -> None:
        task.start_ns = time.monotonic_ns()
        task.request = task.fn()
        task.end_ns = time.monotonic_ns()
        self._in_flight.append(task)

    def _poll(self, tid: int) -> None:
        """MPI_Test every request in flight (main thread, outside the lock); finish the completed tasks."""
        still = []
        for task in self._in_flight:
            if task.test(task.request):
                with self._cond:
                    self._finish(task, tid)
            else:
                still.append(task)
                self.log.polls += 1
        self._in_flight = still

    def taskwait(self) -> None:
        """Run tasks on the main thread, starting communication tasks and testing their requests between tasks,
        until every submitted task is done."""
        tid = threading.get_ident()
        cond, ready, main_ready = self._cond, self._ready, self._main_ready
        idle_since = None
        while True:
            if self._in_flight:
                self._poll(tid)
            with cond:
                if self._unfinished == 0:
                    break
                task = None
                if main_ready and main_ready[0][0] == self._comm_started:
                    task = heapq.heappop(main_ready)[1]
                    self._comm_started += 1
                elif ready:
                    task = ready.popleft()
                if task is None:
                    if idle_since is None:
                        idle_since = time.monotonic_ns()
                    cond.wait(POLL_S if self._in_flight else None)
                    continue
                now = time.monotonic_ns()
                task.pick_ns = now
            if idle_since is not None:
                self.log.idle.append((tid, idle_since, now))
                idle_since = None
            if task.comm:
                self._start_comm(task)
            else:
                self._run(task, tid)
        if idle_since is not None:
            self.log.idle.append((tid, idle_since, time.monotonic_ns()))
        self.deps.clear()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        """Stop the workers once their current task is done; tasks not started are dropped."""
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        for w in self._workers:
            w.join()
        self._workers = []
