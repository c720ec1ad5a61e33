"""The committed PyTorch reference (reference/make_reference.py) loads with our readers and is self-consistent.

The numerical comparison against our model lives with the model's tests; here we only check the files.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.checkpoint import read_checkpoint
from trainer.config import MODELS
from trainer.params import PARAM_NAMES, ParamLayout, param_shapes

REFERENCE = Path(__file__).parent / "reference"
TINY = MODELS["tiny"]        # V=200, Vp=256, C=32
B, T = 2, 16


@pytest.fixture(scope="module")
def state() -> dict[str, np.ndarray]:
    with np.load(REFERENCE / "tiny_state.npz") as npz:
        return {key: npz[key] for key in npz.files}


def test_model_file_is_the_tiny_config() -> None:
    cfg, flat = read_checkpoint(REFERENCE / "tiny_model.bin")
    assert cfg == TINY
    assert flat.shape == (ParamLayout.for_model(cfg).size,) and np.isfinite(flat).all()
    wte = ParamLayout.for_model(cfg).views(flat)["wte"]
    assert np.abs(wte[TINY.vocab_size:]).min() > 0      # padded rows are random, so masking is tested


def test_files_are_small() -> None:
    total = sum((REFERENCE / name).stat().st_size for name in ("tiny_model.bin", "tiny_state.npz"))
    assert total < 1_000_000


def test_batch_shapes_and_shift(state) -> None:
    x, y = state["x"], state["y"]
    assert x.dtype == y.dtype == np.int32 and x.shape == y.shape == (B, T)
    assert (int(state["B"]), int(state["T"])) == (B, T)
    assert x.min() >= 0 and max(x.max(), y.max()) < TINY.vocab_size
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])     # targets are the inputs shifted by one


def test_logits_and_loss(state) -> None:
    logits, loss = state["logits"], float(state["loss"])
    assert logits.shape == (B, T, TINY.padded_vocab_size) and logits.dtype == np.float32
    # the loss uses only the first V columns: recompute it from the stored logits
    real = logits[..., :TINY.vocab_size].astype(np.float64)
    real -= real.max(axis=-1, keepdims=True)
    logp = real - np.log(np.exp(real).sum(axis=-1, keepdims=True))
    assert -np.take_along_axis(logp, state["y"][..., None], -1).mean() == pytest.approx(loss, abs=1e-5)
    assert loss == pytest.approx(np.log(TINY.vocab_size), abs=0.1)   # small random init: near ln V = 5.298


def test_gradients_have_llmc_shapes(state) -> None:
    shapes = param_shapes(TINY)
    for name in PARAM_NAMES:
        grad = state[f"grad_{name}"]
        assert grad.shape == shapes[name] and grad.dtype == np.float32 and np.isfinite(grad).all(), name
        assert np.abs(grad).max() > 0, name
    # padded wte rows never reach the loss; wpe rows past T are never looked up
    assert not state["grad_wte"][TINY.vocab_size:].any()
    assert not state["grad_wpe"][T:].any()


def test_training_losses_and_hyperparameters(state) -> None:
    for key in ("losses", "losses_no_wd"):
        losses = state[key]
        assert losses.shape == (10,) and losses[0] == pytest.approx(float(state["loss"]), abs=1e-6)
        assert (np.diff(losses) < 0).all()                  # same batch every step: loss falls
    assert not np.array_equal(state["losses"], state["losses_no_wd"])   # weight decay mattered
    assert state["params_after"].shape == (ParamLayout.for_model(TINY).size,)
    hyper = {k: float(state[k]) for k in ("lr", "weight_decay", "beta1", "beta2", "eps")}
    assert hyper == {"lr": 1e-3, "weight_decay": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
