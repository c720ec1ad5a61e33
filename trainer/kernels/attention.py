"""Causal multi-head self-attention (llm.c's attention_forward / attention_backward).

Shapes: B batch, T time, C channels, NH heads, hs = C // NH head size. `inp` (B*T, 3C) is the qkv matmul output,
each row [q (C) | k (C) | v (C)]; head h owns columns h*hs:(h+1)*hs of each third.

Threads split the B*NH (b, h) pairs: a pair reads only its own q, k, v columns and writes only its own slices
of out / dinp and its own (T, T) planes of preatt / att / datt / dpreatt, so blocks never race.

Per pair, the four T x T x hs products are cblas_sgemm calls on strided views of `inp` / `dinp` / `out` /
`dout` (leading dimension 3C or C, no copies). They are *block-triangular*: rows are taken in blocks of ROWS
and a block [r0, r1) only multiplies the columns t2 < r1 it can see, which skips ~45% of the flops of the full
T x T product at T=1024 while keeping each call large enough for BLAS to run near peak.

What is defined in the (B, NH, T, T) buffers after a call (the strictly upper, masked triangle t2 > t1):
  att      zero, as in llm.c (the forward output other code may read)
  preatt   unspecified (llm.c leaves it unwritten too); only t2 <= t1 is meaningful
  datt, dpreatt   scratch, fully (re)written where read: the caller need not zero them
All arrays are C-contiguous float32: the sgemm pointers and leading dimensions assume it.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from trainer.blas import NO_TRANS, ROW_MAJOR, TRANS, cblas_sgemm
from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end

# Row block of the block-triangular products. Smaller skips more masked work but makes more, smaller sgemm
# calls; 64 is a good trade on AVX2 OpenBLAS from T=64 (one block) to T=1024 (16 blocks, 53% of full flops).
ROWS = 64


@njit(inline="always")
def _head(p, NH, T, C, hs):
    """(b, h) of pair p, its first row in inp/out, and where head h's q, k, v columns start in a qkv row."""
    b, h = p // NH, p % NH
    return b, h, b * T, h * hs, C + h * hs, 2 * C + h * hs


@kernel
def attention_forward(out, preatt, att, inp, B, T, NH, tr, nthreads):
    # out (B*T, C); preatt, att (B, NH, T, T) (saved for backward); inp (B*T, 3C)
    C3 = inp.shape[1]
    C = C3 // 3
    hs = C // NH
    scale = np.float32(1.0 / math.sqrt(hs))
    region_begin(tr)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        p0, p1 = chunk(B * NH, nthreads, t)
        for p in range(p0, p1):
            b, h, row, qcol, kcol, vcol = _head(p, NH, T, C, hs)
            pre = preatt[b, h]  # (T, T)
            a = att[b, h]  # (T, T)
            for r0 in range(0, T, ROWS):
                r1 = min(r0 + ROWS, T)
                # pre[r0:r1, 0:r1] = scale * q[r0:r1] @ k[0:r1]^T (columns past r1 are all masked)
                cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(TRANS),
                            np.int32(r1 - r0), np.int32(r1), np.int32(hs), scale,
                            inp[row + r0:, qcol:].ctypes.data, np.int32(C3),
                            inp[row:, kcol:].ctypes.data, np.int32(C3),
                            np.float32(0.0), pre[r0:].ctypes.data, np.int32(T))
            for t1 in range(T):
                # softmax over the visible t2 <= t1; the max shift keeps exp from overflowing (llm.c does it
                # too), and the denominator is summed in float64 because it can run over 1024 terms
                maxval = pre[t1, 0]
                for t2 in range(1, t1 + 1):
                    if pre[t1, t2] > maxval:
                        maxval = pre[t1, t2]
                expsum = 0.0
                for t2 in range(t1 + 1):
                    e = np.exp(pre[t1, t2] - maxval)
                    a[t1, t2] = e
                    expsum += e
                inv = np.float32(1.0 / expsum)
                for t2 in range(t1 + 1):
                    a[t1, t2] *= inv
                for t2 in range(t1 + 1, T):
                    a[t1, t2] = np.float32(0.0)  # masked; also what the att @ v products below read
            for r0 in range(0, T, ROWS):
                r1 = min(r0 + ROWS, T)
                # out[r0:r1, head h] = att[r0:r1, 0:r1] @ v[0:r1]
                cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(NO_TRANS),
                            np.int32(r1 - r0), np.int32(hs), np.int32(r1), np.float32(1.0),
                            a[r0:].ctypes.data, np.int32(T),
                            inp[row:, vcol:].ctypes.data, np.int32(C3),
                            np.float32(0.0), out[row + r0:, qcol:].ctypes.data, np.int32(C))
        block_end(tr, t, t0)
    region_end(tr)


@kernel
def attention_backward(dinp, dpreatt, datt, dout, inp, att, B, T, NH, tr, nthreads):
    # dinp (B*T, 3C) +=; dpreatt, datt (B, NH, T, T) scratch (need no zeroing); dout (B*T, C);
    # inp (B*T, 3C); att (B, NH, T, T) from attention_forward
    C3 = inp.shape[1]
    C = C3 // 3
    hs = C // NH
    scale = np.float32(1.0 / math.sqrt(hs))
    region_begin(tr)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        p0, p1 = chunk(B * NH, nthreads, t)
        for p in range(p0, p1):
            b, h, row, qcol, kcol, vcol = _head(p, NH, T, C, hs)
            a = att[b, h]  # (T, T)
            da = datt[b, h]  # (T, T)
            dpre = dpreatt[b, h]  # (T, T)
            for r0 in range(0, T, ROWS):
                r1 = min(r0 + ROWS, T)
                # da[r0:r1, 0:r1] = dout[r0:r1, head h] @ v[0:r1]^T  (overwrites: beta = 0)
                cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(TRANS),
                            np.int32(r1 - r0), np.int32(r1), np.int32(hs), np.float32(1.0),
                            dout[row + r0:, qcol:].ctypes.data, np.int32(C),
                            inp[row:, vcol:].ctypes.data, np.int32(C3),
                            np.float32(0.0), da[r0:].ctypes.data, np.int32(T))
                # dv[r0:r1] += att[r0:T, r0:r1]^T @ dout[r0:T]: rows t1 < r0 of those columns are masked zeros
                cblas_sgemm(np.int32(ROW_MAJOR), np.int32(TRANS), np.int32(NO_TRANS),
                            np.int32(r1 - r0), np.int32(hs), np.int32(T - r0), np.float32(1.0),
                            a[r0:, r0:].ctypes.data, np.int32(T),
                            dout[row + r0:, qcol:].ctypes.data, np.int32(C),
                            np.float32(1.0), dinp[row + r0:, vcol:].ctypes.data, np.int32(C3))
            for t1 in range(T):
                # softmax backward in O(T) per row: dpre = att * (datt - sum_t2 att*datt), equal to llm.c's
                # O(T^2) double loop; the dot runs over up to 1024 terms, so it is summed in float64
                dot = 0.0
                for t2 in range(t1 + 1):
                    dot += a[t1, t2] * da[t1, t2]
                dotf = np.float32(dot)
                for t2 in range(t1 + 1):
                    dpre[t1, t2] = a[t1, t2] * (da[t1, t2] - dotf)
                # masked entries up to the end of this row's block are read by the products below: zero them
                rend = min((t1 // ROWS + 1) * ROWS, T)
                for t2 in range(t1 + 1, rend):
                    dpre[t1, t2] = np.float32(0.0)
            for r0 in range(0, T, ROWS):
                r1 = min(r0 + ROWS, T)
                # dq[r0:r1] += scale * dpre[r0:r1, 0:r1] @ k[0:r1]
                cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(NO_TRANS),
                            np.int32(r1 - r0), np.int32(hs), np.int32(r1), scale,
                            dpre[r0:].ctypes.data, np.int32(T),
                            inp[row:, kcol:].ctypes.data, np.int32(C3),
                            np.float32(1.0), dinp[row + r0:, qcol:].ctypes.data, np.int32(C3))
                # dk[r0:r1] += scale * dpre[r0:T, r0:r1]^T @ q[r0:T]
                cblas_sgemm(np.int32(ROW_MAJOR), np.int32(TRANS), np.int32(NO_TRANS),
                            np.int32(r1 - r0), np.int32(hs), np.int32(T - r0), scale,
                            dpre[r0:, r0:].ctypes.data, np.int32(T),
                            inp[row + r0:, qcol:].ctypes.data, np.int32(C3),
                            np.float32(1.0), dinp[row + r0:, kcol:].ctypes.data, np.int32(C3))
        block_end(tr, t, t0)
    region_end(tr)


def _heads(x, B, T, NH):
    """(B*T, NH*hs) -> (B, NH, T, hs) view."""
    return x.reshape(B, T, NH, -1).transpose(0, 2, 1, 3)


def attention_forward_ref(inp, B, T, NH):
    """NumPy reference (float64) for tests: returns out (B*T, C), att (B, NH, T, T)."""
    x = inp.astype(np.float64)
    C = x.shape[1] // 3
    q, k, v = (_heads(x[:, i * C:(i + 1) * C], B, T, NH) for i in range(3))  # (B, NH, T, hs) each
    preatt = q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // NH)  # (B, NH, T, T)
    mask = np.tril(np.ones((T, T), dtype=bool))
    preatt = np.where(mask, preatt, -np.inf)
    att = np.exp(preatt - preatt.max(axis=-1, keepdims=True))
    att /= att.sum(axis=-1, keepdims=True)
    out = att @ v  # (B, NH, T, hs)
    return out.transpose(0, 2, 1, 3).reshape(B * T, C), att


def attention_backward_ref(dout, inp, att, B, T, NH):
    """NumPy reference (float64) for tests: returns dinp (B*T, 3C) (not accumulated)."""
    x = inp.astype(np.float64)
    a = att.astype(np.float64)  # (B, NH, T, T)
    C = x.shape[1] // 3
    scale = 1.0 / np.sqrt(C // NH)
    q, k, v = (_heads(x[:, i * C:(i + 1) * C], B, T, NH) for i in range(3))  # (B, NH, T, hs) each
    do = _heads(dout.astype(np.float64), B, T, NH)  # (B, NH, T, hs)
    da = do @ v.transpose(0, 1, 3, 2)  # (B, NH, T, T)
    dv = a.transpose(0, 1, 3, 2) @ do
    dpre = a * (da - (a * da).sum(axis=-1, keepdims=True))  # softmax backward; masked a = 0 gives 0 there
    dq = dpre @ k * scale
    dk = dpre.transpose(0, 1, 3, 2) @ q * scale
    dinp = np.empty_like(x)
    for i, g in enumerate((dq, dk, dv)):
        dinp[:, i * C:(i + 1) * C] = g.transpose(0, 2, 1, 3).reshape(B * T, C)
    return dinp
