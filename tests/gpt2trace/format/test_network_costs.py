"""The network model's vocabulary: each collective is costed by its record's family, and a name that is not a
blocking collective of gpt2trace/format/mpi_calls.py is an error, never the cost of a Barrier."""
import pytest

from gpt2trace.format import mpi_calls as C
from gpt2trace.format.network import IDEAL, Network, link_bytes

NET = Network(bandwidth_bps=1e9, latency_ns=1000)      # 1 byte per ns, 1 us


@pytest.mark.parametrize("name", ["MPI_Neighbor_allgather", "MPI_Iallreduce", "MPI_Send", "MPI_Waitall"])
def test_a_name_that_is_no_blocking_collective_is_an_error(name):
    # before the records, all four cost a Barrier: ceil(log2 4) x 1 us = 2000 ns
    for cost in (lambda: NET.collective_ns(name, 4000, 4), lambda: IDEAL.collective_ns(name, 4000, 4),
                 lambda: NET.on_nodes(name, 4000, [0, 0, 1, 1]), lambda: link_bytes(name, 4000, [0, 1])):
        with pytest.raises(C.UnknownCall, match=name):
            cost()


@pytest.mark.parametrize("name,expected_ns", [
    ("MPI_Scan", 2 * (1000 + 4000)),                 # recursive doubling: ceil(log2 4) (L + n/B)
    ("MPI_Exscan", 2 * (1000 + 4000)),
    ("MPI_Alltoallw", 3 * (1000 + 1000)),            # pairwise: (p-1) (L + n/p/B)
    ("MPI_Scatterv", 3 * (1000 + 4000)),             # linear: (p-1) (L + n/B)
    ("MPI_Reduce_scatter_block", 3 / 4 * 4000 + 3 * 1000),   # ring: (p-1)/p n/B + (p-1) L
])
def test_each_family_by_hand(name, expected_ns):
    assert NET.collective_ns(name, 4000, 4) == pytest.approx(expected_ns)


def test_flat_rooted_collectives_are_the_rooted_classes():
    # 3 members on nodes 0, 1, 1, root on node 0: flat sends both off-node parts through node 0's link
    for name in ("MPI_Bcast", "MPI_Reduce", "MPI_Scatter", "MPI_Scatterv", "MPI_Gather", "MPI_Gatherv"):
        assert link_bytes(name, 10, [0, 1, 1], 0, "flat") == {0: 20, 1: 20}, name
    # an all-to-all: (k-1)/k n through each of the k = 2 links, 2(k-1)/k n for an allreduce
    assert link_bytes("MPI_Allgather", 10, [0, 1, 1], 0, "flat") == {0: 5, 1: 5}
    assert link_bytes("MPI_Allreduce", 10, [0, 1, 1], 0, "flat") == {0: 10, 1: 10}
