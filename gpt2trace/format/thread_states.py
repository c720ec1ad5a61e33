"""From kernel calls to Paraver thread states, for one rank over one window of time.

For one rank and a window [w0, w1) in which every parallel region started and ended:
- a thread's block of a region is Running; before it, from the region's start, Scheduling and Fork/Join;
  after it, to the region's end, Synchronization (waiting for the slowest thread at the join); between two
  blocks of one thread in one region, Synchronization;
- the main thread (index 0) is in Synchronization during a region in which it ran no block, and in the
  states `main_overlays` gives outside regions (I/O for data loading and checkpoints, MPI states);
- outside all of that, the main thread is Running (Python-side work of the step), workers are Idle.
The result partitions [w0, w1) for every thread index 0..nthreads-1, with no gap and no overlap.

The merge runs this for every part the tracer wrote (gpt2trace.format.parts): one compiled pass over the calls
(~10 us for a step of the `small` model, where the equivalent NumPy expressions took ~300 us). Numba loads only
when a part is merged: reading a trace never imports this module.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit

from gpt2trace.format.schema import Phase, State

_RUN, _IDLE, _SYNC, _FORK = int(State.RUNNING), int(State.IDLE), int(State.SYNCHRONIZATION), \
    int(State.SCHEDULING_FORK_JOIN)
_NO_OVERLAYS = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int16))
# The main thread's state during the phases that are not computation.
PHASE_STATES = {Phase.DATALOAD: State.IO, Phase.CHECKPOINT: State.IO}


@dataclass(frozen=True)
class Blocks:
    """One row per executed block: the kernel call it belongs to, its thread index and its span. A thread's
    blocks come in call order."""
    call: np.ndarray     # int64 index into the window's calls
    thread: np.ndarray   # int32 thread index (0 = main)
    start: np.ndarray    # int64 ns
    end: np.ndarray      # int64 ns


def blocks_of(enter: np.ndarray, exit_: np.ndarray, start: np.ndarray, end: np.ndarray,
              thread_index: np.ndarray) -> Blocks:
    """The blocks the kernel calls ran: each call's region (enter, exit_: (n,)), its block columns' spans (start,
    end: (n, k)) and thread indices (n, k: 0..N-1, -1 where the block was not run). Blocks come in call order, a
    call's in column order, and are clipped into their region (clock reads on different cores can disagree by a
    few ns)."""
    ok = thread_index >= 0
    call, _ = np.nonzero(ok)
    enter, exit_ = enter[call], exit_[call]
    start = np.minimum(np.maximum(start[ok], enter), exit_)
    end = np.minimum(np.maximum(end[ok], start), exit_)
    return Blocks(call.astype(np.int64), thread_index[ok].astype(np.int32), start, end)


def thread_states(enter: np.ndarray, exit_: np.ndarray, blocks: Blocks, nthreads: int, window: tuple[int, int],
                  main_overlays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """State records partitioning `window` for thread indices 0..nthreads-1: columns thread/start/end/state,
    in (thread, start) order. `enter`, `exit_`: each call's parallel region (its fork and join on the main
    thread), calls in order; `main_overlays` = (start, end, state) arrays of the main thread's states outside
    regions, sorted by start. Raises ValueError for blocks the compiled pass cannot hold (it does not
    bounds-check)."""
    if len(blocks.thread) and (int(blocks.thread.max()) >= nthreads or int(blocks.thread.min()) < 0):
        raise ValueError(f"a block of thread {int(blocks.thread.max())} but only {nthreads} threads")
    if len(blocks.call) and (int(blocks.call.min()) < 0 or int(blocks.call.max()) >= len(enter)):
        raise ValueError(f"a block of call {int(blocks.call.max())} but only {len(enter)} calls")
    ov = _NO_OVERLAYS if main_overlays is None else main_overlays
    th, s, e, st = _states(np.ascontiguousarray(enter, np.int64), np.ascontiguousarray(exit_, np.int64),
                           np.ascontiguousarray(blocks.call, np.int64), np.ascontiguousarray(blocks.thread, np.int32),
                           np.ascontiguousarray(blocks.start, np.int64), np.ascontiguousarray(blocks.end, np.int64),
                           nthreads, np.int64(window[0]), np.int64(window[1]), np.asarray(ov[0], np.int64),
                           np.asarray(ov[1], np.int64), np.asarray(ov[2], np.int16))
    return {"thread": th, "start": s, "end": e, "state": st}


def main_overlays(phases: Iterable[tuple[str, int, int]], mpi: Sequence[tuple[int, int, int]]) \
        -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, end, state) of the main thread's states outside parallel regions, sorted by start: the I/O of
    dataload/checkpoint phases, cut around the MPI calls made inside them, and the MPI calls' states.
    `phases`: (name, start, end); `mpi`: (start, end, state) of each MPI call, in the order they were made."""
    out = list(mpi)
    for name, s, e in phases:
        state = PHASE_STATES.get(name)
        if state is None:
            continue
        cursor = s
        for ms, me, _ in mpi:                 # few per step; sorted, as the calls were made
            if me > cursor and ms < e:
                if ms > cursor:
                    out.append((cursor, ms, state))
                cursor = max(cursor, me)
        if e > cursor:
            out.append((cursor, e, state))
    if not out:
        return None
    out.sort()
    return tuple(np.array(c, dtype=np.int64) for c in zip(*out))


@njit(cache=True, nogil=True)
def _states(enter, exit_, call, thread, start, end, nthreads, w0, w1, ov_s, ov_e, ov_st):
    nb = len(call)
    # Blocks grouped by thread, keeping call order (a stable counting sort).
    first = np.zeros(nthreads + 1, np.int64)
    for k in range(nb):
        first[thread[k] + 1] += 1
    first = np.cumsum(first)
    order = np.empty(nb, np.int64)
    fill = first[:-1].copy()
    for k in range(nb):
        order[fill[thread[k]]] = k
        fill[thread[k]] += 1

    cap = 2 * nthreads * (len(enter) + 1) + 4 * nb + 2 * len(ov_s) + 2
    out = np.empty((cap, 3), np.int64)   # thread, start, end
    out_st = np.empty(cap, np.int16)
    m = 0
    for j in range(nthreads):
        background = _RUN if j == 0 else _IDLE
        cursor = w0
        o = 0 if j == 0 else len(ov_s)      # overlays are the main thread's
        p, q = first[j], first[j + 1]
        for c in range(len(enter)):
            if p < q and call[order[p]] == c:
                r = p
                while r < q and call[order[r]] == c:
                    r += 1
                _sort_by_start(order, p, r, start)
            elif j == 0:
                r = p                       # the main thread ran no block: it waits at the join
            else:
                continue
            while o < len(ov_s) and ov_s[o] <= enter[c]:
                m, cursor = _emit(out, out_st, m, j, cursor, ov_s[o], ov_e[o], ov_st[o], background, w0, w1)
                o += 1
            lead, lead_state = enter[c], _FORK
            for k in range(p, r):
                b = order[k]
                m, cursor = _emit(out, out_st, m, j, cursor, lead, start[b], lead_state, background, w0, w1)
                m, cursor = _emit(out, out_st, m, j, cursor, start[b], end[b], _RUN, background, w0, w1)
                lead, lead_state = end[b], _SYNC
            if r == p:
                lead_state = _SYNC
            m, cursor = _emit(out, out_st, m, j, cursor, lead, exit_[c], lead_state, background, w0, w1)
            p = r
        while o < len(ov_s):
            m, cursor = _emit(out, out_st, m, j, cursor, ov_s[o], ov_e[o], ov_st[o], background, w0, w1)
            o += 1
        m, cursor = _emit(out, out_st, m, j, cursor, w1, w1, background, background, w0, w1)
    return out[:m, 0].astype(np.int32), out[:m, 1].copy(), out[:m, 2].copy(), out_st[:m].copy()


@njit(inline="always")
def _emit(out, out_st, m, thread, cursor, s, e, state, background, w0, w1):
    """Append `state` over [s, e) after the background from the cursor to s; clipped to the window and kept
    after the cursor (clock noise must not make a thread's records overlap). Returns (m, new cursor)."""
    s = min(max(s, w0, cursor), w1)
    e = min(max(e, s), w1)
    if s > cursor:
        out[m, 0], out[m, 1], out[m, 2] = thread, cursor, s
        out_st[m] = background
        m += 1
    if e > s:
        out[m, 0], out[m, 1], out[m, 2] = thread, s, e
        out_st[m] = state
        m += 1
    return m, e


@njit(inline="always")
def _sort_by_start(order, lo, hi, start):
    """Insertion sort of order[lo:hi] by start (a thread's blocks within one region: one or a few)."""
    for i in range(lo + 1, hi):
        k = order[i]
        j = i - 1
        while j >= lo and start[order[j]] > start[k]:
            order[j + 1] = order[j]
            j -= 1
        order[j + 1] = k
