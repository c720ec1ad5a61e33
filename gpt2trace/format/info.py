"""What a trace holds, at a glance: the data behind `gpt2trace info` (a plain dict, JSON-ready)."""
from __future__ import annotations

import pyarrow.compute as pc

from gpt2trace.format.lanes import distinct_lanes
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, RANK, START_NS, STEP, THREAD, Kind


def trace_info(trace: Trace) -> dict:
    """Schema version, ranks, threads per rank, steps, time span, records per kind, run and machine."""
    lanes, steps = set(), set()
    t0, t1 = None, None
    for part in trace.parts.values():
        rank, thread = distinct_lanes(part.column(RANK).to_numpy(), part.column(THREAD).to_numpy())
        lanes.update(zip(rank.tolist(), thread.tolist()))
        lo, hi = pc.min(part.column(START_NS)).as_py(), pc.max(part.column(END_NS)).as_py()
        t0, t1 = (lo, hi) if t0 is None else (min(t0, lo), max(t1, hi))
        if STEP in part.column_names:
            steps.update(s for s in pc.unique(part.column(STEP)).to_pylist() if s is not None)
    ranks = sorted({r for r, _ in lanes})
    return {
        "path": str(trace.path) if trace.path else None,
        "bytes": trace.path.stat().st_size if trace.path else None,
        "schema_version": trace.version,
        "records": trace.num_rows,
        "records_per_kind": {k: trace.records(k).num_rows for k in Kind.ALL},
        "ranks": len(ranks),
        "threads_per_rank": {str(r): sum(1 for q, _ in lanes if q == r) for r in ranks},
        "steps": len(steps),
        "first_step": min(steps) if steps else None,
        "last_step": max(steps) if steps else None,
        "start_ns": t0,
        "end_ns": t1,
        "duration_s": (t1 - t0) / 1e9 if t0 is not None else 0.0,
        "run": trace.run,
        "machine": trace.machine,
        "sgemm_peak": trace.peak,
        "clock": trace.clock,
        "extra_columns": list(trace.extra_columns),
    }
