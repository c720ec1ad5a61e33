"""One clock for all ranks: each rank's offset to rank 0's CLOCK_MONOTONIC, estimated by ping-pong.

Rank 0 exchanges ROUNDS messages with each rank in turn; in each round it notes its send time t0 and receive
time t1 and the other rank's clock t_r in between. With the shortest round trip, t_r was read within
(t1 - t0) / 2 of the midpoint (t0 + t1) / 2 (Cristian's algorithm), so offset = t_r - (t0 + t1) / 2 with that
error bound. Estimated at the start and at the end of the run; times are corrected for the offset at the start
while tracing and linearly for the drift between the two estimates when the parts are merged.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

ROUNDS = 20
_TAG = 7717


@dataclass(frozen=True)
class ClockEstimate:
    at_ns: list[int]          # rank 0's clock when each rank's estimate was taken
    offsets_ns: list[int]     # rank r's clock minus rank 0's
    error_ns: list[int]       # half the shortest round trip

    def as_json(self) -> dict:
        return {"at_ns": self.at_ns, "offsets_ns": self.offsets_ns, "error_ns": self.error_ns}


def estimate_offsets(comm, rounds: int = ROUNDS) -> ClockEstimate:
    """Collective over `comm` (a raw mpi4py communicator: these messages are not traced)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    buf = np.zeros(1, dtype=np.int64)
    result = np.zeros((size, 3), dtype=np.int64)   # at, offset, error
    for peer in range(1, size):
        if rank == 0:
            best = None
            for _ in range(rounds):
                t0 = time.monotonic_ns()
                comm.Send(buf, dest=peer, tag=_TAG)
                comm.Recv(buf, source=peer, tag=_TAG)
                t1 = time.monotonic_ns()
                rtt = t1 - t0
                if best is None or rtt < best[0]:
                    best = (rtt, int(buf[0]) - (t0 + t1) // 2, (t0 + t1) // 2)
            result[peer] = (best[2], best[1], best[0] // 2 + 1)
        elif rank == peer:
            for _ in range(rounds):
                comm.Recv(buf, source=0, tag=_TAG)
                buf[0] = time.monotonic_ns()
                comm.Send(buf, dest=0, tag=_TAG)
    if rank == 0:
        result[0] = (time.monotonic_ns(), 0, 0)
    comm.Bcast(result, root=0)
    return ClockEstimate(result[:, 0].tolist(), result[:, 1].tolist(), result[:, 2].tolist())


def drift_slope(start: ClockEstimate, end: ClockEstimate, rank: int) -> float:
    """d(offset)/dt of `rank` against rank 0 between the two estimates (0 where they coincide)."""
    dt = end.at_ns[rank] - start.at_ns[rank]
    return (end.offsets_ns[rank] - start.offsets_ns[rank]) / dt if dt > 0 else 0.0
