"""Traces for the interop tests: a hand-made 2-rank trace with one MPI call of each kind the trainer makes, and a
synthetic 2-rank trace (the real ones come from tests/gpt2trace/conftest.py's `real_trace`)."""
from __future__ import annotations

import pytest

from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn

RUN, IDLE, GROUP = State.RUNNING, State.IDLE, State.GROUP_COMMUNICATION


def mpi_zoo_records() -> list[dict]:
    """2 ranks x 2 threads, 12 s in three 4 s steps (phase 'forward'); times in seconds.

    rank 0, thread 0: Run [0,1] MPI_Send->1 (tag 7) [1,1.5] Run [1.5,3] Bcast(root 0) [3,4] Run [4,5] Iallreduce [5,5.1]
                      Run [5.1,6] Waitall [6,7] Run [7,8] Reduce(root 1) [8,9] Run [9,10] Allgatherv [10,11] Run
    rank 1, thread 0: Run [0,0.5] MPI_Recv<-0 (tag 7) [0.5,1.5] Run [1.5,3.5] Bcast [3.5,4] Run [4,5.5] Iallreduce
                      [5.5,5.6] Run [5.6,6.5] Waitall [6.5,7] Run [7,8.5] Reduce [8.5,9] Run [9,10.5]
                      Allgatherv [10.5,11] Run [11,12]
    thread 1 of each rank: Idle, but Running in a matmul_forward block [0.2,0.8]
    """
    calls = {0: [(1, 1.5, "MPI_Send", None, 1000, 1, State.BLOCKING_SEND),
                 (3, 4, "MPI_Bcast", 0, 400, 0, GROUP), (5, 5.1, "MPI_Iallreduce", 1, 800, None, GROUP),
                 (6, 7, "MPI_Waitall", None, None, None, State.WAIT_WAITALL),
                 (8, 9, "MPI_Reduce", 2, 200, 1, GROUP), (10, 11, "MPI_Allgatherv", 3, 64, None, GROUP)],
             1: [(0.5, 1.5, "MPI_Recv", None, 1000, 0, State.WAITING_A_MESSAGE),
                 (3.5, 4, "MPI_Bcast", 0, 400, 0, GROUP), (5.5, 5.6, "MPI_Iallreduce", 1, 800, None, GROUP),
                 (6.5, 7, "MPI_Waitall", None, None, None, State.WAIT_WAITALL),
                 (8.5, 9, "MPI_Reduce", 2, 200, 1, GROUP), (10.5, 11, "MPI_Allgatherv", 3, 64, None, GROUP)]}
    recs = []
    for rank, rank_calls in calls.items():
        t = 0.0
        for start, end, name, seq, nbytes, peer, state in rank_calls:
            recs.append(syn.state(rank, 0, t, start, RUN))
            recs.append(syn.kernel(rank, 0, t, start, "matmul_forward", step=int(t // 4), layer=0))
            recs.append(syn.state(rank, 0, start, end, state))
            recs.append(syn.comm(rank, start, end, name, seq=seq, nbytes=nbytes, peer=peer, step=int(start // 4),
                                 tag=7 if name in ("MPI_Send", "MPI_Recv") else None))
            t = end
        recs.append(syn.state(rank, 0, t, 12, RUN))
        recs += [syn.state(rank, 1, 0, 0.2, IDLE), syn.state(rank, 1, 0.2, 0.8, RUN), syn.state(rank, 1, 0.8, 12, IDLE),
                 syn.kernel(rank, 1, 0.2, 0.8, "matmul_forward", step=0, layer=0)]
        for step in range(3):
            recs.append(syn.phase(rank, 4 * step, 4 * step + 4, "forward", step))
            recs.append(syn.counter(rank, 4 * step + 4, "tokens", 64, step))
            recs.append(syn.counter(rank, 4 * step + 4, "loss", 5.25 - 0.125 * step, step))
    return recs


@pytest.fixture
def mpi_zoo() -> Trace:
    return Trace.from_table(syn.from_records(mpi_zoo_records()))


@pytest.fixture
def mpi_zoo_path(tmp_path):
    path = tmp_path / "zoo.parquet"
    syn.write(syn.from_records(mpi_zoo_records()), path)
    return path


@pytest.fixture(scope="module")
def synthetic_path(tmp_path_factory):
    """2 ranks x 2 threads, 4 steps, a late rank 1 in the gradient MPI_Allreduce."""
    path = tmp_path_factory.mktemp("synthetic") / "trace.parquet"
    syn.write(syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=4, layers=2, late_rank=(1, 1.3))), path)
    return path
