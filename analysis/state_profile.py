"""State profile (Paraver's classic view): where the thread time of the window goes, state by state.

Shares are of the window's thread time P x T (every thread of every rank with state records, times the
window's runtime), so the shares of one thread's states add up to its share of P x T and all of them to 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.window import NS, Records, Window
from gpt2trace.schema import END_NS, RANK, START_NS, STATE, STATE_NAMES, THREAD, State


def state_profile(states: Records, window: Window) -> dict[str, pd.DataFrame]:
    """`totals`: per state id: name, seconds over all threads, share of P x T (largest first);
    `per_thread`: per (rank, thread, state): seconds and the fraction of the window that thread spent in it."""
    dur = (states[END_NS] - states[START_NS]).astype(np.float64)
    df = pd.DataFrame({RANK: states[RANK], THREAD: states[THREAD], STATE: states[STATE], "ns": dur})
    threads = df[[RANK, THREAD]].drop_duplicates()
    thread_time = len(threads) * (window.t1_ns - window.t0_ns)
    totals = df.groupby(STATE, as_index=False)["ns"].sum().sort_values("ns", ascending=False)
    totals["name"] = [_name(s) for s in totals[STATE]]
    totals["seconds"] = totals["ns"] / NS
    totals["share"] = totals["ns"] / thread_time if thread_time > 0 else np.nan
    per_thread = df.groupby([RANK, THREAD, STATE], as_index=False)["ns"].sum()
    per_thread["name"] = [_name(s) for s in per_thread[STATE]]
    per_thread["seconds"] = per_thread["ns"] / NS
    span = window.t1_ns - window.t0_ns
    per_thread["fraction"] = per_thread["ns"] / span if span > 0 else np.nan
    return {"totals": totals[[STATE, "name", "seconds", "share"]].reset_index(drop=True),
            "per_thread": per_thread[[RANK, THREAD, STATE, "name", "seconds", "fraction"]]}


def _name(state: int) -> str:
    try:
        return STATE_NAMES[State(int(state))]
    except ValueError:
        return f"state {int(state)}"
