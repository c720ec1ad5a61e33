"""AdamW step on the flat parameter buffer (llm.c's gpt2_update), and the gradient norm.

params, grads, m and v share one flat layout (see trainer.params), so the step is one elementwise pass split
evenly over threads.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def adamw_update(params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step, tr, kid, layer, nthreads):
    # params (P,) updated in place; grads (P,); m, v (P,) first/second moments, updated in place;
    # step: 1-based optimizer step (llm.c's t) for the bias corrections
    # Decay is decoupled (applied to the parameter, not folded into the gradient) and applies to every
    # parameter, as llm.c's CPU trainer and torch.optim.AdamW do. float32 arithmetic, as llm.c: this pass
    # streams 4 x 500 MB for GPT-2 124M and must run at memory speed, which float64 division/sqrt do not.
    P = params.shape[0]
    one = np.float32(1.0)
    b1, b2 = np.float32(beta1), np.float32(beta2)
    lr32, eps32, wd32 = np.float32(lr), np.float32(eps), np.float32(weight_decay)
    inv_bc1 = one / (one - b1 ** np.float32(step))
    inv_bc2 = one / (one - b2 ** np.float32(step))
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(P, nthreads, t)
        pb, gb, mb, vb = params[r0:r1], grads[r0:r1], m[r0:r1], v[r0:r1]
        for i in range(r1 - r0):
            g = gb[i]
            mi = b1 * mb[i] + (one - b1) * g
            vi = b2 * vb[i] + (one - b2) * g * g
            mb[i] = mi
            vb[i] = vi
            pb[i] -= lr32 * ((mi * inv_bc1) / (np.sqrt(vi * inv_bc2) + eps32) + wd32 * pb[i])
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel(fastmath={"reassoc", "contract"})
def grad_norm_squared(partials, grads, tr, kid, layer, nthreads):
    # partials (>= nthreads,) float64: block t writes its sum of squares into partials[t], the caller sums
    # them (a fixed order, so the norm does not depend on thread timing); grads (P,)
    # fastmath reassoc lets the float64 sum vectorize; the order is still fixed for a given thread count.
    if partials.shape[0] < nthreads:
        raise ValueError("grad_norm_squared: partials must hold one float64 per thread")
    P = grads.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(P, nthreads, t)
        gb = grads[r0:r1]
        acc = 0.0
        for i in range(r1 - r0):
            g = np.float64(gb[i])
            acc += g * g
        partials[t] = acc
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def adamw_update_ref(params, grads, m, v, lr, beta1, beta2, eps, weight_decay, step):
    """NumPy reference (float64) for tests: returns new (params, m, v), inputs untouched."""
    p, g, m, v = (a.astype(np.float64) for a in (params, grads, m, v))
    m = beta1 * m + (1.0 - beta1) * g
    v = beta2 * v + (1.0 - beta2) * g * g
    m_hat = m / (1.0 - beta1 ** step)
    v_hat = v / (1.0 - beta2 ** step)
    return p - lr * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * p), m, v


def grad_norm_squared_ref(grads):
    """Sum of squares of grads in float64."""
    g = grads.astype(np.float64)
    return float(g @ g)
