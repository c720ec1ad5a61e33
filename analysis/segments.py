"""Kernel invocations seen from a rank: the wall-clock segments its threads spend in one kernel.

The trace has one `kernel` record per thread per invocation and no invocation id, so a rank's records sorted by
start are cut where a record starts after every earlier one has ended, or where the kernel (name, layer) changes.
Consecutive invocations of the same kernel and layer may merge into one segment; per-kernel totals are unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.records import Records, records
from analysis.window import Window
from gpt2trace.format.lanes import is_sorted, time_key, time_key_fits
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, LAYER, NAME, RANK, START_NS, STEP, THREAD, Kind


@dataclass(frozen=True)
class Segments:
    """One entry per segment, sorted by (rank, start); `busy_ns` sums the threads' block times in it."""
    rank: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name: np.ndarray          # codes into `names`
    layer: np.ndarray         # -1: not a layer kernel
    busy_ns: np.ndarray
    names: tuple[str, ...]
    lo: int                   # (rank, time) keys: `lanes.time_key(rank, t, lo, width)`, sorted like the segments
    width: int

    def __len__(self) -> int:
        return len(self.rank)

    def locate(self, rank: np.ndarray, t_ns: np.ndarray) -> np.ndarray:
        """The segment holding each (rank, time) (start <= t < end), or -1."""
        if not len(self):
            return np.full(len(t_ns), -1, dtype=np.int64)
        key = time_key(rank, t_ns, self.lo, self.width)
        seg_start = time_key(self.rank, self.start_ns, self.lo, self.width)
        i = np.searchsorted(seg_start, key, side="right")
        i -= 1
        # the rank's own (a time outside the segments' span has a key in a neighbour rank's range)
        at = np.maximum(i, 0)
        ok = self.rank[at] == rank
        ok &= t_ns < self.end_ns[at]
        ok &= i >= 0
        i[~ok] = -1
        return i


def kernel_records(trace: Trace, window: Window | None) -> Records:
    return records(trace, Kind.KERNEL, (RANK, THREAD, NAME, LAYER, STEP), window)


def by_time(kern: Records) -> Records:
    """The kernel records in (rank, start) order, ties in their order: how `segments` and the critical path's
    regions (`kernel_regions`) read them, sorted once for both."""
    if len(kern) < 2:
        return kern
    rank, start = kern[RANK], kern[START_NS]
    lo = int(start.min())
    width = int(start.max()) - lo + 1
    if not time_key_fits(int(rank.max()) + 1, width):
        return kern.take(np.lexsort((start, rank)))
    key = time_key(rank, start, lo, width)
    return kern if is_sorted(key) else kern.take(np.argsort(key, kind="stable"))


def segments(kern: Records) -> Segments:
    n = len(kern)
    if n == 0:
        z = np.zeros(0, dtype=np.int64)
        return Segments(z, z, z, z, z, z, kern.names, 0, 1)
    rank, start, end = kern[RANK].astype(np.int64), kern[START_NS], kern[END_NS]
    lo = int(min(start.min(), end.min()))
    width = int(max(start.max(), end.max())) - lo + 1
    if not time_key_fits(int(rank.max()) + 1, width):
        raise ValueError("trace span too long for composite keys")  # ~ 50 days at 1 ns with 1000 ranks
    cs, ce = time_key(rank, start, lo, width), time_key(rank, end, lo, width)
    name, layer = kern[NAME], kern[LAYER].astype(np.int64)
    if not is_sorted(cs):                       # (`by_time` sorts them so)
        order = np.argsort(cs, kind="stable")
        cs, ce, name, layer, rank = cs[order], ce[order], name[order], layer[order], rank[order]
    else:
        order = None
    key = name.astype(np.int64) * 65538 + (layer + 1)
    reach = np.maximum.accumulate(ce)
    cut = np.ones(n, dtype=bool)
    cut[1:] = (cs[1:] >= reach[:-1]) | (key[1:] != key[:-1])
    first = np.flatnonzero(cut)
    seg_rank = rank[first]
    thread = kern[THREAD] if order is None else kern[THREAD][order]
    return Segments(rank=seg_rank, start_ns=cs[first] - seg_rank * width + lo,
                    end_ns=np.maximum.reduceat(ce, first) - seg_rank * width + lo,
                    name=name[first], layer=layer[first], busy_ns=_busy(cut, first, thread, cs, ce),
                    names=kern.names, lo=lo, width=width)


def _busy(cut: np.ndarray, first: np.ndarray, thread: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> np.ndarray:
    """Per segment, the time each thread spends in its records, summed over the threads: a thread's records that
    nest (a profiled function that calls itself, an op inside an op of the same name) count once, as their union.
    Records in (segment, start) order; `cs`, `ce` their (rank, time) keys."""
    seg = np.cumsum(cut) - 1
    lane = seg * (int(thread.max()) + 1) + thread.astype(np.int64)
    order = np.argsort(lane, kind="stable")                           # (segment, thread), each in start order
    lane, s, e = lane[order], cs[order], ce[order]
    new = np.r_[True, lane[1:] != lane[:-1]]
    if new.all():                                                     # one record per thread and segment
        return np.add.reduceat(ce - cs, first)
    lane_no = np.cumsum(new) - 1
    s0 = s[new][lane_no]                                              # times from the lane's first start
    rs, re = s - s0, e - s0
    span = int(re.max()) + 1
    if time_key_fits(int(lane_no[-1]) + 1, span):                    # a cumulative max per lane, as one
        reach = np.maximum.accumulate(re + lane_no * span) - lane_no * span
    else:
        reach = pd.Series(re).groupby(lane_no).cummax().to_numpy()
    prior = np.where(new, 0, np.r_[0, reach[:-1]])                    # the lane's earlier records' latest end
    covered = np.clip(re - np.maximum(rs, prior), 0, None)
    return np.bincount(seg[order], weights=covered, minlength=len(first)).astype(np.int64)


def concat(parts: list[Segments]) -> Segments:
    """The segments of groups of ranks (in rank order, with the same kernel names) as those of all their ranks."""
    if len(parts) == 1:
        return parts[0]
    cols = {f: np.concatenate([getattr(p, f) for p in parts]) for f in ("rank", "start_ns", "end_ns", "name",
                                                                          "layer", "busy_ns")}
    if not len(cols["rank"]):
        return Segments(**cols, names=parts[0].names, lo=0, width=1)
    lo = int(cols["start_ns"].min())             # the earliest start and latest end, as `segments` keys them
    width = int(cols["end_ns"].max()) - lo + 1
    if not time_key_fits(int(cols["rank"].max()) + 1, width):
        raise ValueError("trace span too long for composite keys")
    return Segments(**cols, names=parts[0].names, lo=lo, width=width)
