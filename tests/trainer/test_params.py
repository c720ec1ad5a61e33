"""The flat parameter layout: llm.c names and shapes, grouped by layer in memory, llm.c's order on disk."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.config import MODELS
from trainer.params import NON_LAYER, PARAM_NAMES, PER_LAYER, ParamLayout, param_shapes


@pytest.fixture
def layout():
    return ParamLayout.for_model(MODELS["tiny"])


def test_views_cover_the_buffer_once_with_llmc_shapes(layout):
    flat = np.zeros(layout.size, dtype=np.float32)
    views = layout.views(flat)
    for i, name in enumerate(PARAM_NAMES):
        assert views[name].shape == param_shapes(MODELS["tiny"])[name]
        views[name][...] += i + 1       # mark each element with its tensor
    # every element belongs to exactly one tensor: no gap (0) and no overlap (a sum of two marks)
    assert set(np.unique(flat)) == set(range(1, len(PARAM_NAMES) + 1))
    assert sum(v.size for v in views.values()) == layout.size


def test_each_layer_is_one_contiguous_range(layout):
    flat = np.zeros(layout.size, dtype=np.float32)
    views = layout.views(flat)
    for l in range(layout.n_layer):
        for name in PER_LAYER:
            views[name][l] = l + 1
    for l in range(layout.n_layer):
        lo, hi = layout.layer_range(l)
        assert np.all(flat[lo:hi] == l + 1)
    assert np.all(flat[:layout.layer_start] == 0)   # the non-layer tensors come first
    assert layout.layer_start == sum(int(np.prod(param_shapes(MODELS["tiny"])[n])) for n in NON_LAYER)


def test_llmc_order_round_trips(layout):
    llmc = np.arange(layout.size, dtype=np.float32)  # llm.c's order: wte, wpe, ln1w, ... tensor by tensor
    flat = layout.from_llmc(llmc)
    views = layout.views(flat)
    # wte is first in both orders; ln1w is third in llm.c's file, right after wte and wpe
    shapes = param_shapes(MODELS["tiny"])
    assert views["wte"].reshape(-1)[0] == 0
    assert views["ln1w"][0, 0] == np.prod(shapes["wte"]) + np.prod(shapes["wpe"])
    np.testing.assert_array_equal(layout.to_llmc(flat), llmc)


def test_a_gradient_bucket_holds_the_non_layer_tensors_and_one_layer_every_layer_shares(layout):
    # tiny: non-layer wte 8,192 + wpe 1,024 + lnfw, lnfb 32 each = 9,280; one layer 12,704 -> 21,984 elements
    flat, views = layout.allocate_bucket()
    assert flat.size == layout.bucket_size == 9_280 + 12_704
    for name in PER_LAYER:
        views[name][1][...] = 1.0                    # written as layer 1: layer 0 is the same memory
        assert (views[name][0] == 1.0).all(), name
    assert (flat[layout.layer_start:] == 1.0).all() and (flat[:layout.layer_start] == 0.0).all()
    # element i of the block is element layer_range(l)[0] + i of the whole buffer, tensor by tensor
    whole = np.zeros(layout.size, dtype=np.float32)
    full = layout.views(whole)
    for i, name in enumerate(PARAM_NAMES):
        full[name][...] = i + 1
    lo, hi = layout.layer_range(1)
    flat[layout.layer_start:] = whole[lo:hi]
    for i, name in enumerate(PARAM_NAMES):
        if name in PER_LAYER:
            assert (views[name][0] == i + 1).all(), name
