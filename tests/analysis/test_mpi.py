import pytest

from analysis import mpi
from analysis.window import select
from gpt2trace.testing import synthetic as syn
from gpt2trace.format.reader import Trace

CLASSES = [
    ("MPI_Allreduce", (mpi.COLL, mpi.NXN, "MPI_Allreduce")),
    ("MPI_Iallreduce", (mpi.COLL_POST, mpi.NXN, "MPI_Allreduce")),
    ("MPI_Ireduce_scatter", (mpi.COLL_POST, mpi.NXN, "MPI_Reduce_scatter")),
    ("MPI_Bcast", (mpi.COLL, mpi.ONE_TO_ALL, "MPI_Bcast")),
    ("MPI_Reduce", (mpi.COLL, mpi.ALL_TO_ONE, "MPI_Reduce")),
    ("MPI_Waitall", (mpi.WAIT, -1, "MPI_Waitall")),
    ("MPI_Isend", (mpi.ISEND, -1, "MPI_Isend")),
    ("MPI_Comm_rank", (mpi.LOCAL, -1, "MPI_Comm_rank")),
]


@pytest.mark.parametrize("name,expected", CLASSES)
def test_classify(name, expected):
    assert mpi.classify(name) == expected


def test_instances_and_matches():
    trace = Trace.from_table(syn.from_records([
        syn.comm(0, 0, 1, "MPI_Allreduce", seq=7), syn.comm(1, 0.5, 1, "MPI_Allreduce", seq=7),
        syn.comm(0, 2, 3, "MPI_Send", peer=1), syn.comm(1, 2, 3, "MPI_Recv", peer=0),
        syn.comm(0, 4, 5, "MPI_Iallreduce", seq=8), syn.comm(0, 5, 6, "MPI_Wait"),
    ]))
    calls = mpi.calls(trace, select(trace))
    # sorted by rank then start: rank 0's allreduce, send, iallreduce, wait, then rank 1's allreduce, recv
    assert calls["name"].tolist() == ["MPI_Allreduce", "MPI_Send", "MPI_Iallreduce", "MPI_Wait", "MPI_Allreduce",
                                      "MPI_Recv"]
    assert calls["inst"].tolist()[0] == calls["inst"].tolist()[4] >= 0
    assert calls["parts"].tolist() == [2, 0, 1, 0, 2, 0]
    assert calls["send_of"].tolist() == [-1, -1, -1, -1, -1, 1]
    assert calls["recv_of"].tolist() == [-1, 5, -1, -1, -1, -1]
    assert mpi.post_waits(calls).tolist() == [-1, -1, 3, -1, -1, -1]
