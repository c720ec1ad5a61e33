"""residual_forward / residual_backward against the float64 NumPy reference, and the trace slot hooks."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.launch import LAYER_BITS, NO_TRACE
from trainer.kernels.residual import residual_backward, residual_backward_ref, residual_forward, residual_forward_ref

# One float32 add per element: the result is the float64 sum rounded once (<= 6e-8 relative), so rtol 1e-5
# is loose; atol 1e-6 covers sums that cancel to near 0.
RTOL, ATOL = 1e-5, 1e-6

# (BT, C, nthreads)
CASES = [
    (2, 1, 3),    # 2 elements < 3 threads: one block is empty
    (4, 8, 1),    # serial twin
    (4, 8, 2),
    (5, 7, 3),    # 35 elements over 3 threads: uneven chunks
]


def make(BT, C, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((BT, C)).astype(np.float32) for _ in range(3))


def run_backward(nthreads, dout, calls=1):
    dinp1 = np.zeros_like(dout)
    dinp2 = np.zeros_like(dout)
    for _ in range(calls):
        residual_backward(nthreads, dinp1, dinp2, dout, NO_TRACE)
    return dinp1, dinp2


@pytest.mark.parametrize("BT, C, nthreads", CASES)
def test_forward_matches_reference(BT, C, nthreads):
    inp1, inp2, _ = make(BT, C)
    out = np.full_like(inp1, np.nan)  # NaN: catches elements left unwritten
    residual_forward(nthreads, out, inp1, inp2, NO_TRACE)
    np.testing.assert_allclose(out, residual_forward_ref(inp1, inp2), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("BT, C, nthreads", CASES)
def test_backward_matches_reference(BT, C, nthreads):
    _, _, dout = make(BT, C)
    for got, want in zip(run_backward(nthreads, dout), residual_backward_ref(dout)):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("nthreads", [1, 3])
def test_backward_accumulates(nthreads):
    _, _, dout = make(4, 8)
    for got in run_backward(nthreads, dout, calls=2):
        np.testing.assert_array_equal(got, 2.0 * dout)  # dout + dout is exact in float32


def test_one_and_two_threads_agree():
    inp1, inp2, dout = make(6, 8, seed=1)
    outs = []
    for nthreads in (1, 2):
        out = np.empty_like(inp1)
        residual_forward(nthreads, out, inp1, inp2, NO_TRACE)
        outs.append((out, *run_backward(nthreads, dout)))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)  # one add per element: the split cannot change the rounding


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_trace_slot_records_region_and_blocks(nthreads):
    inp1, inp2, _ = make(64, 32)
    out = np.empty_like(inp1)
    log = np.zeros((2, nthreads + 1, 3), np.int64)      # the header and one call (trainer.kernels.launch)
    assert residual_forward.call(nthreads, 7, out, inp1, inp2, log)    # half the ring of one is unread
    tr = log[1]
    (enter_ns, exit_ns, key), blocks = tr[0], tr[1:]
    assert log[0, 0].tolist() == [1, 0, 0] and key == (residual_forward.kid << LAYER_BITS) + 7
    assert 0 < enter_ns <= exit_ns
    assert (blocks[:, 0] <= blocks[:, 1]).all()
    # the region is read on the calling thread before the fork and after the join, so it encloses blocks
    assert (enter_ns <= blocks[:, 0]).all() and (blocks[:, 1] <= exit_ns).all()
    assert (blocks[:, 2] >= 0).all()  # Numba thread ids
    np.testing.assert_array_equal(out, inp1 + inp2)  # tracing does not change the result
