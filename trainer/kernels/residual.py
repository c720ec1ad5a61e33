"""Residual add (llm.c's residual_forward / residual_backward): out = inp1 + inp2.

Elementwise, so (BT, C) arrays are viewed as flat (N,) (C-contiguous required; reshape would not copy)
and the N elements are split evenly over threads.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def residual_forward(out, inp1, inp2, tr, kid, layer, nthreads):
    # out, inp1, inp2 (BT, C), one shape, C-contiguous
    o = out.reshape(-1)
    a = inp1.reshape(-1)
    b = inp2.reshape(-1)
    N = o.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(N, nthreads, t)
        ob, ab, bb = o[r0:r1], a[r0:r1], b[r0:r1]
        for i in range(r1 - r0):
            ob[i] = ab[i] + bb[i]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def residual_backward(dinp1, dinp2, dout, tr, kid, layer, nthreads):
    # dinp1 (BT, C) +=, dinp2 (BT, C) +=; dout (BT, C); all C-contiguous
    d1 = dinp1.reshape(-1)
    d2 = dinp2.reshape(-1)
    d = dout.reshape(-1)
    N = d.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(N, nthreads, t)
        d1b, d2b, db = d1[r0:r1], d2[r0:r1], d[r0:r1]
        for i in range(r1 - r0):
            d1b[i] += db[i]
            d2b[i] += db[i]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def residual_forward_ref(inp1, inp2):
    """NumPy reference (float64) for tests."""
    return inp1.astype(np.float64) + inp2.astype(np.float64)


def residual_backward_ref(dout):
    """(dinp1, dinp2) in float64: the add passes dout through to both inputs."""
    d = dout.astype(np.float64)
    return d, d.copy()
