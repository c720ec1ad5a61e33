"""One rank's trace of a run, from its start to the file that is kept: `TraceSession`.

`open` (before the model is built): measures the sgemm peak (rank 0, broadcast), synchronizes the clocks (with
MPI: each rank's offset to rank 0 by ping-pong), writes the run's metadata and starts the tracer.
`finish` (after training, whatever ended it): closes the tracer (the whole run, or up to the last whole step),
estimates the clocks again and merges the parts (with MPI rank 0 merges every rank's), and records in `kept`
what the run leaves: a merged trace, or parts for `gpt2trace recover`.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError
from gpt2trace.format.writer import merge_parts, part_files, parts_dir, steps_phrase
from gpt2trace.record.clocksync import ClockEstimate, drift_slope, estimate_offsets

_SYNC_METHOD = "ping-pong with rank 0, shortest of 20 round trips (Cristian)"


@dataclass(frozen=True)
class KeptTrace:
    """What a run leaves of its trace: one merged file, or parts in <path>.parts (merged by `recover`)."""
    path: Path
    merged: bool
    records: int                       # of the merged file (0 while the parts are not merged)
    steps: tuple[int, int] | None      # first and last whole step kept; None: no step was complete

    def describe(self) -> str:
        """One phrase for the run's last line, e.g. `steps 0-6 in trace.parquet`."""
        if self.steps is None:
            return f"no complete step in {self.path}" if self.merged else "no complete step was traced"
        what = steps_phrase(self.steps)
        if self.merged:
            return f"{what} in {self.path} ({self.records:,} records)"
        return f"{what} as parts in {parts_dir(self.path)} (merge them with `gpt2trace recover {self.path}`)"


def clock_json(ranks: int, start: ClockEstimate | None, end: ClockEstimate | None = None,
               slopes: list[float] | None = None) -> dict:
    """The trace's clock metadata (schema.META_CLOCK): one rank, the start estimate, or both and the drift."""
    if start is None:
        return {"source": "CLOCK_MONOTONIC", "ranks": ranks, "offsets_ns": [0], "error_bound_ns": [0]}
    out = {"source": "CLOCK_MONOTONIC", "ranks": ranks, "method": _SYNC_METHOD, "offsets_ns": start.offsets_ns,
           "error_bound_ns": start.error_ns, "start": start.as_json()}
    if end is not None:
        out |= {"method": _SYNC_METHOD + ", at start and end; offset at start applied while tracing, drift "
                                         "between the two applied linearly at merge",
                "error_bound_ns": [max(a, b) for a, b in zip(start.error_ns, end.error_ns)],
                "end": end.as_json(), "drift_slope": slopes}
    return out


class TraceSession:
    def __init__(self, path: Path, tracer, comm=None, clock_start: ClockEstimate | None = None,
                 origin0: int = 0):
        self.path, self.tracer, self.comm = path, tracer, comm
        self.clock_start, self.origin0 = clock_start, origin0
        self.kept: KeptTrace | None = None     # set by `finish`, also when it raises

    @classmethod
    def open(cls, path: Path, run_json: dict, threads: int, flush_every_s: float, memory_every_s: float,
             comm=None) -> TraceSession:
        """Collective over `comm` (a raw mpi4py communicator) when given. Rank 0 must have cleared the way for
        `path` before (gpt2trace.run.preflight); nothing is written until the first part."""
        from gpt2trace.record.machine import machine_info
        from gpt2trace.record.tracer import Tracer
        from trainer.peak import sgemm_gflops

        rank = comm.Get_rank() if comm is not None else 0
        ranks = comm.Get_size() if comm is not None else 1
        peak = None
        if rank == 0:  # measured once, while the other ranks wait: ranks measuring at once share the cores
            peak = {"gflops_per_core": sgemm_gflops(1), f"gflops_{threads}_threads": sgemm_gflops(threads),
                    "cores": threads, "kernel": "matmul_forward (cblas_sgemm), BT=256 x 768 -> 3072"}
        clock_start, origin0, origin = None, 0, None
        if comm is not None:
            peak = comm.bcast(peak, root=0)
            clock_start = estimate_offsets(comm)
            origin0 = comm.bcast(time.monotonic_ns() if rank == 0 else None, root=0)
            origin = origin0 + clock_start.offsets_ns[rank]  # rank 0's origin, read on this rank's clock
        meta = {
            S.META_RUN: json.dumps(run_json).encode(),
            S.META_MACHINE: json.dumps(machine_info(_mpi_info() if comm is not None else None)).encode(),
            S.META_PEAK: json.dumps(peak).encode(),
            S.META_CLOCK: json.dumps(clock_json(ranks, clock_start)).encode(),
        }
        if comm is not None:
            comm.Barrier()  # rank 0 has cleared the way before anyone writes a part
        tracer = Tracer(path, rank, threads, meta, origin_ns=origin, flush_every_s=flush_every_s,
                        memory_every_s=memory_every_s)
        return cls(path, tracer, comm, clock_start, origin0)

    def finish(self, whole_run: bool) -> KeptTrace:
        """Close the tracer and merge. `whole_run`: training ended normally or at a step boundary on every rank
        (with MPI: collective, rank 0 merges); otherwise this rank stopped inside a step (its last step is
        dropped; with MPI nothing collective can happen, its parts stay for the launcher or `recover`).

        A failure to write (a full disk) is raised as the OutputError it is, after the merge was tried and
        `kept` says what is left; a signal during the merge leaves the parts (`kept` says so)."""
        error = None
        try:
            self.tracer.close(whole_run)
        except OutputError as exc:    # a part's write failed; the parts written before it are whole
            error = exc
        # records are counted by the merge (parts hold raw buffers)
        self.kept = KeptTrace(self.path, False, 0, self.tracer.steps_written)
        try:
            if self.comm is None:
                if part_files(parts_dir(self.path)):
                    merged = merge_parts(self.path)
                    self.kept = KeptTrace(self.path, True, merged.records, merged.steps)
            elif whole_run:
                merged = self._merge_ranks()
                if merged is not None:
                    self.kept = KeptTrace(self.path, True, merged.records, merged.steps)
        except OutputError as exc:
            error = error or exc
        if error is not None:
            raise error
        return self.kept

    def _merge_ranks(self):
        """End of an MPI run on every rank: estimate the clocks again, then rank 0 merges every rank's parts."""
        comm, start = self.comm, self.clock_start
        rank, ranks = comm.Get_rank(), comm.Get_size()
        end = estimate_offsets(comm)
        comm.Barrier()   # every rank's parts are on disk
        if rank != 0:
            return None
        slopes = [drift_slope(start, end, r) for r in range(ranks)]
        drift = {r: (slopes[r], start.at_ns[r] - self.origin0) for r in range(ranks)}
        clock = clock_json(ranks, start, end, slopes)
        return merge_parts(self.path, extra_metadata={S.META_CLOCK: json.dumps(clock).encode()}, drift=drift)


def _mpi_info() -> dict:
    import mpi4py
    from mpi4py import MPI
    return {"library": MPI.Get_library_version().strip().splitlines()[0],
            "standard": "{}.{}".format(*MPI.Get_version()),
            "mpi4py": mpi4py.__version__}
