"""Zeroing of gradient buffers before backward accumulates into them (llm.c's memset, split over threads).

A 124M-parameter gradient is 500 MB: one thread's memset would be a visible serial section of every step.
"""
from __future__ import annotations

from numba import prange

from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def zero_fill(buf, tr, kid, layer, nthreads):
    # buf: any C-contiguous float32 array, set to 0
    flat = buf.reshape(-1)
    n = flat.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        i0, i1 = chunk(n, nthreads, t)
        flat[i0:i1] = 0.0
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)
