"""Message matching on hand-made call records: (rank, name, peer, start, end) per call, rows in the order given."""
import numpy as np
import pytest

from gpt2trace.format.matching import match_messages
from gpt2trace.format.mpi_calls import operation


def _match(calls):
    rank, name, peer, start, end = (np.array(c) for c in zip(*calls))
    op = np.array([operation(n) for n in name])
    s, r = match_messages(rank, peer, op, start, end)
    return list(zip(s.tolist(), r.tolist()))


CASES = [
    # Two sends 0 -> 1 and two receives: first with first, second with second.
    ("in-order", [(0, "MPI_Send", 1, 0, 1), (0, "MPI_Send", 1, 2, 3),
                  (1, "MPI_Recv", 0, 0, 2), (1, "MPI_Recv", 0, 2, 4)],
     [(0, 2), (1, 3)]),
    # Rows not in time order: matching follows each rank's time order, so the send at t=0 (row 3) pairs with the
    # receive at t=0 (row 1) and the send at t=4 (row 2) with the receive at t=5 (row 0); listed by send row.
    ("rows-out-of-time-order", [(1, "MPI_Recv", 0, 5, 6), (1, "MPI_Recv", 0, 0, 1),
                                (0, "MPI_Send", 1, 4, 5), (0, "MPI_Send", 1, 0, 1)],
     [(2, 0), (3, 1)]),
    # Tagged messages received in the other order (tag B first): without tags in the trace, the k-th send still
    # pairs with the k-th receive (MPI's non-overtaking order between one pair of ranks).
    ("out-of-order-tags", [(0, "MPI_Send", 1, 0, 1), (0, "MPI_Send", 1, 1, 2),
                           (1, "MPI_Recv", 0, 3, 4), (1, "MPI_Recv", 0, 4, 5)],
     [(0, 2), (1, 3)]),
    # Pairs are separate queues: 0 -> 2 and 1 -> 2 interleave on rank 2.
    ("two-sources", [(0, "MPI_Send", 2, 0, 1), (1, "MPI_Send", 2, 0, 1),
                     (2, "MPI_Recv", 1, 0, 1), (2, "MPI_Recv", 0, 1, 2)],
     [(0, 3), (1, 2)]),
    # A send nobody receives (0 -> 1 twice, one receive): the second send stays unmatched.
    ("unmatched-send", [(0, "MPI_Send", 1, 0, 1), (0, "MPI_Send", 1, 1, 2), (1, "MPI_Recv", 0, 0, 1)],
     [(0, 2)]),
    # A receive from a rank that never sends to it, and one with no peer: neither matches.
    ("unmatched-recv", [(0, "MPI_Send", 1, 0, 1), (1, "MPI_Recv", 0, 0, 1), (1, "MPI_Recv", 2, 1, 2),
                        (1, "MPI_Recv", -1, 2, 3)],
     [(0, 1)]),
    # Nonblocking: Isend/Irecv are the messages, the waits (no peer) are not.
    ("isend-irecv-wait", [(0, "MPI_Isend", 1, 0, 1), (0, "MPI_Wait", -1, 1, 2),
                          (1, "MPI_Irecv", 0, 0, 1), (1, "MPI_Waitall", -1, 3, 4)],
     [(0, 2)]),
    # A blocking send received by a nonblocking receive, and the reverse.
    ("mixed", [(0, "MPI_Ssend", 1, 0, 1), (0, "MPI_Irecv", 1, 2, 3), (1, "MPI_Irecv", 0, 0, 1),
               (1, "MPI_Bsend", 0, 2, 3)],
     [(0, 2), (3, 1)]),
    # Sendrecv ring of 3 (rank r sends to r + 1, receives from r - 1): each call's receive half gets the
    # previous rank's call of the same round.
    ("sendrecv-ring", [(0, "MPI_Sendrecv", 1, 0, 1), (1, "MPI_Sendrecv", 2, 0, 1), (2, "MPI_Sendrecv", 0, 0, 1)],
     [(0, 1), (1, 2), (2, 0)]),
    # Shift without wrap on 3 ranks: rank 2 sends to no one, so its peer is its source (1); rank 1 gets two
    # candidates (rank 0 names it, rank 2 names it) and takes the non-mutual one, rank 0; rank 2 gets rank 1.
    ("sendrecv-shift", [(0, "MPI_Sendrecv", 1, 0, 1), (1, "MPI_Sendrecv", 2, 0, 1), (2, "MPI_Sendrecv", 1, 0, 1)],
     [(0, 1), (1, 2)]),
    # A Sendrecv whose send half no Sendrecv takes is matched as a plain send by a Recv.
    ("sendrecv-to-recv", [(0, "MPI_Sendrecv", 1, 0, 1), (1, "MPI_Recv", 0, 0, 1)],
     [(0, 1)]),
    ("no-messages", [(0, "MPI_Allreduce", -1, 0, 1), (1, "MPI_Allreduce", -1, 0, 1)], []),
]


@pytest.mark.parametrize("calls,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_match_messages(calls, expected):
    assert _match(calls) == expected


def test_empty():
    s, r = match_messages(*(np.zeros(0, np.int64) for _ in range(5)))
    assert s.dtype == r.dtype == np.int64 and not len(s) and not len(r)
