"""`analyze` spread over MPI processes, as Scalasca's parallel trace analyzer: each process takes a block of the
trace's rank groups, and the small summaries of `analysis.rank_groups` are exchanged.

Pass 1: every process gathers its groups and all of them exchange what they gathered (an allgather: the window and
the analyses across ranks need every rank's phases and MPI calls). Pass 2: each process reduces its groups to
`Part`s, which go to process 0; it combines them into `analyze`'s result, while process 1 computes the explanations
across ranks from every group's kernel regions (`analysis.analyze.Explained`) and sends them to it.

Process 0 has the most to do after pass 2, so what it waits for goes first: the other processes send it their parts
as soon as they have them, and only then the helper takes the regions. Meanwhile process 0 loads the replay's
compiled code in a thread (its Numba import and cache, ~1.5-2 s of its combination otherwise), and waits by polling
with short sleeps: a blocking MPICH receive polls at full speed, which took half the core from that thread. With
fewer processes than cores on a node, each loads its next group in a thread while it works on one, as `analyze`
does on one process (`analysis.analyze.prefetched`). The communicator is passed in (mpi4py's), so `COMM_SELF`
gives the one-process path.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from analysis import analyze, rank_groups, replay
from analysis.analyze import combine, gather_groups, loading, part_groups
from gpt2trace.format.reader import Reads, Trace
from gpt2trace.format.schema import Kind


def analyze_comm(groups: Sequence[Callable[[Reads], Trace]], comm, steps: str | None = None, top: int = 10,
                 peak_gflops: float | None = None, bins: int = 100, explain: bool = True,
                 shares: Sequence[int] | None = None, prefetch: bool = False) -> dict | None:
    """`analyze` of the trace whose rank groups `groups` load (in the order of their lowest rank), on the processes
    of `comm`; the result on process 0, None on the others. An error on any process in pass 1 (an invalid trace, a
    --steps that does not fit) is raised on every process, so that none waits for the others forever; one in pass
    2 on process 0. `shares`: how many consecutive groups each process takes (gpt2trace.cli.grouped.plan balances
    them by records); by default as even a count as the groups allow. `prefetch`: load the next group in a thread
    while one is worked on (for processes with a core to spare each)."""
    process, size = comm.Get_rank(), comm.Get_size()
    if shares is None:
        mine = [groups[i] for i in block(len(groups), process, size)]
    else:
        first = sum(shares[:process])
        mine = groups[first:first + shares[process]]
    kept: list[Trace] = []          # this process's last group, read for both passes (one load less)
    with loading(prefetch) as pool:
        gathered = _values(comm.allgather(_attempt(lambda: gather_groups(pool, mine, kept))))
        meta = next(m for _, m in gathered if m is not None)
        ctx = rank_groups.context([g for gs, _ in gathered for g in gs], meta, steps)
        parts = _attempt(lambda: part_groups(pool, mine, kept, ctx, top, bins))
    if process == 0 and size > 1 and ctx.shared.records(Kind.COMM).num_rows:     # its replay will need them
        threading.Thread(target=_warm, name="warm-replay", daemon=True).start()
    helper = explain and size > 1 and len(groups) > 1
    regions = _then(parts, lambda ps: [p.regions for p in ps]) if helper else None
    if helper:                                                  # process 0 does not need them
        parts = _then(parts, lambda ps: [replace(p, regions=None) for p in ps])
    sent = comm.isend(regions, dest=HELPER, tag=_REGIONS) if helper and process != HELPER else None
    if process != 0:
        comm.send(parts, dest=0, tag=_PARTS)
        if helper and process == HELPER:
            everyone = [regions if p == HELPER else comm.recv(source=p, tag=_REGIONS) for p in range(size)]
            comm.send(_attempt(lambda: _explain(ctx, [r for rs in _values(everyone) for r in rs])), dest=0,
                      tag=_EXPLAINED)
        if sent is not None:
            sent.wait()
        return None
    everything = [parts] + [_receive(comm, p, _PARTS) for p in range(1, size)]
    if sent is not None:
        _complete(sent)
    received = []

    def explained() -> analyze.Explained:
        received.append(_receive(comm, HELPER, _EXPLAINED))
        return _values(received)[0]

    try:
        return combine(ctx, [p for ps in _values(everything) for p in ps], top, peak_gflops, explain,
                       explained if helper else None)
    finally:
        if helper and not received:     # an error came first: the helper still waits in its send for this receive
            _receive(comm, HELPER, _EXPLAINED)


HELPER = 1         # the process that computes the explanations (analysis.analyze.Explained)
_PARTS, _REGIONS, _EXPLAINED = 1, 2, 3          # the tags of pass 2's messages
_POLL_S = 0.002     # process 0's sleep between two looks for a message


def _warm() -> None:
    """`replay.warm` in a thread: whatever fails there fails again in the replay itself, on the main thread, where
    it is reported as every other error (a thread's exception would print a traceback)."""
    try:
        replay.warm()
    except Exception:       # noqa: BLE001 - see the docstring
        pass


def _receive(comm, source: int, tag: int):
    """The next message from `source` with `tag`, once it is there (`_poll`)."""
    _poll(lambda: comm.Iprobe(source=source, tag=tag))
    return comm.recv(source=source, tag=tag)


def _complete(request) -> None:
    """Waits for a nonblocking send (`_poll`)."""
    _poll(request.Test)


def _poll(ready: Callable[[], bool]) -> None:
    """Waits until `ready()` by asking and sleeping (see the module docstring: a blocking MPI wait spins)."""
    while not ready():
        time.sleep(_POLL_S)


def block(groups: int, process: int, processes: int) -> range:
    """The groups of one process: a contiguous block, the first ones one larger when they do not divide evenly."""
    bounds = np.r_[0, np.cumsum([len(b) for b in np.array_split(np.arange(groups), processes)])]
    return range(int(bounds[process]), int(bounds[process + 1]))


def _explain(ctx: rank_groups.Context, regions: list[pd.DataFrame]) -> analyze.Explained:
    """The explanations from every group's kernel regions (`analysis.analyze.Explained`)."""
    return analyze.explanations(ctx, {"regions": (pd.concat(regions, ignore_index=True), ctx.kernel_names)})


# What a process sends: (value, None), or (None, the exception it raised) for every process to raise.
def _attempt(work: Callable[[], object]) -> tuple:
    try:
        return work(), None
    except Exception as exc:            # noqa: BLE001 - sent to the other processes, raised there
        return None, exc


def _then(outcome: tuple, f: Callable) -> tuple:
    value, exc = outcome
    return (f(value), None) if exc is None else outcome


def _values(outcomes: list[tuple]) -> list:
    """The processes' values in process order (their blocks are in group order); the first exception raised."""
    for _, exc in outcomes:
        if exc is not None:
            raise exc
    return [value for value, _ in outcomes]
