"""`--schedule tasks` against the PyTorch reference state (tests/trainer/test_model.py's) and against forkjoin,
at 1, 2 and 3 threads, with block sizes that cut the reference's B*T = 32 rows into several blocks.

Tolerances: the reference test's own (LOGITS_ATOL, GRAD_RTOL_OF_MAX, LOSS_ATOL, PARAMS_ATOL; it says why). Against
forkjoin: every step's loss within LOSS_RTOL relative and the parameters after 10 AdamW steps within PARAMS_ATOL:
the tasks compute each element as forkjoin does except that BLAS gets other block shapes and the gradient norm
other partial sums, so gradients differ by float32 rounding, which AdamW's division by the gradient's own size
can turn into up to lr on a parameter whose gradient is near 0 (see tests/trainer/test_dp.py). Measured at 1, 2, 3
threads: losses <= 6.4e-9 relative, parameters <= 2.9e-6 (forkjoin at 2 vs 1 threads differs as much); against
the PyTorch reference: losses 1.0e-6, parameters 4.0e-6, as forkjoin's.
The task schedule does not depend on the thread count: which thread runs a block changes no arithmetic, so 1, 2
and 3 threads give bit-identical results.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.checkpoint import read_checkpoint
from trainer.config import TrainConfig
from trainer.dp import make_strategy
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.params import PARAM_NAMES
from trainer.tasks.launcher import TaskLauncher
from trainer.train import train

REF = Path(__file__).parent.parent / "reference"
LOGITS_ATOL, GRAD_RTOL_OF_MAX, LOSS_ATOL, PARAMS_ATOL = 2e-6, 1e-5, 2e-5, 5e-5   # tests/trainer/test_model.py's
LOSS_RTOL = 1e-6


@pytest.fixture(scope="module")
def ref():
    state = dict(np.load(REF / "tiny_state.npz"))
    cfg, flat = read_checkpoint(REF / "tiny_model.bin")
    return state, cfg, flat


class _Fixed:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def batch(self, k):
        return self.x, self.y


class _Logs:
    """An observer keeping the task logs."""
    def __init__(self):
        self.logs = []

    def __getattr__(self, name):            # every other Observer call: nothing to do
        from trainer.train import NullObserver
        return getattr(NullObserver(), name)

    def tasks(self, log):
        self.logs.append(log)


def _tcfg(state, steps=10):
    return TrainConfig(batch_size=int(state["B"]), seq_len=int(state["T"]), steps=steps, lr=float(state["lr"]),
                       weight_decay=float(state["weight_decay"]), beta1=float(state["beta1"]),
                       beta2=float(state["beta2"]), eps=float(state["eps"]))


def _train(ref, run, steps=10, observer=None):
    state, cfg, flat = ref
    m = GPT2(cfg, flat.copy(), int(state["B"]), int(state["T"]), run)
    tcfg = _tcfg(state, steps)
    dp = make_strategy("allreduce", m, tcfg, run, None)
    try:
        history = train(m, _Fixed(state["x"], state["y"]), tcfg, dp, observer=observer)
    finally:
        run.close()
    return m, history


@pytest.mark.parametrize("nthreads,block", [(1, 8), (2, 8), (3, 8), (2, 5), (3, 64)])
def test_forward_and_backward_match_the_reference(ref, nthreads, block):
    state, cfg, flat = ref
    run = TaskLauncher(nthreads, block)
    try:
        m = GPT2(cfg, flat.copy(), int(state["B"]), int(state["T"]), run)
        loss = m.forward(state["x"], state["y"])        # the forward's taskwait is where the loss is read
        logits = m.slots[0].a["logits"].reshape(state["logits"].shape)
        np.testing.assert_allclose(logits, state["logits"], rtol=0, atol=LOGITS_ATOL)
        assert loss == pytest.approx(float(state["loss"]), abs=LOSS_ATOL)
        m.zero_grad()
        m.backward(1.0 / state["x"].size)
        run.taskwait()
    finally:
        run.close()
    for name in PARAM_NAMES:
        want = state[f"grad_{name}"]
        err = np.abs(m.gp[name] - want).max()
        assert err <= GRAD_RTOL_OF_MAX * np.abs(want).max(), f"grad {name}: max error {err:.3g}"
    assert not m.gp["wte"][cfg.vocab_size:].any()


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_ten_steps_match_the_reference_and_forkjoin(ref, nthreads):
    state = ref[0]
    m, history = _train(ref, TaskLauncher(nthreads, 8))
    np.testing.assert_allclose([h.loss for h in history], state["losses"], rtol=0, atol=LOSS_ATOL)
    np.testing.assert_allclose(m.params, m.layout.from_llmc(state["params_after"]), rtol=0, atol=PARAMS_ATOL)
    fj, fj_history = _train(ref, Launcher(nthreads))
    np.testing.assert_allclose([h.loss for h in history], [h.loss for h in fj_history], rtol=LOSS_RTOL, atol=0)
    np.testing.assert_allclose([h.grad_norm for h in history], [h.grad_norm for h in fj_history], rtol=LOSS_RTOL)
    np.testing.assert_allclose(m.params, fj.params, rtol=0, atol=PARAMS_ATOL)


def test_the_thread_count_changes_no_bit(ref):
    runs = [_train(ref, TaskLauncher(n, 8), steps=3)[0] for n in (1, 2, 3)]
    for m in runs[1:]:
        assert np.array_equal(m.params, runs[0].params)


def test_the_model_s_task_log_keeps_every_dependency(ref):
    """Three steps on 3 threads: every task was picked after its predecessors were done, including those of an
    earlier log; the backward's and update's kernels show up under forkjoin's names; AdamW ran per layer (layers 0
    and 1, and -1 for the embeddings and final LayerNorm)."""
    obs = _Logs()
    _train(ref, TaskLauncher(3, 8), steps=3, observer=obs)
    assert len(obs.logs) == 6               # per step: the forward's taskwait and the step's
    done = {}
    for log in obs.logs:
        for i in range(len(log)):
            for p in log.predecessors(i).tolist():
                assert p in done or p in set(log.task.tolist())
        done.update(zip(log.task.tolist(), log.done_ns.tolist()))
        own = dict(zip(log.task.tolist(), log.done_ns.tolist()))
        for i in range(len(log)):
            assert all({**done, **own}[p] <= log.pick_ns[i] for p in log.predecessors(i).tolist())
    last = obs.logs[-1]
    names = {last.names[k] for k in last.kernel.tolist()}
    assert {"matmul_backward", "layernorm_backward", "attention_backward", "adamw_update",
            "grad_norm_squared", "zero_fill", "encoder_backward"} <= names
    adamw = last.kernel == last.names.index("adamw_update")
    assert set(last.layer[adamw].tolist()) == {-1, 0, 1}
    # the top layer's update waits only for that layer's gradient tasks, not for the backward of the layer below
    layer_of = dict(zip(last.task.tolist(), last.layer.tolist()))
    top = np.flatnonzero(adamw & (last.layer == 1))
    assert len(top) and all(layer_of[p] == 1 for i in top for p in last.predecessors(i).tolist())
    ids = np.concatenate([g.task for g in obs.logs])
    assert len(np.unique(ids)) == len(ids)      # unique over the run


def test_gradient_accumulation_matches_forkjoin(ref):
    """--grad-accum 2: the update's tasks are submitted in the last micro-batch's backward only, after the first
    one's gradients were accumulated (a taskwait ends each forward)."""
    state, cfg, flat = ref
    out = []
    for run in (TaskLauncher(2, 8), Launcher(2)):
        m = GPT2(cfg, flat.copy(), int(state["B"]), int(state["T"]), run)
        tcfg = TrainConfig(batch_size=int(state["B"]), seq_len=int(state["T"]), steps=3, lr=1e-3, grad_accum=2)
        try:
            history = train(m, _Fixed(state["x"], state["y"]), tcfg, make_strategy("allreduce", m, tcfg, run, None))
        finally:
            run.close()
        out.append((np.array([h.loss for h in history]), m.params))
    (tl, tp), (fl, fp) = out
    np.testing.assert_allclose(tl, fl, rtol=LOSS_RTOL, atol=0)
    np.testing.assert_allclose(tp, fp, rtol=0, atol=PARAMS_ATOL)
