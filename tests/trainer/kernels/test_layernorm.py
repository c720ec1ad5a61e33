"""layernorm_forward / layernorm_backward against the float64 NumPy reference, itself checked by finite
differences."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.launch import NO_TRACE
from trainer.kernels.layernorm import (
    layernorm_backward,
    layernorm_backward_ref,
    layernorm_forward,
    layernorm_forward_ref,
)

# The kernel sees the same float32 inputs as the float64 reference; it sums rows in float64 and columns in
# float32 (at most BT=12 terms here), so the difference is a few float32 roundings (~6e-8 relative each):
# rtol 1e-5 leaves >10x margin. atol 1e-6 covers gradient entries that cancel to near 0.
RTOL, ATOL = 1e-5, 1e-6
FP32_EPS = float(np.finfo(np.float32).eps)

# (BT, C, nthreads)
CASES = [
    (2, 8, 3),    # BT=2 rows < 3 threads: one block has no rows (but does own columns in backward)
    (6, 16, 1),   # serial twin
    (6, 16, 2),
    (7, 10, 3),   # uneven row and column chunks
    (5, 2, 3),    # C=2 < 3 threads: one block owns no columns in backward
]


def make(BT, C, seed=0):
    rng = np.random.default_rng(seed)
    # a mean offset per row, so the kernel's mean subtraction matters
    inp = (rng.standard_normal((BT, C)) + rng.uniform(-3, 3, (BT, 1))).astype(np.float32)
    weight = rng.standard_normal(C).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    dout = rng.standard_normal((BT, C)).astype(np.float32)
    return inp, weight, bias, dout


def run_forward(nthreads, inp, weight, bias):
    BT, C = inp.shape
    out = np.full((BT, C), np.nan, np.float32)  # NaN: catches elements left unwritten
    mean = np.full(BT, np.nan, np.float32)
    rstd = np.full(BT, np.nan, np.float32)
    layernorm_forward(nthreads, out, mean, rstd, inp, weight, bias, NO_TRACE)
    return out, mean, rstd


def run_backward(nthreads, dout, inp, weight, calls=1):
    _, mean, rstd = run_forward(nthreads, inp, weight, np.zeros_like(weight))
    dinp = np.zeros_like(inp)
    dweight = np.zeros_like(weight)
    dbias = np.zeros_like(weight)
    for _ in range(calls):
        layernorm_backward(nthreads, dinp, dweight, dbias, dout, inp, weight, mean, rstd, NO_TRACE)
    return dinp, dweight, dbias


@pytest.mark.parametrize("BT, C, nthreads", CASES)
def test_forward_matches_reference(BT, C, nthreads):
    inp, weight, bias, _ = make(BT, C)
    got = run_forward(nthreads, inp, weight, bias)
    for g, w in zip(got, layernorm_forward_ref(inp, weight, bias)):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("BT, C, nthreads", CASES)
def test_backward_matches_reference(BT, C, nthreads):
    inp, weight, _, dout = make(BT, C)
    dinp, dweight, dbias = run_backward(nthreads, dout, inp, weight)
    want_dinp, want_dweight, want_dbias = layernorm_backward_ref(dout, inp, weight)
    # dinp is a difference of O(1) terms times rstd, so its rounding error scales with rstd (7.8 in the
    # C=2 case, where dinp is exactly 0 in exact arithmetic and only the rounding is left)
    rstd = layernorm_forward_ref(inp, weight, weight)[2]
    np.testing.assert_allclose(dinp, want_dinp, rtol=RTOL, atol=ATOL * max(1.0, rstd.max()))
    np.testing.assert_allclose(dweight, want_dweight, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(dbias, want_dbias, rtol=RTOL, atol=ATOL)


def test_backward_reference_matches_finite_differences():
    # L = sum(out * dout), so dL/dx is exactly what backward computes for upstream gradient dout.
    # Central differences in float64 with h=1e-6 have error ~h^2 + 1e-16/h ~ 1e-10: atol 1e-7 is loose.
    inp, weight, bias, dout = (a.astype(np.float64) for a in make(3, 5, seed=2))

    def loss(x, w, b):
        return float((layernorm_forward_ref(x, w, b)[0] * dout).sum())

    want = layernorm_backward_ref(dout, inp, weight)
    h = 1e-6
    for which, arr in enumerate((inp, weight, bias)):
        fd = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            args = [inp, weight, bias]
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += h
            minus[idx] -= h
            args[which] = plus
            lp = loss(*args)
            args[which] = minus
            fd[idx] = (lp - loss(*args)) / (2 * h)
        np.testing.assert_allclose(want[which], fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("nthreads", [1, 3])
def test_backward_accumulates(nthreads):
    inp, weight, _, dout = make(6, 16)
    once = run_backward(nthreads, dout, inp, weight)
    twice = run_backward(nthreads, dout, inp, weight, calls=2)
    for a, b in zip(once, twice):
        # dinp: a + a is exact. dweight/dbias add their BT terms one by one into the float32 running sum, so
        # the second call rounds differently from the first: a few float32 roundings of sums of size ~5
        # (seen: 1e-6), hence rtol 1e-5 plus atol 1e-5 for entries that cancel to near 0
        np.testing.assert_allclose(b, 2.0 * a, rtol=1e-5, atol=1e-5)


def test_one_and_two_threads_agree():
    inp, weight, bias, dout = make(7, 16, seed=1)
    for a, b in zip(run_forward(1, inp, weight, bias), run_forward(2, inp, weight, bias)):
        np.testing.assert_allclose(a, b, rtol=2 * FP32_EPS)
    for a, b in zip(run_backward(1, dout, inp, weight), run_backward(2, dout, inp, weight)):
        np.testing.assert_allclose(a, b, rtol=2 * FP32_EPS, atol=1e-7)
