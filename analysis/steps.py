"""Steps: where each step starts and ends, and which steps took unusually long.

A step's boundaries come from its `phase` records (else its `kernel` records, else any record with a step):
step s starts at the earliest record of s on any rank and ends where step s+1 starts (the last step ends at its
latest record), so the step times tile the run.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.records import NS, grouped
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, START_NS, STEP, Kind

_SOURCES = ((Kind.PHASE,), (Kind.KERNEL,), Kind.ALL)      # where step boundaries come from, in order
NO_STEPS = len(_SOURCES)                                  # the `Bounds.level` of a trace without steps


def steps_table(trace: Trace) -> pd.DataFrame:
    """One row per step: step, start_ns, end_ns, seconds (steps tile the run; empty when no record has a step)."""
    return from_bounds([bounds(trace)])


@dataclass(frozen=True)
class Bounds:
    """What a trace (or a group of its ranks) tells about the steps: the earliest start and latest end of each step
    in the first source that has steps (`level`: 0 phases, 1 kernels, 2 any record; 3 none), and its step-less
    phases (start_ns, end_ns). Small: one row per step, plus the flushes. `phase_steps`: whether any of its phases
    has a step (a trace whose phases have none ends its last step at its last step record)."""
    level: int
    per_step: pa.Table
    stepless: pa.Table
    phase_steps: bool


def bounds(trace: Trace) -> Bounds:
    """The trace's `Bounds` (`from_bounds` of several groups' gives the steps of all their ranks)."""
    sub, level = None, NO_STEPS
    for i, kinds in enumerate(_SOURCES):
        parts = [trace.records(k) for k in kinds]
        parts = [p.select([STEP, START_NS, END_NS]).filter(pc.is_valid(p.column(STEP)))
                 for p in parts if STEP in p.column_names]
        if parts and sum(p.num_rows for p in parts):
            sub, level = pa.concat_tables(parts), i
            break
    agg = (grouped(sub, STEP, [(START_NS, "min"), (END_NS, "max")]) if sub is not None
           else pa.table({STEP: pa.array([], pa.int64()), f"{START_NS}_min": pa.array([], pa.int64()),
                          f"{END_NS}_max": pa.array([], pa.int64())}))
    phases = trace.records(Kind.PHASE)
    has_steps = STEP in phases.column_names
    stepless = (phases.filter(pc.is_null(phases.column(STEP))) if has_steps else phases).select([START_NS, END_NS])
    return Bounds(level, agg, stepless, has_steps)


def from_bounds(groups: list[Bounds]) -> pd.DataFrame:
    """The steps table of the ranks of all `groups` together (see `steps_table`)."""
    level = min((b.level for b in groups), default=NO_STEPS)
    if level == NO_STEPS:
        return pd.DataFrame({STEP: [], START_NS: [], END_NS: [], "seconds": []})
    chosen = [b.per_step for b in groups if b.level == level]
    names = [f"{START_NS}_min", f"{END_NS}_max"]
    agg = chosen[0] if len(chosen) == 1 else grouped(
        pa.concat_tables([t.cast(chosen[0].schema) for t in chosen]), STEP,
        [(names[0], "min"), (names[1], "max")]).rename_columns([STEP, *names])
    agg = agg.sort_by(STEP)
    step = agg.column(STEP).to_numpy().astype(np.int64)
    first = agg.column(f"{START_NS}_min").to_numpy()
    last = agg.column(f"{END_NS}_max").to_numpy().copy()
    # The last step also takes the step-less phases after its start (the tracer's flush, a checkpoint), as the
    # other steps take theirs before the next step starts.
    for b in groups if any(g.phase_steps for g in groups) else ():
        tail = b.stepless.filter(pc.greater_equal(b.stepless.column(START_NS), int(first[-1])))
        if tail.num_rows:
            last[-1] = max(int(last[-1]), int(pc.max(tail.column(END_NS)).as_py()))
    end = np.maximum(np.r_[first[1:], last[-1:]], first)
    return pd.DataFrame({STEP: step, START_NS: first, END_NS: end, "seconds": (end - first) / NS})


def outliers(seconds: np.ndarray) -> np.ndarray:
    """Steps whose time is far from the median: beyond 3 robust standard deviations (1.4826 MAD) and 5 %."""
    if len(seconds) < 3:
        return np.zeros(len(seconds), dtype=bool)
    med = np.median(seconds)
    mad = 1.4826 * np.median(np.abs(seconds - med))
    return np.abs(seconds - med) > max(3 * mad, 0.05 * med)
