"""Thread occupancy: how many threads of a rank are Running over time, serial sections, per-kernel occupancy.

A serial section is time where the main thread (thread 0) is Running and no other thread of its rank is.
Per kernel: mean occupancy = the threads' block time / the kernel's wall time on the rank (segments), and the
time its threads spent in Synchronization (waiting at the region's end) and in Scheduling and Fork/Join.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.order import by_value
from analysis.records import NS, Records, records
from analysis.segments import Segments
from analysis.window import Window
from gpt2trace.format.lanes import distinct_index, distinct_lanes, is_sorted, run_starts, time_key_fits
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, LAYER, RANK, START_NS, STATE, THREAD, Kind, State


def _events(st, ranks: np.ndarray):
    """Running intervals as +1/-1 events sorted by (rank, time), ends before starts at equal times: where each
    rank's events start (`ptr`: those of ranks[i] are ptr[i]:ptr[i + 1]), their times, and the main-thread count
    and the number of threads Running after each event.

    Events of a rank at the same time and of the same sign come in any order: what is read of them, the time
    until the next event and the counts after the last of them, does not depend on it. So one plain sort per rank
    of keys that carry the event (time, start, main thread) in their bits, and no permutation to apply.
    """
    run = np.flatnonzero((st[STATE] == State.RUNNING) & (st[END_NS] > st[START_NS]))
    if not len(run):
        return (np.zeros(len(ranks) + 1, np.int64),) + (np.zeros(0, np.int64),) * 3
    rank = st[RANK][run]
    if not is_sorted(rank):                             # rank by rank (as a reader gives them)
        run = run[np.argsort(rank, kind="stable")]
        rank = st[RANK][run]
    s, e = st[START_NS][run], st[END_NS][run]
    lo = int(s.min())
    width = int(e.max()) - lo + 1
    if not time_key_fits(4 * len(ranks), width):
        raise ValueError("trace span too long for composite keys")
    on_main = st[THREAD][run] == 0
    bound = np.r_[run_starts(rank), len(run)]
    key = np.empty(2 * len(run), np.int64)
    for a, b in zip(bound[:-1].tolist(), bound[1:].tolist()):       # one iteration per rank: its events
        k, n = key[2 * a:2 * b], b - a
        for half, t, flag in ((k[:n], e[a:b], 0), (k[n:], s[a:b], 2)):     # an end: bit 1 clear; a start: set
            np.subtract(t, lo, out=half)
            half <<= 2
            half += on_main[a:b]
            half += flag
        # each thread's ends, then its starts, are runs already in order (a thread's intervals do not overlap),
        # which a stable sort (a merge of runs) takes advantage of
        k.sort(kind="stable")
    kind = key.astype(np.int8)                          # the low byte, then its two low bits: 0, 1 a worker's,
    kind &= 3                                           # the main thread's end; 2, 3 starts
    main = np.cumsum(_MAIN_STEP[kind], dtype=np.int32)  # (a rank's events end with every count back to 0)
    level = np.cumsum(_LEVEL_STEP[kind], dtype=np.int32)
    key >>= 2
    key += lo
    per_rank = np.zeros(len(ranks), np.int64)
    per_rank[np.searchsorted(ranks, rank[bound[:-1]])] = 2 * np.diff(bound)
    return np.r_[0, np.cumsum(per_rank)], key, main, level


_MAIN_STEP = np.array([0, -1, 0, 1], dtype=np.int8)    # by event kind (the two low bits of `_events`' keys)
_LEVEL_STEP = np.array([-1, -1, 1, 1], dtype=np.int8)


def occupancy(trace: Trace, window: Window, segs: Segments, top: int = 10, bins: int = 100,
              states: Records | None = None) -> dict:
    """Tables (pandas) per_rank, levels, per_kernel, serial_sections and a binned timeline (lists).

    `states` are the window's state records if the caller has them already.
    """
    st = states if states is not None else records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    return from_parts([part(st, window, segs, top, bins)], segs, top)


def from_parts(parts: list[dict], segs: Segments, top: int = 10) -> dict:
    """`occupancy` of all ranks from the `part`s of groups of them (in rank order) and the segments of all."""
    if len(parts) == 1:
        p = parts[0]
        return {"per_rank": p["per_rank"], "levels": p["levels"], "per_kernel": _per_kernel(segs, p["waits"]),
                "serial_sections": p["serial_sections"], "timeline": p["timeline"]}
    waits = pd.concat([p["waits"] for p in parts]).groupby(level=0).sum()    # integer ns: exact in any order
    sections = [p["serial_sections"] for p in parts if len(p["serial_sections"])]
    sections = (pd.concat(sections, ignore_index=True).nlargest(top, "seconds").reset_index(drop=True) if sections
                else parts[0]["serial_sections"])
    timeline = {**parts[0]["timeline"], "ranks": {r: v for p in parts for r, v in p["timeline"]["ranks"].items()}}
    return {"per_rank": pd.concat([p["per_rank"] for p in parts], ignore_index=True),
            "levels": pd.concat([p["levels"] for p in parts], ignore_index=True),
            "per_kernel": _per_kernel(segs, waits), "serial_sections": sections, "timeline": timeline}


def part(st: Records, window: Window, segs: Segments, top: int = 10, bins: int = 100,
         lanes: tuple[np.ndarray, np.ndarray] | None = None) -> dict:
    """What the ranks of `st` (the window's state records of some ranks; `segs` their segments) contribute: their
    rows of per_rank, levels and the timeline, their `top` serial sections, and `waits`, the Synchronization and
    Fork/Join nanoseconds per kernel key. `lanes`: the distinct (rank, thread) pairs of the records, sorted (as
    `lanes.distinct_lanes` gives them), if the caller has them."""
    T = window.t1_ns - window.t0_ns
    # from the distinct (rank, thread) pairs, found by counting: a sort or a ufunc.at over every record is slow
    lane_rank, lane_thread = lanes if lanes is not None else distinct_lanes(st[RANK], st[THREAD])
    ranks, lane_ri = np.unique(lane_rank, return_inverse=True)
    ranks = ranks.astype(st[RANK].dtype) if len(st) else np.zeros(0, dtype=np.int32)
    threads = np.zeros(len(ranks), dtype=np.int64)
    np.maximum.at(threads, lane_ri.ravel(), lane_thread + 1)
    ptr, t, main, level = _events(st, ranks) if len(st) else (np.zeros(1, np.int64),) + (np.zeros(0, np.int64),) * 3
    dt = np.zeros(len(t), np.int64)                 # from each event to the next of its rank (0 after its last)
    np.subtract(t[1:], t[:-1], out=dt[:-1])
    dt[ptr[1:][ptr[1:] > 0] - 1] = 0
    nlev = int(threads.max()) + 1 if len(threads) else 1
    at_level = np.zeros((len(ranks), nlev))
    # serial: the main thread alone Running, on a rank of more than one thread
    serial = (main == 1) & (level == 1)
    serial_ns = np.zeros(len(ranks))
    for i, (a, b) in enumerate(zip(ptr[:-1].tolist(), ptr[1:].tolist())):       # one iteration per rank
        at_level[i] = np.bincount(level[a:b], weights=dt[a:b], minlength=nlev)
        if threads[i] > 1:
            serial_ns[i] = dt[a:b][serial[a:b]].sum()
        else:
            serial[a:b] = False
    at_level[:, 0] += T - at_level.sum(axis=1)                       # before the first / after the last event
    busy = (at_level * np.arange(nlev)).sum(axis=1)
    per_rank = pd.DataFrame({RANK: ranks.astype(int), "threads": threads, "mean_occupancy": busy / T,
                             "serial_s": serial_ns / NS, "serial_fraction": serial_ns / T})
    levels = pd.DataFrame({RANK: np.repeat(ranks.astype(int), nlev), "level": np.tile(np.arange(nlev), len(ranks)),
                           "seconds": at_level.ravel() / NS})
    levels = levels[levels["level"] <= np.repeat(threads, nlev)].reset_index(drop=True)
    return {"per_rank": per_rank, "levels": levels, "waits": _kernel_waits(st, segs),
            "serial_sections": _sections(ptr, t, dt, serial, ranks, window, top),
            "timeline": _timeline(ptr, t, level, dt, ranks, window, bins)}


def kernel_wall(segs: Segments) -> pd.DataFrame:
    """Per kernel x layer (layer NA outside the layers): wall_s, the wall time of its segments on all ranks; the
    first columns of `per_kernel`, in its order before the sort (what `diff` compares, without the states)."""
    cols = ["kernel", LAYER, "wall_s"]
    if not len(segs):
        return pd.DataFrame(columns=cols)
    return _wall_table(segs, *_kernel_keys(segs))


def _kernel_keys(segs: Segments) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (kernel, layer) keys of the segments, sorted, and each segment's position among them."""
    return distinct_index(segs.name.astype(np.int64) * 65538 + segs.layer + 1)


def _wall_table(segs: Segments, ukey: np.ndarray, kidx: np.ndarray) -> pd.DataFrame:
    wall = np.bincount(kidx, weights=segs.end_ns - segs.start_ns, minlength=len(ukey))
    layer = ukey % 65538 - 1
    out = pd.DataFrame({"kernel": np.array(segs.names, dtype=object)[ukey // 65538],
                        LAYER: pd.array(np.where(layer >= 0, layer, 0), dtype="Int64"), "wall_s": wall / NS})
    out.loc[layer < 0, LAYER] = pd.NA
    return out


def _kernel_waits(st, segs: Segments) -> pd.DataFrame:
    """Nanoseconds in Synchronization (sync) and Fork/Join (fork) inside each kernel's segments, indexed by the
    (kernel, layer) key of `_kernel_keys`."""
    if not len(segs):
        return pd.DataFrame({"sync_s": [], "fork_s": []}, index=pd.Index([], dtype=np.int64))
    ukey, kidx = _kernel_keys(segs)
    state, start, end = st[STATE], st[START_NS], st[END_NS]
    sync = state == State.SYNCHRONIZATION
    sel = np.flatnonzero((sync | (state == State.SCHEDULING_FORK_JOIN)) & (end > start))
    start, end, sync = start[sel], end[sel], sync[sel]
    # A Synchronization record starts inside the kernel's segment (when the thread's block ends); a Fork/Join
    # record ends inside it (when the thread's block starts).
    seg = segs.locate(st[RANK][sel], np.where(sync, start, end - 1))
    ok = seg >= 0
    if not ok.all():                            # (most are in a segment)
        seg, sync, start, end = seg[ok], sync[ok], start[ok], end[ok]
    ns = np.bincount(kidx[seg] * 2 + sync, weights=end - start, minlength=2 * len(ukey))
    return pd.DataFrame({"sync_s": ns[1::2], "fork_s": ns[0::2]}, index=ukey)


def _per_kernel(segs: Segments, waits: pd.DataFrame) -> pd.DataFrame:
    cols = ["kernel", LAYER, "wall_s", "mean_occupancy", "sync_s", "fork_s"]
    if not len(segs):
        return pd.DataFrame(columns=cols)
    ukey, kidx = _kernel_keys(segs)
    out = _wall_table(segs, ukey, kidx)
    wall = np.bincount(kidx, weights=segs.end_ns - segs.start_ns, minlength=len(ukey))
    busy = np.bincount(kidx, weights=segs.busy_ns, minlength=len(ukey))
    out["mean_occupancy"] = busy / np.maximum(wall, 1)
    for col in ("sync_s", "fork_s"):
        out[col] = waits[col].reindex(ukey, fill_value=0.0).to_numpy() / NS
    # ties (kernels of no Synchronization) by name and layer, not by the order of the file's name dictionary
    return by_value(out[cols], "sync_s", ["kernel", LAYER])


def _sections(ptr, t, dt, serial, ranks, window: Window, top: int) -> pd.DataFrame:
    """The longest runs of serial time: rank, start (s from the window start), seconds; `ptr`, `t`: `_events`',
    `dt` the time from each event to the next of its rank (0 after its last).

    Runs are found on the intervals of positive length, so zero-length steps between events do not cut them.
    """
    cols = [RANK, "start_s", "seconds"]
    pos = np.flatnonzero(dt > 0)
    flag = serial[pos]
    if not flag.any():
        return pd.DataFrame(columns=cols)
    # a serial interval continues a run when the interval of positive length before it is serial too, of its rank
    # and ends where it starts
    k = np.flatnonzero(flag)
    pos = pos[k]
    rank = np.searchsorted(ptr, pos, side="right") - 1             # of these events only
    joined = np.r_[False, (np.diff(k) == 1) & (rank[1:] == rank[:-1]) & (t[pos[1:]] == t[pos[:-1] + 1])]
    first = np.flatnonzero(~joined)
    last = np.r_[first[1:], len(pos)] - 1                           # a run is in one rank, where times increase
    start, seconds = t[pos[first]], (t[pos[last] + 1] - t[pos[first]]) / NS
    top = _largest(seconds, top)
    return pd.DataFrame({RANK: ranks[rank[first[top]]].astype(int), "start_s": (start[top] - window.t0_ns) / NS,
                         "seconds": seconds[top]})


def _largest(x: np.ndarray, k: int) -> np.ndarray:
    """The positions of the `k` largest of `x`, largest first, ties in order (DataFrame.nlargest's): those of
    np.argsort(-x, kind="stable")[:k], with a sort of the candidates only."""
    if 0 < k < len(x):
        cand = np.flatnonzero(x >= np.partition(x, len(x) - k)[len(x) - k])   # the k-th largest and above
        return cand[np.argsort(-x[cand], kind="stable")[:k]]
    return np.argsort(-x, kind="stable")[:k]


def _timeline(ptr, t, level, dt, ranks, window: Window, bins: int) -> dict:
    """Mean Running threads per rank in `bins` equal bins of the window."""
    T = window.t1_ns - window.t0_ns
    edges = window.t0_ns + (np.arange(bins + 1) * (T / bins)).astype(np.int64)
    area = np.r_[0, np.cumsum(level * dt)]                           # area[k] = integral up to event k
    series = {}
    for i, r in enumerate(ranks):                                    # one iteration per rank
        a, b = int(ptr[i]), int(ptr[i + 1])
        if a == b:
            series[int(r)] = [0.0] * bins
            continue
        k = np.searchsorted(t[a:b], edges, side="right") - 1
        kk = np.clip(k, 0, b - a - 1) + a
        integral = np.where(k >= 0, area[kk] - area[a] + level[kk] * (edges - t[kk]) * (k < b - a - 1), 0)
        series[int(r)] = (np.diff(integral) / np.diff(edges)).tolist()
    return {"t0_s": window.t0_ns / NS, "bin_s": T / bins / NS, "ranks": series}
