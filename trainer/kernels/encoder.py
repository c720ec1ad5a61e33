"""Token + position embedding (llm.c's encoder_forward / encoder_backward).

Forward splits the BT rows. Backward splits the C columns instead: several rows can share a token (and every
T-th row shares a position), so with a row split two threads could add into the same dwte/dwpe element.
Owning columns c0:c1 makes every gradient element belong to exactly one thread: no atomics, no scratch.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def encoder_forward(out, tokens, wte, wpe, T, tr, nthreads):
    # out (BT, C); tokens (BT,) int32 in [0, V); wte (Vp, C); wpe (maxT, C); row i is position i % T
    BT, C = out.shape
    region_begin(tr)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            tok = tokens[i]
            pos = i % T
            for c in range(C):
                out[i, c] = wte[tok, c] + wpe[pos, c]
        block_end(tr, t, t0)
    region_end(tr)


@kernel
def encoder_backward(dwte, dwpe, dout, tokens, T, tr, nthreads):
    # dwte (Vp, C) +=, dwpe (maxT, C) +=; dout (BT, C); tokens (BT,) int32
    BT, C = dout.shape
    region_begin(tr)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        c0, c1 = chunk(C, nthreads, t)
        for i in range(BT):
            tok = tokens[i]
            pos = i % T
            for c in range(c0, c1):
                d = dout[i, c]
                dwte[tok, c] += d
                dwpe[pos, c] += d
        block_end(tr, t, t0)
    region_end(tr)


def encoder_forward_ref(tokens, wte, wpe, T):
    """NumPy reference (float64) for tests: (BT, C)."""
    pos = np.arange(len(tokens)) % T
    return wte.astype(np.float64)[tokens] + wpe.astype(np.float64)[pos]


def encoder_backward_ref(dout, tokens, T, Vp, maxT):
    """(dwte (Vp, C), dwpe (maxT, C)) in float64; np.add.at sums rows that share a token or position."""
    d = dout.astype(np.float64)
    dwte = np.zeros((Vp, d.shape[1]))
    dwpe = np.zeros((maxT, d.shape[1]))
    np.add.at(dwte, tokens, d)
    np.add.at(dwpe, np.arange(len(tokens)) % T, d)
    return dwte, dwpe
