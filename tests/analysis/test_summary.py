import json

import pytest

from analysis.summary import flops_per_token, summary
from analysis.window import select
from gpt2trace.format import schema
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import grid_trace
from gpt2trace.testing import synthetic as syn

RUN = {"model": {"n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 16, "max_seq_len": 4,
                 "padded_vocab_size": 16, "num_parameters": 1000},
       "train": {"batch_size": 4, "seq_len": 4, "grad_accum": 1}, "parallel": {"ranks": 2, "threads": 1}}


def _trace(metadata: bool, counters: bool = True, run: dict = RUN) -> Trace:
    # 2 ranks x 1 thread, steps 0, 1, 2 of 1 s, 1 s and 1.5 s; each rank counts 16 tokens per step.
    recs = []
    for rank in (0, 1):
        recs.append(syn.state(rank, 0, 0, 3.5, State.RUNNING))
        for step, (a, b) in enumerate(((0, 1), (1, 2), (2, 3.5))):
            recs.append(syn.phase(rank, a, b, "forward", step))
            if counters:
                recs.append(syn.counter(rank, b, "tokens", 16, step))
    meta = {schema.META_RUN: json.dumps(run).encode(),
            schema.META_PEAK: json.dumps({"gflops_per_core": 0.001, "cores": 2}).encode()} if metadata else None
    return Trace.from_table(syn.from_records(recs, meta))


def test_flops_per_token():
    # 6 N + 6 L T C = 6 * 1000 + 6 * 2 * 4 * 8 = 6384
    assert flops_per_token(RUN) == 6384
    assert flops_per_token(None) is None


def test_summary_with_metadata():
    trace = _trace(metadata=True)
    s = summary(trace, select(trace))
    # window: steps 1, 2 (warm-up left out) = [1, 3.5]: 2.5 s, median of (1, 1.5) = 1.25
    assert (s["runtime_s"], s["steps"], s["ranks"], s["threads_per_rank"]) == (2.5, 2, 2, 1)
    assert (s["step_s_median"], s["step_s_min"], s["step_s_max"]) == pytest.approx((1.25, 1, 1.5))
    # tokens: 2 ranks x 16 x 2 steps = 64 -> 64 / 2.5 = 25.6 tokens/s; FLOPs 6384 x 64 = 408576
    # -> 408576 / 2.5 / 1e9 = 1.634304e-4 GFLOP/s, per core (2) 8.17152e-5, MFU 8.17152e-5 / 0.001
    assert s["tokens_per_s"] == pytest.approx(25.6)
    assert s["achieved_gflops"] == pytest.approx(1.634304e-4)
    assert s["mfu"] == pytest.approx(0.0817152)
    assert summary(trace, select(trace), peak_gflops=0.01)["mfu"] == pytest.approx(0.00817152)


@pytest.mark.parametrize("recompute, study, executed", [
    # 25.6 tokens/s on 2 cores = 12.8 tokens/s per core. The study's formula: 2 N x 3 (x 4 with recomputation)
    # FLOPs per token: 2 x 1000 x 3 x 12.8 = 76800 FLOP/s = 7.68e-8 TFLOPS (x 4: 1.024e-7). Executed: 6384 FLOPs
    # per token (6N + 6LTC), and with recomputation the blocks' forward again: 24 L C^2 + 2 L T C = 3072 + 128 =
    # 3200 more: 6384 x 12.8 = 8.17152e-8, 9584 x 12.8 = 1.226752e-7 TFLOPS.
    (False, 7.68e-8, 8.17152e-8), (True, 1.024e-7, 1.226752e-7)])
def test_tflops_per_core_by_the_study_formula_and_as_executed(recompute, study, executed):
    run = {**RUN, "parallel": {**RUN["parallel"], "recompute": recompute}}
    trace = _trace(metadata=True, run=run)
    s = summary(trace, select(trace))
    assert (s["recompute"], s["study_passes"]) == (recompute, 4 if recompute else 3)
    assert s["study_tflops_per_core"] == pytest.approx(study)
    assert s["hardware_flops_per_token"] == (9584 if recompute else 6384)
    assert s["hardware_tflops_per_core"] == pytest.approx(executed)


def test_summary_without_metadata_still_works():
    trace = _trace(metadata=False)
    s = summary(trace, select(trace))
    assert s["tokens_per_s"] == pytest.approx(25.6)
    assert (s["flops_per_step"], s["achieved_gflops"], s["mfu"]) == (None, None, None)
    assert (s["study_tflops_per_core"], s["hardware_tflops_per_core"]) == (None, None)


def test_tokens_from_metadata_when_no_counter():
    trace = _trace(metadata=True, counters=False)
    # B * T * grad_accum * ranks = 4 * 4 * 1 * 2 = 32 per step, 2 steps in 2.5 s
    assert summary(trace, select(trace))["tokens_per_s"] == pytest.approx(64 / 2.5)


def test_phases_table():
    # both ranks: forward in every step; the window (steps 1, 2) is 2.5 s long, 2 ranks -> 5 rank-seconds;
    # forward lasts 1 + 1.5 = 2.5 s per rank: 5 s in 4 records, mean 1.25, share 5 / 5 = 1
    trace = _trace(metadata=False)
    table = summary(trace, select(trace))["phases"]
    assert table.to_dict("records") == [{"phase": "forward", "count": 4, "total_s": 5.0, "mean_s": 1.25,
                                         "share": 1.0}]


def test_no_step_means_no_throughput():
    # A --steps 0 run: metadata says B*T per step, but no step ran, so there are no tokens and no FLOPs to
    # divide by the runtime (the summary once reported tokens/s and MFU for a run that trained nothing).
    recs = [syn.state(0, 0, 0, 0.05, State.RUNNING)]
    meta = {schema.META_RUN: json.dumps(RUN).encode(),
            schema.META_PEAK: json.dumps({"gflops_per_core": 0.001, "cores": 2}).encode()}
    trace = Trace.from_table(syn.from_records(recs, meta))
    s = summary(trace, select(trace))
    assert s["tokens_per_s"] is None and s["mfu"] is None and s["achieved_gflops"] is None


@pytest.mark.parametrize("trace,degrees,dims,source", [
    # the run metadata's grid (tp fastest, as the trainer lays the ranks out), shown dp, tp, pp, sp
    (lambda: Trace.from_table(grid_trace.tp_dp_trace()), "dp 2 x tp 2 x pp 1 x sp 1",
     [["tp", 2], ["sp", 1], ["pp", 1], ["dp", 2]], "run metadata grid"),
    # no grid: the degrees of the run ({ranks: 2}: sp 1, pp 1, dp 2)
    (lambda: _trace(metadata=True), "dp 2 x pp 1 x sp 1", [["sp", 1], ["pp", 1], ["dp", 2]], "run metadata degrees"),
    # no run metadata at all: one dp dimension of the 2 ranks
    (lambda: _trace(metadata=False), "dp 2", [["dp", 2]], "one dp dimension of all ranks")])
def test_the_summary_shows_the_degrees_of_the_run(trace, degrees, dims, source):
    t = trace()
    s = summary(t, select(t))
    assert (s["degrees"], s["grid"]) == (degrees, {"dims": dims, "source": source})
