"""Fused softmax + cross-entropy over the real vocab of padded logits (llm.c's softmax_forward,
crossentropy_forward and crossentropy_softmax_backward in one op).

Logits are (BT, Vp) with Vp >= V (llm.c pads V to a multiple of 128 so the lm-head matmul tiles well); the
padded columns V:Vp are not tokens, so they take no part in the softmax, get probability 0 and gradient 0.
Each row is independent: threads split the BT rows. Row sums run in float64.

Vocabulary-parallel (Megatron, trainer.parallel.tensor): a rank holds logits columns [v0, v0 + Vs) of the padded
vocabulary, so the fused forward is cut where the tensor-parallel group must agree on a row: `crossentropy_max`
(each row's local maximum, then an all-reduce MAX), `crossentropy_exps` (exps against the global maximum; each
row's local sum and, on the rank holding the target, the target's logit, then an all-reduce SUM) and
`crossentropy_finish` (normalise, loss). The backward is the same kernel with the slice's offset.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.fastmath import exp_f32
from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel(fastmath={"reassoc", "contract"})
def crossentropy_forward(losses, probs, logits, targets, V, tr, kid, layer, nthreads):
    # losses (BT,); probs (BT, Vp); logits (BT, Vp); targets (BT,) int32 in [0, V); V <= Vp the real vocab
    # reassoc lets the float64 sum of exps vectorize (a fixed order per row, so still deterministic).
    BT, Vp = logits.shape
    trc = region_begin(tr, kid, layer)
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
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def crossentropy_max(rowmax, logits, v0, V, tr, kid, layer, nthreads):
    # rowmax (BT,) = the maximum of each row's real columns (-inf where the slice holds none); logits (BT, Vs),
    # the vocabulary's columns [v0, v0 + Vs)
    BT, Vs = logits.shape
    Vl = min(max(V - v0, 0), Vs)
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            m = -np.inf
            for j in range(Vl):
                if logits[i, j] > m:
                    m = logits[i, j]
            rowmax[i] = m
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel(fastmath={"reassoc", "contract"})
def crossentropy_exps(stats, probs, logits, rowmax, targets, v0, V, tr, kid, layer, nthreads):
    # probs (BT, Vs) = exp(logit - rowmax) over the real columns, 0 over the padding; stats (BT, 2): each row's sum
    # of those (summed in float64) and, where this slice holds the target, its logit - rowmax (else 0)
    BT, Vs = logits.shape
    Vl = min(max(V - v0, 0), Vs)
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            lrow, prow, m = logits[i], probs[i], rowmax[i]
            total = 0.0
            for j in range(Vl):
                e = exp_f32(lrow[j] - m)
                prow[j] = e
                total += e
            for j in range(Vl, Vs):
                prow[j] = 0.0
            stats[i, 0] = total
            tgt = targets[i] - v0
            stats[i, 1] = lrow[tgt] - m if 0 <= tgt < Vl else np.float32(0.0)
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def crossentropy_finish(losses, probs, stats, targets, V, tr, kid, layer, nthreads):
    # losses (BT,); probs (BT, Vs) normalised in place; stats (BT, 2) summed over the group: (sum of exps, target
    # logit - rowmax); targets (BT,) int32 in [0, V)
    BT, Vs = probs.shape
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            total = np.float64(stats[i, 0])
            inv_total = np.float32(1.0 / total)
            for j in range(Vs):
                probs[i, j] = probs[i, j] * inv_total
            tgt = targets[i]
            losses[i] = np.log(total) - stats[i, 1] if 0 <= tgt < V else np.nan
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def crossentropy_backward(dlogits, probs, targets, dloss, V, v0, tr, kid, layer, nthreads):
    # dlogits (BT, Vs) written (=, not +=); probs (BT, Vs) from crossentropy_forward; targets (BT,) int32;
    # dloss float32 scalar, d(mean loss)/d(loss_i) = 1/(B*T*grad_accum); the columns are the vocabulary's
    # [v0, v0 + Vs) (v0 = 0, Vs = Vp: the whole)
    # Unlike every other backward this one overwrites: dlogits has no other contributor (the loss is the
    # only consumer of the logits), so += would only force the caller to zero a (BT, Vp) buffer first
    # (51 MB for GPT-2 at B=4, T=64) for nothing.
    BT, Vs = dlogits.shape
    Vl = min(max(V - v0, 0), Vs)
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            for j in range(Vl):
                dlogits[i, j] = probs[i, j] * dloss
            for j in range(Vl, Vs):
                dlogits[i, j] = 0.0
            # the one-hot term, outside the loop so the loop above stays branch-free
            tgt = targets[i] - v0
            if 0 <= tgt < Vl:
                dlogits[i, tgt] = (probs[i, tgt] - 1.0) * dloss
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


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
