"""gelu_forward / gelu_backward against the float64 NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.gelu import gelu_backward, gelu_backward_ref, gelu_forward, gelu_forward_ref
from trainer.kernels.launch import NO_TRACE

# The kernel computes in float64 from the same float32 inputs the reference sees and rounds once on store
# (backward: twice, the += into float32): ~1e-7 relative, so rtol 1e-5 has a wide margin; atol 1e-6 covers
# values near GELU's zero crossing, where relative error means nothing.
RTOL, ATOL = 1e-5, 1e-6
FP32_EPS = float(np.finfo(np.float32).eps)

# (shape, nthreads): 2-D (BT, 4C) as the model passes it
CASES = [
    ((2, 1), 3),    # 2 elements < 3 threads: one block is empty
    ((4, 8), 1),    # serial twin
    ((4, 8), 2),
    ((5, 7), 3),    # 35 elements over 3 threads: uneven chunks
]


def make(shape, seed=0):
    rng = np.random.default_rng(seed)
    # std 3: both saturated tails (tanh near +-1, slope near 0 and 1) are exercised, not just the middle
    inp = (3.0 * rng.standard_normal(shape)).astype(np.float32)
    dout = rng.standard_normal(shape).astype(np.float32)
    return inp, dout


def run_forward(nthreads, inp):
    out = np.full_like(inp, np.nan)  # NaN: catches elements left unwritten
    gelu_forward(nthreads, out, inp, NO_TRACE)
    return out


def run_backward(nthreads, inp, dout, calls=1):
    dinp = np.zeros_like(inp)
    for _ in range(calls):
        gelu_backward(nthreads, dinp, inp, dout, NO_TRACE)
    return dinp


@pytest.mark.parametrize("shape, nthreads", CASES)
def test_forward_matches_reference(shape, nthreads):
    inp, _ = make(shape)
    np.testing.assert_allclose(run_forward(nthreads, inp), gelu_forward_ref(inp), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("shape, nthreads", CASES)
def test_backward_matches_reference(shape, nthreads):
    inp, dout = make(shape)
    np.testing.assert_allclose(run_backward(nthreads, inp, dout), gelu_backward_ref(inp, dout),
                               rtol=RTOL, atol=ATOL)


def test_reference_by_hand():
    # gelu(0) = 0 with slope 1/2; far out it is x (slope 1) on the right and 0 (slope 0) on the left
    x = np.array([0.0, 10.0, -10.0])
    np.testing.assert_allclose(gelu_forward_ref(x), [0.0, 10.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(gelu_backward_ref(x, np.ones(3)), [0.5, 1.0, 0.0], atol=1e-12)


def test_backward_reference_matches_finite_differences():
    # central differences in float64, h=1e-6: error ~h^2 + 1e-16/h ~ 1e-10
    x = np.linspace(-5.0, 5.0, 41)
    h = 1e-6
    fd = (gelu_forward_ref(x + h) - gelu_forward_ref(x - h)) / (2 * h)
    np.testing.assert_allclose(gelu_backward_ref(x, np.ones_like(x)), fd, rtol=1e-7, atol=1e-9)


def test_flat_input():
    # 1-D arrays go through the same reshape path
    inp, dout = make((11,))
    np.testing.assert_allclose(run_forward(2, inp), gelu_forward_ref(inp), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("nthreads", [1, 3])
def test_backward_accumulates(nthreads):
    inp, dout = make((4, 8))
    once = run_backward(nthreads, inp, dout)
    np.testing.assert_allclose(run_backward(nthreads, inp, dout, calls=2), 2.0 * once, rtol=2 * FP32_EPS)


def test_one_and_two_threads_agree():
    inp, dout = make((6, 8), seed=1)
    np.testing.assert_allclose(run_forward(1, inp), run_forward(2, inp), rtol=2 * FP32_EPS, atol=1e-7)
    np.testing.assert_allclose(run_backward(1, inp, dout), run_backward(2, inp, dout),
                               rtol=2 * FP32_EPS, atol=1e-7)
