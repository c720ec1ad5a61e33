"""The pipeline analysis against known answers: synthetic GPipe and 1F1B traces (gpt2trace.testing.
synthetic_pipeline) whose bubble theory predicts, one worked out by hand, a slow stage, and traces without a
pipeline."""
from __future__ import annotations

from dataclasses import replace

import pyarrow.compute as pc
import pytest

from analysis import mpi, pipeline, segments, waits
from analysis.analyze import analyze
from analysis.rootcause import OUTSIDE
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import NAME
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp

# No overheads at all: each stage's forward and backward are exactly its kernels, messages are free.
FREE = dict(transfer_ns=0, call_ns=0, gap_ns=0, dataload_ns=0)


def trace_of(cfg: sp.PipelineConfig) -> Trace:
    return Trace.from_table(sp.generate(cfg))


def pipeline_of(trace: Trace) -> dict | None:
    window = select(trace)
    calls = mpi.calls(trace, window)
    return pipeline.pipeline(trace, window, calls, waits.wait_states(calls),
                             segments.segments(segments.kernel_records(trace, window)))


def test_layout_from_the_pp_communicators():
    lay = pipeline.layout(trace_of(sp.PipelineConfig(stages=4, pipelines=2, micro_batches=3)))
    # rank = stage x D + pipeline (the pipeline dimension slowest): the stage is the index in the pp communicator
    assert lay.pipelines == ((0, 2, 4, 6), (1, 3, 5, 7)) and lay.stages == 4
    assert lay.stage_of()[4] == 2 and lay.pipeline_of()[5] == 1 and lay.stage_ranks(3) == [6, 7]
    assert lay.micro_batches == 3                                   # the forwards per step, as the metadata says
    assert (lay.schedule, lay.recompute) == ("1f1b", False)
    assert lay.ideal_bubble == pytest.approx(3 / 6)                 # (P-1)/(M+P-1) = 3/6


@pytest.mark.parametrize("trace", [
    Trace.from_table(syn.generate(syn.SyntheticConfig(ranks=2, steps=3))),         # no communicator table
    Trace.from_table(sp.generate(sp.PipelineConfig(stages=1, pipelines=2))),        # a pp of one rank: no pipeline
], ids=["data_parallel", "one_stage"])
def test_no_pipeline_no_analysis(trace):
    assert pipeline.layout(trace) is None and pipeline_of(trace) is None
    assert analyze(trace)["pipeline"] is None


@pytest.mark.parametrize("schedule", sp.SCHEDULES)
@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("micro", [1, 2, 4, 8])
def test_equal_stages_and_free_messages_give_the_ideal_bubble(schedule, stages, micro):
    p = pipeline_of(trace_of(sp.PipelineConfig(stages=stages, micro_batches=micro, schedule=schedule, **FREE)))
    # GPipe and 1F1B alike: window = (M+P-1)(t_f+t_b), each stage busy M(t_f+t_b), so the bubble is exactly
    # (P-1)/(M+P-1), on every stage and every step
    ideal = (stages - 1) / (micro + stages - 1)
    assert p["ideal_bubble"] == pytest.approx(ideal)
    assert [r["bubble"] for r in p["per_step"].to_dict("records")] == pytest.approx([ideal] * len(p["per_step"]))
    assert p["stage_imbalance"] == pytest.approx(1.0)


@pytest.mark.parametrize("schedule", sp.SCHEDULES)
@pytest.mark.parametrize("stages", [2, 4])
@pytest.mark.parametrize("micro", [1, 2, 4, 8])
def test_with_transfer_and_overheads_the_bubble_is_within_the_margin(schedule, stages, micro):
    cfg = sp.PipelineConfig(stages=stages, micro_batches=micro, schedule=schedule)      # transfer 20 µs, ...
    p = pipeline_of(trace_of(cfg))
    # The margin. With stage times t_f, t_b the ideal window is W0 = (M+P-1)(t_f+t_b). Each forward and backward
    # on the critical path can be held up once by a transfer (its receive; or, sending, the wait on its previous
    # send, which ends when that message arrived) and adds its own overheads o: a gap before it, a data loading
    # and a second gap (first and last stage), and three calls (receive, wait, send) that return at once. So
    # W <= W0 + 2(M+P-1)(o + transfer), and bubble - ideal = (1 - ideal)(1 - W0/W) <= (W - W0)/W0.
    overhead = 2 * cfg.gap_ns + cfg.dataload_ns + 3 * cfg.call_ns
    w0 = (micro + stages - 1) * (cfg.forward_ns + cfg.backward_ns)
    margin = 2 * (micro + stages - 1) * (overhead + cfg.transfer_ns) / w0      # 2.8% here: 9 x 84 µs / 27 ms
    assert margin == pytest.approx(2 * (overhead + cfg.transfer_ns) / (cfg.forward_ns + cfg.backward_ns))
    ideal = (stages - 1) / (micro + stages - 1)
    for bubble in p["per_stage"]["bubble"]:
        assert ideal <= bubble <= ideal + margin                    # overheads only ever add to the window
    assert p["bubble"] == pytest.approx(p["per_stage"]["bubble"].mean())


def test_acceptance_1f1b_p2_m4():
    """Issue 13's acceptance 2: 1F1B, P=2, M=4, balanced stages: the measured bubble within the margin of 1/5."""
    cfg = sp.PipelineConfig(stages=2, micro_batches=4, schedule=sp.ONE_F_ONE_B)
    p = pipeline_of(trace_of(cfg))
    # margin 2 (o + transfer) / (t_f + t_b) = 2 (22 + 20) µs / 3 ms = 2.8% (derivation in the test above)
    assert 0.2 <= p["bubble"] <= 0.2 + 0.028


def test_a_pipeline_worked_out_by_hand():
    # P=2, M=2, GPipe (B0 first), t_f = 1 ms, t_b = 2 ms, transfer 0.1 ms, calls, gaps and data loading free.
    # Stage 0: F0 [0,1] Isend@1; F1: Wait on F0's send until stage 1 got it (1.1), F1 [1.1,2.1] Isend@2.1;
    #          B0: Recv [2.1,5.3] (stage 1 sends at 5.2), B0 [5.3,7.3]; B1: Recv [7.3,7.4], B1 [7.4,9.4].
    # Stage 1: F0: Recv [0,1.1], F0 [1.1,2.1]; F1: Recv [2.1,2.2], F1 [2.2,3.2]; B0 [3.2,5.2] Isend@5.2;
    #          B1: Wait [5.2,5.3], B1 [5.3,7.3] Isend@7.3; grad_sync: Wait [7.3,7.4], embedding MPI_Allreduce from
    #          7.4 until stage 0 enters at 9.4 (+ 50 µs).
    cfg = sp.PipelineConfig(stages=2, micro_batches=2, schedule=sp.GPIPE, forward_ns=1_000_000,
                            backward_ns=2_000_000, **{**FREE, "transfer_ns": 100_000})
    p = pipeline_of(trace_of(cfg))
    rows = p["per_stage"].set_index("stage")
    # window [0, 9.4] ms; both stages busy 2 x (1 + 2) = 6 ms
    assert rows["window_s"].tolist() == pytest.approx([9.4e-3, 9.4e-3])
    assert rows["busy_s"].tolist() == pytest.approx([6e-3, 6e-3])
    # stage 0: 0.1 (wait) + 3.2 + 0.1 (receives); stage 1: 1.1 + 0.1 (receives) + 0.1 + 0.1 (waits)
    assert rows["neighbour_s"].tolist() == pytest.approx([3.4e-3, 1.4e-3])
    assert rows["other_mpi_s"].tolist() == pytest.approx([0.0, 2.0e-3])     # the allreduce [7.4, 9.4] in the window
    assert rows["idle_s"].tolist() == pytest.approx([0.0, 0.0], abs=1e-12)
    assert p["bubble"] == pytest.approx(1 - 6 / 9.4) and p["ideal_bubble"] == pytest.approx(1 / 3)
    # Late Sender, per step: stage 1 waits for F0 from 0 to 1 (the send's start; the last 0.1 ms is transfer),
    # stage 0 for B0's gradient from 2.1 to 5.2; F1 and B1 arrive without a wait (send and receive start together)
    late = p["late_senders"].set_index(["stage", "direction"])
    assert late.loc[(1, "forward"), ["sender_stage", "waits", "per_step_s", "worst_microbatch"]].tolist() == \
        pytest.approx([0, 2, 1.0e-3, 0])
    assert late.loc[(0, "backward"), ["sender_stage", "waits", "per_step_s", "worst_microbatch"]].tolist() == \
        pytest.approx([1, 2, 3.1e-3, 0])
    # stage 0's 3.1 ms wait is charged to what stage 1 did since stage 0's previous message (its F1 send, at
    # 2.1): the receive of F1 [2.1,2.2] (0.1 ms outside kernels), F1's forward kernels (1 ms) and B0's backward
    # kernels (2 ms): 3.1 ms, exactly the wait; all for micro-batch 0's gradient
    causes = p["causes"]
    back = causes[causes["stage"] == 0]
    assert back["wait_s"].sum() == pytest.approx(2 * 3.1e-3) and set(back["sender_stage"]) == {1}
    fwd_part = back[back["kernel"].str.endswith("_forward")]["wait_s"].sum()
    assert fwd_part == pytest.approx(2 * 1e-3)
    assert back[back["kernel"] == OUTSIDE]["wait_s"].sum() == pytest.approx(2 * 0.1e-3)
    assert all(m == [0] for m in back["microbatches"])
    assert causes["share"].sum() == pytest.approx(1.0)
    # the largest: matmul_backward of layer 2, 0.348 ms of each step's 2 ms of backward kernels
    assert back.iloc[0]["text"] == (
        "stage 0 waited 0.000696 s for the gradients of micro-batch 0 from stage 1 (rank 1), which computed "
        "matmul_backward (layer 2) before sending them")


@pytest.mark.parametrize("schedule", sp.SCHEDULES)
def test_a_slow_stage_raises_the_others_bubble_and_is_the_root_cause(schedule):
    cfg = sp.PipelineConfig(stages=4, micro_batches=4, schedule=schedule, slow_stage=(1, 2.0), **FREE)
    p = pipeline_of(trace_of(cfg))
    bubble = p["per_stage"].set_index("stage")["bubble"]
    ideal = 3 / 7
    assert bubble[1] < ideal and all(bubble[k] > ideal + 0.05 for k in (0, 2, 3))
    # busy per micro-batch 3, 6, 3, 3 ms: max/mean = 6 / 3.75
    assert p["stage_imbalance"] == pytest.approx(1.6)
    if schedule == sp.GPIPE:
        # GPipe is a flow shop: W = sum_k(f_k + b_k) + (M-1)(max f + max b) = 15 + 3 x 6 = 33 ms
        assert bubble.tolist() == pytest.approx([1 - 12 / 33, 1 - 24 / 33, 1 - 12 / 33, 1 - 12 / 33])
    causes = p["causes"]
    on_slow = causes[causes["sender_stage"] == 1]
    # the stages around it wait most for stage 1, and its kernels (its layer: 1) explain it
    assert on_slow["wait_s"].sum() > 0.5 * causes["wait_s"].sum()
    assert causes.iloc[0]["sender_stage"] == 1 and causes.iloc[0]["layer"] == 1
    assert {"forward", "backward"} == set(on_slow["direction"])    # stage 2 in forward, stage 0 in backward
    assert set(on_slow[on_slow["direction"] == "forward"]["stage"]) == {2}
    assert set(on_slow[on_slow["direction"] == "backward"]["stage"]) == {0}


def test_data_parallel_pipelines_average_over_replicas():
    one = pipeline_of(trace_of(sp.PipelineConfig(stages=2, micro_batches=4, **FREE)))
    two = pipeline_of(trace_of(sp.PipelineConfig(stages=2, pipelines=2, micro_batches=4, **FREE)))
    assert two["per_stage"]["ranks"].tolist() == [[0, 1], [2, 3]]
    assert two["bubble"] == pytest.approx(one["bubble"]) == pytest.approx(1 / 5)
    assert len(two["per_step"]) == 2 * len(one["per_step"])


def test_the_bubble_as_a_share_of_the_step():
    cfg = sp.PipelineConfig(stages=2, micro_batches=2, optimizer_ns=3_000_000, flush_ns=950_000, **FREE)
    p = pipeline_of(trace_of(cfg))
    # 1F1B, P=2, M=2: window 3 x 3 ms = 9 ms, busy 6 ms; the step adds the embedding sync (50 µs), the 3 ms
    # optimizer and the tracer's 0.95 ms flush: 3 ms of bubble in a 13 ms step
    assert p["of_step"] == pytest.approx(3 / 13)


def test_analyze_counts_tokens_once_per_pipeline_and_findings_name_the_bubble():
    cfg = sp.PipelineConfig(stages=2, pipelines=2, micro_batches=4)
    result = analyze(trace_of(cfg))
    # every rank writes the tokens its pipeline trained on (B T M = 1024); stages share them: 2 pipelines x 1024
    assert result["summary"]["tokens_per_step"] == 2 * 4 * 64 * 4
    assert any(f["metric"] == "pipeline.bubble" for f in result["findings"])
    # per layer, a kernel lives on one stage: its imbalance across ranks is the split, so it is not listed
    assert not [r for r in result["imbalance"] if r["scope"] == "ranks" and r["layer"] is not None]
    assert result["parallel"]["pp"] == 2 and result["parallel"]["dp"] == 2


def test_microbatch_ranges():
    assert pipeline.ranges([7, 0, 1, 2, 5, 8]) == "0-2, 5, 7-8"
    assert pipeline.ranges([]) == ""


def test_steps_window_selects_steps():
    cfg = replace(sp.PipelineConfig(stages=2, micro_batches=2, **FREE), steps=4)
    trace = trace_of(cfg)
    window = select(trace, "2:4")
    calls = mpi.calls(trace, window)
    p = pipeline.pipeline(trace, window, calls, waits.wait_states(calls),
                          segments.segments(segments.kernel_records(trace, window)))
    assert sorted(set(p["per_step"]["step"])) == [2, 3]


def test_a_trace_cut_before_its_backwards_has_no_bubble_but_its_waits():
    table = sp.generate(sp.PipelineConfig(stages=2, micro_batches=2, steps=1))
    cut = table.filter(pc.invert(pc.equal(table.column(NAME), "backward")))     # no backward phase recorded
    p = analyze(Trace.from_table(cut))["pipeline"]
    assert (p["bubble"], p["stage_imbalance"], p["per_stage"]) == (None, None, [])
    # the waits are still there; a gradient's receive outside any phase has no micro-batch
    late = {(r["stage"], r["direction"]): r["worst_microbatch"] for r in p["late_senders"]}
    assert late == {(0, "backward"): None, (1, "forward"): 0}
