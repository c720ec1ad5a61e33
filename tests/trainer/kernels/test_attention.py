"""attention_forward / attention_backward against the float64 NumPy reference, and the reference against
finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.attention import (
    ROWS,
    attention_backward,
    attention_backward_ref,
    attention_forward,
    attention_forward_ref,
    whole_sequence_positions,
)
from trainer.kernels.launch import NO_TRACE

# Tolerances for float32 kernels (sgemm, expf) against the float64 reference. Values here are O(1) (inputs
# ~N(0,1), hs <= 64): float32 carries ~6e-8 relative error per op, and a sum of up to T*hs terms grows it to
# ~1e-6 relative; rtol 1e-4 leaves two orders of margin. atol covers entries that cancel to ~0 (gradients of
# masked or tiny attention weights), where a relative bound means nothing.
RTOL, ATOL = 1e-4, 1e-5

# (B, T, C, NH): T=1 (softmax over one element), NH=1 (hs = C), B*NH=2 < 3 threads (a thread with no pairs),
# T not a multiple of ROWS and T > ROWS (block-triangular products with a ragged last block), hs=64 as in GPT-2.
CASES = [
    (1, 1, 8, 2),
    (2, 5, 12, 1),
    (1, 7, 16, 2),
    (2, 9, 24, 3),
    (2, ROWS + 37, 64, 4),
    (1, 2 * ROWS + 1, 128, 2),
]
THREADS = [1, 2, 3]


def make_inputs(B, T, C, seed=0):
    rng = np.random.default_rng(seed)
    inp = rng.standard_normal((B * T, 3 * C), dtype=np.float32)  # (B*T, 3C)
    dout = rng.standard_normal((B * T, C), dtype=np.float32)  # (B*T, C)
    return inp, dout


def run_forward(inp, B, T, NH, nthreads, tr=NO_TRACE, fill=np.nan):
    C = inp.shape[1] // 3
    out = np.full((B * T, C), fill, dtype=np.float32)
    preatt = np.full((B, NH, T, T), fill, dtype=np.float32)
    att = np.full((B, NH, T, T), fill, dtype=np.float32)
    attention_forward(nthreads, out, preatt, att, inp, inp, *whole_sequence_positions(T), B, NH, tr)
    return out, preatt, att


def run_backward(dinp, dout, inp, att, B, T, NH, nthreads, tr=NO_TRACE, fill=np.nan):
    # NaN-filled scratch: the kernel must not read any entry it has not written itself
    dpreatt = np.full((B, NH, T, T), fill, dtype=np.float32)
    datt = np.full((B, NH, T, T), fill, dtype=np.float32)
    C = inp.shape[1] // 3
    attention_backward(nthreads, dinp, dinp, dpreatt, datt, dout, inp, inp, att, *whole_sequence_positions(T), B,
                       NH, C, tr)
    return dinp


@pytest.mark.parametrize("nthreads", THREADS)
@pytest.mark.parametrize("B,T,C,NH", CASES)
def test_forward_matches_reference(B, T, C, NH, nthreads):
    inp, _ = make_inputs(B, T, C)
    out, preatt, att = run_forward(inp, B, T, NH, nthreads)
    out_ref, att_ref = attention_forward_ref(inp, B, T, NH)
    np.testing.assert_allclose(out, out_ref, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(att, att_ref, rtol=RTOL, atol=ATOL)  # includes the exact zeros above the diagonal
    # the saved pre-softmax scores, on the causal part (the masked part is unspecified)
    x = inp.astype(np.float64)
    q = x[:, :C].reshape(B, T, NH, -1).transpose(0, 2, 1, 3)
    k = x[:, C:2 * C].reshape(B, T, NH, -1).transpose(0, 2, 1, 3)
    pre_ref = q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // NH)
    tril = np.tril(np.ones((T, T), dtype=bool))
    np.testing.assert_allclose(preatt[..., tril], pre_ref[..., tril], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("nthreads", THREADS)
@pytest.mark.parametrize("B,T,C,NH", CASES)
def test_backward_matches_reference(B, T, C, NH, nthreads):
    inp, dout = make_inputs(B, T, C)
    _, _, att = run_forward(inp, B, T, NH, nthreads)
    dinp = run_backward(np.zeros_like(inp), dout, inp, att, B, T, NH, nthreads)
    np.testing.assert_allclose(dinp, attention_backward_ref(dout, inp, att, B, T, NH), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_backward_accumulates(nthreads):
    B, T, C, NH = 2, ROWS + 3, 32, 2
    inp, dout = make_inputs(B, T, C, seed=1)
    _, _, att = run_forward(inp, B, T, NH, nthreads)
    once = run_backward(np.zeros_like(inp), dout, inp, att, B, T, NH, nthreads)
    dinp = np.zeros_like(inp)
    run_backward(dinp, dout, inp, att, B, T, NH, nthreads)
    run_backward(dinp, dout, inp, att, B, T, NH, nthreads)
    np.testing.assert_allclose(dinp, 2 * once, rtol=1e-6, atol=1e-7)  # x + x is exact in float32


def test_scratch_contents_do_not_matter():
    # NaN (in run_backward's default) and garbage must give the same dinp: nothing is read before it is written
    B, T, C, NH = 2, ROWS + 5, 32, 4
    inp, dout = make_inputs(B, T, C, seed=2)
    _, _, att = run_forward(inp, B, T, NH, 2)
    with_nan = run_backward(np.zeros_like(inp), dout, inp, att, B, T, NH, 2, fill=np.nan)
    with_junk = run_backward(np.zeros_like(inp), dout, inp, att, B, T, NH, 2, fill=1e30)
    assert np.isfinite(with_nan).all()
    np.testing.assert_array_equal(with_nan, with_junk)


def test_one_and_two_threads_agree():
    # Each (b, h) pair does the same sgemm calls in the same order whichever thread runs it, so results are
    # bitwise equal in practice; the tolerance only allows for a BLAS that picks a kernel per thread.
    B, T, C, NH = 2, 2 * ROWS + 11, 96, 3
    inp, dout = make_inputs(B, T, C, seed=3)
    results = []
    for nthreads in (1, 2):
        out, _, att = run_forward(inp, B, T, NH, nthreads)
        dinp = run_backward(np.zeros_like(inp), dout, inp, att, B, T, NH, nthreads)
        results.append((out, att, dinp))
    for one, two in zip(*results):
        np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-7)


def test_reference_backward_matches_finite_differences():
    # Loss L = sum(out * dout); dL/dinp by central differences in float64 (h=1e-6 gives ~1e-9 error)
    B, T, C, NH = 1, 3, 4, 2
    rng = np.random.default_rng(4)
    inp = rng.standard_normal((B * T, 3 * C))  # (B*T, 3C) float64
    dout = rng.standard_normal((B * T, C))  # (B*T, C)
    _, att = attention_forward_ref(inp, B, T, NH)
    analytic = attention_backward_ref(dout, inp, att, B, T, NH)
    numeric = np.zeros_like(inp)
    eps = 1e-6
    for idx in np.ndindex(inp.shape):
        plus, minus = inp.copy(), inp.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric[idx] = ((attention_forward_ref(plus, B, T, NH)[0] * dout).sum()
                        - (attention_forward_ref(minus, B, T, NH)[0] * dout).sum()) / (2 * eps)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)
    # q of the first token cannot change anything (its only score is softmaxed over one element): zero gradient
    np.testing.assert_array_equal(analytic[0, :C], 0.0)


@pytest.mark.parametrize("nthreads", [1, 2, 3])
def test_trace_slot_filled(nthreads):
    B, T, C, NH = 2, 9, 24, 3
    inp, dout = make_inputs(B, T, C, seed=5)
    log_fwd = np.zeros((2, nthreads + 1, 3), dtype=np.int64)    # the header and one call (trainer.kernels.launch)
    _, _, att = run_forward(inp, B, T, NH, nthreads, tr=log_fwd)
    log_bwd = np.zeros((2, nthreads + 1, 3), dtype=np.int64)
    run_backward(np.zeros_like(inp), dout, inp, att, B, T, NH, nthreads, tr=log_bwd)
    for tr in (log_fwd[1], log_bwd[1]):
        assert 0 < tr[0, 0] <= tr[0, 1]  # the region, read on the main thread
        # every block ran inside the region, even a thread with no (b, h) pairs
        assert (tr[0, 0] <= tr[1:, 0]).all() and (tr[1:, 0] <= tr[1:, 1]).all() and (tr[1:, 1] <= tr[0, 1]).all()


# ---------------------------------------------------------------------------------------------------------------
# One rank's share of the sequence (sequence parallelism), simulated rank by rank in one process: rank r's queries
# against the whole group's gathered qkv must give the whole-sequence result's rows at r's positions, and the dk,
# dv contributions of the S ranks, summed (what the group's MPI reduction does), the whole-sequence dk, dv.

def split_positions(T, S, split):
    """(S, T/S) positions table, as trainer.parallel.sequence.SequenceSplit.table() builds it."""
    if split == "contiguous":
        return np.arange(T, dtype=np.int32).reshape(S, T // S)
    return np.arange(T, dtype=np.int32).reshape(T // S, S).T.copy()


def rows_at(x, B, T, pos):
    """Rows of a (B*T, ...) array at positions `pos` of every sequence: (B*len(pos), ...)."""
    return x.reshape(B, T, -1)[:, pos].reshape(B * len(pos), -1)


# (B, T, C, NH, S): S=3 with a tiny T; Tl > ROWS with a ragged last block (136 / 2 = 68, 264 / 4 = 66)
SPLIT_CASES = [(2, 12, 24, 3, 3), (1, 2 * ROWS + 8, 32, 2, 2), (1, 4 * ROWS + 8, 32, 2, 4)]


@pytest.mark.parametrize("split", ["contiguous", "interleaved"])
@pytest.mark.parametrize("B,T,C,NH,S", SPLIT_CASES)
@pytest.mark.parametrize("nthreads", [1, 3])
def test_each_ranks_share_matches_the_whole_sequence(B, T, C, NH, S, split, nthreads):
    inp, dout = make_inputs(B, T, C, seed=6)
    out_ref, att_ref = attention_forward_ref(inp, B, T, NH)
    dinp_ref = attention_backward_ref(dout, inp, att_ref, B, T, NH)
    P = split_positions(T, S, split)
    Tl = T // S
    gathered = np.concatenate([rows_at(inp, B, T, P[r]) for r in range(S)])   # (S*B*Tl, 3C), rank order
    dkv_sum = np.zeros((S * B * Tl, 2 * C), dtype=np.float64)
    for r in range(S):
        q = gathered[r * B * Tl:(r + 1) * B * Tl]
        out = np.full((B * Tl, C), np.nan, dtype=np.float32)
        preatt = np.full((B, NH, Tl, T), np.nan, dtype=np.float32)
        att = np.full((B, NH, Tl, T), np.nan, dtype=np.float32)
        attention_forward(nthreads, out, preatt, att, q, gathered, P[r], P, B, NH, NO_TRACE)
        np.testing.assert_allclose(out, rows_at(out_ref, B, T, P[r]), rtol=RTOL, atol=ATOL)
        # score column s*Tl + j is key position P[s, j]; masked ones exactly 0
        np.testing.assert_allclose(att, att_ref[:, :, P[r]][..., P.reshape(-1)], rtol=RTOL, atol=ATOL)
        dq = np.zeros((B * Tl, 3 * C), dtype=np.float32)
        dkv = np.zeros((S * B * Tl, 2 * C), dtype=np.float32)
        dpreatt = np.full((B, NH, Tl, T), np.nan, dtype=np.float32)   # NaN scratch: read only where written
        datt = np.full((B, NH, Tl, T), np.nan, dtype=np.float32)
        attention_backward(nthreads, dq, dkv, dpreatt, datt, rows_at(dout, B, T, P[r]), q, gathered, att, P[r], P,
                           B, NH, 0, NO_TRACE)
        np.testing.assert_allclose(dq[:, :C], rows_at(dinp_ref, B, T, P[r])[:, :C], rtol=RTOL, atol=ATOL)
        assert not dq[:, C:].any()          # dk, dv go to the group-wide buffer only
        dkv_sum += dkv
    want = np.concatenate([rows_at(dinp_ref, B, T, P[r])[:, C:] for r in range(S)])
    np.testing.assert_allclose(dkv_sum, want, rtol=RTOL, atol=ATOL)


def test_contiguous_split_gives_the_last_rank_the_most_keys():
    # Why the contiguous split is unbalanced: with T=8, S=2, rank 0's queries (positions 0..3) see 1+2+3+4 = 10
    # keys, rank 1's (4..7) see 5+6+7+8 = 26; interleaved: rank 0 (0,2,4,6) sees 1+3+5+7 = 16, rank 1 sees 20.
    B, T, C, NH = 1, 8, 8, 1
    inp, _ = make_inputs(B, T, C, seed=7)
    for split, want in (("contiguous", [10, 26]), ("interleaved", [16, 20])):
        P = split_positions(T, 2, split)
        gathered = np.concatenate([rows_at(inp, B, T, P[r]) for r in range(2)])
        seen = []
        for r in range(2):
            out = np.empty((B * 4, C), dtype=np.float32)
            att = np.empty((B, NH, 4, T), dtype=np.float32)
            attention_forward(1, out, np.empty_like(att), att, gathered[r * 4:(r + 1) * 4], gathered, P[r], P, B,
                              NH, NO_TRACE)
            seen.append(int((att > 0).sum()))    # softmax weights of visible keys are > 0, masked ones 0
        assert seen == want, split
