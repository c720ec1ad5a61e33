"""Preallocated per-call buffers that kernels write their timestamps into (the hot path of tracing).

The launcher asks `slot(kernel, layer)` before each kernel call and passes the returned int64 view
(nthreads + 1, 3) to the kernel, which fills it from inside Numba code (see trainer/kernels/launch.py).
Per call, Python does one dict lookup, one tuple append and hands out a view made in advance: nothing is
allocated but the tuple (~0.4 us a call), and the buffer grows only in the first steps.
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
        self._calls: list[tuple[int, int, int, int]] = []   # kernel id, layer, step, microstep per call
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        self.times = np.zeros((capacity, self.nthreads + 1, 3), dtype=np.int64)
        self.times[:, 1:, 2] = NO_VALUE   # a block a thread did not run stays marked as absent
        self._slots = list(self.times)    # one view per call, made once

    def _grow(self) -> None:
        times = self.times
        self._alloc(2 * len(times))
        self.times[: len(times)] = times

    def slot(self, kernel: str, layer: int) -> np.ndarray:
        i = self.n
        if i == len(self._slots):
            self._grow()
        kid = self._kernel_ids.get(kernel)
        if kid is None:
            kid = self._kernel_ids[kernel] = len(self.kernel_names)
            self.kernel_names.append(kernel)
        self._calls.append((kid, layer, self.step, self.microstep))
        self.n = i + 1
        return self._slots[i]

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """The calls recorded since the last take: times (n, nthreads+1, 3) and meta (n, 4) int32 (kernel id,
        layer, step, microstep), as copies; the slots are reset for reuse."""
        n, self.n = self.n, 0
        times = self.times[:n].copy()
        self.times[:n, 1:, 2] = NO_VALUE
        meta = np.array(self._calls, dtype=np.int32).reshape(n, 4)
        self._calls = []
        return times, meta
