"""Hardware counters of a window: BasicAnalysis' useful IPC and frequency, from instruction and cycle counters.

Extrae reads a thread's counters at each of its events and writes the count since the previous read, so a value
written at time t belongs to the burst that t closes: the thread's state record in effect just before t
(start < t <= end). Useful instructions and cycles sum the values whose burst is Running:
    IPC = useful instructions / useful cycles      frequency = useful cycles / useful time (GHz)
(BasicAnalysis' definitions). Extrae may rotate counter sets (event 41999999 names the active one), so a counter
is not read in every burst: each ratio is taken over the Running bursts in which every counter of the ratio was
read (IPC over bursts with both counters, the frequency over the time of bursts with cycles), never dividing the
counts of some bursts by the time or cycles of others. Without set changes that is every Running burst a read
closes. A second read of a counter at the same instant on the same thread (common after a zero-duration MPI call)
closes an empty burst (t, t]: Paraver drops it, and so do we. Traces without the counters (ours, today) give None
for all four.
"""
from __future__ import annotations

import numpy as np

from analysis.records import NS, Records, records
from analysis.sections import Inputs, Section
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


# What a part adds up for the ratios, over the bursts where all their counters were read
_IPC_INS, _IPC_CYC, _FREQ_CYC, _FREQ_NS = "_ipc_instructions", "_ipc_cycles", "_frequency_cycles", "_frequency_ns"


def part(trace: Trace, window: Window, states: Records) -> dict[str, float]:
    """The useful instructions and cycles of the ranks of `trace` (`states`: their window's state records), for
    the counters they have (empty: none), and what the ratios need (see the module's docstring)."""
    rec = records(trace, Kind.COUNTER, (RANK, THREAD, NAME, VALUE), None)
    if INSTRUCTIONS not in rec.names and CYCLES not in rec.names:
        return {}
    t = rec[START_NS]
    inside = (t > window.t0_ns) & (t <= window.t1_ns) & ~_repeated(rec)   # a value closes the burst (t_prev, t]
    burst = _running_burst(states, rec[RANK][inside], rec[THREAD][inside], t[inside])
    value, name = rec[VALUE][inside], rec[NAME][inside]
    totals, per_burst = {}, {}
    for key, counter in (("useful_instructions", INSTRUCTIONS), ("useful_cycles", CYCLES)):
        if counter in rec.names:
            sel = (burst >= 0) & (name == rec.names.index(counter))
            totals[key] = float(np.nansum(value[sel]))
            per_burst[counter] = _per_burst(burst[sel], value[sel], len(states))
    return totals | _ratio_sums(per_burst, states)


def _per_burst(burst: np.ndarray, value: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(sum of the counter's values, whether it was read) per state record."""
    read = np.zeros(n, bool)
    read[burst] = True
    return np.bincount(burst, weights=np.nan_to_num(value), minlength=n), read


def _ratio_sums(per_burst: dict, states: Records) -> dict[str, float]:
    """The sums each ratio divides, each over the bursts where every counter of the ratio was read."""
    out = {}
    if CYCLES not in per_burst:
        return out
    cyc, cyc_read = per_burst[CYCLES]
    out[_FREQ_CYC] = float(cyc[cyc_read].sum())
    out[_FREQ_NS] = float((states[END_NS] - states[START_NS])[cyc_read].sum())
    if INSTRUCTIONS in per_burst:
        ins, ins_read = per_burst[INSTRUCTIONS]
        both = cyc_read & ins_read
        out[_IPC_INS], out[_IPC_CYC] = float(ins[both].sum()), float(cyc[both].sum())
    return out


def from_parts(parts: list[dict[str, float]], running_ns: int) -> dict:
    """`counters` from the `part`s of groups of ranks and the Running nanoseconds of all their threads (the ratios
    take their time from the parts: the Running time in which the cycles were read)."""
    out = dict.fromkeys(KEYS)
    if not any(parts):
        return out
    totals = {}
    for p in parts:
        for key, value in p.items():
            totals[key] = totals[key] + value if key in totals else value
    out.update({k: v for k, v in totals.items() if k in KEYS})
    if totals.get(_IPC_CYC):
        out["ipc"] = totals[_IPC_INS] / totals[_IPC_CYC]
    if totals.get(_FREQ_CYC) and totals.get(_FREQ_NS, 0) > 0:
        out["frequency_ghz"] = totals[_FREQ_CYC] / (totals[_FREQ_NS] / NS) / 1e9
    return out


def _running_burst(st: Records, rank: np.ndarray, thread: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each instant, the Running state record of its thread it closes (start < t <= end), -1 for none."""
    if not len(st) or not len(t):
        return np.full(len(t), -1, np.int64)
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
    ok = (j >= 0) & same & (st[END_NS][jj] >= t) & (st[STATE][jj] == State.RUNNING)
    return np.where(ok, jj, -1)


def _repeated(rec: Records) -> np.ndarray:
    """Values read at the same instant as the thread's previous read of that counter (in the file's order)."""
    order = np.lexsort((rec[START_NS], rec[NAME], rec[THREAD], rec[RANK]))     # stable: file order at one instant
    same = np.zeros(len(rec), dtype=bool)
    cols = [rec[c][order] for c in (RANK, THREAD, NAME, START_NS)]
    same[order[1:]] = np.logical_and.reduce([c[1:] == c[:-1] for c in cols])
    return same


def _section(inputs: Inputs, parts: list[dict[str, float]]) -> dict:
    return from_parts(parts, inputs.running_ns)


# The summary shows the IPC and frequency; `analysis.scaling` compares them across traces
SECTION = Section("counters", "counters", _section, part=lambda view: part(view.group, view.window, view.states))
