import numpy as np
import pytest

from analysis import segments
from analysis.imbalance import imbalance
from analysis.window import select


def _rows(trace):
    window = select(trace)
    kern = segments.kernel_records(trace, window)
    ranks = np.unique(kern["rank"])
    return imbalance(kern, segments.segments(kern), ranks)


def test_across_ranks(late_rank):
    out = _rows(late_rank)
    # gelu_forward: rank 0 2 s, rank 1 5 s: mean 3.5, max 5, 5 / 3.5, lost (5 - 2) + 0 = 3, slowest rank 1.
    # matmul_forward takes 4 s on both: no loss, no row. The per-kernel row and the layer-1 row agree.
    assert out[["scope", "kernel", "layer", "slowest"]].values.tolist() == [
        ["ranks", "gelu_forward", None, "1"], ["ranks", "gelu_forward", 1, "1"]]
    for _, row in out.iterrows():
        assert (row["mean_s"], row["max_s"], row["imbalance"], row["lost_s"]) == pytest.approx((3.5, 5, 5 / 3.5, 3))


def test_across_threads(slow_thread):
    out = _rows(slow_thread)
    # matmul_forward L0: threads 2, 2, 4 s: mean 8/3, max 4, imbalance 1.5, lost 2 + 2 + 0 = 4, slowest 0.2.
    # gelu_forward: 2 s on every thread, no row. One rank: no 'ranks' rows.
    assert out[["scope", "kernel", "layer", "rank", "count", "slowest"]].values.tolist() == [
        ["threads", "matmul_forward", None, 0, 3, "0.2"], ["threads", "matmul_forward", 0, 0, 3, "0.2"]]
    for _, row in out.iterrows():
        assert (row["mean_s"], row["max_s"], row["imbalance"], row["lost_s"]) == pytest.approx((8 / 3, 4, 1.5, 4))


def test_a_layer_is_compared_only_across_the_ranks_that_hold_it():
    # 2 pipelines x 2 stages (ranks 0, 2 hold stage 0 = layers 0-1; ranks 1, 3 stage 1 = layers 2-3), stage 1 slow:
    # a kernel x layer row compares the 2 replicas of its stage (equal work: no time lost), never stage 0 against
    # stage 1; the all-layers rows still compare every rank (the stages' different work is real imbalance)
    from gpt2trace.format.reader import Trace
    from gpt2trace.testing import synthetic_pipeline as sp
    trace = Trace.from_table(sp.generate(sp.PipelineConfig(stages=2, pipelines=2, slow_stage=(1, 2.0))))
    rows = _rows(trace)
    across = rows[rows["scope"] == "ranks"]
    per_layer = across[across["layer"].notna()]
    assert (per_layer["count"] == 2).all()
    assert (per_layer["lost_s"] < 0.05 * across["lost_s"].max()).all()
    whole = across[across["layer"].isna()]
    assert len(whole) and (whole["count"] == 4).all()
