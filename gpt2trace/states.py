"""From recorded kernel calls to Paraver thread states and kernel records (vectorized, per flush window).

For one rank and a window [w0, w1) in which every parallel region started and ended:
- a thread's block of a region is Running; before it, from the region's start, Scheduling and Fork/Join;
  after it, to the region's end, Synchronization (waiting for the slowest thread at the join);
- the main thread (index 0) is in Synchronization during a region in which it ran no block, and in the
  states the caller passes as `main_overlays` (I/O for data loading, MPI states) outside regions;
- outside all of that, the main thread is Running (Python-side work of the step), workers are Idle.
The result partitions [w0, w1) for every thread index 0..nthreads-1, with no gap and no overlap.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpt2trace.schema import State


@dataclass(frozen=True)
class Blocks:
    """One row per executed block: the kernel call it belongs to, its thread index and its span."""
    call: np.ndarray     # int64 index into the window's calls
    thread: np.ndarray   # int32 thread index (0 = main)
    start: np.ndarray    # int64 ns
    end: np.ndarray      # int64 ns


def blocks_of(times: np.ndarray, thread_index: np.ndarray) -> Blocks:
    """times (n, nthreads+1, 3) from the recorder; thread_index (n, nthreads) maps each block to 0..N-1
    (-1 where the block was not run). Blocks are clipped into their region (clock reads on different cores
    can disagree by a few ns)."""
    n, nb = thread_index.shape
    call = np.repeat(np.arange(n, dtype=np.int64), nb)
    thread = thread_index.reshape(-1)
    enter = np.repeat(times[:, 0, 0], nb)
    exit_ = np.repeat(times[:, 0, 1], nb)
    start = np.clip(times[:, 1:, 0].reshape(-1), enter, exit_)
    end = np.clip(times[:, 1:, 1].reshape(-1), start, exit_)
    ok = thread >= 0
    return Blocks(call[ok], thread[ok].astype(np.int32), start[ok], end[ok])


def _region_overlays(times: np.ndarray, blocks: Blocks) -> tuple[np.ndarray, ...]:
    """(thread, start, end, state) of every state interval that lies inside a parallel region."""
    order = np.lexsort((blocks.start, blocks.call, blocks.thread))
    call, thread = blocks.call[order], blocks.thread[order]
    start, end = blocks.start[order], blocks.end[order]
    enter, exit_ = times[call, 0, 0], times[call, 0, 1]
    same_group = np.zeros(len(call), dtype=bool)
    same_group[1:] = (call[1:] == call[:-1]) & (thread[1:] == thread[:-1])
    last_in_group = np.ones(len(call), dtype=bool)
    last_in_group[:-1] = ~same_group[1:]
    prev_end = np.where(same_group, np.roll(end, 1), enter)
    lead_state = np.where(same_group, State.SYNCHRONIZATION, State.SCHEDULING_FORK_JOIN)

    parts = [
        (thread, prev_end, start, lead_state),                                   # waiting for its block
        (thread, start, end, np.full(len(call), State.RUNNING)),                 # the block
        (thread[last_in_group], end[last_in_group], exit_[last_in_group],
         np.full(int(last_in_group.sum()), State.SYNCHRONIZATION)),              # waiting at the join
    ]
    # The main thread waits at the join of regions in which it ran no block (e.g. a workqueue layer).
    n = times.shape[0]
    main_ran = np.zeros(n, dtype=bool)
    main_ran[blocks.call[blocks.thread == 0]] = True
    idle_calls = np.flatnonzero(~main_ran)
    parts.append((np.zeros(len(idle_calls), dtype=np.int32), times[idle_calls, 0, 0], times[idle_calls, 0, 1],
                  np.full(len(idle_calls), State.SYNCHRONIZATION)))
    return tuple(np.concatenate([np.asarray(p[k]) for p in parts]) for k in range(4))


def thread_states(times: np.ndarray, blocks: Blocks, nthreads: int, window: tuple[int, int],
                  main_overlays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """State records partitioning `window` for thread indices 0..nthreads-1: columns thread/start/end/state."""
    w0, w1 = window
    th, s, e, st = _region_overlays(times, blocks)
    if main_overlays is not None and len(main_overlays[0]):
        ms, me, mst = main_overlays
        th = np.concatenate([th, np.zeros(len(ms), dtype=np.int32)])
        s, e, st = np.concatenate([s, ms]), np.concatenate([e, me]), np.concatenate([st, mst])
    th = th.astype(np.int32)
    s, e = np.clip(s, w0, w1), np.clip(e, w0, w1)
    # Every thread gets a zero-length anchor at w0 so that a thread with no overlay is still filled.
    anchors = np.arange(nthreads, dtype=np.int32)
    th = np.concatenate([anchors, th])
    s = np.concatenate([np.full(nthreads, w0), s])
    e = np.concatenate([np.full(nthreads, w0), e])
    st = np.concatenate([np.full(nthreads, -1), st]).astype(np.int16)

    order = np.lexsort((e, s, th))
    th, s, e, st = th[order], s[order], e[order], st[order]
    first = np.ones(len(th), dtype=bool)
    first[1:] = th[1:] != th[:-1]
    # Overlays of one thread never overlap by construction; the running maximum enforces it against clock noise.
    group = np.cumsum(first) - 1
    cummax_end = _segment_cummax(e, group)
    prev_end = np.where(first, w0, np.roll(cummax_end, 1))
    s = np.maximum(s, prev_end)
    e = np.maximum(e, s)
    background = np.where(th == 0, State.RUNNING, State.IDLE).astype(np.int16)
    last = np.ones(len(th), dtype=bool)
    last[:-1] = first[1:]

    gap_s, gap_e = prev_end, s                      # background before each overlay
    tail_s = e[last]                                # background after each thread's last overlay
    out_th = np.concatenate([th, th, th[last]])
    out_s = np.concatenate([gap_s, s, tail_s])
    out_e = np.concatenate([gap_e, e, np.full(int(last.sum()), w1)])
    out_st = np.concatenate([background, st, background[last]])
    keep = (out_e > out_s) & (out_st >= 0)
    out_th, out_s, out_e, out_st = out_th[keep], out_s[keep], out_e[keep], out_st[keep]
    order = np.lexsort((out_s, out_th))
    return {"thread": out_th[order], "start": out_s[order], "end": out_e[order], "state": out_st[order]}


def _segment_cummax(values: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Running maximum of `values` restarted at each new `group` (groups are contiguous and ascending)."""
    if len(values) == 0:
        return values
    # Offset each group above all earlier ones so one global running maximum never leaks across groups.
    span = int(values.max() - values.min()) + 1
    lifted = (values - values.min()) + group.astype(np.int64) * span
    return np.maximum.accumulate(lifted) - group.astype(np.int64) * span + values.min()
