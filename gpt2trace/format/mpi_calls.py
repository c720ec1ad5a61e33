"""MPI call names and what each call does: the one vocabulary analyses, exports and tests share.

A call is one operation type (what it does in an ideal replay: a blocking collective, the posting of a
nonblocking one, a send, a receive, a wait, ...), and a collective also has a class named after the Scalasca wait
state it can show (all-to-all, one-to-all, all-to-one). A nonblocking collective is its blocking name with `I`
after `MPI_` (`MPI_Iallreduce` posts an `MPI_Allreduce`). Names outside the vocabulary are local calls.
Paraver's event values for these names are Paraver's encoding and stay in `interop/paraver_format.py`.
"""
from __future__ import annotations

# Operation types.
LOCAL, COLL, COLL_POST, WAIT, SEND, RECV, SENDRECV, ISEND, IRECV = range(9)
# Collective classes.
NXN, ONE_TO_ALL, ALL_TO_ONE = 0, 1, 2
NO_CLASS = -1

PREFIX, NONBLOCKING_PREFIX = "MPI_", "MPI_I"

# Blocking collectives -> class.
COLLECTIVES: dict[str, int] = {
    **dict.fromkeys(("MPI_Allreduce", "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv",
                     "MPI_Alltoallw", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block", "MPI_Barrier", "MPI_Scan",
                     "MPI_Exscan"), NXN),
    **dict.fromkeys(("MPI_Bcast", "MPI_Scatter", "MPI_Scatterv"), ONE_TO_ALL),
    **dict.fromkeys(("MPI_Reduce", "MPI_Gather", "MPI_Gatherv"), ALL_TO_ONE),
}
COMPLETIONS = ("MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome")
# MPI_Test is a local call (it never waits for another rank; Paraver files it under MPI Other), but a successful one
# completes a request: traces record only those (the task runtime's failed polls are counted, not recorded), with
# the seq of the nonblocking collective completed, so a posting's flight ends at the Test of the same seq.
TEST = "MPI_Test"
# Point-to-point calls and completions -> operation type.
POINT_TO_POINT: dict[str, int] = {
    **dict.fromkeys(("MPI_Send", "MPI_Ssend", "MPI_Rsend", "MPI_Bsend"), SEND),
    **dict.fromkeys(("MPI_Isend", "MPI_Issend", "MPI_Irsend", "MPI_Ibsend"), ISEND),
    "MPI_Recv": RECV, "MPI_Irecv": IRECV,
    **dict.fromkeys(("MPI_Sendrecv", "MPI_Sendrecv_replace"), SENDRECV),
    **dict.fromkeys(COMPLETIONS, WAIT),
}
SENDING, RECEIVING = (SEND, ISEND, SENDRECV), (RECV, IRECV, SENDRECV)
# Calls that can wait for another rank; a posting or a local call cannot.
SYNCHRONIZING = (COLL, WAIT, SEND, RECV, SENDRECV)


def nonblocking(name: str) -> str:
    """The nonblocking form of a blocking collective's name: MPI_Allreduce -> MPI_Iallreduce."""
    return NONBLOCKING_PREFIX + name[len(PREFIX)].lower() + name[len(PREFIX) + 1:]


NONBLOCKING_COLLECTIVES: dict[str, str] = {nonblocking(n): n for n in COLLECTIVES}   # posting -> blocking name
# Collectives with a root (the trace's `peer`), blocking or not.
ROOTED = frozenset(n for n, c in COLLECTIVES.items() if c != NXN) | frozenset(
    p for p, n in NONBLOCKING_COLLECTIVES.items() if COLLECTIVES[n] != NXN)


def is_mpi(name: str) -> bool:
    """Whether a name (a call, or a task named by the call it makes) is an MPI call."""
    return name.startswith(PREFIX)


def classify(name: str) -> tuple[int, int, str]:
    """(operation type, collective class or NO_CLASS, the blocking collective's name) of an MPI call name."""
    if name in POINT_TO_POINT:
        return POINT_TO_POINT[name], NO_CLASS, name
    if name in COLLECTIVES:
        return COLL, COLLECTIVES[name], name
    if name in NONBLOCKING_COLLECTIVES:
        base = NONBLOCKING_COLLECTIVES[name]
        return COLL_POST, COLLECTIVES[base], base
    return LOCAL, NO_CLASS, name


def operation(name: str) -> int:
    return classify(name)[0]
