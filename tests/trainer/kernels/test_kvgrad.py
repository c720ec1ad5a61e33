"""kvgrad_add (the last step of sequence-parallel attention backward) against its NumPy reference."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.kernels.kvgrad import kvgrad_add, kvgrad_add_ref
from trainer.kernels.launch import NO_TRACE


@pytest.mark.parametrize("rows,nthreads", [(5, 1), (5, 2), (2, 3)])   # 2 rows over 3 threads: one has none
def test_adds_dk_dv_into_the_last_two_thirds(rows, nthreads):
    C = 4
    rng = np.random.default_rng(0)
    dqkv = rng.standard_normal((rows, 3 * C)).astype(np.float32)
    dkv = rng.standard_normal((rows, 2 * C)).astype(np.float32)
    want = kvgrad_add_ref(dqkv, dkv)
    before_dq = dqkv[:, :C].copy()
    kvgrad_add(nthreads, dqkv, dkv, NO_TRACE)
    np.testing.assert_array_equal(dqkv[:, :C], before_dq)              # dq untouched
    np.testing.assert_allclose(dqkv, want, rtol=1e-7)                   # one float32 add each: exact to 1 ulp


def test_reference_by_hand():
    # C=1: dqkv row [q, k, v] = [1, 2, 3], dkv [10, 20] -> [1, 12, 23]
    out = kvgrad_add_ref(np.array([[1.0, 2.0, 3.0]], np.float32), np.array([[10.0, 20.0]], np.float32))
    np.testing.assert_array_equal(out, [[1.0, 12.0, 23.0]])
