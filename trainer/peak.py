"""The sgemm peak of this machine, measured in the same process: the denominator of MFU."""
from __future__ import annotations

import time

import numpy as np

from trainer.kernels.launch import NO_TRACE
from trainer.kernels.matmul import matmul_forward


def sgemm_gflops(nthreads: int, m: int = 256, n: int = 3072, k: int = 768, seconds: float = 0.3) -> float:
    """Best GFLOP/s of our own matmul_forward on a GPT-2 MLP shape (BT=256, C=768 -> 4C) over ~`seconds`.

    Our kernel rather than a bare BLAS call, so the peak includes the same threading and blocking the
    trainer gets; the best of many repetitions, as a peak should be.
    """
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    out = np.empty((m, n), dtype=np.float32)
    nobias = np.zeros(1, dtype=np.float32)
    matmul_forward(nthreads, out, a, w, nobias, False, NO_TRACE)  # compile / warm caches
    best = float("inf")
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        matmul_forward(nthreads, out, a, w, nobias, False, NO_TRACE)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * m * n * k / best / 1e9
