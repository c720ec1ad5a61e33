"""`analyze` spread over MPI processes, as Scalasca's parallel trace analyzer: each process takes a block of the
trace's rank groups, and the small summaries of `analysis.rank_groups` are exchanged.

Pass 1: every process gathers its groups and all of them exchange what they gathered (an allgather: the window and
the analyses across ranks need every rank's phases and MPI calls). Pass 2: each process reduces its groups to
`Part`s, which go to process 0; it combines them into `analyze`'s result. The communicator is passed in (any
object with mpi4py's `Get_rank`, `Get_size`, `allgather` and `gather`), so `COMM_SELF` gives the one-process path.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from analysis import rank_groups
from analysis.analyze import combine
from gpt2trace.format.reader import Trace


def analyze_comm(groups: Sequence[Callable[[], Trace]], comm, steps: str | None = None, top: int = 10,
                 peak_gflops: float | None = None, bins: int = 100, explain: bool = True) -> dict | None:
    """`analyze` of the trace whose rank groups `groups` load (in the order of their lowest rank), on the processes
    of `comm`; the result on process 0, None on the others. An error in pass 1 on any process (an invalid trace, a
    --steps that does not fit) is raised on every process, so that none waits for the others forever."""
    mine = block(len(groups), comm.Get_rank(), comm.Get_size())
    gathered, meta = _exchange(comm.allgather(_attempt(lambda: _gather(groups, mine))))
    ctx = rank_groups.context(gathered, meta, steps)
    everything = comm.gather(_attempt(lambda: ([rank_groups.part(groups[i](), ctx, top, bins) for i in mine],
                                               None)), root=0)
    if everything is None:
        return None
    parts, _ = _exchange(everything)
    return combine(ctx, parts, top, peak_gflops, bins, explain)


def block(groups: int, process: int, processes: int) -> range:
    """The groups of one process: a contiguous block, the first ones one larger when they do not divide evenly."""
    bounds = np.r_[0, np.cumsum([len(b) for b in np.array_split(np.arange(groups), processes)])]
    return range(int(bounds[process]), int(bounds[process + 1]))


def _gather(groups: Sequence[Callable[[], Trace]], mine: range) -> tuple[list, Trace | None]:
    """Pass 1 over this process's groups, and the trace's metadata (that of its first group)."""
    out, meta = [], None
    for i in mine:
        group = groups[i]()
        out.append(rank_groups.gather(group))
        meta = meta or rank_groups.metadata(group)
    return out, meta


def _attempt(work: Callable[[], tuple]) -> tuple:
    """(result, None), or (None, the exception) for the processes to share."""
    try:
        return work(), None
    except Exception as exc:            # noqa: BLE001 - sent to every process, raised there
        return None, exc


def _exchange(items: list[tuple]) -> tuple[list, Trace | None]:
    """The processes' results (in process order: their blocks are in group order) joined, and the first metadata;
    the first process's exception raised if any had one."""
    for _, exc in items:
        if exc is not None:
            raise exc
    joined = [x for (results, _), _ in items for x in results]
    meta = next((m for (_, m), _ in items if m is not None), None)
    return joined, meta
