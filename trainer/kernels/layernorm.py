"""LayerNorm over the C channels of each row (llm.c's layernorm_forward / layernorm_backward).

Row statistics are summed in float64 (two passes: mean, then the variance about it), rounded to float32 only
when stored, so rows with a large mean do not lose their variance to cancellation.

Backward has two reductions running in different directions: dinp needs sums along each row, dweight/dbias
need sums down each column. One prange iteration does both, over different index sets: thread t owns rows
r0:r1 of dinp and columns c0:c1 of dweight/dbias (recomputing norm for all BT rows of its columns), so no
element is written by two threads and no per-thread scratch buffer is needed.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from trainer.kernels.launch import NO_LAYER, block_begin, block_end, chunk, kernel, region_begin, region_end

EPS = 1e-5  # llm.c and GPT-2's nn.LayerNorm default


@kernel
def layernorm_forward(out, mean, rstd, inp, weight, bias, tr, kid, layer, nthreads):
    # out (BT, C); mean, rstd (BT,) saved for backward; inp (BT, C); weight, bias (C,)
    BT, C = inp.shape
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            m = 0.0
            for c in range(C):
                m += inp[i, c]
            m /= C
            var = 0.0
            for c in range(C):
                d = inp[i, c] - m
                var += d * d
            var /= C
            s = 1.0 / np.sqrt(var + EPS)
            for c in range(C):
                out[i, c] = (inp[i, c] - m) * s * weight[c] + bias[c]
            mean[i] = m
            rstd[i] = s
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, tr, kid, layer, nthreads):
    # dinp (BT, C) +=, dweight (C,) +=, dbias (C,) +=; dout (BT, C), inp (BT, C), weight (C,),
    # mean, rstd (BT,) from layernorm_forward
    BT, C = inp.shape
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        # dinp for rows r0:r1; the two row means are float64 because dinp is their small difference
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            m = mean[i]
            s = rstd[i]
            dnorm_mean = 0.0
            dnorm_norm_mean = 0.0
            for c in range(C):
                dnorm = weight[c] * dout[i, c]
                dnorm_mean += dnorm
                dnorm_norm_mean += dnorm * ((inp[i, c] - m) * s)
            dnorm_mean /= C
            dnorm_norm_mean /= C
            for c in range(C):
                norm = (inp[i, c] - m) * s
                dinp[i, c] += (weight[c] * dout[i, c] - dnorm_mean - norm * dnorm_norm_mean) * s
        # dweight/dbias for columns c0:c1 over all rows, row by row so the inner loop reads contiguous
        # memory; summed straight into the float32 gradients, as llm.c does
        c0, c1 = chunk(C, nthreads, t)
        for i in range(BT):
            m = mean[i]
            s = rstd[i]
            for c in range(c0, c1):
                dbias[c] += dout[i, c]
                dweight[c] += (inp[i, c] - m) * s * dout[i, c]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def layernorm_forward_ref(inp, weight, bias):
    """NumPy reference (float64) for tests: (out (BT, C), mean (BT,), rstd (BT,))."""
    x = inp.astype(np.float64)
    mean = x.mean(axis=1)
    rstd = 1.0 / np.sqrt(x.var(axis=1) + EPS)
    norm = (x - mean[:, None]) * rstd[:, None]
    return norm * weight.astype(np.float64) + bias.astype(np.float64), mean, rstd


def layernorm_backward_ref(dout, inp, weight):
    """(dinp (BT, C), dweight (C,), dbias (C,)) in float64, recomputing the statistics from inp."""
    d, x, w = (a.astype(np.float64) for a in (dout, inp, weight))
    _, mean, rstd = layernorm_forward_ref(x, w, np.zeros_like(w))
    norm = (x - mean[:, None]) * rstd[:, None]
    dnorm = d * w
    dinp = (dnorm - dnorm.mean(axis=1, keepdims=True)
            - norm * (dnorm * norm).mean(axis=1, keepdims=True)) * rstd[:, None]
    return dinp, (d * norm).sum(axis=0), d.sum(axis=0)


# -- block kernels of the task runtime (trainer/tasks): layernorm_backward's two reductions as separate tasks -----

@njit(cache=True, nogil=True, error_model="numpy")
def layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, tr):
    # dinp (R, C) += for a block of rows; dout, inp (R, C), mean, rstd (R,) the same rows; weight (C,); tr: as every
    # kernel's (launch.py)
    R, C = inp.shape
    trc = region_begin(tr, 0, NO_LAYER)
    for i in range(R):
        m = mean[i]
        s = rstd[i]
        dnorm_mean = 0.0
        dnorm_norm_mean = 0.0
        for c in range(C):
            dnorm = weight[c] * dout[i, c]
            dnorm_mean += dnorm
            dnorm_norm_mean += dnorm * ((inp[i, c] - m) * s)
        dnorm_mean /= C
        dnorm_norm_mean /= C
        for c in range(C):
            norm = (inp[i, c] - m) * s
            dinp[i, c] += (weight[c] * dout[i, c] - dnorm_mean - norm * dnorm_norm_mean) * s
    return region_end(tr, trc)


@njit(cache=True, nogil=True, error_model="numpy")
def layernorm_backward_params(dweight, dbias, dout, inp, mean, rstd, c0, c1, tr):
    # dweight, dbias (C,) += on columns c0:c1 over all BT rows, in layernorm_backward's order (bitwise equal);
    # dout, inp (BT, C), mean, rstd (BT,)
    BT = inp.shape[0]
    trc = region_begin(tr, 0, NO_LAYER)
    for i in range(BT):
        m = mean[i]
        s = rstd[i]
        for c in range(c0, c1):
            dbias[c] += dout[i, c]
            dweight[c] += (inp[i, c] - m) * s * dout[i, c]
    return region_end(tr, trc)
