"""Delay costs on hand-built traces whose costs are worked out in the comments (times in seconds), on random
pipelines (what is charged adds up to the wait time) and on the contiguous sequence-split sample."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import delay, mpi, segments, waits
from analysis.analyze import analyze
from analysis.window import select
from gpt2trace.format.reader import Trace, load
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def costs_of(trace: Trace, propagate: bool = True) -> delay.DelayCosts:
    window = select(trace)
    calls = mpi.calls(trace, window)
    segs = segments.segments(segments.kernel_records(trace, window))
    return delay.delay_costs(calls, waits.wait_states(calls), segs, window, propagate=propagate)


def charged(costs: delay.DelayCosts) -> dict[tuple, tuple[float, float]]:
    """(rank, kernel, layer) -> (short, long) seconds."""
    return {(r["rank"], r["kernel"], None if r["layer"] is None or r["layer"] != r["layer"] else int(r["layer"])):
            (r["short_s"], r["long_s"]) for r in costs.causes.astype(object).to_dict("records")}


def one_step(recs: list[dict], ranks: int, end: float) -> Trace:
    return Trace.from_table(syn.from_records(recs + [syn.phase(r, 0, end, "forward", 0) for r in range(ranks)]))


@pytest.fixture
def chain() -> Trace:
    """Three ranks, two messages: rank 2 waits for rank 1, which is late because it waited for rank 0."""
    return one_step([
        # rank 0: matmul_forward L0 [0,6], MPI_Send to 1 [6,6.1]
        syn.kernel(0, 0, 0, 6, "matmul_forward", 0, 0), syn.comm(0, 6, 6.1, "MPI_Send", peer=1),
        # rank 1: matmul L0 [0,2], MPI_Recv from 0 [2,6.1] (Late Sender: 6 - 2 = 4 s), gelu_forward L0 [6.1,7.1],
        #         MPI_Send to 2 [7.1,7.2]
        syn.kernel(1, 0, 0, 2, "matmul_forward", 0, 0), syn.comm(1, 2, 6.1, "MPI_Recv", peer=0),
        syn.kernel(1, 0, 6.1, 7.1, "gelu_forward", 0, 0), syn.comm(1, 7.1, 7.2, "MPI_Send", peer=2),
        # rank 2: matmul L0 [0,2], gelu L0 [2,3], MPI_Recv from 1 [3,7.2] (Late Sender: 7.1 - 3 = 4.1 s)
        syn.kernel(2, 0, 0, 2, "matmul_forward", 0, 0), syn.kernel(2, 0, 2, 3, "gelu_forward", 0, 0),
        syn.comm(2, 3, 7.2, "MPI_Recv", peer=1)], ranks=3, end=7.3)


def test_a_chain_of_late_senders_across_three_ranks_is_charged_to_rank_0(chain):
    # Rank 2's 4.1 s: since rank 2 last synchronized (never: 0), it ran matmul 2 + gelu 1; rank 1, up to its send
    # at 7.1, matmul 2, waiting 4 ([2,6)), outside kernels 0.1 (the receive's transfer [6,6.1)), gelu 1. Excess:
    # waiting 4 and outside 0.1, D = 4.1: 0.1 s short-term to rank 1's time outside kernels, 4 s passed to rank 1's
    # wait. Rank 1's 4 s: rank 1 ran nothing before its receive at 2 but matmul 2; rank 0 up to its send at 6,
    # matmul 6: excess 4, D = 4, so rank 0's matmul_forward gets 4 s short-term and the 4 s passed on long-term.
    costs = costs_of(chain)
    assert charged(costs) == {(0, "matmul_forward", 0): pytest.approx((4.0, 4.0)),
                              (1, delay.OUTSIDE, None): pytest.approx((0.1, 0.0))}
    assert costs.total_wait_s == pytest.approx(8.1)
    assert costs.causes["cost_s"].sum() == pytest.approx(8.1) and costs.unattributed_s == 0
    assert (costs.propagating_waits, costs.propagating_wait_s) == pytest.approx((1, 4.0))   # rank 1's wait


def test_without_propagation_each_wait_stops_at_its_delayer(chain):
    # Rank 2's wait against rank 1 without its waiting: excess outside kernels 0.1 only, so all 4.1 s go there.
    assert charged(costs_of(chain, propagate=False)) == {(0, "matmul_forward", 0): pytest.approx((4.0, 0.0)),
                                                         (1, delay.OUTSIDE, None): pytest.approx((4.1, 0.0))}


def test_a_collective_whose_last_rank_waited_for_another():
    # rank 0: matmul L0 [0,5], MPI_Send to 1 [5,5.1], gelu L0 [5.1,6.1], MPI_Allreduce [6.1,8]
    # rank 1: matmul L0 [0,2], MPI_Recv from 0 [2,5.2] (Late Sender 3 s), gelu L0 [5.2,6.2], MPI_Allreduce [6.2,8]
    # rank 2: matmul L0 [0,2], gelu L0 [2,3], MPI_Allreduce [3,8]
    # The allreduce's last rank is rank 1 (6.2): rank 2 waits 3.2 s (Wait at NxN), rank 0 0.1 s.
    recs = [syn.kernel(0, 0, 0, 5, "matmul_forward", 0, 0), syn.comm(0, 5, 5.1, "MPI_Send", peer=1),
            syn.kernel(0, 0, 5.1, 6.1, "gelu_forward", 0, 0), syn.comm(0, 6.1, 8, "MPI_Allreduce", seq=0),
            syn.kernel(1, 0, 0, 2, "matmul_forward", 0, 0), syn.comm(1, 2, 5.2, "MPI_Recv", peer=0),
            syn.kernel(1, 0, 5.2, 6.2, "gelu_forward", 0, 0), syn.comm(1, 6.2, 8, "MPI_Allreduce", seq=0),
            syn.kernel(2, 0, 0, 2, "matmul_forward", 0, 0), syn.kernel(2, 0, 2, 3, "gelu_forward", 0, 0),
            syn.comm(2, 3, 8, "MPI_Allreduce", seq=0)]
    costs = costs_of(one_step(recs, ranks=3, end=8))
    # Rank 2's 3.2 s, interval [0, .): rank 2 matmul 2, gelu 1; rank 1 up to 6.2: matmul 2, waiting 3, outside 0.2
    #   (the receive's [5,5.2)), gelu 1. Excess: waiting 3, outside 0.2 (D = 3.2): 0.2 s short-term to rank 1
    #   outside kernels, 3 s to rank 1's wait.
    # Rank 0's 0.1 s, interval from its send's end, [5.1, .): rank 0 gelu 1; rank 1 [5.1,6.2): outside 0.1 (the
    #   receive's end), gelu 1. Excess: outside 0.1 -> 0.1 s short-term to rank 1 outside kernels.
    # Rank 1's 3 s, interval [0, .): rank 1 matmul 2; rank 0 up to its send at 5: matmul 5. Excess: matmul 3 ->
    #   3 s short-term and the 3 s it received long-term to rank 0's matmul_forward.
    assert charged(costs) == {(0, "matmul_forward", 0): pytest.approx((3.0, 3.0)),
                              (1, delay.OUTSIDE, None): pytest.approx((0.3, 0.0))}
    assert costs.total_wait_s == pytest.approx(6.3) and costs.causes["cost_s"].sum() == pytest.approx(6.3)


def test_a_pipeline_chain_of_late_senders():
    # Stage k (rank k) computes matmul_forward of layer k; each downstream stage receives at 0.
    # rank 0: matmul L0 [0,4], MPI_Send to 1 [4,4.1]
    # rank 1: MPI_Recv from 0 [0,4.1] (wait 4), matmul L1 [4.1,5.1], MPI_Send to 2 [5.1,5.2]
    # rank 2: MPI_Recv from 1 [0,5.2] (wait 5.1), matmul L2 [5.2,6.2], MPI_Send to 3 [6.2,6.3]
    # rank 3: MPI_Recv from 2 [0,6.3] (wait 6.2), matmul L3 [6.3,7.3]
    recs = [syn.kernel(0, 0, 0, 4, "matmul_forward", 0, 0), syn.comm(0, 4, 4.1, "MPI_Send", peer=1)]
    for k, t in ((1, 4.1), (2, 5.2), (3, 6.3)):
        recs += [syn.comm(k, 0, t, "MPI_Recv", peer=k - 1), syn.kernel(k, 0, t, t + 1, "matmul_forward", 0, k)]
        if k < 3:
            recs.append(syn.comm(k, t + 1, t + 1.1, "MPI_Send", peer=k + 1))
    costs = costs_of(one_step(recs, ranks=4, end=7.3))
    # Rank 3's 6.2 s: rank 2 up to 6.2 waited 5.1, was outside kernels 0.1, ran matmul L2 1 (rank 3 ran nothing):
    #   short-term 1 to rank 2's matmul L2, 0.1 to its outside time; 5.1 passed to rank 2's wait.
    # Rank 2's 5.1 s (+ 5.1 received): rank 1 waited 4, outside 0.1, matmul L1 1 (D = 5.1): short-term 1 and 0.1,
    #   long-term 5.1 x 1/5.1 = 1 and 0.1; (5.1 + 5.1) x 4/5.1 = 8 passed to rank 1's wait.
    # Rank 1's 4 s (+ 8 received): rank 0's matmul L0 4 is all the excess: 4 short-term, 8 long-term.
    # Every stage's compute costs each downstream stage once: rank 0's 4 s three times, rank 1's 1 s twice.
    assert charged(costs) == {(0, "matmul_forward", 0): pytest.approx((4.0, 8.0)),
                              (1, "matmul_forward", 1): pytest.approx((1.0, 1.0)),
                              (1, delay.OUTSIDE, None): pytest.approx((0.1, 0.1)),
                              (2, "matmul_forward", 2): pytest.approx((1.0, 0.0)),
                              (2, delay.OUTSIDE, None): pytest.approx((0.1, 0.0))}
    assert costs.causes["cost_s"].sum() == pytest.approx(4 + 5.1 + 6.2)
    assert (costs.propagating_waits, costs.propagating_wait_s) == pytest.approx((2, 4 + 5.1))   # ranks 1 and 2
    top = costs.causes.iloc[0]
    assert (top["rank"], top["kernel"], top["waits"], top["share"]) == \
        (0, "matmul_forward", 1, pytest.approx(12 / 15.3))    # charged directly by rank 1's wait only


def test_a_wait_whose_delayer_only_waited_is_unattributed_without_propagation():
    # rank 0: matmul L0 [0,4], MPI_Send to 1 [4,4.1]
    # rank 1: MPI_Recv from 0 [0,4] (wait 4, no transfer after it), MPI_Send to 2 [4,4.1]
    # rank 2: MPI_Recv from 1 [0,4.1] (wait 4)
    recs = [syn.kernel(0, 0, 0, 4, "matmul_forward", 0, 0), syn.comm(0, 4, 4.1, "MPI_Send", peer=1),
            syn.comm(1, 0, 4, "MPI_Recv", peer=0), syn.comm(1, 4, 4.1, "MPI_Send", peer=2),
            syn.comm(2, 0, 4.1, "MPI_Recv", peer=1)]
    trace = one_step(recs, ranks=3, end=4.1)
    # Rank 2's wait: rank 1 did nothing but wait up to its send, so without propagation there is no excess to
    # charge (D = 0): unattributed, on rank 1. With it, the 4 s pass to rank 1's wait and land on rank 0's matmul.
    direct = costs_of(trace, propagate=False)
    assert charged(direct) == {(0, "matmul_forward", 0): pytest.approx((4.0, 0.0)),
                               (1, delay.UNATTRIBUTED, None): pytest.approx((4.0, 0.0))}
    assert direct.unattributed_s == pytest.approx(4.0)
    assert charged(costs_of(trace)) == {(0, "matmul_forward", 0): pytest.approx((4.0, 4.0))}


pipelines = st.builds(sp.PipelineConfig, stages=st.integers(2, 4), micro_batches=st.integers(1, 4),
                      schedule=st.sampled_from(sp.SCHEDULES), steps=st.integers(2, 3),
                      slow_stage=st.one_of(st.none(), st.tuples(st.integers(0, 1), st.floats(1.0, 3.0))),
                      transfer_ns=st.integers(0, 200_000))


@settings(max_examples=20, deadline=None)
@given(pipelines)
def test_costs_add_up_to_the_wait_time_on_random_pipelines(cfg):
    costs = costs_of(Trace.from_table(sp.generate(cfg)))
    c = costs.causes
    # every wait's time is charged once: short-term to what delayed it, the rest passed on or unattributed
    assert c["cost_s"].sum() == pytest.approx(costs.total_wait_s, rel=1e-9, abs=1e-12)
    assert (c["short_s"] >= 0).all() and (c["long_s"] >= 0).all()
    assert costs.propagating_wait_s <= costs.total_wait_s + 1e-12


def test_the_contiguous_sequence_split_is_charged_to_rank_1s_attention():
    # Rank 1 holds the later half of every sequence, so its causal attention does ~3x rank 0's work
    # (sample_traces/README.md): rank 0 waits in the sequence group's MPI_Allgather and MPI_Allreduce. By delay
    # costs, measured: all 0.313 s of waits trace back to rank 1, 51% to its attention_forward and 47% to its
    # attention_backward (over the 4 layers), all directly (no wait delays its rank into another here).
    result = analyze(load(SAMPLES / "small_2ranks_sp_contiguous.parquet"))
    d = result["delay_costs"]
    assert d["short_s"] + d["long_s"] + d["unattributed_s"] == pytest.approx(d["total_wait_s"])
    on_rank_1 = [c for c in d["causes"] if c["rank"] == 1]
    attention = sum(c["cost_s"] for c in on_rank_1 if c["kernel"].startswith("attention_"))
    assert sum(c["cost_s"] for c in on_rank_1) > 0.99 * d["total_wait_s"] and attention > 0.9 * d["total_wait_s"]
    assert {c["kernel"] for c in d["causes"][:8]} == {"attention_forward", "attention_backward"}   # 2 x 4 layers
    found = next(f for f in result["findings"] if f["metric"] == "delay_costs.causes")
    assert found["part_of"] == "pop.lost.mpi_load_balance"
    assert found["text"].startswith("Behind the MPI-level losses, by delay costs (Scalasca): 100% of the 0.3126 s "
                                    "ranks wait in MPI trace back to rank 1 (all directly), most to "
                                    "attention_forward (51%) and attention_backward (47%) over all layers")


def test_analyze_names_the_top_cause_of_a_chain(chain):
    # The chain above: 8.1 s of waits; rank 0 causes 8 s (4 directly, 4 through rank 1's wait), rank 1 0.1 s.
    result = analyze(chain, steps="0:1")
    d = result["delay_costs"]
    assert (d["total_wait_s"], d["short_s"], d["long_s"], d["unattributed_s"]) == pytest.approx((8.1, 4.1, 4, 0))
    assert [(c["rank"], c["kernel"], c["layer"]) for c in d["causes"]] == [(0, "matmul_forward", 0),
                                                                           (1, delay.OUTSIDE, None)]
    # (a trace without thread states has no POP losses for the finding to explain: asked for directly)
    found = delay.findings(result, "pop.lost.mpi_load_balance")
    assert [f["text"] for f in found] == [
        "Behind the MPI-level losses, by delay costs (Scalasca): 99% of the 8.1 s ranks wait in MPI trace back to "
        "rank 0 (4 s directly, 4 s through the waits it caused first), most to matmul_forward (99%) over all "
        "layers; 1 wait state(s) made their rank late into more waits."]
    # root_causes keep their communicator and say the same per group
    assert result["root_causes"][0]["text"] == ("8 s of waits caused by kernel matmul_forward (layer 0) on rank 0, "
                                                "4 s directly and 4 s through other waits")


@pytest.mark.parametrize("name", ["small_8ranks_3d", "small_2ranks_sp_contiguous", "small_2ranks_pp2_1f1b"])
def test_blocks_of_waits_give_the_costs_of_all(name, monkeypatch):
    # with blocks of a few overlaps, the waits are worked on a handful at a time: the same table, to the bit
    trace = load(SAMPLES / f"{name}.parquet")
    window = select(trace)
    calls = mpi.calls(trace, window)
    wait_rows, segs = waits.wait_states(calls), segments.segments(segments.kernel_records(trace, window))
    whole = delay.delay_costs(calls, wait_rows, segs, window, keys=(mpi.GROUP,))
    monkeypatch.setattr(delay, "_CHUNK", 5)
    blocks = delay.delay_costs(calls, wait_rows, segs, window, keys=(mpi.GROUP,))
    assert len(wait_rows) > 5 and len(whole.causes)
    pd.testing.assert_frame_equal(blocks.causes, whole.causes, check_exact=True)
    assert (blocks.total_wait_s, blocks.propagating_waits, blocks.propagating_wait_s) == (
        whole.total_wait_s, whole.propagating_waits, whole.propagating_wait_s)
