"""State profile (Paraver's classic view): where the thread time of the window goes, state by state.

Shares are of the window's thread time P x T (every thread of every rank with state records, times the
window's runtime), so the shares of one thread's states add up to its share of P x T and all of them to 1.
Columnar: one bincount over (thread, state) keys, no per-record Python.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.records import NS, Records
from analysis.window import Window
from gpt2trace.format.lanes import lane_index, lane_runs
from gpt2trace.format.schema import END_NS, RANK, START_NS, STATE, STATE_NAMES, THREAD, State

_STATE_SLOTS = 32   # Paraver ids are small; anything larger is folded into the last slot's name


def state_profile(states: Records, window: Window) -> dict[str, pd.DataFrame]:
    """`totals`: per state id: name, seconds over all threads, share of P x T (largest first);
    `per_thread`: per (rank, thread, state): seconds and the fraction of the window that thread spent in it."""
    return from_lanes(lane_states(states), window)


@dataclass(frozen=True)
class LaneStates:
    """Per thread with state records (sorted by rank, thread): nanoseconds in each state id (`ns`: threads x slots).
    The lanes of groups of ranks, concatenated in rank order, are those of all the ranks together."""
    rank: np.ndarray
    thread: np.ndarray
    ns: np.ndarray

    @staticmethod
    def concat(parts: list[LaneStates]) -> LaneStates:
        return LaneStates(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("rank", "thread", "ns")))


def lane_states(states: Records) -> LaneStates:
    dur = states[END_NS] - states[START_NS]
    state = np.clip(states[STATE], 0, _STATE_SLOTS - 1)
    runs = lane_runs(states[RANK], states[THREAD]) if len(states) else None
    if runs is None:
        rank, thread, lane = lane_index(states[RANK], states[THREAD])      # threads with state records
        ns = np.bincount(lane * _STATE_SLOTS + state, weights=dur, minlength=len(rank) * _STATE_SLOTS)
        return LaneStates(rank, thread, ns.reshape(-1, _STATE_SLOTS))
    rank, thread, bound = runs                  # records thread by thread: one count per thread, no lane index
    ns = np.zeros((len(rank), _STATE_SLOTS))
    for i, (a, b) in enumerate(zip(bound[:-1].tolist(), bound[1:].tolist())):
        ns[i] = np.bincount(state[a:b], weights=dur[a:b], minlength=_STATE_SLOTS)
    return LaneStates(rank, thread, ns)


def from_lanes(lanes: LaneStates, window: Window) -> dict[str, pd.DataFrame]:
    """`state_profile` from the threads' times in each state."""
    rank, thread, ns = lanes.rank, lanes.thread, lanes.ns
    span = window.t1_ns - window.t0_ns
    thread_time = len(rank) * span

    total = ns.sum(axis=0)
    ids = np.flatnonzero(total > 0)
    ids = ids[np.argsort(-total[ids], kind="stable")]
    totals = pd.DataFrame({STATE: ids, "name": [_name(s) for s in ids], "seconds": total[ids] / NS,
                           "share": total[ids] / thread_time if thread_time > 0 else np.nan})
    lanes, sts = np.nonzero(ns > 0)
    per_thread = pd.DataFrame({RANK: rank[lanes], THREAD: thread[lanes], STATE: sts,
                               "name": [_name(s) for s in sts], "seconds": ns[lanes, sts] / NS,
                               "fraction": ns[lanes, sts] / span if span > 0 else np.nan})
    return {"totals": totals, "per_thread": per_thread}


def _name(state: int) -> str:
    try:
        return STATE_NAMES[State(int(state))]
    except ValueError:
        return f"state {int(state)}"
