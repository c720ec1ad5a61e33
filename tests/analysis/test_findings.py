from pathlib import Path

import pytest
import random_traces
from hypothesis import given, settings

from analysis.analyze import analyze
from analysis.findings import DIMENSION_SHARE, findings
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.schema import State
from gpt2trace.testing import grid_trace, synthetic
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
FIXTURES = ["late_rank", "slow_thread", "serial", "nonblocking", "bucketed", "fork_join", "io_rank"]


def _losses(found):
    return {f["metric"]: f["lost_fraction"] for f in found if f["lost_fraction"] is not None}


def test_serial_code_is_named_as_such(serial):
    # 1 rank x 2 threads: the second thread is Idle for the 6 s the main thread runs Python alone; the only
    # region is balanced. BSC's load balance is 0.7, but the loss is serial code: 6 / 20 thread-seconds.
    found = analyze(serial)["findings"]
    assert found[0]["metric"] == "pop.lost.serial_regions"
    assert found[0]["lost_fraction"] == pytest.approx(0.3)
    assert found[0]["text"].startswith("Serial code between parallel regions costs 30.0% of thread time")
    assert not any("load imbalance" in f["text"].lower() for f in found)


def test_findings_order_slow_thread(slow_thread):
    # T = 10, P = 3 (30 thread-seconds), lost 13: serial code 6/30 (Python [5,8] with two workers idle), load
    # imbalance inside regions 4/30 (matmul_forward: 2, 2 and 4 s of work), the rest of that region 3/30.
    # The imbalance details (matmul_forward across the threads, the Synchronization at its end) follow it.
    found = analyze(slow_thread)["findings"]
    assert [f["metric"] for f in found[:6]] == ["pop.lost.serial_regions", "pop.lost.region_load_balance",
                                                "imbalance[0]", "imbalance[1]", "occupancy.per_kernel[0].sync_s",
                                                "pop.lost.region_scheduling"]
    assert _losses(found) == pytest.approx({"pop.lost.serial_regions": 6 / 30,
                                            "pop.lost.region_load_balance": 4 / 30,
                                            "pop.lost.region_scheduling": 3 / 30})
    assert {f["part_of"] for f in found[2:5]} == {"pop.lost.region_load_balance"}
    assert "slowest rank 0 thread 2" in found[2]["text"]


def test_findings_late_rank_name_the_kernel(late_rank):
    found = analyze(late_rank)["findings"]
    cause = next(f for f in found if f["metric"] == "root_causes[0]")
    assert "3 s of waits caused by kernel gelu_forward (layer 1) on rank 1" in cause["text"]
    assert cause["lost_fraction"] is None and cause["part_of"].startswith("pop.lost.")


@pytest.mark.parametrize("fixture", FIXTURES)
def test_quoted_losses_never_exceed_the_lost_time(fixture, request):
    out = analyze(request.getfixturevalue(fixture))
    _check_partition(out)


configs = random_traces.configs()


@settings(max_examples=25, deadline=None)
@given(configs)
def test_quoted_losses_never_exceed_the_lost_time_on_random_traces(cfg):
    _check_partition(analyze(Trace.from_table(synthetic.generate(cfg)), top=100))


def _check_partition(out):
    # The losses the findings quote are each counted once: together at most 1 - PE (all of it when none is
    # below the threshold), and every detail names a loss shown before it.
    found = out["findings"]
    lost = 1 - out["pop"]["parallel_efficiency"]
    assert sum(_losses(found).values()) <= lost + 1e-12
    seen = set()
    for f in found:
        if "part_of" in f:
            assert f["lost_fraction"] is None and f["part_of"] in seen
        seen.add(f["metric"])


def test_a_replay_longer_than_the_run_comes_first():
    recs = [syn.state(0, 0, 0, 5, State.RUNNING), syn.state(0, 0, 5, 5.1, State.BLOCKING_SEND),
            syn.state(0, 0, 5.1, 6, State.RUNNING), syn.comm(0, 5, 5.1, "MPI_Send", peer=1),
            syn.state(1, 0, 0, 1, State.RUNNING), syn.state(1, 0, 1, 1.1, State.WAITING_A_MESSAGE),
            syn.state(1, 0, 1.1, 6, State.RUNNING), syn.comm(1, 1, 1.1, "MPI_Recv", peer=0)]
    out = analyze(Trace.from_table(syn.from_records(recs)))
    assert any("longer than the measured 6 s" in w for w in out["warnings"])
    assert out["findings"][0]["metric"] == "warnings" and "longer than the measured" in out["findings"][0]["text"]
    _check_partition(out)


def _dimension_findings(found):
    return [f for f in found if f["metric"].startswith("comm_dimensions[")]


def test_the_costliest_dimension_is_named_with_its_dominant_call():
    # gpt2trace/testing/grid_trace.py (tp 2 x dp 2): tp's 4 all-reduces of 0.5 s and 1 MB per step take 2 of each
    # rank's 10 s step (20%), more than dp's all-reduce (1.5 s of a mean rank, 15%) and the world's barrier (5%)
    found = analyze(Trace.from_table(grid_trace.tp_dp_trace(tp_s=0.5)), steps="0:2")["findings"]
    [dim] = _dimension_findings(found)
    assert dim["metric"] == "comm_dimensions[0]" and dim["lost_fraction"] is None
    assert dim["part_of"] == "pop.lost.transfer"                       # the largest MPI-level loss holds it
    assert dim["text"] == ("Behind the MPI-level losses: tensor-parallel all-reduces take 20% of the step: 4 per "
                           "step of 1 MB each; that is all its communication.")


@pytest.mark.parametrize("tp_s,named", [
    # tp alone: 4 calls x tp_s x 2 steps x 4 ranks over 80 rank-seconds = 0.4 tp_s of the step
    (0.13, True),      # 5.2% >= findings.DIMENSION_SHARE (5%)
    (0.12, False)])    # 4.8%: within what tracing itself costs, no finding
def test_the_dimension_finding_appears_only_from_the_threshold(tp_s, named):
    assert DIMENSION_SHARE == 0.05
    found = analyze(Trace.from_table(grid_trace.tp_dp_trace(tp_s=tp_s, dp=False, barrier=False)), "0:2")["findings"]
    assert [f["text"].split(": ", 1)[1][:52] for f in _dimension_findings(found)] == (
        ["tensor-parallel all-reduces take 5% of the step: 4 p"] if named else [])


def test_a_group_over_several_dimensions_is_named_by_them():
    # tp_s 0.1: tp takes 4%; the world's barrier (0.5 s a step on every rank, 5%) spans dp and tp
    found = analyze(Trace.from_table(grid_trace.tp_dp_trace(tp_s=0.1, dp=False)), "0:2")["findings"]
    assert [f["text"] for f in _dimension_findings(found)] == [
        "Behind the MPI-level losses: barriers over dp x tp take 5% of the step: 1 per step; that is all its "
        "communication."]


def test_without_an_mpi_level_loss_the_dimension_is_a_note():
    result = analyze(Trace.from_table(grid_trace.tp_dp_trace(tp_s=0.5)), steps="0:2")
    result["pop"]["lost"] = {k: 0.0 for k in result["pop"]["lost"]}
    found = findings(result)
    [dim] = _dimension_findings(found)
    assert found[0] is dim and "part_of" not in dim          # no loss left and no warning: it leads the notes
    assert dim["text"].startswith("Tensor-parallel all-reduces take 20% of the step")


def test_a_sample_sequence_split_names_the_sequence_group():
    # small_2ranks_sp_contiguous: the sp group's 4 all-reduces per step (512 KiB) cost most; the gradient sync on
    # the world is folded into the same dimension, so the dimension's whole communication is said too
    found = analyze(load(SAMPLES / "small_2ranks_sp_contiguous.parquet"))["findings"]
    [dim] = _dimension_findings(found)
    text = dim["text"]
    assert text.startswith("Behind the MPI-level losses: sequence-parallel all-reduces take ")
    assert " of the step: 4 per step of 524 kB each; all sequence-parallel communication takes " in text
    assert text.endswith("of it waiting.")
