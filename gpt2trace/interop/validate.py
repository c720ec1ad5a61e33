"""What an export refuses, checked on every record before anything is written: one line naming the file, the
record (kind, name, rank, thread, times) and what is wrong.

  a record that ends before it starts      neither a .prv nor Chrome's JSON has a negative duration
  a time before 0                          our times count from the trace's start; Paraver's start at 0
  state records of a thread that overlap   a thread is in one state at a time (Paraver would draw one of them,
                                           and Chrome's state track would not nest)
  kernel, phase, MPI call or task          Paraver pairs a thread's opening and closing events of a type as a
  records of a thread that overlap         stack, so crossing records would come back paired wrongly; Chrome's
                                           slices on one track must nest

Streaming, batch by batch: each batch's records are sorted by (kind, rank, thread, start) and swept by one compiled
pass, and only the records still open at the batch's end (a few per thread) are carried to the next one. That is
exact when each thread's records come in time order across batches, as our writer's files have them; when they do
not, the sweep notices it and `finish` checks again over the narrow columns of the whole trace at once (about 30
bytes per record).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from gpt2trace.format.errors import TraceError
from gpt2trace.format.schema import END_NS, KIND, NAME, RANK, START_NS, THREAD, Kind

COLUMNS = (KIND, RANK, THREAD, START_NS, END_NS, NAME)
INTERVALS = (Kind.STATE, Kind.KERNEL, Kind.PHASE, Kind.COMM, Kind.TASK)     # index = kind code in the sweep
_STATE = INTERVALS.index(Kind.STATE)
_OK, _OVERLAP, _UNORDERED = 0, 1, 2


@dataclass
class _Records:
    """Interval records as flat arrays (kind code, rank, thread, start, end, name id) and whether each was carried
    from an earlier batch."""
    kind: np.ndarray
    rank: np.ndarray
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name: np.ndarray                  # index in the checker's list of names, -1 for none
    carried: np.ndarray

    @classmethod
    def empty(cls) -> _Records:
        z = np.zeros(0, np.int64)
        return cls(z.astype(np.int8), z, z, z, z, z, z.astype(bool))

    @classmethod
    def of(cls, batch: pa.Table, names: _Names) -> _Records:
        kind = _kind_codes(batch)
        keep = kind >= 0
        if not keep.all():
            batch, kind = batch.filter(pa.array(keep)), kind[keep]
        col = {c: batch.column(c).to_numpy().astype(np.int64, copy=False) for c in (RANK, THREAD, START_NS, END_NS)}
        return cls(kind, col[RANK], col[THREAD], col[START_NS], col[END_NS], names.ids(batch.column(NAME)),
                   np.zeros(batch.num_rows, bool))

    def take(self, idx: np.ndarray) -> _Records:
        return _Records(*(getattr(self, f)[idx] for f in _FIELDS))

    @staticmethod
    def concat(parts: list[_Records]) -> _Records:
        return _Records(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))

    def __len__(self) -> int:
        return len(self.kind)


_FIELDS = ("kind", "rank", "thread", "start", "end", "name", "carried")


class _Names:
    """One id per distinct name across batches (each batch has its own dictionary): records carry ids, and a
    message looks the name up."""

    def __init__(self):
        self._ids: dict[str, int] = {}

    def ids(self, column) -> np.ndarray:
        col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        # one more entry, -1, at the end of the lookup: where a null name's index (-1) lands
        lookup = np.array([self._ids.setdefault(n, len(self._ids)) for n in col.dictionary.to_pylist()] + [-1],
                          np.int64)
        return lookup[pc.fill_null(col.indices, -1).to_numpy(zero_copy_only=False)]

    def __getitem__(self, i: int) -> str:
        return next(n for n, k in self._ids.items() if k == i)


class RecordCheck:
    """Feed every batch (COLUMNS) to `add`, then call `finish`; both raise TraceError at the first problem."""

    def __init__(self, where: str):
        self.where = where
        self._open = _Records.empty()
        self._unordered = False
        self._names = _Names()

    def add(self, batch: pa.Table) -> None:
        if not batch.num_rows:
            return
        self._times(batch)
        if self._unordered:
            return
        code, recs, i, j, keep = _check(_Records.concat([self._open, _Records.of(batch, self._names)]))
        if code == _UNORDERED:
            self._unordered, self._open = True, _Records.empty()
            return
        if code == _OVERLAP:
            raise TraceError(self._overlap(recs, i, j))
        self._open = recs.take(keep)
        self._open.carried[:] = True

    def finish(self, batches) -> None:
        """Checks the whole trace at once when its records were not in time order across batches; `batches` is
        called for a fresh iterator over the COLUMNS."""
        if not self._unordered:
            return
        parts = [_Records.of(b, self._names) for b in batches() if b.num_rows]
        code, recs, i, j, _ = _check(_Records.concat(parts) if parts else _Records.empty())
        if code == _OVERLAP:
            raise TraceError(self._overlap(recs, i, j))

    def _times(self, batch: pa.Table) -> None:
        start, end = batch.column(START_NS), batch.column(END_NS)
        back = pc.less(end, start)
        if pc.any(back).as_py():
            i = int(np.argmax(back.to_numpy(zero_copy_only=False)))
            raise TraceError(f"{self.where}: cannot export: {_record(batch, i)} ends before it starts (start "
                             f"{start[i].as_py()} ns, end {end[i].as_py()} ns); fix or drop the record")
        early = pc.less(start, 0)
        if pc.any(early).as_py():
            i = int(np.argmax(early.to_numpy(zero_copy_only=False)))
            raise TraceError(f"{self.where}: cannot export: {_record(batch, i)} starts at {start[i].as_py()} ns; "
                             "times count from the trace's start and Paraver's start at 0")

    def _named(self, recs: _Records, i: int) -> str:
        return f"{_quote(self._names[int(recs.name[i])])} " if recs.name[i] >= 0 else ""

    def _overlap(self, recs: _Records, i: int, j: int) -> str:
        kind = INTERVALS[recs.kind[i]]
        where = f"rank {recs.rank[i]} thread {recs.thread[i]}"
        if kind == Kind.STATE:
            return (f"{self.where}: cannot export: state records overlap on {where}: the one over {_span(recs, i)} "
                    f"starts before the one over {_span(recs, j)} ends; a thread is in one state at a time")
        return (f"{self.where}: cannot export: {kind} records overlap without nesting on {where}: "
                f"{self._named(recs, i)}{_span(recs, i)} starts inside {self._named(recs, j)}{_span(recs, j)} and "
                f"ends after it; a thread's {kind} records must nest (Paraver pairs their start and end events as a "
                "stack, and Chrome's slices on a track nest)")


def _check(recs: _Records) -> tuple[int, _Records, int, int, np.ndarray]:
    """Sorts and sweeps; (code, the sorted records, offending record, the one it overlaps, records still open)."""
    if not len(recs):
        return _OK, recs, -1, -1, np.zeros(0, np.int64)
    # At one start: states shortest first (a zero-length state then the next one), other kinds longest first
    # (the enclosing record before those it holds); carried records before new ones.
    tie = np.where(recs.kind != _STATE, -recs.end, recs.end)
    if recs.rank.max() < 2**30:          # (kind, rank, thread) as one sort key
        lane = (recs.kind.astype(np.int64) << 61) | (recs.rank.astype(np.int64) << 31) | recs.thread.astype(np.int64)
        order = np.lexsort((~recs.carried, tie, recs.start, lane))
    else:
        order = np.lexsort((~recs.carried, tie, recs.start, recs.thread, recs.rank, recs.kind))
    recs = recs.take(order)
    keep = np.zeros(len(recs), np.bool_)
    code, i, j = _sweep(recs.kind, recs.rank, recs.thread, recs.start, recs.end, recs.kind != _STATE, recs.carried,
                        keep)
    return int(code), recs, int(i), int(j), np.flatnonzero(keep)


@njit(cache=True)
def _sweep(kind, rank, thread, start, end, nests, carried, keep):
    """Per (kind, rank, thread), in sorted order, a stack of the records enclosing the current start: a record
    that starts before the top ends must nest inside it (and states may not be inside one at all). Marks in
    `keep` the records still open at the end; (code, i, j): _OVERLAP with the record i and the one j it
    overlaps, _UNORDERED when a carried record comes after a new one of its thread."""
    n = len(kind)
    stack = np.empty(n, np.int64)
    top = 0
    fresh = False
    for i in range(n):
        if i == 0 or kind[i] != kind[i - 1] or rank[i] != rank[i - 1] or thread[i] != thread[i - 1]:
            for k in range(top):
                keep[stack[k]] = True
            top = 0
            fresh = False
        if carried[i]:
            if fresh:
                return _UNORDERED, i, -1
        else:
            fresh = True
        while top > 0 and end[stack[top - 1]] <= start[i]:
            top -= 1
        if top > 0:
            j = stack[top - 1]
            if not nests[i] or end[i] > end[j]:
                return _OVERLAP, i, j
        stack[top] = i
        top += 1
    for k in range(top):
        keep[stack[k]] = True
    return _OK, -1, -1


def _kind_codes(batch: pa.Table) -> np.ndarray:
    """Each record's index in INTERVALS, -1 for counters."""
    col = batch.column(KIND).combine_chunks()
    lookup = np.array([INTERVALS.index(k) if k in INTERVALS else -1 for k in col.dictionary.to_pylist()], np.int8)
    return lookup[col.indices.to_numpy(zero_copy_only=False)] if len(lookup) else np.zeros(len(col), np.int8)


def _record(batch: pa.Table, i: int) -> str:
    kind = batch.column(KIND)[i].as_py()
    name = batch.column(NAME)[i].as_py()
    named = f" {_quote(name)}" if name is not None and kind != Kind.STATE else ""
    return f"a {kind} record{named} on rank {batch.column(RANK)[i].as_py()} thread {batch.column(THREAD)[i].as_py()}"


def _span(recs: _Records, i: int) -> str:
    return f"[{recs.start[i]}, {recs.end[i]}] ns"


def _quote(name: str) -> str:
    """A name for a one-line message: repr (no raw line break or NUL), cut at 80 characters."""
    text = repr(name)
    return text if len(text) <= 80 else text[:77] + "..."
