"""What a trace holds, at a glance: the data behind `gpt2trace info` (a plain dict, JSON-ready).

`trace_info` summarizes a `Trace` in memory; `file_info` gives the same dict for a Parquet trace file read rank
group by rank group (gpt2trace.format.reader.rank_groups), so a trace bigger than memory is summarized in the memory
of one group: each group is loaded with every check of the reader, summarized (lanes, steps, span, records per
kind) and dropped, and the summaries are combined.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow.compute as pc

from gpt2trace.format.lanes import distinct_lanes
from gpt2trace.format.limits import GROUP_RECORDS
from gpt2trace.format.reader import Trace, load, rank_groups
from gpt2trace.format.schema import END_NS, RANK, START_NS, STEP, THREAD, Kind


def trace_info(trace: Trace) -> dict:
    """Schema version, ranks, threads per rank, steps, time span, records per kind, communicators (of a trace with
    MPI calls), run and machine."""
    return _Summary().add(trace).info(trace)


def file_info(path: str | Path, group_records: int = GROUP_RECORDS,
              advance: Callable[[int], None] = lambda n: None, shown: Path | None = None) -> dict:
    """`trace_info` of the Parquet trace at `path`, reading at most `group_records` records at once (whole ranks);
    `advance(n)` is called with each group's record count. `shown`: the file named (path and size) when `path` is
    a temporary import of it."""
    summary, trace = _Summary(), None
    for ranks in rank_groups(path, group_records):
        trace = load(path, ranks=ranks)
        summary.add(trace)
        advance(trace.num_rows)
    if trace is None:
        trace = load(path)          # no records: the reader's own error
    # the metadata is the whole trace's in every group's Trace
    return summary.info(trace if shown is None else replace(trace, path=Path(shown)))


@dataclass
class _Summary:
    """What `trace_info` counts, added up over traces holding disjoint ranks."""
    lanes: set = field(default_factory=set)
    steps: set = field(default_factory=set)
    t0: int | None = None
    t1: int | None = None
    per_kind: dict = field(default_factory=lambda: dict.fromkeys(Kind.ALL, 0))

    def add(self, trace: Trace) -> _Summary:
        for kind, part in trace.parts.items():
            rank, thread = distinct_lanes(part.column(RANK).to_numpy(), part.column(THREAD).to_numpy())
            self.lanes.update(zip(rank.tolist(), thread.tolist()))
            lo, hi = pc.min(part.column(START_NS)).as_py(), pc.max(part.column(END_NS)).as_py()
            self.t0, self.t1 = (lo, hi) if self.t0 is None else (min(self.t0, lo), max(self.t1, hi))
            if STEP in part.column_names:
                self.steps.update(s for s in pc.unique(part.column(STEP)).to_pylist() if s is not None)
            self.per_kind[kind] += part.num_rows
        return self

    def info(self, trace: Trace) -> dict:
        """The summary as `gpt2trace info` shows it, with the metadata of `trace`."""
        ranks = sorted({r for r, _ in self.lanes})
        steps, t0, t1 = self.steps, self.t0, self.t1
        return {
            "path": str(trace.path) if trace.path else None,
            "bytes": trace.path.stat().st_size if trace.path else None,
            "schema_version": trace.version,
            "records": sum(self.per_kind.values()),
            "records_per_kind": dict(self.per_kind),
            "ranks": len(ranks),
            "threads_per_rank": {str(r): sum(1 for q, _ in self.lanes if q == r) for r in ranks},
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
            "communicators": ([c.as_json() for c in sorted(trace.communicators.values(), key=lambda c: c.id)]
                              if self.per_kind[Kind.COMM] else []),
        }
