"""Thread states of a task-based window: what the runtime's threads did while a task graph ran.

While a graph runs (from the first task taken, or the first wait, to the last task's successors released), each of
its threads is, by priority: in an MPI state during an MPI call (the comm tasks' calls, on the main thread),
Running inside a task's body, Idle while it waited with no ready task, and otherwise in Scheduling and Fork/Join
(inside the runtime: taking a task, releasing its successors), as OmpSs-2's ovni traces show a worker. Outside the
graphs the states built for fork-join kernels stay (gpt2trace.format.thread_states). The result is still a
partition of the window for every thread.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpt2trace.format.schema import State

_SCHEDULING = int(State.SCHEDULING_FORK_JOIN)


@dataclass(frozen=True)
class Intervals:
    """Intervals of one kind on threads: (thread, start, end) arrays and the state they put the thread in."""
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    state: np.ndarray


def paint_graphs(states: dict[str, np.ndarray], graphs: tuple[np.ndarray, np.ndarray],
                 layers: list[Intervals], nthreads: int) -> dict[str, np.ndarray]:
    """`states` (thread/start/end/state, a partition in (thread, start) order) with every graph span [g0, g1) of
    `graphs` repainted on every thread: Scheduling, then each of `layers` over it, later layers winning. Adjacent
    equal states merge inside and around the spans."""
    g0, g1 = (np.asarray(a, np.int64) for a in graphs)
    out = {k: [] for k in ("thread", "start", "end", "state")}
    for j in range(nthreads):
        mine = states["thread"] == j
        bs, be, bst = states["start"][mine], states["end"][mine], states["state"][mine].astype(np.int16)
        if len(bs) == 0:
            continue
        w0, w1 = bs[0], be[-1]
        cuts = [bs, be, np.clip(g0, w0, w1), np.clip(g1, w0, w1)]
        for layer in layers:
            on = layer.thread == j
            cuts += [np.clip(layer.start[on], w0, w1), np.clip(layer.end[on], w0, w1)]
        edges = np.unique(np.concatenate(cuts))
        lo, hi = edges[:-1], edges[1:]
        # each elementary segment [lo, hi) takes the base state, then the spans' and the layers' in turn
        state = bst[np.searchsorted(bs, lo, side="right") - 1].copy()
        inside = _covered(lo, g0, g1)
        state[inside] = _SCHEDULING
        for layer in layers:
            on = layer.thread == j
            which = _covering(lo, layer.start[on], layer.end[on])
            hit = inside & (which >= 0)
            state[hit] = np.asarray(layer.state[on], np.int16)[which[hit]]
        keep = np.ones(len(lo), bool)
        keep[1:] = state[1:] != state[:-1]
        starts = lo[keep]
        ends = np.append(starts[1:], hi[-1])
        out["thread"].append(np.full(len(starts), j, np.int32))
        out["start"].append(starts)
        out["end"].append(ends)
        out["state"].append(state[keep])
    return {k: np.concatenate(v) if v else np.zeros(0, states[k].dtype) for k, v in out.items()}


def _covered(points: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether each point lies in one of the intervals [start, end) (any order, may overlap)."""
    if len(start) == 0:
        return np.zeros(len(points), bool)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    k = np.searchsorted(s, points, side="right") - 1
    return (k >= 0) & (e[np.maximum(k, 0)] > points)


def _covering(points: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each point, the index of an interval [start, end) that holds it (the latest starting one), else -1.
    The intervals of one layer on one thread do not overlap."""
    if len(start) == 0:
        return np.full(len(points), -1, np.int64)
    order = np.argsort(start, kind="stable")
    k = np.searchsorted(start[order], points, side="right") - 1
    idx = order[np.maximum(k, 0)]
    return np.where((k >= 0) & (end[idx] > points), idx, -1)
