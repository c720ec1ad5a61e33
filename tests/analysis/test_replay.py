import numpy as np
import pytest

from analysis import mpi, replay
from analysis.window import select
from gpt2trace.testing import synthetic as syn
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State


def _ideal_s(comm_records, end_s):
    # every rank has one Running state over [0, end_s] so the window is [0, end_s]
    recs = [syn.state(r, 0, 0, end_s, State.RUNNING) for r in (0, 1)] + comm_records
    trace = Trace.from_table(syn.from_records(recs))
    w = select(trace)
    return replay.ideal_runtime_ns(mpi.calls(trace, w), np.array([0, 1]), w.t0_ns, w.t1_ns) / 1e9


CASES = [
    # Bcast from root 0: root enters at 5 and leaves at once; rank 1 enters at 2 and leaves when the root
    # enters (5); both then compute 8 - 6 = 2 s: T_ideal = 7.
    ([syn.comm(0, 5, 6, "MPI_Bcast", seq=0, peer=0), syn.comm(1, 2, 6, "MPI_Bcast", seq=0, peer=0)], 8, 7),
    # Send at 5 (eager: leaves at 5, then 6 - 5.1 = 0.9 s): 5.9; Recv entered at 2 ends when the send starts (5),
    # then 6 - 5.2 = 0.8 s: 5.8. T_ideal = 5.9.
    ([syn.comm(0, 5, 5.1, "MPI_Send", peer=1), syn.comm(1, 2, 5.2, "MPI_Recv", peer=0)], 6, 5.9),
    # Collectives in crossed order on the two ranks (a trace no real run makes): the replay releases rank 0's
    # first allreduce at its enter (1), rank 0 enters seq 1 at 2, which ends at 2 for both; rank 1 enters
    # seq 0 at 3, which ends at 3; tails of 1 s: rank 0 ends at 3, rank 1 at 4.
    ([syn.comm(0, 1, 2, "MPI_Allreduce", seq=0), syn.comm(0, 3, 4, "MPI_Allreduce", seq=1),
      syn.comm(1, 1, 2, "MPI_Allreduce", seq=1), syn.comm(1, 3, 4, "MPI_Allreduce", seq=0)], 5, 4),
    # No MPI on one rank: it keeps its whole 3 s as one burst.
    ([syn.comm(0, 1, 2, "MPI_Barrier", seq=0)], 3, 3),
]


@pytest.mark.parametrize("recs,end_s,expected", CASES, ids=["bcast", "send-recv", "crossed", "one-rank"])
def test_ideal_runtime(recs, end_s, expected):
    assert _ideal_s(recs, end_s) == pytest.approx(expected)
