"""Matmul with bias: out = inp @ weight^T + bias (llm.c's matmul_forward / matmul_backward).

Threads split the *output features* (rows of weight), not the BT rows: with BT=256 and weights of 2-150 MB,
each thread then streams only its share of the weight from memory. Each block is one cblas_sgemm call
(BLAS itself on one thread). Backward accumulates (beta = 1), as llm.c does.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from trainer.blas import NO_TRANS, ROW_MAJOR, TRANS, cblas_sgemm
from trainer.kernels.launch import NO_LAYER, block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def matmul_forward(out, inp, weight, bias, has_bias, tr, kid, layer, nthreads):
    # out (BT, OC), inp (BT, C), weight (OC, C), bias (OC,) (ignored unless has_bias)
    BT, C = inp.shape
    OC = weight.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        o0, o1 = chunk(OC, nthreads, t)
        if o1 > o0:
            # out[:, o0:o1] = inp @ weight[o0:o1]^T
            cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(TRANS),
                        np.int32(BT), np.int32(o1 - o0), np.int32(C), np.float32(1.0),
                        inp.ctypes.data, np.int32(C),
                        weight[o0:].ctypes.data, np.int32(C),
                        np.float32(0.0), out[:, o0:].ctypes.data, np.int32(OC))
            if has_bias:
                bb = bias[o0:o1]
                for i in range(BT):
                    ob = out[i, o0:o1]
                    for j in range(o1 - o0):
                        ob[j] += bb[j]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def matmul_backward(dinp, dweight, dbias, dout, inp, weight, has_bias, tr, kid, layer, nthreads):
    # dinp (BT, C) +=, dweight (OC, C) +=, dbias (OC,) +=; dout (BT, OC), inp (BT, C), weight (OC, C)
    BT, C = inp.shape
    OC = weight.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        # dinp[:, c0:c1] += dout @ weight[:, c0:c1]: each thread reads its columns of weight
        c0, c1 = chunk(C, nthreads, t)
        if c1 > c0:
            cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(NO_TRANS),
                        np.int32(BT), np.int32(c1 - c0), np.int32(OC), np.float32(1.0),
                        dout.ctypes.data, np.int32(OC),
                        weight[:, c0:].ctypes.data, np.int32(C),
                        np.float32(1.0), dinp[:, c0:].ctypes.data, np.int32(C))
        # dweight[o0:o1] += dout[:, o0:o1]^T @ inp, read in place through lda = OC
        o0, o1 = chunk(OC, nthreads, t)
        if o1 > o0:
            cblas_sgemm(np.int32(ROW_MAJOR), np.int32(TRANS), np.int32(NO_TRANS),
                        np.int32(o1 - o0), np.int32(C), np.int32(BT), np.float32(1.0),
                        dout[:, o0:].ctypes.data, np.int32(OC),
                        inp.ctypes.data, np.int32(C),
                        np.float32(1.0), dweight[o0:].ctypes.data, np.int32(C))
            if has_bias:
                db = dbias[o0:o1]
                for i in range(BT):
                    dob = dout[i, o0:o1]
                    for j in range(o1 - o0):
                        db[j] += dob[j]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def matmul_forward_ref(inp, weight, bias):
    """NumPy reference (float64) for tests."""
    out = inp.astype(np.float64) @ weight.astype(np.float64).T
    return out + bias if bias is not None else out


def matmul_backward_ref(dout, inp, weight, has_bias=True):
    d, x, w = (a.astype(np.float64) for a in (dout, inp, weight))
    return d @ w, d.T @ x, (d.sum(axis=0) if has_bias else None)


# -- block kernels of the task runtime (trainer/tasks): one task computes one block, without the GIL ------------

@njit(cache=True, nogil=True, error_model="numpy")
def matmul_backward_input(dinp, dout, weight, tr):
    # dinp (R, C) +=, a block of rows; dout (R, OC) the same rows; weight (OC, C); tr: as every kernel's (launch.py)
    R, C = dinp.shape
    OC = weight.shape[0]
    trc = region_begin(tr, 0, NO_LAYER)
    if R > 0:
        cblas_sgemm(np.int32(ROW_MAJOR), np.int32(NO_TRANS), np.int32(NO_TRANS),
                    np.int32(R), np.int32(C), np.int32(OC), np.float32(1.0),
                    dout.ctypes.data, np.int32(OC),
                    weight.ctypes.data, np.int32(C),
                    np.float32(1.0), dinp.ctypes.data, np.int32(C))
    return region_end(tr, trc)


@njit(cache=True, nogil=True, error_model="numpy")
def matmul_backward_weight(dweight, dbias, dout, inp, o0, o1, has_bias, tr):
    # dweight (OC, C) += and dbias (OC,) += on output features o0:o1 only, over all BT rows: the same sgemm and
    # row-order bias sum as matmul_backward's block of those features; dout (BT, OC), inp (BT, C)
    BT, C = inp.shape
    OC = dout.shape[1]
    trc = region_begin(tr, 0, NO_LAYER)
    if o1 > o0:
        cblas_sgemm(np.int32(ROW_MAJOR), np.int32(TRANS), np.int32(NO_TRANS),
                    np.int32(o1 - o0), np.int32(C), np.int32(BT), np.float32(1.0),
                    dout[:, o0:].ctypes.data, np.int32(OC),
                    inp.ctypes.data, np.int32(C),
                    np.float32(1.0), dweight[o0:].ctypes.data, np.int32(C))
        if has_bias:
            db = dbias[o0:o1]
            for i in range(BT):
                dob = dout[i, o0:o1]
                for j in range(o1 - o0):
                    db[j] += dob[j]
    return region_end(tr, trc)
