"""Data-parallel strategies under real `mpiexec`: each one equals a 1-rank run on the global batch; ZeRO-2 also
with gradient accumulation, pipeline stages and sequence groups, and its memory as trainer.memory estimates it.

Tolerances: RTOL = 1e-5 relative on every step's loss and gradient norm (dp_equivalence.py says why).
PARAM_ATOL = 5e-5 on the parameters after 4 AdamW steps at lr 1e-3 (values up to 1.0): AdamW divides by the
gradient's own size, so a parameter whose gradient is a few ulp from zero moves by up to lr in either direction
whatever the summation order. Measured (zero1 and zero2 alike): losses <= 1.4e-8, norms <= 4.0e-7 relative,
parameters <= 1.34e-5. A ZeRO-2 bucket not zeroed after its layer, or earlier micro-batches left out of the
shard's sum, gives losses 7e-4, norms 0.18 and parameters 7.7e-3 off or worse (measured by breaking each).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.config import TrainConfig, model_config
from trainer.dp import DPSync, Zero2, _norm_sq_outside, shard_bounds, uses_grad_bucket
from trainer.launcher import Launcher
from trainer.memory import estimate, training_bytes
from trainer.model import GPT2
from trainer.optim import AdamW
from trainer.params import ParamLayout, init_params

SCRIPT = Path(__file__).parent / "mpi" / "dp_equivalence.py"
RTOL, PARAM_ATOL = 1e-5, 5e-5
TINY = model_config("tiny")      # L=2 C=32 Vp=256 maxT=32: 34,688 parameters


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])   # 3 ranks x 2 threads oversubscribe the 2-core machine on purpose
def test_every_strategy_matches_one_rank_on_the_global_batch(ranks):
    out = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(SCRIPT)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ranks"] == ranks
    assert set(result["strategies"]) == {s.value for s in DPSync} | {"allreduce+scatter"}
    for name, r in result["strategies"].items():
        assert r["max_param_diff_across_ranks"] == 0.0, name      # replicas stay bit-identical
        assert r["max_rel_loss_err"] <= 1e-5, (name, r["losses"], r["reference"])
        assert r["max_rel_norm_err"] <= 1e-5, name
        assert r["ok"], name


@pytest.mark.parametrize("n,ranks", [(10, 3), (2, 3), (7, 1), (12, 4)])
def test_shards_partition_the_buffer(n, ranks):
    bounds = [shard_bounds(n, ranks, r) for r in range(ranks)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1      # e.g. 10 over 3 ranks: 3, 3, 4


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])   # 4 ranks oversubscribe the 2-core machine on purpose
def test_zero2_matches_one_rank_in_every_layout(ranks):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(SCRIPT), "zero2"], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    cases = json.loads(out.stdout.strip().splitlines()[-1])["cases"]
    # zero1 and zero2 each: grad_accum 1 and 2, sp=2; on 4 ranks also pp=2 (1F1B, M=2; GPipe, M=4), sp=2 x pp=2
    assert len(cases) == (6 if ranks == 2 else 12)
    for name, r in cases.items():
        assert r["max_param_diff_across_replicas"] == 0.0, name    # the ranks that share parameters agree exactly
        assert r["max_rel_loss_err"] <= RTOL, (name, r["losses"], r["reference"])
        assert r["max_rel_norm_err"] <= RTOL, name
        assert r["max_abs_param_err"] <= PARAM_ATOL, name
        assert r["estimate_err_bytes"] == 0, name                  # trainer.memory's estimate is the allocation
    # the gradient memory of the largest rank, 4-layer tiny (P = 60,096: non-layer 9,280 + 4 x 12,704 per layer):
    # zero1 keeps the whole buffer and the shard of the sum; zero2 the bucket (9,280 + 12,704 = 21,984) and the
    # shard. 2 ranks, shard 30,048: zero1 (60,096 + 30,048) x 4 = 360,576; zero2 (21,984 + 30,048) x 4 = 208,128.
    # 4 ranks, shard 15,024: zero1 300,480; zero2 148,032. With pp=2 (stage 0: wte, wpe and 2 layers = 34,624;
    # stage 1: wte, lnf and 2 layers = 33,664) over 2 ranks (dp, or sp), stage 0's shard is 17,312: zero1
    # (34,624 + 17,312) x 4 = 207,744; zero2 (9,216 + 12,704 + 17,312) x 4 = 156,928
    want = {2: {"zero1": 360_576, "zero2": 208_128}, 4: {"zero1": 300_480, "zero2": 148_032}}[ranks]
    for name, r in cases.items():
        sync = name.split("dp_sync=")[1].split()[0]
        pipelined = {"zero1": 207_744, "zero2": 156_928}
        assert r["gradient_bytes"] == (pipelined if "pp=" in name else want)[sync], name


class _Ranks:
    """The one thing make_strategy asks a communicator before choosing a strategy: its size."""
    def __init__(self, n: int):
        self.n = n

    def Get_size(self) -> int:
        return self.n


def test_only_zero2_over_several_ranks_needs_the_gradient_bucket():
    assert uses_grad_bucket(DPSync.zero2, _Ranks(2))
    assert not uses_grad_bucket(DPSync.zero2, _Ranks(1))     # one rank: Local, on the whole buffer
    assert not uses_grad_bucket(DPSync.zero2, None)
    assert not any(uses_grad_bucket(s, _Ranks(2)) for s in DPSync if s != DPSync.zero2)


def test_zero2_refuses_a_model_with_the_whole_gradient_buffer():
    model = GPT2(TINY, init_params(TINY, 1), 2, 16, Launcher(1))
    with pytest.raises(ValueError, match="grad_bucket=True"):
        Zero2(model, TrainConfig(), model.run, _Ranks(2))


def test_the_norm_leaves_out_every_skipped_range():
    opt = AdamW(1, TrainConfig(), Launcher(1))
    grads = np.arange(10, dtype=np.float32)
    # kept: 0 1 | 4 5 6 | 9 -> 0 + 1 + 16 + 25 + 36 + 81 = 159, in whatever order the ranges come
    assert _norm_sq_outside(opt, grads, 0, ((2, 4), (7, 9))) == 159.0
    assert _norm_sq_outside(opt, grads, 0, ((7, 9), (2, 4))) == 159.0
    # a shard starting at buffer element 5 (a ZeRO rank's): the range (2, 7) cuts its first 2 -> 2..9 squared, 284
    assert _norm_sq_outside(opt, grads, 5, ((2, 7),)) == 284.0
    assert _norm_sq_outside(opt, grads, 0, ()) == 285.0     # 0..9 squared
    assert _norm_sq_outside(opt, grads, 0, ((0, 10),)) == 0.0


def test_zero_memory_by_hand():
    # tiny: P = 34,688, bucket 9,280 + 12,704 = 21,984. Float32 bytes of the largest rank's parameters, gradients
    # (the model's and the shard of the sum) and moments:
    layout = ParamLayout.for_model(TINY)
    assert training_bytes(layout) == 4 * 4 * 34_688 == 555_008                   # every buffer whole
    assert training_bytes(layout, DPSync.reduce_bcast, 2) == 555_008             # the root holds all moments
    assert training_bytes(layout, DPSync.zero2, 1) == 555_008                    # one rank: no sharding
    # 2 ranks, shard 17,344: zero1 4 x (34,688 + 34,688 + 3 x 17,344) = 485,632; zero2 4 x (34,688 + 21,984 +
    # 3 x 17,344) = 434,816. 3 ranks: the largest shard is ceil(34,688 / 3) = 11,563 -> 4 x 91,361 = 365,444
    assert training_bytes(layout, DPSync.zero1, 2) == 485_632
    assert training_bytes(layout, DPSync.zero2, 2) == 434_816
    assert training_bytes(layout, DPSync.zero2, 3) == 365_444
    assert max(hi - lo for lo, hi in (shard_bounds(34_688, 3, r) for r in range(3))) == 11_563
    # the run's estimate (what --ranks 2 --dp-sync zero2 is checked against before it starts): activations as ever
    est = estimate(TINY, 2, 16, dp_sync=DPSync.zero2, grad_ranks=2)
    assert (est.training, est.activations) == (434_816, 382_336)


def test_zero2_saves_most_of_the_gradient_memory_of_d12():
    # d12: P = 124,475,904 (Vp = 50,304); non-layer 50,304 x 768 + 1,024 x 768 + 2 x 768 = 39,421,440 (wte is
    # 31% of the model), one layer 7,087,872 -> bucket 46,509,312. Gradient bytes per rank over 2 ranks:
    # zero1 4 x (124,475,904 + 62,237,952) = 746,855,424; zero2 4 x (46,509,312 + 62,237,952) = 434,989,056
    layout = ParamLayout.for_model(model_config("d12"))
    assert (layout.size, layout.bucket_size) == (124_475_904, 46_509_312)
    saved = training_bytes(layout, DPSync.zero1, 2) - training_bytes(layout, DPSync.zero2, 2)
    assert saved == 746_855_424 - 434_989_056 == 4 * (124_475_904 - 46_509_312)
