"""Our GPT-2 against the PyTorch reference state (llm.c's test_gpt2 idea), at 1 and 2 threads.

The reference (tests/trainer/reference/make_reference.py, plain PyTorch float32) holds the logits, the loss,
every one of the 16 gradient tensors and the losses of 10 AdamW steps for the `tiny` config (L=2, NH=4, C=32,
V=200 -> Vp=256) at B=2, T=16, from fixed weights and tokens.

Tolerances, and why: both sides are float32 but sum in different orders (BLAS blocking, our float64
accumulators in softmax/layernorm), so each value differs by a few ulp times the depth of its sum. Measured:
logits 1.2e-7 absolute (|logit| < 1), gradients <= 6e-7 of each tensor's largest entry, step losses 1.8e-6,
parameters after 10 steps 4e-6. We allow 10-20x that, far below anything a real bug produces (a wrong sign,
a missed 1/sqrt(hs), an unmasked padded logit or a bias off by a row each move these by 1e-3 or more).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.checkpoint import read_checkpoint
from trainer.config import TrainConfig
from trainer.dp import Local
from trainer.errors import NonFiniteError
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.params import PARAM_NAMES
from trainer.train import train

REF = Path(__file__).parent / "reference"
LOGITS_ATOL = 2e-6
GRAD_RTOL_OF_MAX = 1e-5
LOSS_ATOL = 2e-5
PARAMS_ATOL = 5e-5


@pytest.fixture(scope="module")
def ref():
    state = dict(np.load(REF / "tiny_state.npz"))
    cfg, flat = read_checkpoint(REF / "tiny_model.bin")
    return state, cfg, flat


def _model(ref, nthreads):
    state, cfg, flat = ref
    return GPT2(cfg, flat.copy(), int(state["B"]), int(state["T"]), Launcher(nthreads))


@pytest.mark.parametrize("nthreads", [1, 2])
def test_forward_matches_reference_logits_and_loss(ref, nthreads):
    state = ref[0]
    m = _model(ref, nthreads)
    loss = m.forward(state["x"], state["y"])
    logits = m.slots[0].a["logits"].reshape(state["logits"].shape)
    np.testing.assert_allclose(logits, state["logits"], rtol=0, atol=LOGITS_ATOL)
    assert loss == pytest.approx(float(state["loss"]), abs=LOSS_ATOL)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_backward_matches_every_reference_gradient(ref, nthreads):
    state = ref[0]
    m = _model(ref, nthreads)
    m.forward(state["x"], state["y"])
    m.zero_grad()
    m.backward(1.0 / state["x"].size)
    for name in PARAM_NAMES:
        want = state[f"grad_{name}"]
        err = np.abs(m.gp[name] - want).max()
        assert err <= GRAD_RTOL_OF_MAX * np.abs(want).max(), f"grad {name}: max error {err:.3g}"
    # padded vocab rows get no gradient through the masked logits (only the encoder could touch them)
    assert not m.gp["wte"][ref[1].vocab_size:].any()


@pytest.mark.parametrize("nthreads", [1, 2])
def test_ten_adamw_steps_match_reference_losses_and_parameters(ref, nthreads):
    state = ref[0]
    m = _model(ref, nthreads)
    tcfg = TrainConfig(batch_size=int(state["B"]), seq_len=int(state["T"]), steps=10, lr=float(state["lr"]),
                       weight_decay=float(state["weight_decay"]), beta1=float(state["beta1"]),
                       beta2=float(state["beta2"]), eps=float(state["eps"]))
    same_batch = _Fixed(state["x"], state["y"])
    history = train(m, same_batch, tcfg, Local(m, tcfg, m.run))
    np.testing.assert_allclose([h.loss for h in history], state["losses"], rtol=0, atol=LOSS_ATOL)
    want = m.layout.from_llmc(state["params_after"])  # stored in llm.c's order, like a checkpoint
    np.testing.assert_allclose(m.params, want, rtol=0, atol=PARAMS_ATOL)


def test_thread_count_changes_results_only_by_float32_rounding(ref):
    state = ref[0]
    grads = []
    for nthreads in (1, 2, 3):
        m = _model(ref, nthreads)
        m.forward(state["x"], state["y"])
        m.zero_grad()
        m.backward(1.0 / state["x"].size)
        grads.append(m.grads.copy())
    scale = np.abs(grads[0]).max()
    for g in grads[1:]:
        assert np.abs(g - grads[0]).max() <= 1e-6 * scale


def test_non_finite_initial_weights_are_named_as_such(ref):
    state = ref[0]
    m = _model(ref, 2)
    m.p["fcw"][1, 3, 5] = np.inf
    tcfg = TrainConfig(batch_size=int(state["B"]), seq_len=int(state["T"]), steps=3)
    with pytest.raises(NonFiniteError) as e:
        train(m, _Fixed(state["x"], state["y"]), tcfg, Local(m, tcfg, m.run))
    msg = str(e.value)
    assert msg.startswith("step 0:") and "parameters already hold NaN/inf (in the initial weights" in msg


def test_overflow_during_the_step_is_blamed_on_the_kernel_that_made_it(ref):
    state = ref[0]
    m = _model(ref, 1)
    m.p["fcw"][1, 3, :] = 3e38  # finite, but the layer-1 fc matmul overflows float32
    tcfg = TrainConfig(batch_size=int(state["B"]), seq_len=int(state["T"]), steps=2)
    with pytest.raises(NonFiniteError, match=r"step 0: the loss is not finite; NaN/inf first appears in kernel "
                                             r"matmul_forward \(layer 1\)"):
        train(m, _Fixed(state["x"], state["y"]), tcfg, Local(m, tcfg, m.run))


class _Fixed:
    """The same batch every step, as test_gpt2.c trains."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def batch(self, k):
        return self.x, self.y
