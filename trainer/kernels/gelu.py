"""Tanh-approximate GELU, as in GPT-2 and llm.c (gelu_forward / gelu_backward).

Elementwise, so arrays of any shape are viewed as flat (N,) (they must be C-contiguous: reshape in Numba
refuses anything else rather than copying) and the N elements are split evenly over threads.

tanh is trainer.kernels.fastmath's vectorizable float32 approximation: libm's scalar tanh made GELU 12% of a
GPT-2 step.
"""
from __future__ import annotations

import math

import numpy as np
from numba import prange

from trainer.kernels.fastmath import tanh_f32
from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end

GELU_SCALING_FACTOR = math.sqrt(2.0 / math.pi)
_S = np.float32(GELU_SCALING_FACTOR)
_K = np.float32(0.044715)
_K3 = np.float32(3.0 * 0.044715)
_HALF, _ONE = np.float32(0.5), np.float32(1.0)


@kernel
def gelu_forward(out, inp, tr, kid, layer, nthreads):
    # out, inp (BT, 4C) or any C-contiguous shape, same for both
    o = out.reshape(-1)
    x = inp.reshape(-1)
    N = x.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(N, nthreads, t)
        ob, xb = o[r0:r1], x[r0:r1]
        for i in range(r1 - r0):
            xi = xb[i]
            ob[i] = _HALF * xi * (_ONE + tanh_f32(_S * (xi + _K * xi * xi * xi)))
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def gelu_backward(dinp, inp, dout, tr, kid, layer, nthreads):
    # dinp (BT, 4C) +=; inp, dout (BT, 4C), all C-contiguous and of one shape
    di = dinp.reshape(-1)
    x = inp.reshape(-1)
    d = dout.reshape(-1)
    N = x.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(N, nthreads, t)
        dib, xb, db = di[r0:r1], x[r0:r1], d[r0:r1]
        for i in range(r1 - r0):
            xi = xb[i]
            tanh_out = tanh_f32(_S * (xi + _K * xi * xi * xi))
            # sech^2 = 1 - tanh^2 rather than llm.c's 1/cosh^2: same value, and cosh cannot overflow
            sech2 = _ONE - tanh_out * tanh_out
            local_grad = _HALF * (_ONE + tanh_out) + xi * _HALF * sech2 * _S * (_ONE + _K3 * xi * xi)
            dib[i] += local_grad * db[i]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def gelu_forward_ref(inp):
    """NumPy reference (float64) for tests, same shape as inp."""
    x = inp.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(GELU_SCALING_FACTOR * (x + 0.044715 * x**3)))


def gelu_backward_ref(inp, dout):
    """dinp in float64: the derivative of gelu_forward_ref times dout."""
    x = inp.astype(np.float64)
    u = GELU_SCALING_FACTOR * (x + 0.044715 * x**3)
    du = GELU_SCALING_FACTOR * (1.0 + 3.0 * 0.044715 * x**2)
    th = np.tanh(u)
    return (0.5 * (1.0 + th) + 0.5 * x * (1.0 - th**2) * du) * dout.astype(np.float64)
