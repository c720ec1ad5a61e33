"""A hand-built trace of a tensor x data-parallel run whose communication per dimension is known by hand.

4 ranks, one thread each, on the grid tp 2 (fastest) x dp 2 (rank = dp x 2 + tp), as the run metadata's `grid` says;
communicators: the world (id 0), tp {0,1} (id 4) and {2,3} (id 6), dp {0,2} (id 8) and {1,3} (id 9), with the ids
gpt2trace.format.communicators assigns (tp split first, then dp). `steps` steps of 10 s; step k at b = 10k:

    [b, b+1)                 Running (matmul_forward)
    [b+1, b+1+4a)            4 MPI_Allreduce on tp, `a` = tp_s each, 1,000,000 bytes, all ranks together
    ... b+6 (dp 0) / b+7     Running
    [b+6 | b+7, b+8)         MPI_Allreduce on dp, 8,000,000 bytes; dp index 1 (ranks 2, 3) enters at b+7, so ranks
                             0 and 1 wait 1 s (Wait at NxN)            (with `dp`; else Running to b+9.5)
    [b+8, b+9.5)             Running
    [b+9.5, b+10)            MPI_Barrier on the world                  (with `barrier`; else Running)

One `forward` phase per step covers [b, b+10).
"""
from __future__ import annotations

import json

import pyarrow as pa

from gpt2trace.format import communicators as comms
from gpt2trace.format import schema
from gpt2trace.format.grid import GRID_KEY
from gpt2trace.format.grid import as_json as grid_json
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn

TP_BYTES, DP_BYTES = 1_000_000, 8_000_000
DIMS = (("tp", 2), ("sp", 1), ("pp", 1), ("dp", 2))
TABLE = (comms.world(range(4)), comms.Communicator(4, "tp", (0, 1)), comms.Communicator(6, "tp", (2, 3)),
         comms.Communicator(8, "dp", (0, 2)), comms.Communicator(9, "dp", (1, 3)))


def tp_dp_trace(tp_s: float = 0.5, steps: int = 2, dp: bool = True, barrier: bool = True,
                grid: bool = True) -> pa.Table:
    """The trace above; `grid` False leaves the grid out of the run metadata (its degrees stay)."""
    if not 0 < 4 * tp_s < 5:
        raise ValueError("the 4 tp all-reduces must fit in [b+1, b+6)")
    RUN, GROUP = State.RUNNING, State.GROUP_COMMUNICATION
    recs = []
    for rank in range(4):
        tp_id, dp_id, late = (4, 6)[rank // 2], (8, 9)[rank % 2], rank // 2 == 1
        for k in range(steps):
            b, seq = 10.0 * k, 4 * k
            recs += [syn.phase(rank, b, b + 10, "forward", k), syn.state(rank, 0, b, b + 1, RUN),
                     syn.kernel(rank, 0, b, b + 1, "matmul_forward", k, 0)]
            t = b + 1
            for i in range(4):
                recs += [syn.state(rank, 0, t, t + tp_s, GROUP),
                         syn.comm(rank, t, t + tp_s, "MPI_Allreduce", seq=seq + i, nbytes=TP_BYTES,
                                  communicator=tp_id, step=k)]
                t += tp_s
            enter = b + (7 if late else 6)
            if dp:
                recs += [syn.state(rank, 0, t, enter, RUN), syn.kernel(rank, 0, t, enter, "matmul_backward", k, 0),
                         syn.state(rank, 0, enter, b + 8, GROUP),
                         syn.comm(rank, enter, b + 8, "MPI_Allreduce", seq=k, nbytes=DP_BYTES, communicator=dp_id,
                                  step=k),
                         syn.state(rank, 0, b + 8, b + 9.5, RUN)]
            else:
                recs += [syn.state(rank, 0, t, b + 9.5, RUN)]
            if barrier:
                recs += [syn.state(rank, 0, b + 9.5, b + 10, GROUP),
                         syn.comm(rank, b + 9.5, b + 10, "MPI_Barrier", seq=k, communicator=0, step=k)]
            else:
                recs += [syn.state(rank, 0, b + 9.5, b + 10, RUN)]
    run = {"parallel": {"ranks": 4, "threads": 1, "tp": 2, "sp": 1, "pp": 1}, "synthetic": True}
    if grid:
        run[GRID_KEY] = grid_json(DIMS)
    meta = {schema.META_RUN: json.dumps(run).encode(), **comms.to_metadata(TABLE)}
    return syn.from_records(recs, meta)
