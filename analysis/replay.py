"""Ideal-network replay (as Dimemas does for POP's Serialization / Transfer split).

Each rank keeps its compute bursts (the time between its MPI calls) and replays its calls with zero-time
transfers: a posting or an (eager) send returns at once; an all-to-all collective ends when its last rank enters;
a broadcast/scatter ends for a non-root when the root has entered; a reduce/gather ends for the root when the last
rank has entered; a receive (or a Sendrecv's receive half) ends when its matched send starts; a wait ends when
what it waits for is complete. T_ideal is when the last rank ends. The replay of a causally consistent trace is
never slower than the trace; when it is (the calls do not match, or clocks disagree), T_ideal is returned as it
is and the caller warns. A blocked call whose partner never comes (a collective missing on a rank, an unmatched
receive) is released at its entry so the replay can go on, and counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from numba import njit

from gpt2trace.format import mpi_calls as C
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS


@dataclass(frozen=True)
class Replay:
    ideal_ns: int               # T_ideal, never clipped to the runtime
    busy_ns: np.ndarray         # per rank (in the order given): the compute bursts it plays, its useful time
    forced: dict[str, int]      # call name -> blocked calls released without their partner


def replay(calls: pd.DataFrame, ranks: np.ndarray, t0_ns: int, t1_ns: int) -> Replay:
    """The ideal-network replay of the window [t0, t1) for `ranks` (sorted); `calls` is `mpi.calls` of it."""
    runtime = t1_ns - t0_ns
    ranks = np.asarray(ranks)
    if calls.empty or not len(ranks):
        return Replay(runtime, np.full(len(ranks), runtime, dtype=np.int64), {})
    dense = {int(r): i for i, r in enumerate(ranks)}
    rank = calls[RANK].map(dense).fillna(-1).to_numpy().astype(np.int64)
    keep = rank >= 0
    df = calls[keep]
    rank = rank[keep]
    nrank = len(dense)
    ptr = np.searchsorted(rank, np.arange(nrank + 1))               # rows are sorted by rank
    start = df[START_NS].to_numpy() - t0_ns
    end = df[END_NS].to_numpy() - t0_ns
    since = np.maximum(df["prev_end"].to_numpy() - t0_ns, 0)      # the window start for a rank's first call
    burst = np.maximum(start - since, 0)
    last_end = np.zeros(nrank, dtype=np.int64)
    has = ptr[1:] > ptr[:-1]
    last_end[has] = np.maximum.reduceat(end, ptr[:-1][has]) if has.any() else 0
    tail = np.where(has, np.maximum(runtime - last_end, 0), runtime)
    busy = np.bincount(rank, weights=burst, minlength=nrank).astype(np.int64) + tail
    n_inst = int(df["inst"].max()) + 1 if len(df) else 0
    parts = np.bincount(df["inst"].to_numpy()[df["inst"].to_numpy() >= 0], minlength=n_inst).astype(np.int64)
    root_present = np.zeros(n_inst, dtype=np.bool_)
    root_present[df["inst"].to_numpy()[df["is_root"].to_numpy() & (df["inst"].to_numpy() >= 0)]] = True
    send_of = _renumber(df["send_of"].to_numpy(), df.index.to_numpy())
    t_ideal, forced = _replay(ptr, df["op"].to_numpy().astype(np.int64), df["cls"].to_numpy().astype(np.int64),
                              df["inst"].to_numpy().astype(np.int64), df["is_root"].to_numpy().astype(np.bool_),
                              send_of, df["wait_inst"].to_numpy().astype(np.int64), burst, tail.astype(np.int64),
                              parts, root_present)
    names, counts = np.unique(df[NAME].to_numpy()[forced].astype(str), return_counts=True)
    return Replay(int(t_ideal), busy, {str(n): int(c) for n, c in zip(names, counts)})


def _renumber(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Row labels of the calls table -> positions in the kept rows (-1 stays, a dropped row becomes -1)."""
    pos = pd.Series(np.arange(len(index)), index=index)
    return pd.Series(rows).map(pos).fillna(-1).to_numpy().astype(np.int64)


@njit(cache=True)
def _coll_ready(i, inst, cls, is_root, enter, arrived, parts, maxe, root_e, root_present):
    k = inst[i]
    if cls[i] == C.NXN:
        return maxe[k] if arrived[k] == parts[k] else -1
    if cls[i] == C.ONE_TO_ALL:
        if is_root[i] or not root_present[k]:
            return enter[i]
        return max(enter[i], root_e[k]) if root_e[k] >= 0 else -1
    if is_root[i]:                                  # ALL_TO_ONE
        return maxe[k] if arrived[k] == parts[k] else -1
    return enter[i]


@njit(cache=True)
def _replay(ptr, op, cls, inst, is_root, send_of, wait_inst, burst, tail, parts, root_present):
    n, nrank, n_inst = len(op), len(ptr) - 1, len(parts)
    enter = np.zeros(n, dtype=np.int64)
    entered = np.zeros(n, dtype=np.bool_)
    done = np.zeros(n, dtype=np.bool_)           # a nonblocking request completed by a wait
    arrived = np.zeros(n_inst, dtype=np.int64)
    maxe = np.zeros(n_inst, dtype=np.int64)
    root_e = np.full(n_inst, -1, dtype=np.int64)
    forced = np.zeros(n, dtype=np.bool_)
    pos = ptr[:-1].copy()
    wait_from = ptr[:-1].copy()
    cur = np.zeros(nrank, dtype=np.int64)
    while True:
        progress = False
        remaining = False
        for r in range(nrank):
            while pos[r] < ptr[r + 1]:
                i = pos[r]
                if not entered[i]:
                    entered[i] = True
                    enter[i] = cur[r] + burst[i]
                    k = inst[i]
                    if k >= 0:
                        arrived[k] += 1
                        maxe[k] = max(maxe[k], enter[i])
                        if is_root[i]:
                            root_e[k] = enter[i]
                x = _ready(i, r, op, cls, inst, is_root, send_of, wait_inst, enter, entered, done, arrived, parts,
                           maxe, root_e, root_present, wait_from, ptr, False)
                if x < 0:
                    break
                cur[r] = x
                pos[r] += 1
                progress = True
            if pos[r] < ptr[r + 1]:
                remaining = True
        if not remaining:
            break
        if not progress:
            # An inconsistent trace: release the blocked call that entered first as if it did not wait, and go on.
            best, best_r = -1, -1
            for r in range(nrank):
                if pos[r] < ptr[r + 1] and (best < 0 or enter[pos[r]] < enter[best]):
                    best, best_r = pos[r], r
            _ready(best, best_r, op, cls, inst, is_root, send_of, wait_inst, enter, entered, done, arrived, parts,
                   maxe, root_e, root_present, wait_from, ptr, True)
            forced[best] = True
            cur[best_r] = enter[best]
            pos[best_r] += 1
    t = 0
    for r in range(nrank):
        t = max(t, cur[r] + tail[r])
    return t, forced


@njit(cache=True)
def _ready(i, r, op, cls, inst, is_root, send_of, wait_inst, enter, entered, done, arrived, parts, maxe, root_e,
           root_present, wait_from, ptr, force):
    """Exit time of call i on rank r in the replay, or -1 while it still waits for another rank."""
    o = op[i]
    if o == C.COLL:
        return _coll_ready(i, inst, cls, is_root, enter, arrived, parts, maxe, root_e, root_present)
    if o == C.RECV or o == C.SENDRECV:
        s = send_of[i]
        if s < 0:
            return enter[i]
        return max(enter[i], enter[s]) if entered[s] else -1
    if o != C.WAIT:
        return enter[i]                            # local call, posting, eager send: zero time
    x = enter[i]
    for j in range(wait_from[r], i):
        if done[j] or (op[j] != C.COLL_POST and op[j] != C.IRECV):
            continue
        if wait_inst[i] >= 0 and inst[j] != wait_inst[i]:
            continue
        if op[j] == C.COLL_POST:
            y = _coll_ready(j, inst, cls, is_root, enter, arrived, parts, maxe, root_e, root_present)
        else:
            s = send_of[j]
            y = enter[j] if s < 0 else (max(enter[j], enter[s]) if entered[s] else -1)
        if y < 0 and not force:
            return -1
        x = max(x, y)
    for j in range(wait_from[r], i):               # complete what this wait covered
        if (op[j] == C.COLL_POST or op[j] == C.IRECV) and (wait_inst[i] < 0 or inst[j] == wait_inst[i]):
            done[j] = True
    if wait_inst[i] < 0:
        wait_from[r] = i + 1
    return x
