"""encoder_forward / encoder_backward against the float64 NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.encoder import encoder_backward, encoder_backward_ref, encoder_forward, encoder_forward_ref
from trainer.kernels.launch import NO_TRACE

# The kernel sees the same float32 inputs the float64 reference does, so results differ only by float32
# rounding (~6e-8 relative per add, a sum of at most BT terms here): rtol 1e-5 leaves >10x margin, and
# atol 1e-6 covers elements whose sum cancels to near 0, where relative error means nothing.
RTOL, ATOL = 1e-5, 1e-6
FP32_EPS = float(np.finfo(np.float32).eps)

# (B, T, C, nthreads); Vp = 16 and maxT = 8 throughout. Tokens are drawn from [0, 4) so many rows share a
# token: the case where a row split of backward would race.
CASES = [
    (1, 2, 8, 3),   # BT=2 rows < 3 threads: one forward block is empty
    (2, 3, 8, 1),   # serial twin
    (2, 3, 8, 2),
    (3, 4, 5, 3),   # C=5 over 3 threads: uneven column chunks in backward
    (3, 4, 2, 3),   # C=2 < 3 threads: one thread owns no columns in backward
]
VP, MAXT = 16, 8


def make(B, T, C, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, 4, size=B * T).astype(np.int32)
    wte = rng.standard_normal((VP, C)).astype(np.float32)
    wpe = rng.standard_normal((MAXT, C)).astype(np.float32)
    dout = rng.standard_normal((B * T, C)).astype(np.float32)
    return tokens, wte, wpe, dout


def positions(T):
    return np.arange(T, dtype=np.int32)


def run_forward(nthreads, tokens, wte, wpe, pos):
    out = np.full((len(tokens), wte.shape[1]), np.nan, np.float32)  # NaN: catches rows left unwritten
    encoder_forward(nthreads, out, tokens, wte, wpe, pos, 0, True, NO_TRACE)
    return out


def run_backward(nthreads, dout, tokens, pos, calls=1):
    dwte = np.zeros((VP, dout.shape[1]), np.float32)
    dwpe = np.zeros((MAXT, dout.shape[1]), np.float32)
    for _ in range(calls):
        encoder_backward(nthreads, dwte, dwpe, dout, tokens, pos, 0, NO_TRACE)
    return dwte, dwpe


@pytest.mark.parametrize("B, T, C, nthreads", CASES)
def test_forward_matches_reference(B, T, C, nthreads):
    tokens, wte, wpe, _ = make(B, T, C)
    out = run_forward(nthreads, tokens, wte, wpe, positions(T))
    np.testing.assert_allclose(out, encoder_forward_ref(tokens, wte, wpe, positions(T)), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("B, T, C, nthreads", CASES)
def test_backward_matches_reference(B, T, C, nthreads):
    tokens, _, _, dout = make(B, T, C)
    dwte, dwpe = run_backward(nthreads, dout, tokens, positions(T))
    want_dwte, want_dwpe = encoder_backward_ref(dout, tokens, positions(T), VP, MAXT)
    np.testing.assert_allclose(dwte, want_dwte, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(dwpe, want_dwpe, rtol=RTOL, atol=ATOL)


def test_reference_by_hand():
    # T=2, tokens [1, 1, 0]: rows 0 and 1 both add into dwte[1]; rows 0 and 2 are position 0
    dout = np.array([[1.0], [2.0], [4.0]], np.float32)
    dwte, dwpe = encoder_backward_ref(dout, np.array([1, 1, 0]), [0, 1], 3, 2)
    np.testing.assert_array_equal(dwte[:, 0], [4.0, 3.0, 0.0])  # [row 2, rows 0+1, unused]
    np.testing.assert_array_equal(dwpe[:, 0], [5.0, 2.0])       # [rows 0+2, row 1]


@pytest.mark.parametrize("nthreads", [1, 3])
def test_backward_accumulates(nthreads):
    B, T, C = 2, 3, 8
    tokens, _, _, dout = make(B, T, C)
    once = run_backward(nthreads, dout, tokens, positions(T))
    twice = run_backward(nthreads, dout, tokens, positions(T), calls=2)
    for a, b in zip(once, twice):
        # rows sharing a token add one by one into the float32 sum, so the second call's adds round
        # differently from the first's: not exactly 2x, but within the reference tolerance
        np.testing.assert_allclose(b, 2.0 * a, rtol=RTOL, atol=ATOL)


def test_one_and_two_threads_agree():
    B, T, C = 3, 4, 8
    tokens, wte, wpe, dout = make(B, T, C, seed=1)
    pos = positions(T)
    np.testing.assert_allclose(run_forward(1, tokens, wte, wpe, pos), run_forward(2, tokens, wte, wpe, pos),
                               rtol=2 * FP32_EPS)
    for a, b in zip(run_backward(1, dout, tokens, pos), run_backward(2, dout, tokens, pos)):
        np.testing.assert_allclose(a, b, rtol=2 * FP32_EPS, atol=1e-7)


@pytest.mark.parametrize("nthreads", [1, 2])
def test_a_share_of_the_positions_embeds_each_token_at_its_true_position(nthreads):
    # Sequence parallelism: 2 sequences of T=8 positions, this rank holding the interleaved share [1, 3, 5, 7].
    # Row i is sequence i // 4 at position pos[i % 4]: rows 0..3 and 4..7 both at positions 1, 3, 5, 7.
    pos = np.array([1, 3, 5, 7], dtype=np.int32)
    tokens, wte, wpe, dout = make(2, 4, 8, seed=2)
    out = run_forward(nthreads, tokens, wte, wpe, pos)
    want = wte[tokens].astype(np.float64) + wpe[[1, 3, 5, 7, 1, 3, 5, 7]]
    np.testing.assert_allclose(out, want, rtol=RTOL, atol=ATOL)
    _, dwpe = run_backward(nthreads, dout, tokens, pos)
    np.testing.assert_allclose(dwpe[[1, 3, 5, 7]], dout[:4].astype(np.float64) + dout[4:], rtol=RTOL, atol=ATOL)
    assert not dwpe[[0, 2, 4, 6]].any()    # positions of the other rank get nothing from this one


@pytest.mark.parametrize("nthreads", [1, 2])
def test_vocabulary_slices_sum_to_the_whole(nthreads):
    # 4 slices of the 16 rows; tokens in [0, 16) so every slice holds some. Summing the slices' outputs (the
    # group's all-reduce), with the position added by slice 0 only, gives the whole lookup; each slice's dwte is its
    # rows of the whole dwte, and every slice's dwpe is the whole dwpe.
    rng = np.random.default_rng(3)
    B, T, C, k = 2, 4, 8, 4
    tokens = rng.integers(0, VP, size=B * T).astype(np.int32)
    _, wte, wpe, dout = make(B, T, C)
    pos, Vs = positions(T), VP // k
    outs, grads = [], []
    for s in range(k):
        out = np.full((B * T, C), np.nan, np.float32)
        encoder_forward(nthreads, out, tokens, np.ascontiguousarray(wte[s * Vs:(s + 1) * Vs]), wpe, pos, s * Vs,
                        s == 0, NO_TRACE)
        outs.append(out)
        dwte, dwpe = np.zeros((Vs, C), np.float32), np.zeros((MAXT, C), np.float32)
        encoder_backward(nthreads, dwte, dwpe, dout, tokens, pos, s * Vs, NO_TRACE)
        grads.append((dwte, dwpe))
    np.testing.assert_allclose(np.sum(outs, axis=0), encoder_forward_ref(tokens, wte, wpe, pos), rtol=RTOL, atol=ATOL)
    want_dwte, want_dwpe = encoder_backward_ref(dout, tokens, pos, VP, MAXT)
    for s, (dwte, dwpe) in enumerate(grads):
        np.testing.assert_allclose(dwte, want_dwte[s * Vs:(s + 1) * Vs], rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(dwpe, want_dwpe, rtol=RTOL, atol=ATOL)
