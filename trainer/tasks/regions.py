"""Data dependencies between tasks from the memory they declare, with OmpSs-2's rules.

A task declares accesses: a region of memory and a mode, IN (reads), OUT (writes) or INOUT. A region is the byte
range a NumPy view spans (its bounding range: exact for the contiguous row blocks the tilings use; a strided view
is widened to its bounds, which can add edges but never miss one). In submission order:

    RAW  a reader depends on the last task that wrote an overlapping byte
    WAW  a writer depends on the last writer of every byte it overlaps ...
    WAR  ... or, where tasks read those bytes since that write, on those readers (which themselves depend on the
         writer, so the writer's edge would be redundant and is left out)

Disjoint regions never create an edge, however close. The map from bytes to their last writer and readers is a
sorted list of disjoint segments, split where a new region starts or ends inside one and merged back when a task
writes a whole range: a new access costs O(log n + k) for the k segments it overlaps, never a scan of the tasks.
The map is emptied at each taskwait (every task is then done: no later task can depend on them).
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

IN, OUT, INOUT = 1, 2, 3
_READS, _WRITES = 1, 2


def byte_range(a: np.ndarray) -> tuple[int, int]:
    """[lo, hi) of the bytes the view `a` spans (its bounding range)."""
    lo = a.__array_interface__["data"][0]
    if a.size == 0:
        return lo, lo
    if a.flags.c_contiguous:
        return lo, lo + a.nbytes
    hi = lo + a.itemsize
    for n, s in zip(a.shape, a.strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi


class DependencyMap:
    """Last writer and readers since of every byte accessed since the last `clear` (see the module docstring).

    Tasks are opaque here (anything hashable); `access` adds to `preds` the tasks the new one must follow."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        # segment i covers bytes [lo[i], hi[i]); writer[i] is its last writer or None, readers[i] the tasks that
        # read it since; lo and hi are both increasing (segments are disjoint), so either can be bisected
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.writer: list = []
        self.readers: list[list] = []

    def __len__(self) -> int:
        return len(self.lo)

    def access(self, task, lo: int, hi: int, mode: int, preds: set) -> None:
        if hi <= lo:
            return
        los, his, ws, rs = self.lo, self.hi, self.writer, self.readers
        first = bisect_right(his, lo)           # the first segment ending after lo
        n = len(los)
        # fast paths, most accesses: exactly one segment's bytes (a block a previous task read or wrote), or new bytes
        if first < n and los[first] == lo and his[first] == hi:
            w, r = ws[first], rs[first]
            if mode & _WRITES:
                if r:
                    preds.update(r)
                elif w is not None:
                    preds.add(w)
                ws[first], rs[first] = task, []
            else:
                if w is not None:
                    preds.add(w)
                r.append(task)          # every segment owns its readers list (splits copy it)
            return
        if first == n or los[first] >= hi:
            los.insert(first, lo), his.insert(first, hi)
            if mode & _WRITES:
                ws.insert(first, task), rs.insert(first, [])
            else:
                ws.insert(first, None), rs.insert(first, [task])
            return
        last = first
        while last < n and los[last] < hi:
            last += 1
        writes = mode & _WRITES
        # segments first..last-1 overlap [lo, hi): collect the dependencies and build their replacement
        new_lo, new_hi, new_w, new_r = [], [], [], []
        pos = lo
        for i in range(first, last):
            s_lo, s_hi, w, r = los[i], his[i], ws[i], rs[i]
            if s_lo < lo:               # the part before the access keeps its state
                new_lo.append(s_lo), new_hi.append(lo), new_w.append(w), new_r.append(list(r))
            elif s_lo > pos and not writes:   # a gap never accessed: read for the first time
                new_lo.append(pos), new_hi.append(s_lo), new_w.append(None), new_r.append([task])
            if writes:
                if r:
                    preds.update(r)
                elif w is not None:
                    preds.add(w)
            else:
                if w is not None:
                    preds.add(w)
                new_lo.append(max(s_lo, lo)), new_hi.append(min(s_hi, hi)), new_w.append(w), new_r.append(r + [task])
            pos = min(s_hi, hi)
            if s_hi > hi:               # the part after the access keeps its state
                tail = (hi, s_hi, w, list(r))
                break
        else:
            tail = None
        if writes:
            # one segment for the whole access, inserted after any kept head part
            k = 1 if new_lo and new_lo[0] < lo else 0
            new_lo.insert(k, lo), new_hi.insert(k, hi), new_w.insert(k, task), new_r.insert(k, [])
            del new_lo[k + 1:], new_hi[k + 1:], new_w[k + 1:], new_r[k + 1:]
        elif pos < hi:
            new_lo.append(pos), new_hi.append(hi), new_w.append(None), new_r.append([task])
        if tail is not None:
            new_lo.append(tail[0]), new_hi.append(tail[1]), new_w.append(tail[2]), new_r.append(tail[3])
        los[first:last], his[first:last], ws[first:last], rs[first:last] = new_lo, new_hi, new_w, new_r

    def add(self, task, accesses, preds: set) -> None:
        """All of one task's accesses, (lo, hi, mode) byte ranges (see `Region`). A task never depends on itself."""
        for lo, hi, mode in accesses:
            self.access(task, lo, hi, mode, preds)
        preds.discard(task)


class Region:
    """An array's byte range, read once (reading a view's address costs ~3 us in NumPy, more than the rest of a
    task's submission), and the byte ranges of its row blocks derived from it by arithmetic."""
    __slots__ = ("lo", "hi", "row")

    def __init__(self, a: np.ndarray):
        self.lo, self.hi = byte_range(a)
        # bytes per row of a C-contiguous array, whose row blocks are contiguous; 0 otherwise (blocks: the whole)
        self.row = a.strides[0] if a.ndim and a.flags.c_contiguous and a.shape[0] else 0

    def whole(self, mode: int) -> tuple[int, int, int]:
        return self.lo, self.hi, mode

    def rows(self, r0: int, r1: int, mode: int) -> tuple[int, int, int]:
        if not self.row:
            return self.lo, self.hi, mode
        return self.lo + r0 * self.row, self.lo + r1 * self.row, mode
