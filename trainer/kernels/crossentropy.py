"""Fused softmax + cross-entropy over the real vocab of padded logits (llm.c's softmax_forward,
crossentropy_forward and crossentropy_softmax_backward in one op).

Logits are (BT, Vp) with Vp >= V (llm.c pads V to a multiple of 128 so the lm-head matmul tiles well); the
padded columns V:Vp are not tokens, so they take no part in the softmax, get probability 0 and gradient 0.
Each row is independent: threads split the BT rows. Row sums run in float64.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.fastmath import exp_f32
from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel(fastmath={"reassoc", "contract"})
def crossentropy_forward(losses, probs, logits, targets, V, tr, nthreads):
    # losses (BT,); probs (BT, Vp); logits (BT, Vp); targets (BT,) int32 in [0, V); V <= Vp the real vocab
    # reassoc lets the float64 sum of exps vectorize (a fixed order per row, so still deterministic).
    BT, Vp = logits.shape
    region_begin(tr)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            lrow, prow = logits[i], probs[i]
            # subtract the row max so exp() cannot overflow
            maxval = lrow[0]
            for j in range(1, V):
                if lrow[j] > maxval:
                    maxval = lrow[j]
            # exp in float32 (the vectorizable fastmath.exp_f32: this loop runs over BT*V elements), its
            # results (all in (0, 1]) summed in float64
            total = 0.0
            for j in range(V):
                e = exp_f32(lrow[j] - maxval)
                prow[j] = e
                total += e
            inv_total = np.float32(1.0 / total)
            for j in range(V):
                prow[j] = prow[j] * inv_total
            for j in range(V, Vp):
                prow[j] = 0.0
            # -log(probs[i, tgt]) taken as log-sum-exp in float64: the same value, but it stays finite when
            # the float32 probability would underflow to 0
            tgt = targets[i]
            if 0 <= tgt < V:
                losses[i] = np.log(total) - (lrow[tgt] - maxval)
            else:
                losses[i] = np.nan  # a target outside the real vocab is a data bug: make it visible
        block_end(tr, t, t0)
    region_end(tr)


@kernel
def crossentropy_backward(dlogits, probs, targets, dloss, V, tr, nthreads):
    # dlogits (BT, Vp) written (=, not +=); probs (BT, Vp) from crossentropy_forward; targets (BT,) int32;
    # dloss float32 scalar, d(mean loss)/d(loss_i) = 1/(B*T*grad_accum)
    # Unlike every other backward this one overwrites: dlogits has no other contributor (the loss is the
    # only consumer of the logits), so += would only force the caller to zero a (BT, Vp) buffer first
    # (51 MB for GPT-2 at B=4, T=64) for nothing.
    BT, Vp = dlogits.shape
    region_begin(tr)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            for j in range(V):
                dlogits[i, j] = probs[i, j] * dloss
            for j in range(V, Vp):
                dlogits[i, j] = 0.0
            # the one-hot term, outside the loop so the loop above stays branch-free
            tgt = targets[i]
            if 0 <= tgt < V:
                dlogits[i, tgt] = (probs[i, tgt] - 1.0) * dloss
        block_end(tr, t, t0)
    region_end(tr)


def crossentropy_forward_ref(logits, targets, V):
    """NumPy reference (float64) for tests: (losses (BT,), probs (BT, Vp) with probs[:, V:] == 0)."""
    z = logits.astype(np.float64)[:, :V]
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    probs = np.zeros(logits.shape)
    probs[:, :V] = e / e.sum(axis=1, keepdims=True)
    rows = np.arange(len(targets))
    losses = np.log(e.sum(axis=1)) - z[rows, targets]
    return losses, probs


def crossentropy_backward_ref(logits, targets, dloss, V):
    """dlogits (BT, Vp) in float64: (softmax - onehot) * dloss over :V, 0 over the padding."""
    _, probs = crossentropy_forward_ref(logits, targets, V)
    dlogits = probs
    dlogits[np.arange(len(targets)), targets] -= 1.0
    return dlogits * float(dloss)
