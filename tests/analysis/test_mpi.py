import pytest

from analysis import mpi
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.testing import synthetic as syn


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
    # The synchronization interval of a call starts at the end of the rank's previous synchronizing call; the
    # posting (row 2) synchronizes nothing, so the wait's interval still starts at the send's end (3 s).
    assert calls["sync_end"].tolist() == [-1, 1e9, 3e9, 3e9, -1, 1e9]
    assert calls["prev_end"].tolist() == [-1, 1e9, 3e9, 5e9, -1, 1e9]


def _sendrecv(pairs):
    """Calls of Sendrecv rounds: pairs[j] = {rank: peer} of round j, round j at [j, j + 1) on every rank."""
    recs = [syn.comm(rank, j, j + 1, "MPI_Sendrecv", peer=peer) for j, peers in enumerate(pairs)
            for rank, peer in peers.items()]
    return mpi.calls(Trace.from_table(syn.from_records(recs)), None)


def _senders(calls):
    """(rank, round) of each Sendrecv -> (rank, round) of the call it receives from, or None."""
    rnd = calls["start_ns"] // 1_000_000_000
    key = list(zip(calls["rank"], rnd))
    return {key[i]: (key[s] if s >= 0 else None) for i, s in enumerate(calls["send_of"])}


SENDRECV = [
    # Ring of 4, twice: rank r sends to r + 1 and receives from r - 1 (mod 4) in each round.
    ("ring", [{r: (r + 1) % 4 for r in range(4)}] * 2,
     {(r, j): ((r - 1) % 4, j) for r in range(4) for j in range(2)}),
    # Non-periodic shift: rank 3 sends to no one, so its peer is its source (2); rank 0 receives nothing.
    ("shift", [{0: 1, 1: 2, 2: 3, 3: 2}],
     {(0, 0): None, (1, 0): (0, 0), (2, 0): (1, 0), (3, 0): (2, 0)}),
    # Halo along a line of 3: round 0 sends right and receives from the left, round 1 the reverse. Boundary
    # ranks name their only partner; rank 1's rounds have two candidates and take the non-mutual one.
    ("halo", [{0: 1, 1: 2, 2: 1}, {0: 1, 1: 0, 2: 1}],
     {(0, 0): None, (1, 0): (0, 0), (2, 0): (1, 0), (0, 1): (1, 1), (1, 1): (2, 1), (2, 1): None}),
    # Pairwise exchange (recursive doubling on 4 ranks): partners r ^ 1, then r ^ 2.
    ("pairwise", [{r: r ^ 1 for r in range(4)}, {r: r ^ 2 for r in range(4)}],
     {(r, j): (r ^ (1 << j), j) for r in range(4) for j in range(2)}),
]


@pytest.mark.parametrize("pairs,expected", [c[1:] for c in SENDRECV], ids=[c[0] for c in SENDRECV])
def test_sendrecv_matched_by_round(pairs, expected):
    assert _senders(_sendrecv(pairs)) == expected
