import pytest

from analysis import mpi, waits
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.testing import synthetic as syn


def _waits(trace):
    calls = mpi.calls(trace, select(trace))
    return calls, waits.wait_states(calls)


def test_late_rank_allreduce_wait(late_rank):
    calls, w = _waits(late_rank)
    # Rank 0 enters at 6, rank 1 (the last) at 9: rank 0 waits 9 - 6 = 3 s; rank 1 does not wait.
    assert w[["wait_state", "rank", "culprit"]].values.tolist() == [["Wait at NxN", 0, 1]]
    assert w["wait_ns"].tolist() == [3_000_000_000]
    row = waits.per_call(calls, w).iloc[0]
    # 2 calls of 1e9 bytes; time 4 + 1 = 5 s, of which 3 s waiting and 2 s transferring: 2e9 B / 2 s = 1 GB/s.
    assert (row["name"], row["count"], row["bytes"]) == ("MPI_Allreduce", 2, 2_000_000_000)
    assert (row["total_s"], row["wait_s"], row["transfer_s"]) == pytest.approx((5, 3, 2))
    assert row["bandwidth_gb_s"] == pytest.approx(1.0)


def test_nonblocking_wait_and_overlap(nonblocking):
    calls, w = _waits(nonblocking)
    # The last post is rank 1's at 4.5; rank 0's MPI_Wait starts at 4: it waits 0.5 s for rank 1.
    # Rank 1's wait starts at 5, after every post: no wait.
    assert w[["wait_state", "rank", "culprit", "wait_ns"]].values.tolist() == [["Wait at NxN", 0, 1, 500_000_000]]
    table = waits.per_call(calls, w).set_index("name")
    # MPI_Wait: 2 + 1 = 3 s, 0.5 s of it waiting; MPI_Iallreduce: 2 postings of 0.5 s.
    assert table.loc["MPI_Wait", ["total_s", "wait_s", "transfer_s"]].tolist() == pytest.approx([3, 0.5, 2.5])
    # In flight: rank 0 [1, 6] = 5 s, exposed 0.5 (post) + 2 (wait) -> 2.5 hidden; rank 1 [4.5, 6] = 1.5 s,
    # exposed 0.5 + 1 -> 0 hidden. Hidden 2.5 of 6.5 s.
    post = table.loc["MPI_Iallreduce"]
    assert (post["inflight_s"], post["hidden_s"], post["hidden_fraction"]) == pytest.approx((6.5, 2.5, 2.5 / 6.5))


# Scalasca states of rooted collectives and point-to-point calls: (records, [(state, rank, culprit, wait_s)]).
ROOTED = [
    # MPI_Bcast rooted at 0: the root enters at 5; rank 1 entered at 2 and waits 5 - 2 = 3 s.
    ([syn.comm(0, 5, 6, "MPI_Bcast", seq=0, peer=0), syn.comm(1, 2, 6, "MPI_Bcast", seq=0, peer=0)],
     [("Late Broadcast", 1, 0, 3.0)]),
    # MPI_Reduce to root 0, entering at 1; the first sender (rank 2) enters at 3: the root waits 3 - 1 = 2 s.
    ([syn.comm(0, 1, 6, "MPI_Reduce", seq=0, peer=0), syn.comm(1, 4, 6, "MPI_Reduce", seq=0, peer=0),
      syn.comm(2, 3, 6, "MPI_Reduce", seq=0, peer=0)],
     [("Early Reduce", 0, 2, 2.0)]),
    # MPI_Recv on rank 1 from 0 enters at 2, the matching MPI_Send starts at 5: Late Sender, 3 s.
    ([syn.comm(0, 5, 5.1, "MPI_Send", peer=1), syn.comm(1, 2, 5.2, "MPI_Recv", peer=0)],
     [("Late Sender", 1, 0, 3.0)]),
    # A synchronous send from rank 1 at 1 whose receive on rank 0 starts at 4: Late Receiver, 3 s.
    ([syn.comm(1, 1, 4.1, "MPI_Ssend", peer=0), syn.comm(0, 4, 4.1, "MPI_Recv", peer=1)],
     [("Late Receiver", 1, 0, 3.0)]),
    # MPI_Irecv on rank 1 from 0 posted at 1, its MPI_Wait enters at 2, the matching MPI_Send starts at 5: Late
    # Sender in the wait, 5 - 2 = 3 s (the posting itself waits for nothing).
    ([syn.comm(0, 5, 5.1, "MPI_Send", peer=1), syn.comm(1, 1, 1.1, "MPI_Irecv", peer=0),
      syn.comm(1, 2, 5.2, "MPI_Wait")],
     [("Late Sender", 1, 0, 3.0)]),
    # Rank 1: MPI_Irecv from 0 at 1, MPI_Isend to 0 at 1.1, MPI_Wait [1.2,1.3] (the send's), MPI_Wait [1.3,6.2].
    # Rank 0 sends at 6: the first wait ended before that, so it cannot complete the receive; the second waits
    # 6 - 1.3 = 4.7 s. (Pairing the Irecv with the first wait would find 0.1 s.) Rank 0 receives the Isend at 6.1,
    # long after it was sent: no wait there.
    ([syn.comm(0, 6, 6.1, "MPI_Send", peer=1), syn.comm(0, 6.1, 6.2, "MPI_Recv", peer=1),
      syn.comm(1, 1, 1.1, "MPI_Irecv", peer=0), syn.comm(1, 1.1, 1.2, "MPI_Isend", peer=0),
      syn.comm(1, 1.2, 1.3, "MPI_Wait"), syn.comm(1, 1.3, 6.2, "MPI_Wait")],
     [("Late Sender", 1, 0, 4.7)]),
    # Rank 1 posts Irecvs from 0 and 2, then MPI_Waitall [1,7.1]; rank 0 sends at 3, rank 2 at 7: one wait, for the
    # latest sender, 7 - 1 = 6 s, blaming rank 2.
    ([syn.comm(0, 3, 3.1, "MPI_Send", peer=1), syn.comm(2, 7, 7.1, "MPI_Send", peer=1),
      syn.comm(1, 0, 0.1, "MPI_Irecv", peer=0), syn.comm(1, 0.1, 0.2, "MPI_Irecv", peer=2),
      syn.comm(1, 1, 7.1, "MPI_Waitall")],
     [("Late Sender", 1, 2, 6.0)]),
    # Rank 0's MPI_Waitall [1,5] completes an MPI_Iallreduce (rank 1 posts it at 2: 1 s of Wait at NxN) and an
    # Irecv from rank 1 (sent at 4: 3 s of Late Sender): one call waits once, the longer 3 s. Rank 1's Waitall
    # enters at 4.1, after every posting: no wait.
    ([syn.comm(0, 0, 0.1, "MPI_Iallreduce", seq=0), syn.comm(0, 0.1, 0.2, "MPI_Irecv", peer=1),
      syn.comm(0, 1, 5, "MPI_Waitall"),
      syn.comm(1, 2, 2.1, "MPI_Iallreduce", seq=0), syn.comm(1, 4, 4.1, "MPI_Send", peer=0),
      syn.comm(1, 4.1, 5, "MPI_Waitall")],
     [("Late Sender", 0, 1, 3.0)]),
    # Without seq, collectives match by their order on each rank: the 2nd barrier waits 7 - 6 = 1 s on rank 0.
    ([syn.comm(0, 1, 2, "MPI_Barrier"), syn.comm(1, 1, 2, "MPI_Barrier"),
      syn.comm(0, 6, 8, "MPI_Barrier"), syn.comm(1, 7, 8, "MPI_Barrier")],
     [("Wait at NxN", 0, 1, 1.0)]),
]


@pytest.mark.parametrize("recs,expected", ROOTED, ids=["bcast", "reduce", "late-sender", "late-receiver",
                                                      "irecv-wait", "wait-order", "waitall", "mixed-waitall",
                                                      "no-seq"])
def test_scalasca_wait_states(recs, expected):
    _, w = _waits(Trace.from_table(syn.from_records(recs)))
    got = [(s, r, c, ns / 1e9) for s, r, c, ns in w[["wait_state", "rank", "culprit", "wait_ns"]].values.tolist()]
    assert got == [(s, r, c, pytest.approx(x)) for s, r, c, x in expected]
