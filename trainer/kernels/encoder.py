"""Token + position embedding (llm.c's encoder_forward / encoder_backward).

Row i of the (B*Tl, C) output embeds tokens[i], of sequence i // Tl, at position pos[i % Tl]: pos = arange(T) for
whole sequences, this rank's positions under sequence parallelism (every token keeps its true position).

Forward splits the BT rows. Backward splits the C columns instead: several rows can share a token (and every
Tl-th row shares a position), so with a row split two threads could add into the same dwte/dwpe element.
Owning columns c0:c1 makes every gradient element belong to exactly one thread: no atomics, no scratch.

Under tensor parallelism (trainer.parallel.tensor) wte is a rank's vocabulary slice, rows [v0, v0 + Vs): a token
outside it contributes nothing here (another rank's lookup holds it, and the group's all-reduce sums the rows), and
only one rank of the group adds the position embedding (`add_pos`). Whole vocabulary: v0 = 0, add_pos = True.
"""
from __future__ import annotations

import numpy as np
from numba import prange

from trainer.kernels.launch import block_begin, block_end, chunk, kernel, region_begin, region_end


@kernel
def encoder_forward(out, tokens, wte, wpe, pos, v0, add_pos, tr, kid, layer, nthreads):
    # out (B*Tl, C); tokens (B*Tl,) int32 in [0, V); wte (Vs, C): vocabulary rows [v0, v0 + Vs); wpe (maxT, C);
    # pos (Tl,) int32: row i is at position pos[i % Tl]; add_pos: whether to add wpe
    BT, C = out.shape
    Tl = pos.shape[0]
    Vs = wte.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        r0, r1 = chunk(BT, nthreads, t)
        for i in range(r0, r1):
            tok = tokens[i] - v0
            p = pos[i % Tl]
            held = 0 <= tok < Vs
            for c in range(C):
                e = wte[tok, c] if held else np.float32(0.0)
                out[i, c] = e + wpe[p, c] if add_pos else e
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


@kernel
def encoder_backward(dwte, dwpe, dout, tokens, pos, v0, tr, kid, layer, nthreads):
    # dwte (Vs, C) += for the tokens in [v0, v0 + Vs), dwpe (maxT, C) +=; dout (B*Tl, C); tokens (B*Tl,) int32;
    # pos (Tl,) int32 as in forward
    BT, C = dout.shape
    Tl = pos.shape[0]
    Vs = dwte.shape[0]
    trc = region_begin(tr, kid, layer)
    for t in prange(nthreads):
        t0 = block_begin(tr)
        c0, c1 = chunk(C, nthreads, t)
        for i in range(BT):
            tok = tokens[i] - v0
            p = pos[i % Tl]
            held = 0 <= tok < Vs
            for c in range(c0, c1):
                d = dout[i, c]
                if held:
                    dwte[tok, c] += d
                dwpe[p, c] += d
        block_end(tr, trc, t, t0)
    return region_end(tr, trc)


def _row_positions(n_rows: int, pos) -> np.ndarray:
    pos = np.asarray(pos)
    return pos[np.arange(n_rows) % len(pos)]


def encoder_forward_ref(tokens, wte, wpe, pos):
    """NumPy reference (float64) for tests: (B*Tl, C)."""
    return wte.astype(np.float64)[tokens] + wpe.astype(np.float64)[_row_positions(len(tokens), pos)]


def encoder_backward_ref(dout, tokens, pos, Vp, maxT):
    """(dwte (Vp, C), dwpe (maxT, C)) in float64; np.add.at sums rows that share a token or position."""
    d = dout.astype(np.float64)
    dwte = np.zeros((Vp, d.shape[1]))
    dwpe = np.zeros((maxT, d.shape[1]))
    np.add.at(dwte, tokens, d)
    np.add.at(dwpe, _row_positions(len(tokens), pos), d)
    return dwte, dwpe
