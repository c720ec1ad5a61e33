"""Running bursts and Paraver's useful-duration histogram.

A burst is a thread's uninterrupted Running time: Running records of one thread that touch (or overlap) join
into one. The histogram puts each burst into a log-spaced duration bin, `bins_per_decade` bins per decade from
the decade fraction below the shortest burst to the one above the longest, and sums per thread and bin the
bursts and their time: where the Running time goes by burst length.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.plain import rows
from analysis.records import NS, Records
from analysis.sections import Inputs, Section
from gpt2trace.format.lanes import distinct_index, in_lane_order, key_width, lane_key, lane_order, split_key
from gpt2trace.format.schema import END_NS, RANK, START_NS, STATE, THREAD, State

CELL_COLUMNS = [RANK, THREAD, "bin", "count", "seconds", "share"]
_NEAR_EDGE = 1e-6      # slots (log10 x bins per decade) this close to an integer may fall on either side of an edge


def histogram(states: Records, bins_per_decade: int = 10) -> dict:
    """`edges_s`: the bin edges (seconds, ascending; empty when there is no burst); `cells`: one row per thread
    and non-empty bin, by (rank, thread, bin): rank, thread, bin (index of its lower edge), count, seconds, share
    (of the thread's time in bursts)."""
    return from_counts([counts(states, bins_per_decade)])


@dataclass(frozen=True)
class Counts:
    """The bursts of some threads, binned without knowing the edges, which depend on the shortest and the longest
    burst of every thread: per (thread, slot) count and nanoseconds, slot = floor(log10(ns) x bins_per_decade),
    which is the bin's index up to a shift, except for a burst within float error of an edge, kept as it is.
    Threads (`rank`, `thread`) sorted; `lane` indexes them."""
    bins_per_decade: int
    min_ns: int | None
    max_ns: int | None
    rank: np.ndarray
    thread: np.ndarray
    lane: np.ndarray
    slot: np.ndarray
    count: np.ndarray
    ns: np.ndarray
    edge_lane: np.ndarray
    edge_ns: np.ndarray


def counts(states: Records, bins_per_decade: int = 10) -> Counts:
    key, width, start, end = _bursts(states)
    dur = end - start
    present, lane = distinct_index(key)
    lane_rank, lane_thread = split_key(present, width)
    x = np.log10(dur.astype(np.float64)) * bins_per_decade
    near = np.abs(x - np.round(x)) < _NEAR_EDGE
    slot = np.floor(x[~near]).astype(np.int64)
    width = int(slot.max() - slot.min()) + 1 if len(slot) else 1
    cell, idx = distinct_index(lane[~near] * width + (slot - (slot.min() if len(slot) else 0)))    # by counting
    return Counts(bins_per_decade, int(dur.min()) if len(dur) else None, int(dur.max()) if len(dur) else None,
                  lane_rank, lane_thread, cell // width, cell % width + (slot.min() if len(slot) else 0),
                  np.bincount(idx, minlength=len(cell)),
                  np.bincount(idx, weights=dur[~near].astype(np.float64), minlength=len(cell)),
                  lane[near], dur[near])


def from_counts(groups: list[Counts]) -> dict:
    """`histogram` of the threads of all `groups` (each its own threads, in rank order)."""
    bins_per_decade = groups[0].bins_per_decade
    mins = [g.min_ns for g in groups if g.min_ns is not None]
    if not mins:
        return {"edges_s": np.zeros(0), "cells": pd.DataFrame(columns=CELL_COLUMNS)}
    lo = np.floor(np.log10(float(min(mins))) * bins_per_decade) / bins_per_decade
    hi = np.ceil(np.log10(float(max(g.max_ns for g in groups if g.max_ns is not None))) * bins_per_decade + 1e-9) \
        / bins_per_decade
    edges = 10 ** np.arange(lo, hi + 0.5 / bins_per_decade, 1 / bins_per_decade)       # ns
    nbins = len(edges) - 1
    first = int(round(lo * bins_per_decade))
    offsets = np.cumsum([0] + [len(g.rank) for g in groups])
    lane_rank = np.concatenate([g.rank for g in groups])
    lane_thread = np.concatenate([g.thread for g in groups])
    lane = np.concatenate([g.lane + o for g, o in zip(groups, offsets)]
                          + [g.edge_lane + o for g, o in zip(groups, offsets)])
    col = np.concatenate([g.slot - first for g in groups]
                         + [np.searchsorted(edges, g.edge_ns, side="right") - 1 for g in groups])
    col = np.clip(col, 0, nbins - 1)
    weight_ns = np.concatenate([g.ns for g in groups] + [g.edge_ns.astype(np.float64) for g in groups])
    weight_n = np.concatenate([g.count for g in groups] + [np.ones(len(g.edge_ns), np.int64) for g in groups])
    cell = lane * nbins + col
    time = np.bincount(cell, weights=weight_ns, minlength=len(lane_rank) * nbins)
    count = np.bincount(cell, weights=weight_n, minlength=len(lane_rank) * nbins).astype(np.int64)
    per_lane = time.reshape(len(lane_rank), nbins).sum(axis=1)
    used = np.flatnonzero(count)
    lane_of = used // nbins
    cells = pd.DataFrame({RANK: lane_rank[lane_of], THREAD: lane_thread[lane_of],
                          "bin": used % nbins, "count": count[used], "seconds": time[used] / NS,
                          "share": time[used] / per_lane[lane_of]})
    return {"edges_s": edges / NS, "cells": cells}


def _bursts(states: Records) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """(lane key, its width (`lanes.lane_key`), start_ns, end_ns) of the bursts of positive length, by (rank,
    thread, start)."""
    run = np.flatnonzero(states[STATE] == State.RUNNING)
    thread = states[THREAD][run]
    width = key_width(thread)
    lane = lane_key(states[RANK][run], thread, width)
    s, e = states[START_NS][run], states[END_NS][run]
    if not in_lane_order(lane, s):                      # as a reader gives them: no sort
        order = lane_order(lane, np.zeros_like(lane), s)
        lane, s, e = lane[order], s[order], e[order]
    if not len(s):
        return lane, width, s, e
    joins = np.r_[False, (lane[1:] == lane[:-1]) & (s[1:] <= e[:-1])]
    head = np.flatnonzero(~joins)
    lane, s, e = lane[head], s[head], np.maximum.reduceat(e, head)
    keep = e > s
    return lane[keep], width, s[keep], e[keep]


def _section(inputs: Inputs, parts: list[Counts]) -> dict:
    hist = from_counts(parts)
    return {"edges_s": hist["edges_s"], "cells": rows(hist["cells"])}


# The useful-duration histogram (the report draws it)
SECTION = Section("bursts", "bursts", _section, part=lambda view: counts(view.states))
