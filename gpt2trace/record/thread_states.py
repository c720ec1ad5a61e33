"""From recorded kernel calls to Paraver thread states (per flush window).

For one rank and a window [w0, w1) in which every parallel region started and ended:
- a thread's block of a region is Running; before it, from the region's start, Scheduling and Fork/Join;
  after it, to the region's end, Synchronization (waiting for the slowest thread at the join); between two
  blocks of one thread in one region, Synchronization;
- the main thread (index 0) is in Synchronization during a region in which it ran no block, and in the
  states the caller passes as `main_overlays` (I/O for data loading, MPI states) outside regions;
- outside all of that, the main thread is Running (Python-side work of the step), workers are Idle.
The result partitions [w0, w1) for every thread index 0..nthreads-1, with no gap and no overlap.

The tracer's writer thread runs this for every window: one compiled pass over the calls (~10 us for a step of
the `small` model, where the equivalent NumPy expressions took ~300 us), without the GIL, so the training loop's
thread is not held up meanwhile.
"""
from __future__ import annotations  # noqa: I001  (trainer must be imported before numba, below)

from dataclasses import dataclass

import numpy as np

import trainer  # noqa: F401  (before Numba loads: sets Numba's cache directory, see trainer/jitcache.py)
from numba import njit

from gpt2trace.format.schema import State

_RUN, _IDLE, _SYNC, _FORK = int(State.RUNNING), int(State.IDLE), int(State.SYNCHRONIZATION), \
    int(State.SCHEDULING_FORK_JOIN)
_NO_OVERLAYS = (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int16))


@dataclass(frozen=True)
class Blocks:
    """One row per executed block: the kernel call it belongs to, its thread index and its span."""
    call: np.ndarray     # int64 index into the window's calls
    thread: np.ndarray   # int32 thread index (0 = main)
    start: np.ndarray    # int64 ns
    end: np.ndarray      # int64 ns


def blocks_of(times: np.ndarray, thread_index: np.ndarray) -> Blocks:
    """times (n, nthreads+1, 3) from the recorder; thread_index (n, nthreads) maps each block to 0..N-1
    (-1 where the block was not run). Blocks come in call order and are clipped into their region (clock
    reads on different cores can disagree by a few ns)."""
    ok = thread_index >= 0
    call, _ = np.nonzero(ok)
    enter, exit_ = times[call, 0, 0], times[call, 0, 1]
    start = np.minimum(np.maximum(times[:, 1:, 0][ok], enter), exit_)
    end = np.minimum(np.maximum(times[:, 1:, 1][ok], start), exit_)
    return Blocks(call.astype(np.int64), thread_index[ok].astype(np.int32), start, end)


def thread_states(times: np.ndarray, blocks: Blocks, nthreads: int, window: tuple[int, int],
                  main_overlays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """State records partitioning `window` for thread indices 0..nthreads-1: columns thread/start/end/state,
    in (thread, start) order. `main_overlays` = (start, end, state) arrays of the main thread's states
    outside regions, sorted by start."""
    if len(blocks.thread) and int(blocks.thread.max()) >= nthreads:   # the compiled pass does not bounds-check
        raise ValueError(f"a block of thread {int(blocks.thread.max())} but only {nthreads} threads")
    ov = _NO_OVERLAYS if main_overlays is None else main_overlays
    th, s, e, st = _states(np.ascontiguousarray(times[:, 0, 0]), np.ascontiguousarray(times[:, 0, 1]),
                           blocks.call, blocks.thread, blocks.start, blocks.end, nthreads,
                           np.int64(window[0]), np.int64(window[1]), np.asarray(ov[0], np.int64),
                           np.asarray(ov[1], np.int64), np.asarray(ov[2], np.int16))
    return {"thread": th, "start": s, "end": e, "state": st}


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
