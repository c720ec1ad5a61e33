"""Each kernel's tiling: its block tasks, run one after the other, give the forkjoin kernel's result (bitwise where
each element is computed in the same order; matmul within float32 rounding: BLAS gets other block shapes), and the
blocks a call writes never overlap (no edge between two blocks of one call, unless they accumulate into the same
weight gradient, which none does)."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels import attention, crossentropy, encoder, gelu, layernorm, matmul, residual
from trainer.tasks.regions import DependencyMap
from trainer.tasks.tiling import row_blocks, tasks_of

BT, C, OC, B, NH = 24, 16, 12, 2, 4        # BT = B * T, T = 12; blocks of 5 rows: 5, 5, 5, 5, 4


def _f32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _cases():
    """(kernel, build(): fresh args, indices of the outputs to compare, bitwise?)"""
    r = np.random.default_rng(1)
    x, w, bias = r.standard_normal((BT, C), np.float32), r.standard_normal((OC, C), np.float32), \
        r.standard_normal(OC, np.float32)
    dout = r.standard_normal((BT, OC), np.float32)
    lw, lb = r.standard_normal(C, np.float32), r.standard_normal(C, np.float32)
    ld = r.standard_normal((BT, C), np.float32)
    _, mean, rstd = layernorm.layernorm_forward_ref(x, lw, lb)
    mean, rstd = mean.astype(np.float32), rstd.astype(np.float32)
    qkv = r.standard_normal((BT, 3 * C), np.float32)
    qpos, kpos = attention.whole_sequence_positions(BT // B)
    att = np.zeros((B, NH, BT // B, BT // B), np.float32)
    attention.attention_forward(1, np.zeros((BT, C), np.float32), np.zeros_like(att), att, qkv, qkv, qpos, kpos, B, NH,
                                np.zeros((0, 1, 3), np.int64))
    logits = r.standard_normal((BT, 40), np.float32)
    targets = r.integers(0, 30, BT).astype(np.int32)
    tokens = r.integers(0, 40, BT).astype(np.int32)
    wte, wpe = r.standard_normal((40, C), np.float32), r.standard_normal((BT // B, C), np.float32)
    z = lambda *s: np.zeros(s, np.float32)   # noqa: E731
    return [
        (matmul.matmul_forward, lambda: (z(BT, OC), x, w, bias, True), [0], False),
        (matmul.matmul_backward, lambda: (z(BT, C) + 1, z(OC, C) + 1, z(OC) + 1, dout, x, w, True), [0, 1, 2], False),
        (layernorm.layernorm_forward, lambda: (z(BT, C), z(BT), z(BT), x, lw, lb), [0, 1, 2], True),
        (layernorm.layernorm_backward, lambda: (z(BT, C) + 1, z(C) + 1, z(C) + 1, ld, x, lw, mean, rstd), [0, 1, 2],
         True),
        (residual.residual_forward, lambda: (z(BT, C), x, ld), [0], True),
        (residual.residual_backward, lambda: (z(BT, C) + 1, z(BT, C) + 2, ld), [0, 1], True),
        (gelu.gelu_forward, lambda: (z(BT, C), x), [0], True),
        (gelu.gelu_backward, lambda: (z(BT, C) + 1, x, ld), [0], True),
        (attention.attention_forward, lambda: (z(BT, C), z(*att.shape), z(*att.shape), qkv, qkv, qpos, kpos, B, NH),
         [0, 2], True),
        (attention.attention_backward, lambda: (z(BT, 3 * C) + 1, None, z(*att.shape), z(*att.shape), ld, qkv, qkv,
                                                att, qpos, kpos, B, NH, C), [0], True),
        (crossentropy.crossentropy_forward, lambda: (z(BT), z(BT, 40), logits, targets, 30), [0, 1], True),
        (crossentropy.crossentropy_backward, lambda: (z(BT, 40), np.abs(logits), targets, np.float32(0.5), 30, 0),
         [0], True),
        (encoder.encoder_forward, lambda: (z(BT, C), tokens, wte, wpe, qpos, 0, True), [0], True),
        (encoder.encoder_backward, lambda: (z(40, C) + 1, z(BT // B, C) + 1, ld, tokens, qpos, 0), [0, 1], True),
    ]


def _args(build):
    args = list(build())
    if args[1] is None:          # attention backward: dq and dkv are one buffer
        args[1] = args[0]
    return tuple(args)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0].name)
def test_blocks_give_the_kernel_s_result(case):
    k, build, outputs, bitwise = case
    want = _args(build)
    k(1, *want, np.zeros((0, 1, 3), np.int64))
    got = _args(build)
    tasks = tasks_of(k, got, 5)
    assert len(tasks) >= 1
    for fn, args, _, _ in tasks:
        fn(*args)
    for i in outputs:
        if bitwise:
            assert np.array_equal(got[i], want[i]), (k.name, i)
        else:
            np.testing.assert_allclose(got[i], want[i], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0].name)
def test_blocks_of_one_call_do_not_depend_on_each_other(case):
    k, build, _, _ = case
    tasks = tasks_of(k, _args(build), 5)
    deps = DependencyMap()
    for t, (_, _, accesses, _) in enumerate(tasks):
        preds = set()
        deps.add(t, accesses, preds)
        # matmul and layernorm backward: the weight-gradient tasks read dout and inp whole while the input-gradient
        # tasks write dinp, another buffer: no edge either
        assert preds == set(), (k.name, t)


def test_row_blocks_cover_the_rows_once():
    assert row_blocks(24, 5) == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 24)]
    assert row_blocks(24, 64) == [(0, 24)]


def test_a_read_of_a_block_follows_only_the_block_that_wrote_it():
    # layernorm forward then GELU on row blocks: GELU's block b depends on layernorm's block b only
    x, out = _f32(BT, C), np.zeros((BT, C), np.float32)
    deps, ids = DependencyMap(), {}
    ln = tasks_of(layernorm.layernorm_forward, (out, np.zeros(BT, np.float32), np.zeros(BT, np.float32), x,
                                                np.ones(C, np.float32), np.zeros(C, np.float32)), 5)
    ge = tasks_of(gelu.gelu_forward, (np.zeros((BT, C), np.float32), out), 5)
    for t, (_, _, accesses, _) in enumerate(ln + ge):
        preds = set()
        deps.add(t, accesses, preds)
        ids[t] = preds
    n = len(ln)
    assert [ids[n + b] for b in range(len(ge))] == [{b} for b in range(n)]
