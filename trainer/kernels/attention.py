"""Causal multi-head self-attention (llm.c's attention_forward / attention_backward), over whole sequences or
over one rank's share of them (sequence parallelism).

Shapes: B batch, C channels, NH heads, hs = C // NH head size. A qkv row is [q (C) | k (C) | v (C)]; head h owns
columns h*hs:(h+1)*hs of each third. Queries and the keys they attend to are passed apart, with positions:

    q     (B*Tq, 3C)          the rows whose output we compute; only their q third is read
    kv    (nsrc*B*Tks, 3C)    every row a query may attend to, as nsrc source blocks of B*Tks rows: key j of
                              sequence b in source s is row (s*B + b)*Tks + j; only the k and v thirds are read
    qpos  (Tq,) int32         position in the sequence of query i, increasing
    kpos  (nsrc, Tks) int32   position of key j of source s, increasing along j

Query i attends to the keys with kpos <= qpos[i] (causal), and each query sees at least one key (its own).
The (B, NH, Tq, Tk) score buffers, Tk = nsrc*Tks, hold key j of source s in column s*Tks + j: softmax does not
care about the order of keys, so sources need not be sorted by position.

    whole sequences   q = kv = the layer's qkv (B*T, 3C); qpos = arange(T), kpos = arange(T)[None]
    sequence parallel q = this rank's B*T/S rows; kv = the sequence group's rows gathered by MPI_Allgather, one
                      source per rank; positions from the split (trainer/parallel/sequence.py): contiguous
                      (rank r holds [r*T/S, (r+1)*T/S)) or interleaved (position t on rank t mod S)

Threads split the B*NH (b, h) pairs: a pair reads only its own q, k, v columns and writes only its own columns
of out / dq / dkv and its own (Tq, Tk) planes of preatt / att / datt / dpreatt, so blocks never race.

Per pair, the products are cblas_sgemm calls on strided views (leading dimension 3C or C, no copies). They are
*block-triangular*: queries are taken in blocks of ROWS and a block multiplies, in each source, only the keys its
last query can see; keys are taken in blocks of ROWS and a block meets only the queries that see its first key.
For whole sequences this skips ~45% of the flops of the full T x T product at T=1024 while keeping each call
large enough for BLAS to run near peak; with a contiguous split, rank r's queries see about (r + 1/2) T/S keys
each, so the last rank of a sequence group does the most work (the imbalance sequence parallelism is known for).

What is defined in the (B, NH, Tq, Tk) buffers after a call (masked: kpos > qpos):
  att      zero where masked, as in llm.c (the forward output other code may read)
  preatt   unspecified where masked (llm.c leaves it unwritten too)
  datt, dpreatt   scratch, fully (re)written where read: the caller need not zero them
All arrays are C-contiguous: the sgemm pointers and leading dimensions assume it.
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
def _seen(kp, pos):
    """How many keys of one source (positions kp, increasing) a query at position `pos` sees: #{kp <= pos}."""
    lo, hi = 0, kp.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if kp[mid] <= pos:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(inline="always")
def _first_seeing(qpos, pos):
    """Index of the first query (positions qpos, increasing) that sees a key at position `pos`: #{qpos < pos}."""
    lo, hi = 0, qpos.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if qpos[mid] < pos:
            lo = mid + 1
        else:
            hi = mid
    return lo


@kernel
def attention_forward(out, preatt, att, q, kv, qpos, kpos, B, NH, tr, kid, layer, nthreads):
    # out (B*Tq, C); preatt, att (B, NH, Tq, Tk) (saved for backward); q (B*Tq, 3C); kv (nsrc*B*Tks, 3C);
    # qpos (Tq,), kpos (nsrc, Tks) int32
    C3 = q.shape[1]
    C = C3 // 3
    hs = C // NH
    Tq = qpos.shape[0]
    nsrc, Tks = kpos.shape
    Tk = nsrc * Tks
    scale = np.float32(1.0 / math.sqrt(hs))
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        p0, p1 = chunk(B * NH, nthreads, t)
        for p in range(p0, p1):
            b, h = p // NH, p % NH
            qrow, qcol, kcol, vcol = b * Tq, h * hs, C + h * hs, 2 * C + h * hs
            pre = preatt[b, h]  # (Tq, Tk)
            a = att[b, h]  # (Tq, Tk)
            for r0 in range(0, Tq, ROWS):
                r1 = min(r0 + ROWS, Tq)
                for s in range(nsrc):
                    n = _seen(kpos[s], qpos[r1 - 1])
                    if n > 0:
                        # pre[r0:r1, source s's keys 0:n] = scale * q[r0:r1] @ k_s[0:n]^T
                        cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(TRANS),
                                    np.int32(r1 - r0), np.int32(n), np.int32(hs), scale,
                                    q[qrow + r0:, qcol:].ctypes.data, np.int32(C3),
                                    kv[(s * B + b) * Tks:, kcol:].ctypes.data, np.int32(C3),
                                    np.float32(0.0), pre[r0:, s * Tks:].ctypes.data, np.int32(Tk))
            for t1 in range(Tq):
                # softmax over the visible keys; the max shift keeps exp from overflowing (llm.c does it too),
                # and the denominator is summed in float64 because it can run over 1024 terms
                # (2-D indexing with the source's column offset o: measured faster here than row slices)
                pos = qpos[t1]
                maxval = np.float32(-np.inf)
                for s in range(nsrc):
                    o = s * Tks
                    for j in range(o, o + _seen(kpos[s], pos)):
                        if pre[t1, j] > maxval:
                            maxval = pre[t1, j]
                expsum = 0.0
                for s in range(nsrc):
                    o = s * Tks
                    n = _seen(kpos[s], pos)
                    for j in range(o, o + n):
                        e = np.exp(pre[t1, j] - maxval)
                        a[t1, j] = e
                        expsum += e
                    for j in range(o + n, o + Tks):
                        a[t1, j] = np.float32(0.0)  # masked; also what the att @ v products below read
                inv = np.float32(1.0 / expsum)
                for s in range(nsrc):
                    o = s * Tks
                    for j in range(o, o + _seen(kpos[s], pos)):
                        a[t1, j] *= inv
            for r0 in range(0, Tq, ROWS):
                r1 = min(r0 + ROWS, Tq)
                beta = np.float32(0.0)
                for s in range(nsrc):
                    n = _seen(kpos[s], qpos[r1 - 1])
                    if n > 0:
                        # out[r0:r1, head h] (+)= att[r0:r1, source s's keys 0:n] @ v_s[0:n]
                        cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(NO_TRANS),
                                    np.int32(r1 - r0), np.int32(hs), np.int32(n), np.float32(1.0),
                                    a[r0:, s * Tks:].ctypes.data, np.int32(Tk),
                                    kv[(s * B + b) * Tks:, vcol:].ctypes.data, np.int32(C3),
                                    beta, out[qrow + r0:, qcol:].ctypes.data, np.int32(C))
                        beta = np.float32(1.0)
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def attention_backward(dq, dkv, dpreatt, datt, dout, q, kv, att, qpos, kpos, B, NH, dkoff, tr, kid, layer, nthreads):
    # dq (B*Tq, ldq) += into columns 0:C; dkv (nsrc*B*Tks, ldkv) += into dk columns dkoff:dkoff+C and dv columns
    # dkoff+C:dkoff+2C (whole sequences: dq = dkv = the layer's dqkv, dkoff = C); dpreatt, datt (B, NH, Tq, Tk)
    # scratch (need no zeroing); dout (B*Tq, C); q, kv, qpos, kpos as in forward; att from attention_forward
    C3 = q.shape[1]
    C = C3 // 3
    hs = C // NH
    Tq = qpos.shape[0]
    nsrc, Tks = kpos.shape
    Tk = nsrc * Tks
    ldq, ldkv = dq.shape[1], dkv.shape[1]
    scale = np.float32(1.0 / math.sqrt(hs))
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        p0, p1 = chunk(B * NH, nthreads, t)
        for p in range(p0, p1):
            b, h = p // NH, p % NH
            qrow, qcol, kcol, vcol = b * Tq, h * hs, C + h * hs, 2 * C + h * hs
            a = att[b, h]  # (Tq, Tk)
            da = datt[b, h]  # (Tq, Tk)
            dpre = dpreatt[b, h]  # (Tq, Tk)
            for r0 in range(0, Tq, ROWS):
                r1 = min(r0 + ROWS, Tq)
                for s in range(nsrc):
                    n = _seen(kpos[s], qpos[r1 - 1])
                    if n > 0:
                        # da[r0:r1, source s's keys 0:n] = dout[r0:r1, head h] @ v_s[0:n]^T  (overwrites)
                        cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(TRANS),
                                    np.int32(r1 - r0), np.int32(n), np.int32(hs), np.float32(1.0),
                                    dout[qrow + r0:, qcol:].ctypes.data, np.int32(C),
                                    kv[(s * B + b) * Tks:, vcol:].ctypes.data, np.int32(C3),
                                    np.float32(0.0), da[r0:, s * Tks:].ctypes.data, np.int32(Tk))
            for t1 in range(Tq):
                # softmax backward in O(Tk) per row: dpre = att * (datt - sum att*datt), equal to llm.c's O(T^2)
                # double loop; the dot runs over up to 1024 terms, so it is summed in float64
                pos = qpos[t1]
                block_last = qpos[min((t1 // ROWS + 1) * ROWS, Tq) - 1]  # last query of t1's row block
                dot = 0.0
                for s in range(nsrc):
                    as_, das = a[t1, s * Tks:(s + 1) * Tks], da[t1, s * Tks:(s + 1) * Tks]
                    for j in range(_seen(kpos[s], pos)):
                        dot += as_[j] * das[j]
                dotf = np.float32(dot)
                for s in range(nsrc):
                    as_, das = a[t1, s * Tks:(s + 1) * Tks], da[t1, s * Tks:(s + 1) * Tks]
                    ds = dpre[t1, s * Tks:(s + 1) * Tks]
                    n = _seen(kpos[s], pos)
                    for j in range(n):
                        ds[j] = as_[j] * (das[j] - dotf)
                    # the masked entries the products below read are zero: up to the keys the row block's dq
                    # product multiplies, and to the end of the last key block whose first key this query sees
                    zend = max(_seen(kpos[s], block_last), min((n + ROWS - 1) // ROWS * ROWS, Tks))
                    for j in range(n, zend):
                        ds[j] = np.float32(0.0)
            for r0 in range(0, Tq, ROWS):
                r1 = min(r0 + ROWS, Tq)
                for s in range(nsrc):
                    n = _seen(kpos[s], qpos[r1 - 1])
                    if n > 0:
                        # dq[r0:r1] += scale * dpre[r0:r1, source s's keys 0:n] @ k_s[0:n]
                        cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(NO_TRANS),
                                    np.int32(r1 - r0), np.int32(hs), np.int32(n), scale,
                                    dpre[r0:, s * Tks:].ctypes.data, np.int32(Tk),
                                    kv[(s * B + b) * Tks:, kcol:].ctypes.data, np.int32(C3),
                                    np.float32(1.0), dq[qrow + r0:, qcol:].ctypes.data, np.int32(ldq))
            for s in range(nsrc):
                krow = (s * B + b) * Tks
                for c0 in range(0, Tks, ROWS):
                    c1 = min(c0 + ROWS, Tks)
                    qa = _first_seeing(qpos, kpos[s, c0])  # queries before qa see none of this key block
                    if qa >= Tq:
                        break  # nor any later one: positions increase along j
                    # dv_s[c0:c1] += att[qa:Tq, c0:c1]^T @ dout[qa:Tq] (masked att entries are zeros)
                    cblas_sgemm(np.int32(ROW_MAJOR), np.int32(TRANS), np.int32(NO_TRANS),
                                np.int32(c1 - c0), np.int32(hs), np.int32(Tq - qa), np.float32(1.0),
                                a[qa:, s * Tks + c0:].ctypes.data, np.int32(Tk),
                                dout[qrow + qa:, qcol:].ctypes.data, np.int32(C),
                                np.float32(1.0), dkv[krow + c0:, dkoff + C + qcol:].ctypes.data, np.int32(ldkv))
                    # dk_s[c0:c1] += scale * dpre[qa:Tq, c0:c1]^T @ q[qa:Tq]
                    cblas_sgemm(np.int32(ROW_MAJOR), np.int32(TRANS), np.int32(NO_TRANS),
                                np.int32(c1 - c0), np.int32(hs), np.int32(Tq - qa), scale,
                                dpre[qa:, s * Tks + c0:].ctypes.data, np.int32(Tk),
                                q[qrow + qa:, qcol:].ctypes.data, np.int32(C3),
                                np.float32(1.0), dkv[krow + c0:, dkoff + qcol:].ctypes.data, np.int32(ldkv))
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def whole_sequence_positions(T: int) -> tuple[np.ndarray, np.ndarray]:
    """(qpos, kpos) of plain causal attention over whole sequences: every rank holds all T positions."""
    pos = np.arange(T, dtype=np.int32)
    return pos, pos[None, :].copy()


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
