"""matmul_forward / matmul_backward (one cblas_sgemm per thread's block) against the float64 NumPy reference,
itself checked by finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.launch import LAYER_BITS, NO_LAYER, NO_TRACE
from trainer.kernels.matmul import matmul_backward, matmul_backward_ref, matmul_forward, matmul_forward_ref

U = 2.0 ** -24                  # float32 unit roundoff

# (BT, C, OC, nthreads)
CASES = [
    (4, 8, 2, 3),     # OC=2 < 3 threads: one forward block owns no output feature
    (5, 2, 6, 3),     # C=2 < 3 threads: one backward block owns no dinp column
    (6, 16, 12, 1),   # serial twin
    (6, 16, 12, 2),
    (7, 10, 11, 3),   # uneven chunks of OC and C
    (3, 40, 24, 3),   # a longer dot product (K=40)
]


def bound(abs_a: np.ndarray, abs_b: np.ndarray, terms: int) -> np.ndarray:
    """The classic worst-case error of a float32 sum of `terms` products, in any order, with or without FMA:
    gamma_n * (|a| @ |b|), gamma_n = n u / (1 - n u) (Higham, Accuracy and Stability, 3.1). The inputs are
    exact float32 values and the float64 reference is exact to ~1e-16 relative, so this is the whole allowed
    difference; one more term covers the bias add or the accumulation into the output."""
    n = terms + 1
    return n * U / (1 - n * U) * (abs_a @ abs_b) + 1e-30


def make(BT, C, OC, seed=0):
    rng = np.random.default_rng(seed)
    inp = rng.standard_normal((BT, C)).astype(np.float32)
    weight = rng.standard_normal((OC, C)).astype(np.float32)
    bias = rng.standard_normal(OC).astype(np.float32)
    dout = rng.standard_normal((BT, OC)).astype(np.float32)
    return inp, weight, bias, dout


def run_forward(nthreads, inp, weight, bias, has_bias=True):
    out = np.full((inp.shape[0], weight.shape[0]), np.nan, np.float32)   # NaN: catches elements left unwritten
    matmul_forward(nthreads, out, inp, weight, bias, has_bias, NO_TRACE)
    return out


def run_backward(nthreads, dout, inp, weight, has_bias=True, calls=1, tr=NO_TRACE):
    dinp, dweight = np.zeros_like(inp), np.zeros_like(weight)
    dbias = np.zeros(weight.shape[0], np.float32)
    for _ in range(calls):
        matmul_backward(nthreads, dinp, dweight, dbias, dout, inp, weight, has_bias, tr)
    return dinp, dweight, dbias


def assert_within(got, want, err_bound):
    excess = np.abs(got.astype(np.float64) - want) - err_bound
    assert (excess <= 0).all(), f"off by more than the float32 bound: worst excess {excess.max():.3g}"


@pytest.mark.parametrize("BT, C, OC, nthreads", CASES)
def test_forward_matches_reference(BT, C, OC, nthreads):
    inp, weight, bias, _ = make(BT, C, OC)
    got = run_forward(nthreads, inp, weight, bias)
    want = matmul_forward_ref(inp, weight, bias)
    # C products, then + bias (|bias| is part of the magnitude the last rounding scales with)
    assert_within(got, want, bound(np.abs(inp), np.abs(weight).T, C) + 2 * U * np.abs(bias))


@pytest.mark.parametrize("BT, C, OC, nthreads", CASES)
def test_forward_without_bias_ignores_it(BT, C, OC, nthreads):
    inp, weight, _, _ = make(BT, C, OC)
    no_bias = np.full(1, np.nan, np.float32)       # what the model passes for the tied lm_head: never read
    got = run_forward(nthreads, inp, weight, no_bias, has_bias=False)
    assert_within(got, matmul_forward_ref(inp, weight, None), bound(np.abs(inp), np.abs(weight).T, C))


@pytest.mark.parametrize("BT, C, OC, nthreads", CASES)
def test_backward_matches_reference(BT, C, OC, nthreads):
    inp, weight, _, dout = make(BT, C, OC)
    dinp, dweight, dbias = run_backward(nthreads, dout, inp, weight)
    want_dinp, want_dweight, want_dbias = matmul_backward_ref(dout, inp, weight)
    a_dout, a_inp, a_w = np.abs(dout), np.abs(inp), np.abs(weight)
    assert_within(dinp, want_dinp, bound(a_dout, a_w, OC))            # dout @ weight: OC terms
    assert_within(dweight, want_dweight, bound(a_dout.T, a_inp, BT))   # dout^T @ inp: BT terms
    assert_within(dbias, want_dbias, bound(a_dout.T, np.ones(BT), BT))  # column sums of dout: BT terms


@pytest.mark.parametrize("nthreads", [1, 3])
def test_backward_without_bias_leaves_dbias_alone(nthreads):
    inp, weight, _, dout = make(6, 16, 12)
    dinp, dweight, dbias = run_backward(nthreads, dout, inp, weight, has_bias=False)
    want_dinp, want_dweight, none = matmul_backward_ref(dout, inp, weight, has_bias=False)
    assert none is None
    np.testing.assert_array_equal(dbias, 0.0)
    assert_within(dinp, want_dinp, bound(np.abs(dout), np.abs(weight), 12))
    assert_within(dweight, want_dweight, bound(np.abs(dout).T, np.abs(inp), 6))


@pytest.mark.parametrize("nthreads", [1, 3])
def test_backward_accumulates(nthreads):
    inp, weight, _, dout = make(7, 10, 11)
    once = run_backward(nthreads, dout, inp, weight)
    twice = run_backward(nthreads, dout, inp, weight, calls=2)
    # beta = 1: the second call adds its products into the first call's sums, so twice = 2 x once up to the
    # second call's roundings; the same bound as one call (on twice the magnitude) holds
    a_dout, a_inp, a_w = np.abs(dout), np.abs(inp), np.abs(weight)
    for got, one, err in zip(twice, once, (bound(a_dout, a_w, 2 * 11), bound(a_dout.T, a_inp, 2 * 7),
                                           bound(a_dout.T, np.ones(7), 2 * 7))):
        assert_within(got, 2.0 * one.astype(np.float64), 2 * err)


def test_backward_reference_matches_finite_differences():
    # L = sum(out * dout) is linear in each of inp, weight and bias, so central differences are exact up to
    # float64 rounding (~1e-16 / h = 1e-10 with h = 1e-6): atol 1e-7 is loose.
    inp, weight, bias, dout = (a.astype(np.float64) for a in make(3, 4, 5, seed=2))

    def loss(x, w, b):
        return float((matmul_forward_ref(x, w, b) * dout).sum())

    want = matmul_backward_ref(dout, inp, weight)
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


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_trace_slot_records_region_and_blocks(nthreads):
    inp, weight, _, dout = make(32, 24, 36)
    log = np.zeros((2, nthreads + 1, 3), np.int64)      # the header and one call (trainer.kernels.launch)
    got = run_backward(nthreads, dout, inp, weight, tr=log)
    tr = log[1]
    (enter_ns, exit_ns, key), blocks = tr[0], tr[1:]
    assert log[0, 0, 0] == 1 and key == (matmul_backward.kid << LAYER_BITS) + NO_LAYER
    assert 0 < enter_ns <= exit_ns
    # the region is read on the calling thread before the fork and after the join, so it encloses blocks
    assert (enter_ns <= blocks[:, 0]).all() and (blocks[:, 0] <= blocks[:, 1]).all()
    assert (blocks[:, 1] <= exit_ns).all() and (blocks[:, 2] > 0).all()          # thread ids
    for g, w in zip(got, run_backward(nthreads, dout, inp, weight)):
        np.testing.assert_array_equal(g, w)        # tracing does not change the result
