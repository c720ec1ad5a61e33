"""adamw_update and grad_norm_squared against float64 NumPy references."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.adamw import adamw_update, adamw_update_ref, grad_norm_squared, grad_norm_squared_ref
from trainer.kernels.launch import NO_TRACE

# The kernel computes each element in float64 from the same float32 state the reference sees and rounds
# params, m and v once when storing: ~6e-8 relative, so rtol 1e-5 has a wide margin. atol 1e-7 covers
# moments and parameters near 0 (the update itself is ~lr = 1e-3 in size).
RTOL, ATOL = 1e-5, 1e-7
FP32_EPS = float(np.finfo(np.float32).eps)
HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)

# (P, nthreads)
CASES = [
    (2, 3),     # 2 parameters < 3 threads: one block is empty
    (37, 1),    # serial twin
    (37, 2),
    (37, 3),    # uneven chunks
]


def make(P, seed=0):
    rng = np.random.default_rng(seed)
    params = rng.standard_normal(P).astype(np.float32)
    grads = rng.standard_normal(P).astype(np.float32)
    m = (0.1 * rng.standard_normal(P)).astype(np.float32)
    v = (0.01 * rng.random(P)).astype(np.float32)
    return params, grads, m, v


def run_update(nthreads, params, grads, m, v, step):
    p, m, v = params.copy(), m.copy(), v.copy()
    adamw_update(nthreads, p, grads, m, v, HYPER["lr"], HYPER["beta1"], HYPER["beta2"], HYPER["eps"],
                 HYPER["weight_decay"], step, NO_TRACE)
    return p, m, v


@pytest.mark.parametrize("P, nthreads", CASES)
@pytest.mark.parametrize("step", [1, 7])
def test_update_matches_reference(P, nthreads, step):
    params, grads, m, v = make(P)
    got = run_update(nthreads, params, grads, m, v, step)
    want = adamw_update_ref(params, grads, m, v, step=step, **HYPER)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_first_step_by_hand():
    # step 1 from m = v = 0: m_hat = g and v_hat = g^2, so the Adam part is g/|g| = sign(g) (eps aside);
    # p = 2, g = -3: 2 - 1e-3 * (-1 + 0.1 * 2) = 2.0008
    p, m, v = run_update(1, np.array([2.0], np.float32), np.array([-3.0], np.float32),
                         np.zeros(1, np.float32), np.zeros(1, np.float32), step=1)
    np.testing.assert_allclose(p, [2.0008], rtol=1e-6)
    np.testing.assert_allclose(m, [-0.3], rtol=1e-6)              # (1 - 0.9) * -3
    np.testing.assert_allclose(v, [0.45], rtol=1e-6)              # (1 - 0.95) * 9


def test_matches_repeated_reference_steps():
    # three steps, state carried over: the bias correction must use the step passed in
    params, grads, m, v = make(37)
    p32, m32, v32 = params, m, v
    p64, m64, v64 = params.astype(np.float64), m.astype(np.float64), v.astype(np.float64)
    for step in (1, 2, 3):
        p32, m32, v32 = run_update(2, p32, grads, m32, v32, step)
        p64, m64, v64 = adamw_update_ref(p64, grads, m64, v64, step=step, **HYPER)
    for g, w in zip((p32, m32, v32), (p64, m64, v64)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_update_one_and_two_threads_agree():
    params, grads, m, v = make(50, seed=1)
    for a, b in zip(run_update(1, params, grads, m, v, 3), run_update(2, params, grads, m, v, 3)):
        np.testing.assert_allclose(a, b, rtol=2 * FP32_EPS, atol=1e-9)


@pytest.mark.parametrize("P, nthreads", CASES)
def test_grad_norm_squared_matches_reference(P, nthreads):
    _, grads, _, _ = make(P)
    partials = np.full(nthreads, np.nan)  # NaN: every block must write its slot, even an empty one
    grad_norm_squared(nthreads, partials, grads, NO_TRACE)
    # float64 sums of float32 squares (exact in float64): only the summation order differs, ~1e-16
    np.testing.assert_allclose(partials.sum(), grad_norm_squared_ref(grads), rtol=1e-12)


def test_grad_norm_squared_by_hand():
    partials = np.zeros(2)
    grad_norm_squared(2, partials, np.array([3.0, 4.0, 0.0, 12.0], np.float32), NO_TRACE)
    np.testing.assert_array_equal(partials, [25.0, 144.0])  # blocks [3, 4] and [0, 12]; norm 13


def test_grad_norm_squared_rejects_short_partials():
    with pytest.raises(ValueError, match="one float64 per thread"):
        grad_norm_squared(3, np.zeros(2), np.ones(5, np.float32), NO_TRACE)
