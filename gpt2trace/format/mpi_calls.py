"""MPI call names and what each call does: the one vocabulary analyses, exports, the cost model and tests share.

One record per call (`MPICall`, in `CALLS`) holds every attribute any layer needs: its operation type (what it does
in an ideal replay: a blocking collective, the posting of a nonblocking one, a send, a receive, a wait, ...), a
collective's class named after the Scalasca wait state it can show (all-to-all, one-to-all, all-to-one), the
algorithm family `gpt2trace.format.network` costs it with, what the `bytes` of its record hold (which
`analysis.comm_matrix` turns into bytes per rank pair), its plural in sentences, and its color in reports. The other
tables here are derived from it. A nonblocking collective is its blocking name with `I` after `MPI_`
(`MPI_Iallreduce` posts an `MPI_Allreduce`) and its record is made from the blocking one's.

Names without a record are local calls (a foreign trace's `MPI_Comm_rank`); `call` raises for them, so a layer
that needs an attribute of a call never guesses one. Paraver's event values are Paraver's encoding (Extrae's table
of ~170 calls, most of them local for us) and stay in `interop/paraver_format.py`; a test holds every record to a
value there.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# Operation types.
LOCAL, COLL, COLL_POST, WAIT, SEND, RECV, SENDRECV, ISEND, IRECV = range(9)
# Collective classes.
NXN, ONE_TO_ALL, ALL_TO_ONE = 0, 1, 2
NO_CLASS = -1

PREFIX, NONBLOCKING_PREFIX = "MPI_", "MPI_I"


class Cost(Enum):
    """The algorithm family a call is costed with (gpt2trace/format/network.py has each one's formula)."""
    RING_ALLREDUCE = "ring reduce-scatter + allgather"
    RING = "ring"
    TREE = "binomial tree"
    RECURSIVE_DOUBLING = "recursive doubling"
    LINEAR = "linear from/to the root"
    PAIRWISE = "pairwise exchange"
    DISSEMINATION = "dissemination"
    MESSAGE = "one message"             # point to point: L + n/B on the receive
    NONE = "none"                       # a wait or local call: costs what it waits for, nothing itself


class Bytes(Enum):
    """What the `bytes` of a record hold, and so which bytes the communication matrix gives each rank pair that
    the call's class connects (a one-to-all: from the root; an all-to-one: to the root; else every pair)."""
    WHOLE = "the source's whole buffer"                                     # allreduce, bcast, reduce, barrier
    PREFIX = "the source's whole buffer, to the members after it only"     # scan, exscan
    PER_MEMBER = "every member's pieces: a pair gets the record / members"  # allgather, alltoall, reduce_scatter
    RECEIVED = "what the destination got from the root"                      # scatter
    MESSAGE = "the message's (the send's bytes)"                            # point to point
    NONE = "none"                                                           # waits, tests


@dataclass(frozen=True)
class MPICall:
    name: str
    op: int                         # operation type
    cls: int                        # collective class, NO_CLASS for other calls
    base: str                       # the blocking collective a posting posts; the name itself otherwise
    cost: Cost
    holds: Bytes                    # what the record's `bytes` hold
    plural: str                     # "all-reduces" ("tensor-parallel all-reduces take 18% of the step")
    rgb: tuple[int, int, int]


def nonblocking(name: str) -> str:
    """The nonblocking form of a blocking collective's name: MPI_Allreduce -> MPI_Iallreduce."""
    return NONBLOCKING_PREFIX + name[len(PREFIX)].lower() + name[len(PREFIX) + 1:]


def _lighter(rgb: tuple[int, int, int]) -> tuple[int, int, int]:
    """A posting's color: its collective's, 41% of the way to white (MPI_Iallreduce's shade of MPI_Allreduce)."""
    return tuple(round(c + (255 - c) * 0.41) for c in rgb)


def _collective(name: str, cls: int, cost: Cost, nbytes: Bytes, plural: str, rgb) -> list[MPICall]:
    """A blocking collective and its nonblocking posting."""
    return [MPICall(name, COLL, cls, name, cost, nbytes, plural, rgb),
            MPICall(nonblocking(name), COLL_POST, cls, name, cost, nbytes, "nonblocking " + plural, _lighter(rgb))]


def _p2p(name: str, op: int, cost: Cost, nbytes: Bytes, plural: str, rgb) -> list[MPICall]:
    return [MPICall(name, op, NO_CLASS, name, cost, nbytes, plural, rgb)]


# Colors: collectives in Group Communication's orange family, waits in Wait/WaitAll's red, the test in Test/Probe's
# green, point-to-point in the send/receive colors of Paraver's states.
_TABLE = [
    *_collective("MPI_Allreduce", NXN, Cost.RING_ALLREDUCE, Bytes.WHOLE, "all-reduces", (255, 144, 26)),
    *_collective("MPI_Allgather", NXN, Cost.RING, Bytes.PER_MEMBER, "all-gathers", (255, 110, 70)),
    *_collective("MPI_Allgatherv", NXN, Cost.RING, Bytes.PER_MEMBER, "all-gathers", (235, 95, 55)),
    *_collective("MPI_Reduce_scatter", NXN, Cost.RING, Bytes.PER_MEMBER, "reduce-scatters", (190, 80, 30)),
    *_collective("MPI_Reduce_scatter_block", NXN, Cost.RING, Bytes.PER_MEMBER, "reduce-scatters", (170, 70, 25)),
    *_collective("MPI_Alltoall", NXN, Cost.PAIRWISE, Bytes.PER_MEMBER, "all-to-alls", (220, 120, 50)),
    *_collective("MPI_Alltoallv", NXN, Cost.PAIRWISE, Bytes.PER_MEMBER, "all-to-alls", (205, 110, 45)),
    *_collective("MPI_Alltoallw", NXN, Cost.PAIRWISE, Bytes.PER_MEMBER, "all-to-alls", (190, 100, 40)),
    *_collective("MPI_Barrier", NXN, Cost.DISSEMINATION, Bytes.WHOLE, "barriers", (179, 0, 0)),
    *_collective("MPI_Scan", NXN, Cost.RECURSIVE_DOUBLING, Bytes.PREFIX, "scans", (255, 200, 60)),
    *_collective("MPI_Exscan", NXN, Cost.RECURSIVE_DOUBLING, Bytes.PREFIX, "exclusive scans", (235, 185, 50)),
    *_collective("MPI_Bcast", ONE_TO_ALL, Cost.TREE, Bytes.WHOLE, "broadcasts", (230, 170, 0)),
    *_collective("MPI_Scatter", ONE_TO_ALL, Cost.LINEAR, Bytes.RECEIVED, "scatters", (200, 150, 0)),
    *_collective("MPI_Scatterv", ONE_TO_ALL, Cost.LINEAR, Bytes.RECEIVED, "scatters", (185, 135, 0)),
    *_collective("MPI_Reduce", ALL_TO_ONE, Cost.TREE, Bytes.WHOLE, "reduces", (204, 102, 0)),
    *_collective("MPI_Gather", ALL_TO_ONE, Cost.LINEAR, Bytes.WHOLE, "gathers", (160, 90, 20)),
    *_collective("MPI_Gatherv", ALL_TO_ONE, Cost.LINEAR, Bytes.WHOLE, "gathers", (145, 80, 15)),
    *_p2p("MPI_Send", SEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (255, 0, 174)),
    *_p2p("MPI_Ssend", SEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (235, 0, 160)),
    *_p2p("MPI_Rsend", SEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (215, 0, 146)),
    *_p2p("MPI_Bsend", SEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (195, 0, 132)),
    *_p2p("MPI_Isend", ISEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (255, 0, 255)),
    *_p2p("MPI_Issend", ISEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (230, 0, 230)),
    *_p2p("MPI_Irsend", ISEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (205, 0, 205)),
    *_p2p("MPI_Ibsend", ISEND, Cost.MESSAGE, Bytes.MESSAGE, "sends", (180, 0, 180)),
    *_p2p("MPI_Recv", RECV, Cost.MESSAGE, Bytes.MESSAGE, "receives", (110, 60, 200)),
    *_p2p("MPI_Irecv", IRECV, Cost.MESSAGE, Bytes.MESSAGE, "receives", (100, 100, 177)),
    *_p2p("MPI_Sendrecv", SENDRECV, Cost.MESSAGE, Bytes.MESSAGE, "send-receives", (66, 66, 66)),
    *_p2p("MPI_Sendrecv_replace", SENDRECV, Cost.MESSAGE, Bytes.MESSAGE, "send-receives", (96, 96, 96)),
    # waits and the test read "<name> calls" in sentences ("data-parallel MPI_Waitall calls")
    *_p2p("MPI_Wait", WAIT, Cost.NONE, Bytes.NONE, "MPI_Wait calls", (235, 0, 0)),
    *_p2p("MPI_Waitall", WAIT, Cost.NONE, Bytes.NONE, "MPI_Waitall calls", (200, 0, 60)),
    *_p2p("MPI_Waitany", WAIT, Cost.NONE, Bytes.NONE, "MPI_Waitany calls", (215, 0, 30)),
    *_p2p("MPI_Waitsome", WAIT, Cost.NONE, Bytes.NONE, "MPI_Waitsome calls", (185, 0, 90)),
    # MPI_Test is a local call (it never waits for another rank; Paraver files it under MPI Other), but a
    # successful one completes a request: traces record only those (the task runtime's failed polls are counted,
    # not recorded), with the seq of the nonblocking collective completed, so a posting's flight ends at the Test
    # of the same seq.
    *_p2p("MPI_Test", LOCAL, Cost.NONE, Bytes.NONE, "MPI_Test calls", (0, 200, 0)),
]
CALLS: dict[str, MPICall] = {c.name: c for c in _TABLE}
if len(CALLS) != len(_TABLE):
    raise ValueError("gpt2trace/format/mpi_calls.py: an MPI call name with two records")


class UnknownCall(KeyError):
    """An MPI call name without a record where a layer needs one of its attributes."""

    def __str__(self) -> str:
        return self.args[0]


def call(name: str) -> MPICall:
    """The record of an MPI call; UnknownCall naming it when it has none."""
    try:
        return CALLS[name]
    except KeyError:
        raise UnknownCall(f"{name}: no record of this MPI call in gpt2trace/format/mpi_calls.py (CALLS); add "
                          "one to trace, cost or count it") from None


def collective(name: str) -> MPICall:
    """The record of a blocking collective; UnknownCall naming the call when `name` is none."""
    c = call(name)
    if c.op != COLL:
        raise UnknownCall(f"{name}: not a blocking MPI collective (gpt2trace/format/mpi_calls.py)")
    return c


# --- Tables derived from the records, for the layers that select by them.
TEST = "MPI_Test"
COLLECTIVES: dict[str, int] = {c.name: c.cls for c in _TABLE if c.op == COLL}               # blocking -> class
NONBLOCKING_COLLECTIVES: dict[str, str] = {c.name: c.base for c in _TABLE if c.op == COLL_POST}   # posting -> base
COMPLETIONS = tuple(c.name for c in _TABLE if c.op == WAIT)
# Point-to-point calls and completions -> operation type.
POINT_TO_POINT: dict[str, int] = {c.name: c.op for c in _TABLE if c.op in (SEND, ISEND, RECV, IRECV, SENDRECV, WAIT)}
SENDING, RECEIVING = (SEND, ISEND, SENDRECV), (RECV, IRECV, SENDRECV)
# Calls that can wait for another rank; a posting or a local call cannot.
SYNCHRONIZING = (COLL, WAIT, SEND, RECV, SENDRECV)
# Collectives with a root (the trace's `peer`), blocking or not.
ROOTED = frozenset(c.name for c in _TABLE if c.cls in (ONE_TO_ALL, ALL_TO_ONE))


def is_mpi(name: str) -> bool:
    """Whether a name (a call, or a task named by the call it makes) is an MPI call."""
    return name.startswith(PREFIX)


def classify(name: str) -> tuple[int, int, str]:
    """(operation type, collective class or NO_CLASS, the blocking collective's name) of an MPI call name; a name
    without a record is a local call."""
    c = CALLS.get(name)
    return (c.op, c.cls, c.base) if c is not None else (LOCAL, NO_CLASS, name)


def operation(name: str) -> int:
    return classify(name)[0]
