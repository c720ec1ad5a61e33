"""How a command reads a trace file it analyzes: whole when it fits, else group of ranks by group of ranks, and over
the processes of an MPI job when it runs under `mpiexec` (as Scalasca's parallel analyzer runs under the job
launcher: `mpiexec -n K gpt2trace analyze TRACE`).

A Parquet trace says how many records each rank holds in its footer (gpt2trace.format.rank_order), so the plan is
made before any record is read: one group when the whole trace is at most GROUP_RECORDS records and there is one
process, else the ranks in one consecutive block per process with shares of records as even as whole ranks allow,
each block in groups of at most GROUP_RECORDS records, each loaded when its turn comes (on one process, while the
group before it is analyzed: analysis.analyze.analyze_groups, two passes). A Paraver trace too big to import
whole (format.limits) is imported rank by rank into a temporary Parquet trace by process 0 and read so; other
formats (a smaller .prv, OTF2) are imported whole by process 0.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.limits import GROUP_RECORDS, PRV_BYTES_PER_RECORD
from gpt2trace.format.reader import Reads, Trace, group_counts, rank_records
from gpt2trace.format.reader import load as load_parquet
from gpt2trace.interop.loader import is_big_paraver, is_parquet
from gpt2trace.interop.loader import load as load_any
from gpt2trace.run.mpiexec import launched_by_mpi
from trainer.cpu import cores_available


@dataclass(frozen=True)
class Processes:
    """The processes analyzing together: an mpi4py communicator under mpiexec, else this process alone; `cores`:
    each one's share of its node's cores."""
    comm: object | None = None
    cores: int = field(default_factory=cores_available)

    @classmethod
    def of_job(cls) -> Processes:
        """The MPI job this process was started in (mpi4py imported only then), or this process alone."""
        job = launched_by_mpi()
        if job is None or job[1] <= 1:
            return cls()
        from mpi4py import MPI
        node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        # Arrow decodes with a thread per core by default: K processes on a node would each start as many
        cores = max(1, cores_available() // node.Get_size())
        pa.set_cpu_count(cores)
        node.Free()
        return cls(MPI.COMM_WORLD, cores)

    @property
    def size(self) -> int:
        return self.comm.Get_size() if self.comm is not None else 1

    @property
    def first(self) -> bool:
        """Process 0: the one that prints and writes."""
        return self.comm is None or self.comm.Get_rank() == 0


def plan(path: Path, processes: int = 1, group_records: int = GROUP_RECORDS) -> list[list[list[int]]] | None:
    """The rank groups each process analyzes `path` by (one list per process, in process order), or None to load it
    whole (small enough for one process, or not a Parquet trace)."""
    if not is_parquet(path):
        return None
    counts = rank_records(path)
    if processes == 1 and sum(counts.values()) <= group_records:
        return None
    return [group_counts(share, group_records) if share else [] for share in shares(counts, processes)]


def shares(counts: dict[int, int], processes: int) -> list[dict[int, int]]:
    """The ranks (with their record counts, in rank order) in `processes` consecutive blocks of nearly equal
    records: each cut where the running sum is nearest to k/processes of the total, every block holding a rank
    while there are ranks enough."""
    ranks = list(counts)
    running = np.cumsum(list(counts.values()))
    cuts = [0]
    for k in range(1, processes):
        target = running[-1] * k / processes if len(running) else 0
        i = int(np.searchsorted(running, target))           # ranks[:i + 1] reach the target
        cut = i + 1 if i == 0 or i >= len(running) or running[i] - target <= target - running[i - 1] else i
        lo = min(cuts[-1] + 1, len(ranks))                    # a rank for this block while there are any
        hi = max(lo, len(ranks) - (processes - k))             # and one for each block after it, if there are enough
        cuts.append(min(max(cut, lo), hi))
    cuts.append(len(ranks))
    return [{r: counts[r] for r in ranks[a:b]} for a, b in zip(cuts, cuts[1:])]


def loaders(path: Path, groups: list[list[int]], advance: Callable[[int], None],
            shown: Path | None = None) -> list[Callable[[Reads | None], Trace]]:
    """A loader per group of ranks, each moving `advance` by the records it read; given `Reads`, it reads only
    those (analysis.analyze.analyze_groups' passes), else everything. `shown`: the trace's name in the results
    when `path` is a temporary import of it."""
    def loader(ranks: list[int]) -> Callable[[Reads | None], Trace]:
        def load(reads: Reads | None = None) -> Trace:
            trace = load_parquet(path, ranks=ranks, reads=reads)
            advance(trace.num_rows)
            return trace if shown is None else replace(trace, path=shown)
        return load
    return [loader(g) for g in groups]


@contextlib.contextmanager
def readable(path: Path, processes: Processes,
             group_records: int = GROUP_RECORDS) -> Iterator[tuple[Path, Path | None]]:
    """(the file to read for `path`, the name to show for it or None): `path` itself, or for a Paraver trace too big
    to import whole (format.limits, scaled by `group_records`) a rank-ordered Parquet import of it in a temporary
    folder, made by process 0 and removed when every process has left the block (the system's temporary folder:
    under mpiexec across nodes, TMPDIR must be a folder they share). An import error is raised on every process."""
    if not is_big_paraver(path, group_records * PRV_BYTES_PER_RECORD):
        yield path, None
        return
    # here only: the Paraver parser loads Numba, which reading a Parquet trace does not need (~0.4 s)
    from gpt2trace.interop.paraver_stream import streamed

    comm = processes.comm
    if comm is None:
        with streamed(path) as imported:
            yield imported, path
        return
    with contextlib.ExitStack() as stack:
        told = None
        if processes.first:
            try:
                told = (stack.enter_context(streamed(path)), None)
            except (TraceError, OutputError) as exc:
                told = (None, exc)
        imported, error = comm.bcast(told, root=0)
        if error is not None:
            raise error
        try:
            yield imported, path
        finally:
            comm.Barrier()          # every process is done with the import before process 0 removes it


def analyze_file(path: Path, processes: Processes, steps: str | None, top: int, peak_gflops: float | None,
                 advance: Callable[[int], None] = lambda n: None, group_records: int = GROUP_RECORDS,
                 shown: Path | None = None) -> tuple[dict | None, Trace | None]:
    """`analyze` of the trace in `path` (a file `readable` gave: `shown` names it in the results) on `processes`:
    (the result, the trace when it was loaded whole) on process 0, (None, None) on the others. Raises TraceError /
    WindowError on every process for an invalid trace or --steps."""
    from analysis.analyze import analyze, analyze_groups
    from analysis.distributed import analyze_comm
    from analysis.rank_groups import NotCombinable

    blocks = plan(path, processes.size, group_records)
    if blocks is not None:
        groups = loaders(path, [g for b in blocks for g in b], advance, shown)
        try:
            prefetch = processes.cores > 1      # the next group loads in a thread where a second core can run it
            if processes.comm is not None:
                return analyze_comm(groups, processes.comm, steps, top, peak_gflops,
                                    shares=[len(b) for b in blocks], prefetch=prefetch), None
            return analyze_groups(groups, steps, top, peak_gflops, prefetch=prefetch), None
        except NotCombinable:           # a task-based trace: analyzed whole, by process 0
            pass
    if not processes.first:
        return None, None
    trace = load_any(path)
    advance(trace.num_rows)
    if shown is not None:
        trace = replace(trace, path=shown)
    return analyze(trace, steps, top, peak_gflops), trace
