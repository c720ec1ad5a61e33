"""The last step of sequence-parallel attention backward: add this rank's summed key/value gradients into its
dqkv (the dq third is already there, computed locally).

Every rank's queries attend to every rank's keys, so attention backward leaves each rank with a contribution to
the dk, dv of every token of the sequence group; once the group has summed them (trainer/parallel/sequence.py),
each rank adds the rows of its own tokens. Rows are independent: threads split them.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def kvgrad_add(dqkv, dkv, tr, kid, layer, nthreads):
    # dqkv (B*Tl, 3C): columns C:3C +=; dkv (B*Tl, 2C) [dk | dv] of this rank's tokens, summed over the group
    BT, C2 = dkv.shape
    C = C2 // 2
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            drow, grow = dqkv[i, C:], dkv[i]
            for j in range(C2):
                drow[j] += grow[j]
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def kvgrad_add_ref(dqkv, dkv):
    """NumPy reference (float64) for tests: the new dqkv."""
    out = dqkv.astype(np.float64)
    C = dkv.shape[1] // 2
    out[:, C:] += dkv
    return out
