"""The record of the tasks a runtime executed, handed to the observer after each taskwait."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NO_LAYER = -1


@dataclass(frozen=True)
class TaskLog:
    """One row per task executed since the previous taskwait, in completion order; NumPy arrays of n rows unless
    said otherwise. Times are time.monotonic_ns() (the clock of the kernels' trace slots and of the tracer).
    A taskwait is a barrier the predecessor lists do not show: every task of a log was submitted after every task
    of the earlier logs was done (a critical path adds up the logs' own).

    task         int64  id, unique on the rank over the whole run, increasing in submission order
    kernel       int32  index into `names`
    layer        int32  the model's layer, -1 outside the transformer blocks (as the forkjoin kernels' records)
    block        int32  the block of its kernel call (0..blocks-1: row, feature or sequence block, or 0 for a
                        single-task call)
    tid          int64  threading.get_ident() of the thread that ran it (the main thread is one of the workers)
    submit_ns    int64  created (by the main thread, in program order)
    pick_ns      int64  taken from the ready queue by that thread
    start_ns, end_ns  int64  its body: the kernel's block as its trace slot read it inside the kernel, without
                        the GIL (so pick..start and end..done hold the runtime's own cost, the GIL's release and
                        retaking included), or for a communication task the posting of its nonblocking MPI call
    done_ns      int64  finished and its successors released; for a communication task, when MPI_Test found
                        its request complete (end_ns..done_ns: the request in flight)
    pred_offsets int64 (n + 1,) and preds int64: CSR of the ids of each task's predecessors (task i's are
                        preds[pred_offsets[i]:pred_offsets[i + 1]]; every predecessor was done before it was
                        picked, possibly in an earlier log)
    idle         int64 (k, 3): (tid, start_ns, end_ns) intervals a thread waited with no ready task it could run
                        (the main thread polls pending MPI requests meanwhile)
    names        the kernel names, as forkjoin traces name the kernels; communication tasks by their MPI call
                        (MPI_Iallreduce). Indices are stable over a run: later logs only append names.
    polls        int: MPI_Test calls that found a request still in flight (only successful ones are in the trace)
    submit_cost_ns int: main-thread time spent submitting these tasks: cutting the kernel calls into blocks and
                        finding each block's predecessors (trainer.tasks.launcher)
    """
    task: np.ndarray
    kernel: np.ndarray
    layer: np.ndarray
    block: np.ndarray
    tid: np.ndarray
    submit_ns: np.ndarray
    pick_ns: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    done_ns: np.ndarray
    pred_offsets: np.ndarray
    preds: np.ndarray
    idle: np.ndarray
    names: tuple[str, ...]
    polls: int = 0
    submit_cost_ns: int = 0

    def __len__(self) -> int:
        return len(self.task)

    def predecessors(self, i: int) -> np.ndarray:
        return self.preds[self.pred_offsets[i]:self.pred_offsets[i + 1]]


class LogBuilder:
    """What the runtime appends as tasks finish (a row tuple, the predecessors: a few appends per task); `take`
    turns it into a TaskLog and starts over."""

    FIELDS = ("task", "kernel", "layer", "block", "tid", "submit_ns", "pick_ns", "start_ns", "end_ns", "done_ns")
    INT32 = ("kernel", "layer", "block")

    def __init__(self):
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        self._reset()

    def _reset(self) -> None:
        self.rows: list[tuple] = []          # one tuple of FIELDS per finished task
        self.pred_counts: list[int] = []
        self.preds: list[int] = []
        self.idle: list[tuple[int, int, int]] = []
        self.polls = 0
        self.submit_cost_ns = 0

    def name_index(self, name: str) -> int:
        i = self._index.get(name)
        if i is None:
            i = self._index[name] = len(self.names)
            self.names.append(name)
        return i

    def take(self) -> TaskLog:
        table = np.array(self.rows, dtype=np.int64).reshape(-1, len(self.FIELDS))
        cols = {f: table[:, i].astype(np.int32) if f in self.INT32 else table[:, i].copy()
                for i, f in enumerate(self.FIELDS)}
        offsets = np.zeros(len(self.pred_counts) + 1, dtype=np.int64)
        np.cumsum(self.pred_counts, out=offsets[1:])
        log = TaskLog(**cols, pred_offsets=offsets, preds=np.array(self.preds, dtype=np.int64),
                      idle=np.array(self.idle, dtype=np.int64).reshape(-1, 3), names=tuple(self.names),
                      polls=self.polls, submit_cost_ns=self.submit_cost_ns)
        self._reset()
        return log
