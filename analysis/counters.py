"""Hardware counters of a window: BasicAnalysis' useful IPC and frequency, from instruction and cycle counters.

Extrae reads a thread's counters at each of its events and writes the count since the previous read, so a value
written at time t belongs to the burst that t closes: the thread's state record in effect just before t
(start < t <= end). Useful instructions and cycles sum the values whose burst is Running:
    IPC = useful instructions / useful cycles      frequency = useful cycles / useful time (GHz)
with the useful time all the Running time of the window (BasicAnalysis' definitions). A second read of a counter
at the same instant on the same thread (common after a zero-duration MPI call) closes an empty burst (t, t]:
Paraver drops it, and so do we. Traces without the counters (ours, today) give None for all four.
"""
from __future__ import annotations

import numpy as np

from analysis.records import NS, Records, records
from analysis.window import Window
from gpt2trace.format.lanes import lane_key, time_key, time_key_fits
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import (
    CYCLES,
    END_NS,
    INSTRUCTIONS,
    NAME,
    RANK,
    START_NS,
    STATE,
    THREAD,
    VALUE,
    Kind,
    State,
)

KEYS = ("useful_instructions", "useful_cycles", "ipc", "frequency_ghz")


def counters(trace: Trace, window: Window, states: Records | None = None) -> dict:
    """{useful_instructions, useful_cycles, ipc, frequency_ghz} of the window (None without the counters)."""
    st = states if states is not None else records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    running_ns = int(((st[END_NS] - st[START_NS]) * (st[STATE] == State.RUNNING)).sum())
    return from_parts([part(trace, window, st)], running_ns)


def part(trace: Trace, window: Window, states: Records) -> dict[str, float]:
    """The useful instructions and cycles of the ranks of `trace` (`states`: their window's state records), for
    the counters they have (empty: none)."""
    rec = records(trace, Kind.COUNTER, (RANK, THREAD, NAME, VALUE), None)
    if INSTRUCTIONS not in rec.names and CYCLES not in rec.names:
        return {}
    t = rec[START_NS]
    inside = (t > window.t0_ns) & (t <= window.t1_ns) & ~_repeated(rec)   # a value closes the burst (t_prev, t]
    running = _closes_running(states, rec[RANK][inside], rec[THREAD][inside], t[inside])
    value, name = rec[VALUE][inside], rec[NAME][inside]
    totals = {}
    for key, counter in (("useful_instructions", INSTRUCTIONS), ("useful_cycles", CYCLES)):
        if counter in rec.names:
            sel = running & (name == rec.names.index(counter))
            totals[key] = float(np.nansum(value[sel]))
    return totals


def from_parts(parts: list[dict[str, float]], running_ns: int) -> dict:
    """`counters` from the `part`s of groups of ranks and the Running nanoseconds of all their threads."""
    out = dict.fromkeys(KEYS)
    if not any(parts):
        return out
    totals = {}
    for p in parts:
        for key, value in p.items():
            totals[key] = totals[key] + value if key in totals else value
    out.update(totals)
    useful_s = float(running_ns) / NS
    ins, cyc = totals.get("useful_instructions"), totals.get("useful_cycles")
    if ins is not None and cyc:
        out["ipc"] = ins / cyc
    if cyc and useful_s > 0:
        out["frequency_ghz"] = cyc / useful_s / 1e9
    return out


def _closes_running(st: Records, rank: np.ndarray, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each instant, whether its thread's state just before it (start < t <= end) is Running."""
    if not len(st) or not len(t):
        return np.zeros(len(t), dtype=bool)
    width = int(max(st[THREAD].max(), thread.max())) + 1
    lo = int(min(st[START_NS].min(), t.min()))
    span = int(max(st[END_NS].max(), t.max())) - lo + 1
    lanes = int(max(st[RANK].max(), rank.max())) + 1
    if not time_key_fits(lanes * width, span):
        raise ValueError("trace span too long for composite keys")
    key = time_key(lane_key(st[RANK], st[THREAD], width), st[START_NS], lo, span)
    order = np.argsort(key, kind="stable")
    q = time_key(lane_key(rank, thread, width), t, lo, span)
    j = np.searchsorted(key[order], q, side="left") - 1         # the last state starting before t
    jj = order[np.maximum(j, 0)]
    same = (st[RANK][jj] == rank) & (st[THREAD][jj] == thread)
    return (j >= 0) & same & (st[END_NS][jj] >= t) & (st[STATE][jj] == State.RUNNING)


def _repeated(rec: Records) -> np.ndarray:
    """Values read at the same instant as the thread's previous read of that counter (in the file's order)."""
    order = np.lexsort((rec[START_NS], rec[NAME], rec[THREAD], rec[RANK]))     # stable: file order at one instant
    same = np.zeros(len(rec), dtype=bool)
    cols = [rec[c][order] for c in (RANK, THREAD, NAME, START_NS)]
    same[order[1:]] = np.logical_and.reduce([c[1:] == c[:-1] for c in cols])
    return same
