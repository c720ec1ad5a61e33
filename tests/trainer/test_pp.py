"""Pipeline parallelism: schedules, the stage split, stage parameters and memory, and (under real `mpiexec`) every
schedule, micro-batch count, recompute and data-parallel strategy against a 1-rank run on the global batch.

Tolerances: RTOL = 1e-5 relative on every step's loss and gradient norm, PARAM_ATOL = 1e-5 on the parameters after
3 AdamW steps (values up to 1.0). With one micro-batch a pipeline runs exactly the 1-rank kernels in the same order:
losses are bit-identical, the gradient norm differs only by the order its per-stage sums are added (~1e-15). With
M > 1 the tied embedding's gradient is summed in another order (stage 0's encoder part and the last stage's head
part accumulate separately over the micro-batches, then add), a few ulp that AdamW's first steps amplify: measured
losses <= 4.3e-9, norms <= 6.1e-8 relative, parameters <= 1.4e-6 absolute. A real bug is far larger: a missing
tied-gradient sum, a micro-batch's activation sent to the wrong slot or a wrong loss scale move the loss by 1e-3.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.config import DataLoading, ParallelConfig, PPSchedule, model_config
from trainer.errors import ConfigError
from trainer.launcher import Launcher
from trainer.memory import estimate, micro_batch_slots
from trainer.model import GPT2
from trainer.parallel.grid import GridLayout
from trainer.parallel.schedule import BACKWARD, FORWARD, peak_in_flight, schedule
from trainer.parallel.stages import Stage, balanced_layers, plan
from trainer.params import ParamLayout, init_params

SCRIPT = Path(__file__).parent / "mpi" / "pp_equivalence.py"
RTOL, PARAM_ATOL = 1e-5, 1e-5
TINY4 = model_config("tiny", n_layer=4)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])     # 4 ranks oversubscribe the 2-core machine on purpose
def test_pipelines_match_one_rank_on_the_global_batch(ranks):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(SCRIPT), "1"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    cases = json.loads(out.stdout.strip().splitlines()[-1])["cases"]
    # 2 ranks: P=2 x both schedules x M in {1,2,4,8}, + recompute under both; 4 ranks: P=4 x both x M in {1,4,8},
    # 2 recompute, 2 pipelines x every --dp-sync, zero1 + recompute, uneven --pp-layers, sp=2 x pp=2
    assert len(cases) == (10 if ranks == 2 else 16)
    for name, r in cases.items():
        assert r["max_param_diff_across_replicas"] == 0.0, name
        assert r["max_rel_loss_err"] <= RTOL, (name, r["losses"], r["reference"])
        assert r["max_rel_norm_err"] <= RTOL, name
        assert r["max_abs_param_err"] <= PARAM_ATOL, name
        if "grad_accum=1" in name:       # one micro-batch: the 1-rank kernels in the 1-rank order
            assert r["losses"] == r["reference"], name
    # recompute reruns each layer's forward from its kept input: the same kernels on the same values, so the same
    # losses bit for bit as the run that kept everything
    if ranks == 2:
        for s in ("gpipe", "1f1b"):
            kept = cases[f"pp=2 pp_schedule={s} grad_accum=4"]["losses"]
            assert cases[f"pp=2 pp_schedule={s} recompute=True grad_accum=4"]["losses"] == kept


def test_1f1b_runs_warmup_forwards_then_alternates():
    # P=4, M=6, stage 1: 2 warm-up forwards, then F2 B0 F3 B1 F4 B2 F5 B3, then B4 B5
    passes = [f"{k}{m}" for k, m in schedule("1f1b", 1, 4, 6)]
    assert passes == ["F0", "F1", "F2", "B0", "F3", "B1", "F4", "B2", "F5", "B3", "B4", "B5"]
    # the last stage alternates from the start
    assert [f"{k}{m}" for k, m in schedule("1f1b", 3, 4, 3)] == ["F0", "B0", "F1", "B1", "F2", "B2"]


@pytest.mark.parametrize("P,M", [(2, 1), (2, 8), (4, 2), (4, 16), (3, 5)])
def test_every_schedule_runs_each_micro_batch_once_each_way_within_its_memory_bound(P, M):
    for name in ("gpipe", "1f1b"):
        for k in range(P):
            passes = schedule(name, k, P, M)
            assert sorted(m for kind, m in passes if kind == FORWARD) == list(range(M))
            assert sorted(m for kind, m in passes if kind == BACKWARD) == list(range(M))
            done = set()
            for kind, m in passes:       # a backward follows its own forward
                assert kind == FORWARD or (FORWARD, m) in done
                done.add((kind, m))
            slots = micro_batch_slots(Stage(k, P, 0, 1), name, M)
            assert peak_in_flight(passes) == slots          # GPipe holds M, 1F1B min(P - k, M)
            assert slots == (M if name == "gpipe" else min(P - k, M))
            # a slot (m mod slots) is free again when the next micro-batch needs it
            held: dict[int, int] = {}
            for kind, m in passes:
                if kind == FORWARD:
                    assert m % slots not in held
                    held[m % slots] = m
                else:
                    assert held.pop(m % slots) == m


def test_balanced_layers_give_the_lm_head_its_cost():
    # d12 at T=1024: a layer 12*768^2 + 1024*768 = 7.86M multiply-adds per token, the head 50304*768 = 38.6M
    # (4.9 layers). 8 + 4 layers: stage 0 62.9M, stage 1 31.5M + 38.6M = 70.1M; 9 + 3 would make stage 0 70.8M.
    assert balanced_layers(model_config("d12"), 1024, 2) == (8, 4)
    # the tiny model's head (256 x 32 = 8K) is smaller than a layer (13.3K): equal counts
    assert balanced_layers(TINY4, 32, 2) == (2, 2)
    assert balanced_layers(TINY4, 32, 4) == (1, 1, 1, 1)
    stages = plan(model_config("d12"), 1024, 2)
    assert [(s.first_layer, s.n_layer) for s in stages] == [(0, 8), (8, 4)]


def test_stage_splits_that_cannot_work_are_refused():
    with pytest.raises(ConfigError, match="exceeds the model's 4 layers"):
        plan(TINY4, 32, 5)
    with pytest.raises(ConfigError, match="must add up to the model's 4 layers"):
        plan(TINY4, 32, 2, (3, 3))
    with pytest.raises(ConfigError, match="one layer count per stage"):
        ParallelConfig(ranks=2, pp=2, pp_layers=(4,))
    with pytest.raises(ConfigError, match="must divide the 6 ranks"):
        ParallelConfig(ranks=6, pp=4)
    with pytest.raises(ConfigError, match="scatter is not supported"):
        ParallelConfig(ranks=2, pp=2, data_loading=DataLoading.scatter)


def test_the_grid_puts_a_pipelines_stages_on_adjacent_ranks():
    # 8 ranks, sp=2, pp=2: rank = (dp * 2 + pp) * 2 + sp
    layout = GridLayout.from_config(ParallelConfig(ranks=8, sp=2, pp=2))
    assert layout.groups(("pp",)) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert layout.groups(("sp", "dp")) == [(0, 1, 4, 5), (2, 3, 6, 7)]


def test_stages_hold_their_layers_and_the_tied_embedding_at_both_ends():
    whole = ParamLayout.for_model(TINY4)
    flat = init_params(TINY4, 3)
    stages = plan(TINY4, 32, 3, (1, 2, 1))
    layouts = [ParamLayout.for_stage(TINY4, s) for s in stages]
    assert list(layouts[0].shapes)[:2] == ["wte", "wpe"] and "lnfw" not in layouts[0].shapes
    assert "wte" in layouts[2].shapes and "lnfw" in layouts[2].shapes and "wpe" not in layouts[2].shapes
    assert "wte" not in layouts[1].shapes and layouts[1].shapes["qkvw"][0] == 2
    # every parameter is on exactly one stage, except wte on the first and last: sizes add up to the model + wte
    assert sum(lay.size for lay in layouts) == whole.size + int(np.prod(whole.shapes["wte"]))
    back = np.zeros_like(flat)
    for lay in layouts:
        lay.put(whole, lay.take(whole, flat), back)
    assert np.array_equal(back, flat)
    # stage 1 holds layers 1-2: its layer 0 is the model's layer 1
    assert np.array_equal(layouts[1].views(layouts[1].take(whole, flat))["fcw"][0], whole.views(flat)["fcw"][1])


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("schedule_name", ["gpipe", "1f1b"])
def test_the_stage_memory_estimate_is_what_the_stage_allocates(recompute, schedule_name):
    for stage in plan(TINY4, 16, 2):
        slots = micro_batch_slots(stage, schedule_name, 4)
        params = ParamLayout.for_stage(TINY4, stage).take(ParamLayout.for_model(TINY4), init_params(TINY4, 1))
        model = GPT2(TINY4, params, 2, 16, Launcher(1), stage=stage, slots=slots, recompute=recompute)
        est = estimate(TINY4, 2, 16, stage=stage, slots=slots, recompute=recompute)
        assert est.activations == model.activation_bytes
        assert est.parameters == params.nbytes


def test_recompute_keeps_a_fraction_of_the_activations():
    # per micro-batch the whole tiny model keeps 2 x 16 x 32 x (1 + 4) floats of layer inputs instead of every
    # activation; GPipe at M=8 on a 4-layer model: far below
    full = estimate(TINY4, 2, 16, stage=plan(TINY4, 16, 2)[0], slots=8)
    kept = estimate(TINY4, 2, 16, stage=plan(TINY4, 16, 2)[0], slots=8, recompute=True)
    assert kept.activations < full.activations / 4


def test_one_stage_with_recompute_equals_the_plain_model():
    from trainer.data import TokenLoader, synthetic_corpus
    cfg = TINY4
    x, y = TokenLoader(synthetic_corpus(cfg.vocab_size, 4096, 1), 2, 16).batch(0)
    grads = []
    for recompute in (False, True):
        model = GPT2(cfg, init_params(cfg, 1), 2, 16, Launcher(1), recompute=recompute)
        loss = model.forward(x, y)
        model.zero_grad()
        model.backward(1.0 / 32)
        grads.append((loss, model.grads.copy()))
    assert grads[0][0] == grads[1][0]
    assert np.array_equal(grads[0][1], grads[1][1])


def test_pp_schedule_values_are_the_cli_names():
    assert {s.value for s in PPSchedule} == {"gpipe", "1f1b"}
