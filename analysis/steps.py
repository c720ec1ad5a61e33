"""Steps: where each step starts and ends, and which steps took unusually long.

A step's boundaries come from its `phase` records (else its `kernel` records, else any record with a step):
step s starts at the earliest record of s on any rank and ends where step s+1 starts (the last step ends at its
latest record), so the step times tile the run.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.records import NS
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, START_NS, STEP, Kind


def steps_table(trace: Trace) -> pd.DataFrame:
    """One row per step: step, start_ns, end_ns, seconds (steps tile the run; empty when no record has a step)."""
    sub = None
    for kinds in ((Kind.PHASE,), (Kind.KERNEL,), Kind.ALL):
        parts = [trace.records(k) for k in kinds]
        parts = [p.select([STEP, START_NS, END_NS]).filter(pc.is_valid(p.column(STEP)))
                 for p in parts if STEP in p.column_names]
        if parts and sum(p.num_rows for p in parts):
            sub = pa.concat_tables(parts)
            break
    if sub is None:
        return pd.DataFrame({STEP: [], START_NS: [], END_NS: [], "seconds": []})
    agg = sub.group_by(STEP).aggregate([(START_NS, "min"), (END_NS, "max")]).sort_by(STEP)
    step = agg.column(STEP).to_numpy().astype(np.int64)
    first = agg.column(f"{START_NS}_min").to_numpy()
    last = agg.column(f"{END_NS}_max").to_numpy().copy()
    # The last step also takes the step-less phases after its start (the tracer's flush, a checkpoint), as the
    # other steps take theirs before the next step starts.
    phases = trace.records(Kind.PHASE)
    if STEP in phases.column_names and phases.num_rows:
        tail = phases.filter(pc.and_(pc.is_null(phases.column(STEP)),
                                     pc.greater_equal(phases.column(START_NS), int(first[-1]))))
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
