"""crossentropy_forward / crossentropy_backward against the float64 NumPy reference (itself checked by finite
differences), including the masking of the padded vocab columns V:Vp."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.crossentropy import (
    crossentropy_backward,
    crossentropy_backward_ref,
    crossentropy_exps,
    crossentropy_finish,
    crossentropy_forward,
    crossentropy_forward_ref,
    crossentropy_max,
)
from trainer.kernels.launch import NO_TRACE

# The kernel sees the same float32 logits as the float64 reference. It takes logit - max and exp in float32
# (as llm.c: each rounding costs <= 6e-8 * |logit - max| <~ 1e-6 relative here), sums in float64, then
# rounds probs and dlogits once more each: rtol 1e-5 keeps a >10x margin (seen: < 1e-7).
# atol 1e-6 covers tiny probabilities and gradients near 0.
RTOL, ATOL = 1e-5, 1e-6
FP32_EPS = float(np.finfo(np.float32).eps)
DLOSS = np.float32(1.0 / 6.0)  # the caller's 1/(B*T*grad_accum)

# (BT, V, Vp, nthreads)
CASES = [
    (2, 5, 8, 3),     # BT=2 rows < 3 threads: one block is empty
    (6, 10, 16, 1),   # serial twin
    (6, 10, 16, 2),
    (7, 13, 16, 3),   # uneven row chunks
    (4, 8, 8, 2),     # no padding: V == Vp
]


def make(BT, V, Vp, seed=0):
    rng = np.random.default_rng(seed)
    logits = (2.0 * rng.standard_normal((BT, Vp))).astype(np.float32)
    logits[:, V:] = 50.0  # padded columns hold garbage (large, so any leak into the softmax dominates)
    targets = rng.integers(0, V, size=BT).astype(np.int32)
    return logits, targets


def run_forward(nthreads, logits, targets, V):
    BT = logits.shape[0]
    losses = np.full(BT, np.nan, np.float32)  # NaN: catches rows left unwritten
    probs = np.full_like(logits, np.nan)
    crossentropy_forward(nthreads, losses, probs, logits, targets, V, NO_TRACE)
    return losses, probs


def run_backward(nthreads, logits, targets, V):
    _, probs = run_forward(nthreads, logits, targets, V)
    dlogits = np.full_like(logits, np.nan)  # never zeroed: backward must write every element
    crossentropy_backward(nthreads, dlogits, probs, targets, DLOSS, V, 0, NO_TRACE)
    return dlogits


@pytest.mark.parametrize("BT, V, Vp, nthreads", CASES)
def test_forward_matches_reference(BT, V, Vp, nthreads):
    logits, targets = make(BT, V, Vp)
    losses, probs = run_forward(nthreads, logits, targets, V)
    want_losses, want_probs = crossentropy_forward_ref(logits, targets, V)
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(probs, want_probs, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("BT, V, Vp, nthreads", CASES)
def test_backward_matches_reference(BT, V, Vp, nthreads):
    logits, targets = make(BT, V, Vp)
    dlogits = run_backward(nthreads, logits, targets, V)
    np.testing.assert_allclose(dlogits, crossentropy_backward_ref(logits, targets, DLOSS, V),
                               rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("nthreads", [1, 3])
def test_padded_vocab_is_masked(nthreads):
    BT, V, Vp = 7, 13, 16
    logits, targets = make(BT, V, Vp)
    losses, probs = run_forward(nthreads, logits, targets, V)
    assert (probs[:, V:] == 0.0).all()
    np.testing.assert_allclose(probs[:, :V].sum(axis=1, dtype=np.float64), 1.0, rtol=0, atol=V * FP32_EPS)
    np.testing.assert_allclose(losses, -np.log(probs[np.arange(BT), targets].astype(np.float64)),
                               rtol=RTOL)
    dlogits = run_backward(nthreads, logits, targets, V)
    assert (dlogits[:, V:] == 0.0).all()
    # each row of (softmax - onehot) sums to 0
    np.testing.assert_allclose(dlogits.sum(axis=1, dtype=np.float64), 0.0, atol=V * FP32_EPS)


def test_backward_overwrites():
    # dlogits is written, not accumulated (see the kernel): a second call gives the same buffer, not 2x
    logits, targets = make(6, 10, 16)
    _, probs = run_forward(2, logits, targets, 10)
    dlogits = np.full_like(logits, 123.0)
    crossentropy_backward(2, dlogits, probs, targets, DLOSS, 10, 0, NO_TRACE)
    first = dlogits.copy()
    crossentropy_backward(2, dlogits, probs, targets, DLOSS, 10, 0, NO_TRACE)
    np.testing.assert_array_equal(dlogits, first)
    np.testing.assert_allclose(first, crossentropy_backward_ref(logits, targets, DLOSS, 10),
                               rtol=RTOL, atol=ATOL)


def test_large_logits_are_stable():
    # without max subtraction exp(200) overflows float32 (and exp(800) float64)
    logits = np.array([[800.0, 799.0, 0.0, 0.0]], np.float32)
    losses, probs = run_forward(1, logits, np.array([1], np.int32), 3)
    # softmax([800, 799, 0]) = [1, e^-1, ~0] / (1 + e^-1); loss = log(1 + e^-1) + 1
    np.testing.assert_allclose(probs[0], [1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1)), 0, 0],
                               rtol=RTOL, atol=1e-30)
    np.testing.assert_allclose(losses, [np.log1p(np.exp(-1.0)) + 1.0], rtol=RTOL)


def test_target_outside_vocab_gives_nan_loss():
    logits, _ = make(2, 5, 8)
    losses, _ = run_forward(1, logits, np.array([1, 6], np.int32), 5)  # 6 is a padded column
    assert np.isfinite(losses[0]) and np.isnan(losses[1])


def test_reference_matches_finite_differences():
    # L = DLOSS * sum(losses): dL/dlogits is what backward computes. Central differences in float64, h=1e-6:
    # error ~h^2 + 1e-16/h ~ 1e-10, so atol 1e-8 is loose. Padded columns must get exactly 0.
    BT, V, Vp = 3, 5, 8
    logits, targets = make(BT, V, Vp, seed=2)
    logits = logits.astype(np.float64)
    h = 1e-6
    fd = np.zeros_like(logits)
    for idx in np.ndindex(logits.shape):
        plus, minus = logits.copy(), logits.copy()
        plus[idx] += h
        minus[idx] -= h
        fd[idx] = float(DLOSS) * (crossentropy_forward_ref(plus, targets, V)[0].sum()
                                  - crossentropy_forward_ref(minus, targets, V)[0].sum()) / (2 * h)
    np.testing.assert_allclose(crossentropy_backward_ref(logits, targets, DLOSS, V), fd, rtol=1e-6, atol=1e-8)
    assert (fd[:, V:] == 0.0).all()


def test_one_and_two_threads_agree():
    logits, targets = make(7, 13, 16, seed=1)
    for a, b in zip(run_forward(1, logits, targets, 13), run_forward(2, logits, targets, 13)):
        np.testing.assert_allclose(a, b, rtol=2 * FP32_EPS, atol=1e-7)
    np.testing.assert_allclose(run_backward(1, logits, targets, 13), run_backward(2, logits, targets, 13),
                               rtol=2 * FP32_EPS, atol=1e-7)


# (BT, V, Vp, slices, nthreads): the vocabulary-parallel pieces, the group's all-reduces done here by NumPy over the
# slices. 13 of 16 columns real over 4 slices of 4: the last slice holds 1 real column and 3 padded; 5 of 16 over 4:
# slices 2 and 3 hold no real column (their maximum is -inf and their exps none).
VOCAB_CASES = [(6, 13, 16, 4, 2), (6, 5, 16, 4, 1), (7, 10, 16, 2, 3)]


@pytest.mark.parametrize("BT, V, Vp, slices, nthreads", VOCAB_CASES)
def test_vocab_parallel_pieces_match_the_whole_row_reference(BT, V, Vp, slices, nthreads):
    logits, targets = make(BT, V, Vp)
    Vs = Vp // slices
    parts = [np.ascontiguousarray(logits[:, k * Vs:(k + 1) * Vs]) for k in range(slices)]
    maxes = [np.full(BT, np.nan, np.float32) for _ in parts]
    for k, part in enumerate(parts):
        crossentropy_max(nthreads, maxes[k], part, k * Vs, V, NO_TRACE)
    rowmax = np.max(maxes, axis=0)                                        # all-reduce MAX
    stats = [np.full((BT, 2), np.nan, np.float32) for _ in parts]
    probs = [np.full_like(part, np.nan) for part in parts]
    for k, part in enumerate(parts):
        crossentropy_exps(nthreads, stats[k], probs[k], part, rowmax, targets, k * Vs, V, NO_TRACE)
    total = np.sum(stats, axis=0)                                         # all-reduce SUM
    losses = [np.full(BT, np.nan, np.float32) for _ in parts]
    for k in range(slices):
        crossentropy_finish(nthreads, losses[k], probs[k], total, targets, V, NO_TRACE)
    ref_losses, ref_probs = crossentropy_forward_ref(logits, targets, V)
    for k in range(slices):   # every rank gets the same loss; its probs are its columns of the whole row's
        np.testing.assert_allclose(losses[k], ref_losses, rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(probs[k], ref_probs[:, k * Vs:(k + 1) * Vs], rtol=RTOL, atol=ATOL)
    ref_dlogits = crossentropy_backward_ref(logits, targets, DLOSS, V)
    for k in range(slices):
        dlogits = np.full_like(parts[k], np.nan)
        crossentropy_backward(nthreads, dlogits, probs[k], targets, DLOSS, V, k * Vs, NO_TRACE)
        np.testing.assert_allclose(dlogits, ref_dlogits[:, k * Vs:(k + 1) * Vs], rtol=RTOL, atol=ATOL)
