"""Each thread's time in each kernel (all layers together), against the kernel's mean over the threads of every
rank that run it: the kernel x thread imbalance map.

`imbalance` compares threads within a rank and ranks by wall time; this table keeps every (kernel, thread) cell,
so one slow thread shows in every kernel it runs.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import NS, Records
from gpt2trace.format.lanes import lane_index
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, THREAD

COLUMNS = ["kernel", RANK, THREAD, "seconds", "ratio"]


def kernel_threads(kern: Records) -> pd.DataFrame:
    """One row per kernel and thread that runs it: kernel, rank, thread, seconds (the sum of its blocks), ratio
    (seconds over the kernel's mean over those threads; 1 = balanced). Kernels by total time (largest first,
    ties by name), threads by (rank, thread)."""
    if not len(kern):
        return pd.DataFrame(columns=COLUMNS)
    rank, thread, lane = lane_index(kern[RANK], kern[THREAD])
    label = list(kern.names) + ["(no name)"]                          # code -1: a kernel record without a name
    codes, name = np.unique(np.where(kern[NAME] < 0, len(kern.names), kern[NAME]), return_inverse=True)
    cell = name * len(rank) + lane
    t = np.bincount(cell, weights=kern[END_NS] - kern[START_NS], minlength=len(codes) * len(rank))
    runs = np.bincount(cell, minlength=t.size) > 0
    t, runs = t.reshape(len(codes), len(rank)) / NS, runs.reshape(len(codes), len(rank))
    mean = t.sum(axis=1) / runs.sum(axis=1)
    order = sorted(range(len(codes)), key=lambda i: (-t[i].sum(), label[codes[i]]))
    k, j = np.nonzero(runs[order])
    k = np.asarray(order)[k]
    return pd.DataFrame({"kernel": np.array(label, dtype=object)[codes[k]], RANK: rank[j], THREAD: thread[j],
                         "seconds": t[k, j],
                         "ratio": t[k, j] / np.maximum(mean[k], 1e-300)}, columns=COLUMNS)
