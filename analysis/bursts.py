"""Running bursts and Paraver's useful-duration histogram.

A burst is a thread's uninterrupted Running time: Running records of one thread that touch (or overlap) join
into one. The histogram puts each burst into a log-spaced duration bin, `bins_per_decade` bins per decade from
the decade fraction below the shortest burst to the one above the longest, and sums per thread and bin the
bursts and their time: where the Running time goes by burst length.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import NS, Records
from gpt2trace.format.lanes import lane_index, lane_order
from gpt2trace.format.schema import END_NS, RANK, START_NS, STATE, THREAD, State

CELL_COLUMNS = [RANK, THREAD, "bin", "count", "seconds", "share"]


def histogram(states: Records, bins_per_decade: int = 10) -> dict:
    """`edges_s`: the bin edges (seconds, ascending; empty when there is no burst); `cells`: one row per thread
    and non-empty bin, by (rank, thread, bin): rank, thread, bin (index of its lower edge), count, seconds, share
    (of the thread's time in bursts)."""
    rank, thread, start, end = _bursts(states)
    if not len(start):
        return {"edges_s": np.zeros(0), "cells": pd.DataFrame(columns=CELL_COLUMNS)}
    dur = (end - start).astype(np.float64)
    lo = np.floor(np.log10(dur.min()) * bins_per_decade) / bins_per_decade
    hi = np.ceil(np.log10(dur.max()) * bins_per_decade + 1e-9) / bins_per_decade
    edges = 10 ** np.arange(lo, hi + 0.5 / bins_per_decade, 1 / bins_per_decade)       # ns
    nbins = len(edges) - 1
    col = np.clip(np.searchsorted(edges, dur, side="right") - 1, 0, nbins - 1)
    lane_rank, lane_thread, lane = lane_index(rank, thread)
    cell = lane * nbins + col
    time = np.bincount(cell, weights=dur, minlength=len(lane_rank) * nbins)
    count = np.bincount(cell, minlength=len(lane_rank) * nbins)
    per_lane = time.reshape(len(lane_rank), nbins).sum(axis=1)
    used = np.flatnonzero(count)
    lane_of = used // nbins
    cells = pd.DataFrame({RANK: lane_rank[lane_of], THREAD: lane_thread[lane_of],
                          "bin": used % nbins, "count": count[used], "seconds": time[used] / NS,
                          "share": time[used] / per_lane[lane_of]})
    return {"edges_s": edges / NS, "cells": cells}


def _bursts(states: Records) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rank, thread, start_ns, end_ns) of the bursts of positive length, by (rank, thread, start)."""
    run = states[STATE] == State.RUNNING
    r, th, s, e = states[RANK][run], states[THREAD][run], states[START_NS][run], states[END_NS][run]
    if not len(s):
        return r, th, s, e
    order = lane_order(r, th, s)
    r, th, s, e = r[order], th[order], s[order], e[order]
    joins = np.r_[False, (r[1:] == r[:-1]) & (th[1:] == th[:-1]) & (s[1:] <= e[:-1])]
    head = np.flatnonzero(~joins)
    r, th, s, e = r[head], th[head], s[head], np.maximum.reduceat(e, head)
    keep = e > s
    return r[keep], th[keep], s[keep], e[keep]
