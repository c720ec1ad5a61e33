"""The MPI call vocabulary: every name we record has a record with every attribute a layer needs, its classes do
not overlap, and it agrees with Paraver's table of MPI call values."""
import ast
import re
from pathlib import Path

import pytest

from gpt2trace.format import mpi_calls as C
from gpt2trace.format.network import Network
from gpt2trace.interop import paraver_format as F

ROOT = Path(__file__).resolve().parents[3]
MPI_NAME = re.compile(r"^MPI_[A-Z][a-z_]*$")

CLASSES = [
    ("MPI_Allreduce", (C.COLL, C.NXN, "MPI_Allreduce")),
    ("MPI_Iallreduce", (C.COLL_POST, C.NXN, "MPI_Allreduce")),
    ("MPI_Ireduce_scatter", (C.COLL_POST, C.NXN, "MPI_Reduce_scatter")),
    ("MPI_Ibarrier", (C.COLL_POST, C.NXN, "MPI_Barrier")),
    ("MPI_Bcast", (C.COLL, C.ONE_TO_ALL, "MPI_Bcast")),
    ("MPI_Iscatterv", (C.COLL_POST, C.ONE_TO_ALL, "MPI_Scatterv")),
    ("MPI_Reduce", (C.COLL, C.ALL_TO_ONE, "MPI_Reduce")),
    ("MPI_Waitall", (C.WAIT, C.NO_CLASS, "MPI_Waitall")),
    ("MPI_Send", (C.SEND, C.NO_CLASS, "MPI_Send")),
    ("MPI_Isend", (C.ISEND, C.NO_CLASS, "MPI_Isend")),
    ("MPI_Irecv", (C.IRECV, C.NO_CLASS, "MPI_Irecv")),
    ("MPI_Sendrecv_replace", (C.SENDRECV, C.NO_CLASS, "MPI_Sendrecv_replace")),
    ("MPI_Comm_rank", (C.LOCAL, C.NO_CLASS, "MPI_Comm_rank")),
    ("MPI_Init", (C.LOCAL, C.NO_CLASS, "MPI_Init")),          # starts with MPI_I but posts no collective
    ("MPI_I", (C.LOCAL, C.NO_CLASS, "MPI_I")),
]


@pytest.mark.parametrize("name,expected", CLASSES, ids=[c[0] for c in CLASSES])
def test_classify(name, expected):
    assert C.classify(name) == expected


def _named_call(value) -> bool:
    """Whether a constant of mpi_calls names one MPI call (MPI_Test), not a prefix (MPI_I) or a table."""
    return isinstance(value, str) and value not in (C.PREFIX, C.NONBLOCKING_PREFIX) and bool(MPI_NAME.match(value))


def _recorded_names() -> set[str]:
    """Every MPI call name the recorder or the trainer can write: string constants in their source, and names
    of mpi_calls they use (mpi_calls.TEST)."""
    names = set()
    for pkg in ("gpt2trace/record", "trainer"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and MPI_NAME.match(node.value):
                    names.add(node.value)
                elif isinstance(node, ast.Attribute) and _named_call(getattr(C, node.attr, None)):
                    names.add(getattr(C, node.attr))          # mpi_calls.TEST
    return names


def test_every_call_the_tracer_records_has_a_record():
    names = _recorded_names()
    # the traced communicator's calls today, so the scan cannot pass by finding nothing
    assert {"MPI_Allreduce", "MPI_Iallreduce", "MPI_Waitall", "MPI_Bcast", "MPI_Reduce", "MPI_Test"} <= names
    unknown = sorted(names - set(C.CALLS))
    assert not unknown, f"recorded MPI calls missing from gpt2trace/format/mpi_calls.py: {unknown}"
    assert all(C.classify(n)[0] != C.LOCAL for n in names - {C.TEST})


NET = Network(bandwidth_bps=1e9, latency_ns=1000)      # 1 byte per ns, 1 us


@pytest.mark.parametrize("name", sorted(set(C.CALLS) | _recorded_names()))
def test_every_call_has_every_field(name):
    """Every name the tracer can record and every record: a cost, a meaning of its bytes, a plural, a color and a
    Paraver value, so no layer falls back to a default for it."""
    c = C.call(name)
    assert c.name == name and C.classify(name) == (c.op, c.cls, c.base)
    if c.op in (C.COLL, C.COLL_POST):
        # the replay costs a posting as its collective: both cost more than nothing on 4 ranks of a real network
        assert c.cost not in (C.Cost.MESSAGE, C.Cost.NONE) and c.holds not in (C.Bytes.MESSAGE, C.Bytes.NONE)
        assert NET.collective_ns(c.base, 4000, 4) > 0
        assert c.cls in (C.NXN, C.ONE_TO_ALL, C.ALL_TO_ONE) and C.call(c.base).cost is c.cost
    elif c.op in (C.SEND, C.ISEND, C.RECV, C.IRECV, C.SENDRECV):
        assert (c.cost, c.holds, c.cls) == (C.Cost.MESSAGE, C.Bytes.MESSAGE, C.NO_CLASS)
    else:                                           # waits and the test cost what they wait for and carry nothing
        assert (c.cost, c.holds, c.cls) == (C.Cost.NONE, C.Bytes.NONE, C.NO_CLASS)
    assert isinstance(c.plural, str) and c.plural and c.plural == c.plural.strip()
    assert len(c.rgb) == 3 and all(isinstance(v, int) and 0 <= v <= 255 for v in c.rgb)
    assert name in F.MPI_CALLS or name in OURS_ONLY, f"{name}: no Paraver value in interop/paraver_format.py"


def test_a_name_without_a_record_is_an_error_naming_it():
    with pytest.raises(C.UnknownCall, match="MPI_Neighbor_allgather: no record"):
        C.call("MPI_Neighbor_allgather")
    with pytest.raises(C.UnknownCall, match="MPI_Iallreduce: not a blocking MPI collective"):
        C.collective("MPI_Iallreduce")
    assert C.classify("MPI_Neighbor_allgather") == (C.LOCAL, C.NO_CLASS, "MPI_Neighbor_allgather")   # still local


@pytest.mark.parametrize("name,plural", [
    ("MPI_Allreduce", "all-reduces"), ("MPI_Iallreduce", "nonblocking all-reduces"),
    ("MPI_Reduce_scatter_block", "reduce-scatters"), ("MPI_Allgatherv", "all-gathers"), ("MPI_Recv", "receives"),
    ("MPI_Issend", "sends"), ("MPI_Waitall", "MPI_Waitall calls"),
])
def test_plurals(name, plural):
    assert C.call(name).plural == plural


def test_a_posting_is_made_from_its_collective():
    # by hand: MPI_Iallreduce's color is MPI_Allreduce's 41% of the way to white, (255, 144, 26) -> (255, 190, 120)
    post, coll = C.call("MPI_Iallreduce"), C.call("MPI_Allreduce")
    assert (post.op, post.base, post.cost, post.holds) == (C.COLL_POST, "MPI_Allreduce", coll.cost, coll.holds)
    assert post.rgb == (255, 190, 120) and coll.rgb == (255, 144, 26)


def test_sends_receives_and_collectives_are_disjoint():
    sends = {n for n, op in C.POINT_TO_POINT.items() if op in (C.SEND, C.ISEND)}
    recvs = {n for n, op in C.POINT_TO_POINT.items() if op in (C.RECV, C.IRECV)}
    both = {n for n, op in C.POINT_TO_POINT.items() if op == C.SENDRECV}
    waits = {n for n, op in C.POINT_TO_POINT.items() if op == C.WAIT}
    collectives = set(C.COLLECTIVES) | set(C.NONBLOCKING_COLLECTIVES)
    groups = [sends, recvs, both, waits, set(C.COLLECTIVES), set(C.NONBLOCKING_COLLECTIVES)]
    assert sum(map(len, groups)) == len(set().union(*groups))
    assert sends and recvs and both == {"MPI_Sendrecv", "MPI_Sendrecv_replace"} and waits == set(C.COMPLETIONS)
    assert {n for n in C.POINT_TO_POINT if C.operation(n) in C.SENDING} == sends | both
    assert {n for n in C.POINT_TO_POINT if C.operation(n) in C.RECEIVING} == recvs | both
    assert not collectives & set(C.POINT_TO_POINT)


def test_rooted_are_the_rooted_collectives():
    assert C.ROOTED <= set(C.COLLECTIVES) | set(C.NONBLOCKING_COLLECTIVES)
    # by hand: broadcast/scatter (root sends) and reduce/gather (root receives), blocking and posted
    assert C.ROOTED == {"MPI_Bcast", "MPI_Reduce", "MPI_Scatter", "MPI_Scatterv", "MPI_Gather", "MPI_Gatherv",
                        "MPI_Ibcast", "MPI_Ireduce", "MPI_Iscatter", "MPI_Iscatterv", "MPI_Igather", "MPI_Igatherv"}


def test_nonblocking_collectives_post_their_blocking_twin():
    assert C.nonblocking("MPI_Allreduce") == "MPI_Iallreduce"
    for posted, blocking in C.NONBLOCKING_COLLECTIVES.items():
        assert C.classify(posted)[1:] == C.classify(blocking)[1:]


# Names Paraver (Extrae) has a value for that our vocabulary leaves local, and the reverse, each with the reason.
PARAVER_ONLY = {
    "MPI_Cancel": "cancels a request: synchronizes nothing",
    "MPI_Probe": "peeks at a message without receiving it", "MPI_Iprobe": "same, without waiting",
    "MPI_Send_init": "persistent requests: not modelled", "MPI_Bsend_init": "", "MPI_Rsend_init": "",
    "MPI_Ssend_init": "", "MPI_Recv_init": "",
}
OURS_ONLY = {"MPI_Exscan", "MPI_Iexscan"}          # Extrae has no id: exported as MPI Other with a .pcf name


def test_paraver_table_agrees_with_the_vocabulary():
    vocabulary = set(C.COLLECTIVES) | set(C.NONBLOCKING_COLLECTIVES) | set(C.POINT_TO_POINT)
    assert vocabulary - set(F.MPI_CALLS) == OURS_ONLY
    for name, (typ, _) in F.MPI_CALLS.items():
        op = C.classify(name)[0]
        if typ == F.MPI_COLLECTIVE:
            # Paraver's nonblocking collectives are its I-names; ours are postings
            assert op == (C.COLL_POST if name.startswith("MPI_I") else C.COLL), name
        elif typ == F.MPI_P2P:
            assert (op == C.LOCAL) == (name in PARAVER_ONLY), name
            assert op not in (C.COLL, C.COLL_POST), name
        else:                                       # MPI Other, one-sided, I/O: local for the analyses
            assert op == C.LOCAL, name
