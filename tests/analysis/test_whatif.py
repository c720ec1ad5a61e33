"""What-if replay on hand-built traces: the network model's costs, nonblocking collectives, steps, --balance and
--scale, each with its prediction worked out in the comments; the ideal case equals analyze's replay."""
import math
from pathlib import Path

import numpy as np
import pytest

from analysis import mpi, replay
from analysis.analyze import analyze
from analysis.whatif import Model, WhatIfError, whatif
from analysis.window import select
from gpt2trace.format.network import Network, NetworkError, parse_bandwidth, parse_latency, placement
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.interop.loader import load
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
NET = Network(bandwidth_bps=1e9, latency_ns=1e8)     # 1 GB/s, 0.1 s: 1e9 bytes take 1 s, a message 1.1 s


def _trace(recs, end_s, ranks=2):
    # every rank has one Running state over [0, end_s] so the window is [0, end_s]
    return Trace.from_table(syn.from_records([syn.state(r, 0, 0, end_s, State.RUNNING) for r in range(ranks)]
                                             + recs))


def _played(recs, end_s, ranks, network):
    trace = _trace(recs, end_s, ranks)
    w = select(trace)
    return replay.play(replay.program(mpi.calls(trace, w), np.arange(ranks), w.t0_ns, w.t1_ns), network)


CASES = [
    # Allreduce of 1e9 bytes, ring on 2 ranks: 2(p-1)/p n/B + 2(p-1) L = 1 s + 0.2 s. Entries 4 and 5: both
    # leave at 5 + 1.2 = 6.2, then compute 4 s: T = 10.2 (the ideal network: 9).
    ("allreduce-ring", [syn.comm(0, 4, 6, "MPI_Allreduce", seq=0, nbytes=10**9),
                        syn.comm(1, 5, 6, "MPI_Allreduce", seq=0, nbytes=10**9)], 10, 2, 10.2, 9),
    # Bcast of 5e8 bytes from root 0 on 3 ranks, binomial tree: ceil(log2 3) (L + n/B) = 2 x 0.6 = 1.2 s.
    # Root enters at 2 and leaves at 3.2; rank 1 enters at 1, leaves at max(1, 2) + 1.2 = 3.2; rank 2 enters at
    # 3, leaves at 4.2. Each computes 1 s more: T = 5.2 (ideal: the root's 2 + 1, rank 2's 3 + 1 = 4).
    ("bcast-tree", [syn.comm(0, 2, 3.5, "MPI_Bcast", seq=0, nbytes=5 * 10**8, peer=0),
                    syn.comm(1, 1, 3.5, "MPI_Bcast", seq=0, nbytes=5 * 10**8, peer=0),
                    syn.comm(2, 3, 3.5, "MPI_Bcast", seq=0, nbytes=5 * 10**8, peer=0)], 4.5, 3, 5.2, 4),
    # Reduce of 1e9 bytes to root 0 on 2 ranks: tree cost 1 x 1.1 s. Root enters at 3, leaves at 3 + 1.1 = 4.1,
    # then 1 s: 5.1. Rank 1 enters at 1 and leaves after sending its part (1.1 s): 2.1, then 1 s: 3.1. T = 5.1.
    ("reduce-tree", [syn.comm(0, 3, 4, "MPI_Reduce", seq=0, nbytes=10**9, peer=0),
                     syn.comm(1, 1, 4, "MPI_Reduce", seq=0, nbytes=10**9, peer=0)], 5, 2, 5.1, 4),
    # Send of 1e9 bytes at 5 (eager: returns at once, then 0.9 s): 5.9. The Recv entered at 2 ends when the
    # message has arrived, 5 + 1.1 = 6.1, then 0.8 s: 6.9. T = 6.9 (ideal: 5.9).
    ("send-recv", [syn.comm(0, 5, 5.1, "MPI_Send", peer=1, nbytes=10**9),
                   syn.comm(1, 2, 5.2, "MPI_Recv", peer=0, nbytes=10**9)], 6, 2, 6.9, 5.9),
    # Iallreduce of 1e9 bytes completes at its Waitall. Rank 0 posts at 1, computes 1.9 s, waits from 2.9; rank 1
    # posts at 2, waits from 3.9. The collective ends at the last posting plus the ring: 2 + 1.2 = 3.2. Rank 0
    # leaves its wait at 3.2, rank 1 at 3.9; 1 s more each: 4.2 and 4.9. T = 4.9 (ideal: 3.9 + 1 = 4.9 too:
    # rank 1's own compute hides the transfer).
    ("iallreduce-wait", [syn.comm(0, 1, 1.1, "MPI_Iallreduce", seq=0, nbytes=10**9),
                         syn.comm(0, 3, 5, "MPI_Waitall"),
                         syn.comm(1, 2, 2.1, "MPI_Iallreduce", seq=0, nbytes=10**9),
                         syn.comm(1, 4, 5, "MPI_Waitall")], 6, 2, 4.9, 4.9),
]


@pytest.mark.parametrize("recs,end_s,ranks,predicted,ideal", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_network_costs(recs, end_s, ranks, predicted, ideal):
    assert _played(recs, end_s, ranks, NET).end_ns / 1e9 == pytest.approx(predicted)
    assert _played(recs, end_s, ranks, Network()).end_ns / 1e9 == pytest.approx(ideal)


def test_iallreduce_whose_transfer_is_not_hidden():
    # As iallreduce-wait, but rank 1 waits at once (posts at 2, enters Waitall at 2): the collective ends at
    # 2 + 1.2 = 3.2, both waits leave then (rank 0 entered at 2.9), 1 s more: T = 4.2 (ideal: 2.9 + 1 = 3.9).
    recs = [syn.comm(0, 1, 1.1, "MPI_Iallreduce", seq=0, nbytes=10**9), syn.comm(0, 3, 5, "MPI_Waitall"),
            syn.comm(1, 2, 2.1, "MPI_Iallreduce", seq=0, nbytes=10**9), syn.comm(1, 2.1, 5, "MPI_Waitall")]
    assert _played(recs, 6, 2, NET).end_ns / 1e9 == pytest.approx(4.2)
    assert _played(recs, 6, 2, Network()).end_ns / 1e9 == pytest.approx(3.9)


@pytest.mark.parametrize("name,nbytes,p,expected_ns", [
    ("MPI_Allreduce", 10**6, 4, 2 * 3 / 4 * 1e6 + 6 * 1000),        # ring: 2(p-1)/p n/B + 2(p-1) L
    ("MPI_Reduce_scatter", 10**6, 4, 3 / 4 * 1e6 + 3 * 1000),       # ring: (p-1)/p n/B + (p-1) L
    ("MPI_Allgatherv", 10**6, 4, 3 / 4 * 1e6 + 3 * 1000),
    ("MPI_Bcast", 10**6, 5, 3 * (1000 + 1e6)),                      # tree: ceil(log2 5) = 3 hops
    ("MPI_Reduce", 10**6, 2, 1 * (1000 + 1e6)),
    ("MPI_Gatherv", 10**6, 3, 2 * (1000 + 1e6)),                    # linear: p-1 parts through the root
    ("MPI_Alltoall", 4 * 10**6, 4, 3 * (1000 + 1e6)),               # pairwise: p-1 exchanges of n/p
    ("MPI_Barrier", 0, 8, 3 * 1000),                                # dissemination: ceil(log2 8) rounds
    ("MPI_Allreduce", 10**6, 1, 0),                                 # one rank: nothing moves
])
def test_collective_costs(name, nbytes, p, expected_ns):
    net = Network(bandwidth_bps=1e9, latency_ns=1000)             # 1 byte per ns, 1 us
    assert net.collective_ns(name, nbytes, p) == pytest.approx(expected_ns)


def test_units_and_bad_values():
    assert parse_bandwidth("12.5") == 12.5e9 and parse_bandwidth("10Gb/s") == 1.25e9
    assert parse_bandwidth("800MB/s") == 8e8 and parse_bandwidth("inf") == math.inf
    assert parse_latency("5") == 5000 and parse_latency("800ns") == 800 and parse_latency("1ms") == 1e6
    for bad in ("0", "-1", "fast", "10 parsecs", "nan"):
        with pytest.raises(NetworkError, match="--bandwidth"):
            parse_bandwidth(bad)
    for bad in ("-1us", "5 lightyears", "inf"):
        with pytest.raises(NetworkError, match="--latency"):
            parse_latency(bad)
    with pytest.raises(NetworkError):
        Network(bandwidth_bps=0)


def _stepped(kernels=()):
    """2 ranks, 2 steps (window --steps 0:2), times in seconds:
    step 0 from 0: rank 0 computes 1, rank 1 3; Allreduce seq 0: rank 0 [1, 3.2], rank 1 [3, 3.2]
    step 1 from 3.2: rank 0 computes 2, rank 1 1; Allreduce seq 1: rank 0 [5.2, 5.3], rank 1 [4.2, 5.3]
    then both compute 0.7 (an `update` phase [5.3, 6.0]). Measured steps 3.2 and 2.8 s (median 3.0)."""
    recs = []
    for r, (c0, c1) in enumerate(((1, 2), (3, 1))):
        recs += [syn.phase(r, 0, c0, "forward", 0), syn.comm(r, c0, 3.2, "MPI_Allreduce", seq=0, step=0),
                 syn.phase(r, 3.2, 3.2 + c1, "forward", 1), syn.comm(r, 3.2 + c1, 5.3, "MPI_Allreduce", seq=1, step=1),
                 syn.phase(r, 5.3, 6.0, "update", 1)]
    return _trace(recs + list(kernels), 6.0)


def test_steps_on_the_ideal_network():
    # Ideal replay: Allreduce 0 ends at max(1, 3) = 3 on both, step 1 starts at 3; Allreduce 1 at max(3 + 2,
    # 3 + 1) = 5, then 0.7: T = 5.7. Steps 3 and 2.7 (the trace's 0.2 and 0.1 s in transfers are gone).
    out = whatif(_stepped(), Model(), steps="0:2")
    assert [v for s in out["steps"] for v in (s["step"], s["measured_s"], s["predicted_s"])] == \
        pytest.approx([0, 3.2, 3.0, 1, 2.8, 2.7])
    assert out["step_time_s"] == pytest.approx({"measured": 3.0, "predicted": 2.85})
    assert out["runtime_s"] == pytest.approx({"measured": 6.0, "predicted": 5.7})
    # Bursts: rank 0 1 + 2 + 0.7 = 3.7, rank 1 3 + 1 + 0.7 = 4.7. Measured: LB 4.2 / 4.7, CommE 4.7 / 6,
    # SerE 4.7 / 5.7, TE 5.7 / 6. Predicted (the ideal replay itself): CommE = SerE = 4.7 / 5.7, TE 1.
    assert out["ideal_runtime_s"] == pytest.approx({"measured": 5.7, "predicted": 5.7})
    assert out["pop"]["measured"] == pytest.approx({
        "parallel_efficiency": 4.2 / 6, "load_balance": 4.2 / 4.7, "communication_efficiency": 4.7 / 6,
        "serialization_efficiency": 4.7 / 5.7, "transfer_efficiency": 5.7 / 6})
    assert out["pop"]["predicted"]["transfer_efficiency"] == pytest.approx(1.0)
    assert out["pop"]["predicted"]["communication_efficiency"] == pytest.approx(4.7 / 5.7)


def test_balance():
    # Each step's k-th burst becomes the mean over the ranks: step 0 (1 + 3) / 2 = 2, step 1 (2 + 1) / 2 = 1.5,
    # the last 0.7. Ideal replay: Allreduce 0 at 2, step 1 from 2, Allreduce 1 at 3.5, T = 4.2: steps 2 and 2.2.
    out = whatif(_stepped(), Model(balance=True), steps="0:2")
    assert [s["predicted_s"] for s in out["steps"]] == pytest.approx([2.0, 2.2])
    assert out["pop"]["predicted"]["load_balance"] == pytest.approx(1.0)
    # On the 1 GB/s, 0.1 s network with 0-byte allreduces, each costs 2(p-1) L = 0.2 s: steps 2.2 and 2.4.
    out = whatif(_stepped(), Model(network=NET, balance=True), steps="0:2")
    assert [s["predicted_s"] for s in out["steps"]] == pytest.approx([2.2, 2.4])


def test_scale_follows_the_slowest_thread():
    # Rank 0's step-1 compute is one matmul_forward on two threads: thread 0 [3.2, 4.2] (1 s), thread 1
    # [3.7, 5.2] (1.5 s from 0.5 s into the segment). x2: thread 0 ends 2 s in, thread 1 0.5 + 3 = 3.5 s in, so
    # the segment takes 3.5 s instead of 2 (scaling the segment as a whole would give 4). Ideal replay: step 0
    # as before (3), Allreduce 1 at 3 + 3.5 = 6.5, then 0.7: T = 7.2, step 1 = 4.2.
    kern = [syn.kernel(0, 0, 3.2, 4.2, "matmul_forward", step=1), syn.kernel(0, 1, 3.7, 5.2, "matmul_forward", step=1)]
    out = whatif(_stepped(kern), Model(scale=(("matmul_forward", 2.0),)), steps="0:2")
    assert [s["predicted_s"] for s in out["steps"]] == pytest.approx([3.0, 4.2])
    assert out["runtime_s"]["predicted"] == pytest.approx(7.2)
    # x0: the kernel takes no time, rank 0's burst of 2 s loses the whole segment: Allreduce 1 at max(3 + 0,
    # 3 + 1) = 4, T = 4.7, step 1 = 1.7.
    out = whatif(_stepped(kern), Model(scale=(("matmul_forward", 0.0),)), steps="0:2")
    assert out["runtime_s"]["predicted"] == pytest.approx(4.7)
    with pytest.raises(WhatIfError, match="--scale attention_forward=.*its kernels: matmul_forward"):
        whatif(_stepped(kern), Model(scale=(("attention_forward", 2.0),)), steps="0:2")


def test_a_trace_without_mpi_is_a_compute_only_replay():
    # One rank, one step: a kernel of 2 s (step 0, so the window is the step, [0.5, 2.5]). x1.5 makes it 3 s;
    # the network changes nothing.
    trace = _trace([syn.kernel(0, 0, 0.5, 2.5, "gelu_forward")], 3.0, ranks=1)
    out = whatif(trace, Model(network=NET, scale=(("gelu_forward", 1.5),)))
    assert out["mpi_calls"] == 0 and out["runtime_s"] == pytest.approx({"measured": 2.0, "predicted": 3.0})
    assert out["step_time_s"] == pytest.approx({"measured": 2.0, "predicted": 3.0})
    assert out["warnings"] == ["the window has no MPI calls: the network changes nothing (a compute-only replay)"]


@pytest.mark.parametrize("sample", ["tiny_2ranks_allreduce", "tiny_2ranks_overlap", "small_2ranks_sp_contiguous",
                                    "small_2ranks_pp2_1f1b"])
def test_the_ideal_case_is_analyzes_replay(sample):
    # The same replay (the step marks cut bursts without changing it): analyze's T_ideal and serialization. (Its
    # transfer differs: analyze takes CommE from the Running time, whatif from the bursts.)
    trace = load(SAMPLES / f"{sample}.parquet")
    mine, theirs = whatif(trace, Model()), analyze(trace)["pop"]
    assert mine["ideal_runtime_s"]["measured"] == theirs["ideal_runtime_s"]
    assert mine["ideal_runtime_s"]["predicted"] == theirs["ideal_runtime_s"]       # nothing changed
    assert mine["pop"]["measured"]["serialization_efficiency"] == pytest.approx(
        theirs["mpi"]["serialization_efficiency"], rel=1e-12)


def test_own_step_time_on_this_machines_network():
    # The 2-rank allreduce sample replayed on the ping-pong's figures (benchmarks/results/network.json, 2.7 us and
    # 9.5 GB/s on 2026-11-24) predicts its own median step time within 5% (measured 3.52 ms, predicted 3.41 ms).
    out = whatif(load(SAMPLES / "tiny_2ranks_allreduce.parquet"), Model(Network(9.5e9, 2700)))
    assert out["step_time_s"]["predicted"] == pytest.approx(out["step_time_s"]["measured"], rel=0.05)
    assert out["forced_releases"] == {}


def test_a_cluster_charges_only_traffic_between_nodes():
    # 4 ranks on 2 nodes ({0,1} {2,3}), Reduce of 1e9 bytes to root 0, all entering at 1, then 1 s of compute.
    # Flat (the emulated cluster): ranks 2 and 3 send through node 0's link: L + 2 n/B = 0.1 + 2 = 2.1 s; the root
    # leaves at 1 + 2.1 = 3.1, computes to 4.1. Leaves send no priced message of their own (the link is the
    # instance's cost): ranks 1-3 leave at 1 and end at 2. T = 4.1. Tree on the same nodes: p = 2 nodes,
    # ceil(log2 2) (L + n/B) = 1.1 s: the root ends at 1 + 1.1 + 1 = 3.1; a leaf on node 1 pays its message
    # (1.1 s, to 3.1), the one on node 0 does not (2). T = 3.1. Without nodes (4 ranks, tree): 2 x 1.1 = 2.2 s:
    # T = 1 + 2.2 + 1 = 4.2.
    recs = [syn.comm(r, 1, 2, "MPI_Reduce", seq=0, nbytes=10**9, peer=0) for r in range(4)]
    trace = _trace(recs, 3, 4)
    w = select(trace)
    prog = replay.program(mpi.calls(trace, w), np.arange(4), w.t0_ns, w.t1_ns)
    nodes = dict(enumerate(placement(4, 2)))
    flat = Network(bandwidth_bps=1e9, latency_ns=1e8, rooted="flat")
    assert replay.play(prog, flat, nodes).end_ns / 1e9 == pytest.approx(4.1)
    assert replay.play(prog, NET, nodes).end_ns / 1e9 == pytest.approx(3.1)
    assert replay.play(prog, NET).end_ns / 1e9 == pytest.approx(4.2)
    # one node: nothing crosses a link
    assert replay.play(prog, flat, dict.fromkeys(range(4), 0)).end_ns / 1e9 == pytest.approx(2)


def _late_gelu():
    """2 ranks, one step, the late_rank fixture's: rank 0 matmul_forward L0 [0,4], gelu_forward L1 [4,6],
    MPI_Allreduce [6,10]; rank 1 matmul L0 [0,4], gelu L1 [4,9], MPI_Allreduce [9,10]; phases forward up to the
    allreduce and grad_sync in it."""
    recs = []
    for r, gelu_end in ((0, 6), (1, 9)):
        recs += [syn.kernel(r, 0, 0, 4, "matmul_forward", 0, 0), syn.kernel(r, 0, 4, gelu_end, "gelu_forward", 0, 1),
                 syn.comm(r, gelu_end, 10, "MPI_Allreduce", seq=0, step=0),
                 syn.phase(r, 0, gelu_end, "forward", 0), syn.phase(r, gelu_end, 10, "grad_sync", 0)]
    return _trace(recs, 10.0)


def _path_items(path):
    return {(i["category"], i["name"]): (i["time_s"], i["share"]) for i in path["items"]}


def _assert_items(got: dict, want: dict) -> None:
    # item -> (seconds, share), each pair approximately (pytest.approx takes no tuples inside a dict)
    assert got.keys() == want.keys(), (got, want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value), key


@pytest.mark.parametrize("model,length,items,phases", [
    # Ideal network: the allreduce ends when rank 1 enters (9), T = 9. Back from 9 on rank 1 (its gelu ends
    # last): gelu [4,9], matmul [0,4]; the allreduce takes no time. Measured: the same plus its 1 s of transfer.
    (Model(), 9.0, {("kernel", "gelu_forward"): (5, 5 / 9), ("kernel", "matmul_forward"): (4, 4 / 9)},
     {"forward": 9}),
    # Balanced: both bursts become (6 + 9) / 2 = 7.5, each stretched as a whole: rank 0's matmul [0,5] and gelu
    # [5,7.5]. Both enter at 7.5 and wait for no one; the path ends on the lowest rank of those ending last, 0.
    (Model(balance=True), 7.5, {("kernel", "matmul_forward"): (5, 2 / 3), ("kernel", "gelu_forward"): (2.5, 1 / 3)},
     {"forward": 7.5}),
    # gelu x0.5: rank 0's burst 4 + 1, rank 1's 4 + 2.5: the allreduce at 6.5 = T; the path on rank 1.
    (Model(scale=(("gelu_forward", 0.5),)), 6.5,
     {("kernel", "matmul_forward"): (4, 4 / 6.5), ("kernel", "gelu_forward"): (2.5, 2.5 / 6.5)}, {"forward": 6.5}),
    # 0.1 s latency: the (0-byte) ring allreduce costs 2 (p-1) L = 0.2 s after the last entry: [9, 9.2] on rank 1,
    # its own call (it waited for no one), so it is on the path, in grad_sync.
    (Model(network=NET), 9.2, {("kernel", "gelu_forward"): (5, 5 / 9.2), ("kernel", "matmul_forward"): (4, 4 / 9.2),
                               ("mpi", "MPI_Allreduce"): (0.2, 0.2 / 9.2)}, {"forward": 9, "grad_sync": 0.2}),
], ids=["ideal", "balance", "scale", "latency"])
def test_the_critical_path_of_the_predicted_run(model, length, items, phases):
    out = whatif(_late_gelu(), model, steps="0:1")
    measured, predicted = out["critical_path"]["measured"], out["critical_path"]["predicted"]
    assert measured["length_s"] == pytest.approx(10.0)
    _assert_items(_path_items(measured), {("kernel", "gelu_forward"): (5, 0.5), ("kernel", "matmul_forward"): (4, 0.4),
                                          ("mpi", "MPI_Allreduce"): (1, 0.1)})
    # the predicted path tiles the predicted run, as the measured one tiles the trace
    assert predicted["length_s"] == pytest.approx(length) == pytest.approx(out["runtime_s"]["predicted"])
    assert predicted["window_s"] == pytest.approx(length) and predicted["clock_violations"] == 0
    _assert_items(_path_items(predicted), items)
    assert {p["phase"]: p["time_s"] for p in predicted["phases"]} == pytest.approx(phases)
    assert [s["step"] for s in predicted["steps"]] == [0] and "segments" not in predicted


@pytest.mark.parametrize("sample", ["tiny_2ranks_allreduce", "small_2ranks_sp_contiguous", "small_2ranks_pp2_1f1b",
                                    "tiny_2ranks_overlap"])
def test_the_predicted_path_tiles_the_predicted_run(sample):
    trace = load(SAMPLES / f"{sample}.parquet")
    for model in (Model(), Model(balance=True), Model(network=Network(1e9, 5000)),
                  Model(scale=(("matmul_backward", 0.5),))):
        out = whatif(trace, model)
        path = out["critical_path"]["predicted"]
        assert path["clock_violations"] == 0
        assert path["length_s"] == pytest.approx(out["runtime_s"]["predicted"], rel=1e-9)
        assert sum(s["length_s"] for s in path["steps"]) == pytest.approx(path["length_s"], rel=1e-6)
