"""Preallocated per-call buffers that kernels write their timestamps into (the hot path of tracing).

The launcher asks `slot(kernel, layer)` before each kernel call and passes the returned int64 view
(nthreads + 1, 3) to the kernel, which fills it from inside Numba code (see trainer/kernels/launch.py).
Per call, Python does one dict lookup and four integer stores; nothing is allocated until the buffer
has to grow, which happens only in the first steps.
"""
from __future__ import annotations

import numpy as np

NO_VALUE = -1


class KernelRecorder:
    def __init__(self, nthreads: int, capacity: int = 4096):
        self.nthreads = nthreads
        self.kernel_names: list[str] = []
        self._kernel_ids: dict[str, int] = {}
        self.step = NO_VALUE
        self.microstep = NO_VALUE
        self.n = 0
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        self.times = np.zeros((capacity, self.nthreads + 1, 3), dtype=np.int64)
        self.meta = np.full((capacity, 4), NO_VALUE, dtype=np.int32)  # kernel id, layer, step, microstep

    def _grow(self) -> None:
        times, meta = self.times, self.meta
        self._alloc(2 * len(times))
        self.times[: len(times)] = times
        self.meta[: len(meta)] = meta

    def slot(self, kernel: str, layer: int) -> np.ndarray:
        i = self.n
        if i == len(self.times):
            self._grow()
        kid = self._kernel_ids.get(kernel)
        if kid is None:
            kid = self._kernel_ids[kernel] = len(self.kernel_names)
            self.kernel_names.append(kernel)
        meta = self.meta[i]
        meta[0], meta[1], meta[2], meta[3] = kid, layer, self.step, self.microstep
        self.n = i + 1
        out = self.times[i]
        out[1:, 2] = NO_VALUE  # a block a thread did not run stays marked as absent
        return out

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The calls recorded since the last take (copies), and reset."""
        n, self.n = self.n, 0
        return self.times[:n].copy(), self.meta[:n].copy()
