"""How a command reads a trace file it analyzes: whole when it fits, else group of ranks by group of ranks, and over
the processes of an MPI job when it runs under `mpiexec` (as Scalasca's parallel analyzer runs under the job
launcher: `mpiexec -n K gpt2trace analyze TRACE`).

A Parquet trace says how many records each rank holds in its footer (gpt2trace.format.rank_order), so the plan is
made before any record is read: one group when the whole trace is at most GROUP_RECORDS records and there is one
process, else consecutive ranks in groups of at most GROUP_RECORDS records (and at least one group per process,
where the ranks allow), each loaded when its turn comes (analysis.analyze.analyze_groups, two passes). Other
formats (Paraver, OTF2) are imported whole by process 0.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpt2trace.format.limits import GROUP_RECORDS
from gpt2trace.format.reader import Reads, Trace, rank_groups, rank_records
from gpt2trace.format.reader import load as load_parquet
from gpt2trace.interop.loader import is_parquet
from gpt2trace.interop.loader import load as load_any
from gpt2trace.run.mpiexec import launched_by_mpi


@dataclass(frozen=True)
class Processes:
    """The processes analyzing together: an mpi4py communicator under mpiexec, else this process alone."""
    comm: object | None = None

    @classmethod
    def of_job(cls) -> Processes:
        """The MPI job this process was started in (mpi4py imported only then), or this process alone."""
        job = launched_by_mpi()
        if job is None or job[1] <= 1:
            return cls()
        from mpi4py import MPI
        return cls(MPI.COMM_WORLD)

    @property
    def size(self) -> int:
        return self.comm.Get_size() if self.comm is not None else 1

    @property
    def first(self) -> bool:
        """Process 0: the one that prints and writes."""
        return self.comm is None or self.comm.Get_rank() == 0


def plan(path: Path, processes: int = 1, group_records: int = GROUP_RECORDS) -> list[list[int]] | None:
    """The rank groups to analyze `path` by, or None to load it whole (small enough for one process, or not a
    Parquet trace)."""
    if not is_parquet(path):
        return None
    counts = rank_records(path)
    total = sum(counts.values())
    if processes == 1 and total <= group_records:
        return None
    budget = min(group_records, max(1, math.ceil(total / processes)))
    return rank_groups(path, budget)


def loaders(path: Path, groups: list[list[int]],
            advance: Callable[[int], None]) -> list[Callable[[Reads | None], Trace]]:
    """A loader per group of ranks, each moving `advance` by the records it read; given `Reads`, it reads only
    those (analysis.analyze.analyze_groups' passes), else everything."""
    def loader(ranks: list[int]) -> Callable[[Reads | None], Trace]:
        def load(reads: Reads | None = None) -> Trace:
            trace = load_parquet(path, ranks=ranks, reads=reads)
            advance(trace.num_rows)
            return trace
        return load
    return [loader(g) for g in groups]


def analyze_file(path: Path, processes: Processes, steps: str | None, top: int, peak_gflops: float | None,
                 advance: Callable[[int], None] = lambda n: None,
                 group_records: int = GROUP_RECORDS) -> tuple[dict | None, Trace | None]:
    """`analyze` of the trace in `path` on `processes`: (the result, the trace when it was loaded whole) on process
    0, (None, None) on the others. Raises TraceError / WindowError on every process for an invalid trace or
    --steps."""
    from analysis.analyze import analyze, analyze_groups
    from analysis.distributed import analyze_comm
    from analysis.rank_groups import NotCombinable

    groups = plan(path, processes.size, group_records)
    if groups is not None:
        try:
            if processes.comm is not None:
                return analyze_comm(loaders(path, groups, advance), processes.comm, steps, top, peak_gflops), None
            return analyze_groups(loaders(path, groups, advance), steps, top, peak_gflops), None
        except NotCombinable:           # a task-based trace: analyzed whole, by process 0
            pass
    if not processes.first:
        return None, None
    trace = load_any(path)
    advance(trace.num_rows)
    return analyze(trace, steps, top, peak_gflops), trace
