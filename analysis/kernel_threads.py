"""Each thread's time in each kernel (all layers together), against the kernel's mean over the threads of every
rank that run it: the kernel x thread imbalance map.

`imbalance` compares threads within a rank and ranks by wall time; this table keeps every (kernel, thread) cell,
so one slow thread shows in every kernel it runs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.plain import rows
from analysis.records import NS, Records
from analysis.sections import Inputs, Section
from gpt2trace.format.lanes import distinct_index, lane_index
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, THREAD

COLUMNS = ["kernel", RANK, THREAD, "seconds", "ratio"]


def kernel_threads(kern: Records) -> pd.DataFrame:
    """One row per kernel and thread that runs it: kernel, rank, thread, seconds (the sum of its blocks), ratio
    (seconds over the kernel's mean over those threads; 1 = balanced). Kernels by total time (largest first,
    ties by name), threads by (rank, thread)."""
    return from_cells([cells(kern)])


def cells(kern: Records) -> pd.DataFrame:
    """Per (kernel, thread) that runs it: kernel name (None: a record without one), rank, thread, ns (the sum of
    its blocks: integer nanoseconds, exact in any order). Small: kernels x threads rows."""
    if not len(kern):
        return pd.DataFrame({"kernel": [], RANK: [], THREAD: [], "ns": []})
    rank, thread, lane = lane_index(kern[RANK], kern[THREAD])
    codes, name = distinct_index(kern[NAME] + 1)             # codes from -1 (no name): by counting
    codes -= 1
    cell = name * len(rank) + lane
    t = np.bincount(cell, weights=kern[END_NS] - kern[START_NS], minlength=len(codes) * len(rank))
    used = np.flatnonzero(np.bincount(cell, minlength=t.size))
    label = np.array(list(kern.names) + [None], dtype=object)
    return pd.DataFrame({"kernel": label[np.where(codes < 0, len(kern.names), codes)][used // len(rank)],
                         RANK: rank[used % len(rank)], THREAD: thread[used % len(rank)], "ns": t[used]})


def from_cells(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """`kernel_threads` of the threads of all `parts` (`cells` of groups of ranks)."""
    parts = [p for p in parts if len(p)]                # an empty table would make the ids floats
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    lanes = df[[RANK, THREAD]].drop_duplicates().sort_values([RANK, THREAD], kind="stable")
    lane = pd.MultiIndex.from_frame(lanes).get_indexer(pd.MultiIndex.from_frame(df[[RANK, THREAD]]))
    named = df["kernel"].notna().to_numpy()
    label = sorted(set(df["kernel"][named])) + ["(no name)"]      # a kernel record without a name: last
    code = np.where(named, pd.Index(label).get_indexer(df["kernel"].where(named, "(no name)")), len(label) - 1)
    codes, name = np.unique(code, return_inverse=True)
    rank, thread = lanes[RANK].to_numpy(), lanes[THREAD].to_numpy()
    t = np.zeros(len(codes) * len(rank))
    t[name * len(rank) + lane] = df["ns"].to_numpy()
    runs = np.zeros(t.size, dtype=bool)
    runs[name * len(rank) + lane] = True
    t, runs = t.reshape(len(codes), len(rank)) / NS, runs.reshape(len(codes), len(rank))
    mean = t.sum(axis=1) / runs.sum(axis=1)
    order = sorted(range(len(codes)), key=lambda i: (-t[i].sum(), label[codes[i]]))
    k, j = np.nonzero(runs[order])
    k = np.asarray(order)[k]
    return pd.DataFrame({"kernel": np.array(label, dtype=object)[codes[k]], RANK: rank[j], THREAD: thread[j],
                         "seconds": t[k, j],
                         "ratio": t[k, j] / np.maximum(mean[k], 1e-300)}, columns=COLUMNS)


def _section(inputs: Inputs, parts: list[pd.DataFrame]) -> list[dict]:
    return rows(from_cells(parts))


# Every step, not only the window (the report draws it)
SECTION = Section("kernel_threads", "kernel threads", _section, part=lambda view: cells(view.kern))
