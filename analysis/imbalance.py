"""Load imbalance per kernel and per kernel x layer, across ranks and across the threads of each rank.

Across ranks, a rank's time in a kernel is the wall time of its segments (every rank of the trace counts, with
zero if it never runs the kernel: ZeRO's or reduce-bcast's optimizer on some ranks only is a real imbalance); a
kernel x layer row compares only the ranks that run that layer (a pipeline stage holds some layers only: the
stages' own balance is analysis/pipeline's); across threads, a thread's time is the sum of its blocks (only the
threads that run the kernel count). For values t_i: mean, max, imbalance = max / mean, time lost =
sum(max - t_i), and the fastest one (min, with its rank or thread) so that a finding can say "2.9x slower on
rank 1 than on rank 0".
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.order import by_value
from analysis.records import NS, Records
from analysis.segments import Segments
from gpt2trace.format.lanes import distinct_index
from gpt2trace.format.schema import END_NS, LAYER, NAME, RANK, START_NS, THREAD

COLUMNS = ["scope", "kernel", LAYER, RANK, "count", "mean_s", "max_s", "imbalance", "lost_s", "slowest", "min_s",
           "fastest"]
_TIES = ["kernel", LAYER, "scope", RANK]            # rows of equal time lost: by name, not by name dictionary code


def imbalance(kern: Records, segs: Segments, ranks: np.ndarray) -> pd.DataFrame:
    """Rows sorted by time lost; scope 'ranks' or 'threads', layer None on the per-kernel rows."""
    return from_parts(segs, ranks, [threads_part(kern)])


def threads_part(kern: Records) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The per-thread rows (per kernel, then per kernel x layer) of the ranks of `kern`, with their sort key `_key`:
    rank-local, so groups of ranks give theirs apart (`from_parts` joins them)."""
    out = []
    for by_layer in (False, True):
        key = _key(kern[NAME], kern[LAYER], by_layer)
        out.append(_across_threads(key, kern[RANK], kern[THREAD], kern[END_NS] - kern[START_NS], kern.names,
                                   by_layer))
    return out[0], out[1]


def from_parts(segs: Segments, ranks: np.ndarray, parts: list[tuple[pd.DataFrame, pd.DataFrame]]) -> pd.DataFrame:
    """`imbalance` from the segments of every rank and each group's `threads_part` (groups in rank order)."""
    if not len(segs) and not any(len(f) for p in parts for f in p):
        return pd.DataFrame(columns=COLUMNS)
    frames = []
    kernels = (*_kernel_layers(segs), _positions(segs.rank, ranks), segs.end_ns - segs.start_ns)
    for i, by_layer in enumerate((False, True)):
        frames.append(_across_ranks(*kernels, ranks, segs.names, by_layer))
        rows = [p[i] for p in parts if len(p[i])]
        if len(rows) > 1:                      # the order of one table of all ranks: by kernel key, then rank
            frames.append(pd.concat(rows, ignore_index=True).sort_values(["_key", RANK], kind="stable"))
        else:
            frames.append(rows[0] if rows else pd.DataFrame(columns=COLUMNS))
    out = pd.concat([f for f in frames if len(f)], ignore_index=True) if any(len(f) for f in frames) else None
    if out is None:
        return pd.DataFrame(columns=COLUMNS)
    out = out[out["lost_s"] > 0]
    return by_value(out[COLUMNS], "lost_s", _TIES)


def kernels_across_ranks(segs: Segments, ranks: np.ndarray) -> pd.DataFrame:
    """The rows of `imbalance` with scope 'ranks' and no layer (each kernel over all its layers), sorted the same,
    without the per-layer and per-thread rows (what `diff` compares)."""
    out = _across_ranks(*_kernel_layers(segs), _positions(segs.rank, ranks), segs.end_ns - segs.start_ns, ranks,
                        segs.names, False)
    out = out[out["lost_s"] > 0]
    return by_value(out[COLUMNS], "lost_s", _TIES)


def _key(name: np.ndarray, layer: np.ndarray, by_layer: bool) -> np.ndarray:
    """(name, layer + 1) as one int; per-kernel rows use layer slot 0. Layer rows only for layer kernels."""
    layer = layer.astype(np.int64)
    if not by_layer:
        return name.astype(np.int64) * 65538
    return np.where(layer >= 0, name.astype(np.int64) * 65538 + layer + 1, -1)


def _decode(keys: np.ndarray, names: tuple[str, ...], by_layer: bool):
    kernel = np.array(names, dtype=object)[keys // 65538]
    layer = [int(v) - 1 if by_layer else None for v in keys % 65538]
    return kernel, layer


def _kernel_layers(segs: Segments) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (kernel, layer) pairs of the segments as `_key(by_layer=True)` would write them if every kernel
    had a layer (sorted), and each segment's position among them: both tables' keys follow from these few."""
    return distinct_index(segs.name.astype(np.int64) * 65538 + segs.layer + 1)


def _across_ranks(pairs, pair, at, dur, ranks, names, by_layer) -> pd.DataFrame:
    """The rows of scope 'ranks' from the segments' `_kernel_layers` (`pairs`, each one's `pair`), `at` the
    position of each one's rank in `ranks`."""
    key = _key(pairs // 65538, pairs % 65538 - 1, by_layer)           # the table's key of each pair
    if not (key >= 0).any() or len(ranks) < 2:
        return pd.DataFrame(columns=COLUMNS)
    # every segment counted, those without a key (-1) in a first row that is then dropped: cheaper than a filter
    ukey, row = distinct_index(key + 1)
    skip = int(ukey[0] == 0)
    ukey = ukey[skip:] - 1
    cell = row[pair] * len(ranks) + at
    size = (len(ukey) + skip) * len(ranks)
    t = np.bincount(cell, weights=dur, minlength=size).reshape(-1, len(ranks))[skip:] / NS
    if by_layer:
        runs = np.bincount(cell, minlength=size).reshape(-1, len(ranks))[skip:] > 0
    else:
        runs = np.ones(t.shape, dtype=bool)
    count = runs.sum(axis=1)
    kernel, layer = _decode(ukey, names, by_layer)
    high, low = np.where(runs, t, -np.inf), np.where(runs, t, np.inf)
    top = high.max(axis=1)
    mean = np.where(runs, t, 0.0).sum(axis=1) / np.maximum(count, 1)
    out = pd.DataFrame({"scope": "ranks", "kernel": kernel, LAYER: layer, RANK: None, "count": count,
                        "mean_s": mean, "max_s": top, "imbalance": np.where(mean > 0, top / np.maximum(mean, 1e-300),
                                                                             np.nan),
                        "lost_s": np.where(runs, top[:, None] - t, 0.0).sum(axis=1),
                        "slowest": [str(r) for r in ranks[high.argmax(axis=1)]],
                        "min_s": low.min(axis=1), "fastest": [str(r) for r in ranks[low.argmin(axis=1)]]})
    return out[count >= 2]


def _positions(rank: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Each rank's position in `ranks` (sorted, and holding every rank given): by a lookup table when the ids are
    small, as millions of segments need."""
    if len(ranks) and 0 <= ranks[0] and ranks[-1] < (1 << 24):
        table = np.zeros(int(ranks[-1]) + 1, dtype=np.int64)
        table[ranks] = np.arange(len(ranks))
        return table[rank]
    return np.searchsorted(ranks, rank)


def _across_threads(key, rank, thread, dur, names, by_layer) -> pd.DataFrame:
    ok = key >= 0
    key, rank, thread, dur = key[ok], rank[ok].astype(np.int64), thread[ok].astype(np.int64), dur[ok]
    if not len(key):
        return pd.DataFrame(columns=COLUMNS)
    ukey, kidx = distinct_index(key)
    urank, ridx = distinct_index(rank)
    nth = int(thread.max()) + 1
    cell = (kidx * len(urank) + ridx) * nth + thread
    size = len(ukey) * len(urank) * nth
    t = np.bincount(cell, weights=dur, minlength=size).reshape(len(ukey), len(urank), nth) / NS
    present = np.bincount(cell, minlength=size).reshape(t.shape) > 0
    count = present.sum(axis=2)
    total = t.sum(axis=2)
    top = np.where(present, t, -np.inf).max(axis=2)
    slow = np.where(present, t, -np.inf).argmax(axis=2)
    low = np.where(present, t, np.inf).min(axis=2)
    fast = np.where(present, t, np.inf).argmin(axis=2)
    k, r = np.nonzero(count >= 2)
    if not len(k):
        return pd.DataFrame(columns=COLUMNS)
    mean = total[k, r] / count[k, r]
    kernel, layer = _decode(ukey[k], names, by_layer)
    return pd.DataFrame({"_key": ukey[k], "scope": "threads", "kernel": kernel, LAYER: layer,
                         RANK: urank[r].astype(int),
                         "count": count[k, r], "mean_s": mean, "max_s": top[k, r],
                         "imbalance": np.where(mean > 0, top[k, r] / np.maximum(mean, 1e-300), np.nan),
                         "lost_s": top[k, r] * count[k, r] - total[k, r],
                         "slowest": [f"{a}.{b}" for a, b in zip(urank[r], slow[k, r])],
                         "min_s": low[k, r], "fastest": [f"{a}.{b}" for a, b in zip(urank[r], fast[k, r])]})
