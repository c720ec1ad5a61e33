"""`check_messages` on hand-built traces: every send received once on its peer and every receive fed once, on one
communicator, with equal bytes and tags; each violation is named."""
from __future__ import annotations

import pytest

from gpt2trace.format.reader import Trace
from gpt2trace.testing.invariants import check_messages
from gpt2trace.testing.synthetic import comm, from_records


def _trace(*calls) -> Trace:
    return Trace.from_table(from_records(list(calls)))


def _send(rank, t, peer, nbytes=64, tag=3, name="MPI_Send", communicator=None):
    return comm(rank, t, t + 1e-6, name, nbytes=nbytes, peer=peer, tag=tag, communicator=communicator)


def _recv(rank, t, peer, nbytes=64, tag=3, name="MPI_Recv", communicator=None):
    return comm(rank, t, t + 1e-6, name, nbytes=nbytes, peer=peer, tag=tag, communicator=communicator)


GOOD = [
    # 0 -> 1 blocking, then 1 -> 0 nonblocking with its waits (which are no messages)
    ("send-recv-and-isend-irecv", [_send(0, 0, 1), _recv(1, 0, 0), _send(1, 1, 0, name="MPI_Isend"),
                                   comm(1, 2, 3, "MPI_Wait"), _recv(0, 1, 1, name="MPI_Irecv"),
                                   comm(0, 2, 3, "MPI_Wait")]),
    # a ring of 3 Sendrecvs (each one's bytes and tag are its send half's), and a collective beside it
    ("sendrecv-ring", [_send(r, 0, (r + 1) % 3, name="MPI_Sendrecv", tag=r) for r in range(3)]
     + [comm(r, 1, 2, "MPI_Allreduce", seq=0, nbytes=8) for r in range(3)]),
    # a send to MPI_PROC_NULL has no peer: no message, nothing to check
    ("no-peer", [comm(0, 0, 1, "MPI_Send", nbytes=0)]),
    # tags recorded on one end only (an import): compared only where both have one
    ("one-tag", [_send(0, 0, 1, tag=None), _recv(1, 0, 0, tag=5)]),
    # on a sub-communicator (null reads as the world: id 0)
    ("sub-communicator", [_send(0, 0, 1, communicator=4), _recv(1, 0, 0, communicator=4),
                          _send(0, 1, 1, communicator=None), _recv(1, 1, 0, communicator=0)]),
]


@pytest.mark.parametrize("calls", [g[1] for g in GOOD], ids=[g[0] for g in GOOD])
def test_consistent_messages_pass(calls):
    check_messages(_trace(*calls))


BAD = [
    # two sends 0 -> 1, one receive: the second send (at 1 s = 1000000000 ns) has no receive
    ("unmatched-send", [_send(0, 0, 1), _send(0, 1, 1), _recv(1, 0, 0)],
     "rank 0's MPI_Send at 1000000000 ns (peer 1, tag 3, 64 bytes) is received 0 times on its peer, not once"),
    # a receive from rank 2, which sends nothing
    ("unmatched-recv", [_send(0, 0, 1), _recv(1, 0, 0), _recv(1, 1, 2, name="MPI_Irecv")],
     "rank 1's MPI_Irecv at 1000000000 ns (peer 2, tag 3, 64 bytes) receives 0 sends, not one"),
    ("bytes", [_send(0, 0, 1, nbytes=64), _recv(1, 0, 0, nbytes=32)], "different bytes"),
    ("tags", [_send(0, 0, 1, tag=3), _recv(1, 0, 0, tag=4)], "different tags"),
    ("communicators", [_send(0, 0, 1, communicator=4), _recv(1, 0, 0, communicator=5)],
     "on communicator 4 pairs with rank 1's MPI_Recv at 0 ns (peer 0, tag 3, 64 bytes) on communicator 5"),
    # a Sendrecv whose partner made no call of it
    ("lonely-sendrecv", [_send(0, 0, 1, name="MPI_Sendrecv")], "is part of no message"),
]


@pytest.mark.parametrize("calls,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_each_violation_is_named(calls, message):
    with pytest.raises(AssertionError, match="point-to-point problem") as err:
        check_messages(_trace(*calls))
    assert message in str(err.value)
