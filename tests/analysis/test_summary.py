import json

import pytest

from analysis.summary import flops_per_token, summary
from analysis.window import select
from gpt2trace.format import schema
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn

RUN = {"model": {"n_layer": 2, "n_head": 2, "n_embd": 8, "vocab_size": 16, "max_seq_len": 4,
                 "padded_vocab_size": 16, "num_parameters": 1000},
       "train": {"batch_size": 4, "seq_len": 4, "grad_accum": 1}, "parallel": {"ranks": 2, "threads": 1}}


def _trace(metadata: bool, counters: bool = True) -> Trace:
    # 2 ranks x 1 thread, steps 0, 1, 2 of 1 s, 1 s and 1.5 s; each rank counts 16 tokens per step.
    recs = []
    for rank in (0, 1):
        recs.append(syn.state(rank, 0, 0, 3.5, State.RUNNING))
        for step, (a, b) in enumerate(((0, 1), (1, 2), (2, 3.5))):
            recs.append(syn.phase(rank, a, b, "forward", step))
            if counters:
                recs.append(syn.counter(rank, b, "tokens", 16, step))
    meta = {schema.META_RUN: json.dumps(RUN).encode(),
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


def test_summary_without_metadata_still_works():
    trace = _trace(metadata=False)
    s = summary(trace, select(trace))
    assert s["tokens_per_s"] == pytest.approx(25.6)
    assert (s["flops_per_step"], s["achieved_gflops"], s["mfu"]) == (None, None, None)


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
