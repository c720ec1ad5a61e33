"""The load on an emulated cluster's links (analysis.network_load), on hand-built traces with the numbers worked
out in the comments, and the finding that names the busiest link."""
from __future__ import annotations

import json

from analysis import mpi
from analysis.analyze import analyze
from analysis.network_load import link_load
from analysis.window import select
from gpt2trace.format import schema as S
from gpt2trace.format.reader import Trace
from gpt2trace.testing import synthetic as syn

MB = 1_000_000


def _trace(recs: list[dict], ranks: int, node_of: list[int] | None) -> Trace:
    run = {"parallel": {"ranks": ranks}}
    if node_of is not None:
        run["network"] = {"nodes": max(node_of) + 1, "link_bytes_per_s": 1.25e9, "latency_s": 5e-6,
                          "rooted": "flat", "node_of_rank": node_of}
    base = [syn.state(r, 0, 0, 4, S.State.RUNNING) for r in range(ranks)]
    return Trace.from_table(syn.from_records(base + recs, {S.META_RUN: json.dumps(run).encode()}))


def test_a_reduce_onto_one_node_loads_its_link():
    # 6 ranks on 3 nodes ({0,1} {2,3} {4,5}), one MPI_Reduce of 10 MB onto rank 0 and one MPI_Bcast of 10 MB from
    # it. Flat: the 4 members off node 0 each move 10 MB through node 0's link and their own: node 0 carries
    # 4 x 10 = 40 MB per call, nodes 1 and 2 carry 2 x 10 = 20 MB each. Two calls, counted as one step: 80 / 40 /
    # 40 MB; 80 MB through node 0's link at 1.25 GB/s = 64 ms, of a 0.5 s step.
    recs = []
    for r in range(6):
        recs.append(syn.comm(r, 1, 1.5, "MPI_Reduce", seq=0, nbytes=10 * MB, peer=0))
        recs.append(syn.comm(r, 2, 2.5, "MPI_Bcast", seq=1, nbytes=10 * MB, peer=0))
    trace = _trace(recs, 6, [0, 0, 1, 1, 2, 2])
    w = select(trace)
    load = link_load(trace, mpi.calls(trace, w), 1, 0.5)
    assert load["node"].tolist() == [0, 1, 2]
    assert load["bytes_per_step"].tolist() == [80 * MB, 40 * MB, 40 * MB]
    assert load["link_s_per_step"].iloc[0] == 80 * MB / 1.25e9                 # 64 ms
    assert load["share_of_step"].iloc[0] == (80 * MB / 1.25e9) / 0.5
    assert load["ranks"].iloc[0] == [0, 1]


def test_ring_allreduce_and_messages_between_nodes():
    # 4 ranks on 2 nodes ({0,1} {2,3}): an MPI_Allreduce of 8 MB is a ring over k = 2 nodes: 2 (k-1)/k x 8 = 8 MB
    # through each link; a 3 MB message from rank 1 to rank 2 crosses both links (+3 MB each); one from 0 to 1
    # stays inside node 0 (nothing)
    recs = [syn.comm(r, 1, 1.5, "MPI_Allreduce", seq=0, nbytes=8 * MB) for r in range(4)]
    recs += [syn.comm(1, 2, 2.1, "MPI_Send", nbytes=3 * MB, peer=2), syn.comm(2, 2, 2.2, "MPI_Recv", nbytes=3 * MB,
                                                                             peer=1),
             syn.comm(0, 3, 3.1, "MPI_Send", nbytes=MB, peer=1), syn.comm(1, 3, 3.2, "MPI_Recv", nbytes=MB, peer=0)]
    trace = _trace(recs, 4, [0, 0, 1, 1])
    load = link_load(trace, mpi.calls(trace, select(trace)), 1, None)
    assert sorted(load["bytes_per_step"].tolist()) == [11 * MB, 11 * MB]
    assert load["share_of_step"].isna().all()


def test_no_emulated_network_no_table():
    recs = [syn.comm(r, 1, 1.5, "MPI_Allreduce", seq=0, nbytes=8 * MB) for r in range(2)]
    trace = _trace(recs, 2, None)
    assert link_load(trace, mpi.calls(trace, select(trace)), 1, 1.0) is None
    assert analyze(trace)["network_links"] is None
