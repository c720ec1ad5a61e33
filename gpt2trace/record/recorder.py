"""Preallocated per-call buffers that kernels write their timestamps into (the hot path of tracing).

The launcher asks `slot(kernel, layer)` before each kernel call and passes the returned int64 view
(nthreads + 1, 3) to the kernel, which fills it from inside Numba code (see trainer/kernels/launch.py).
Per call, Python does one dict lookup, one tuple append and hands out a view made in advance: nothing is
allocated but the tuple (~0.4 us a call), and the buffer grows only in the first steps.
"""
from __future__ import annotations

import itertools

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

    def take(self, upto: int | None = None) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
        """The first `upto` calls recorded since the last take (all by default): times (n, nthreads+1, 3) as a
        copy, and their (kernel id, layer, step, microstep) tuples (`call_meta` makes them an array). Every slot
        is reset for reuse, including the calls after `upto`, which are dropped (a step cut short).

        Runs on the training loop's thread at a window's end, so it only copies: ~30 us for the ~3,000 calls of
        0.5 s of the `small` model; the per-call conversion happens on the writer thread."""
        n = self.n if upto is None else min(upto, self.n)
        times = self.times[:n].copy()
        self.times[: self.n, 1:, 2] = NO_VALUE
        calls, self._calls, self.n = self._calls[:n], [], 0
        return times, calls


def call_meta(calls: list[tuple[int, int, int, int]]) -> np.ndarray:
    """(n, 4) int32: kernel id, layer, step, microstep of each call `KernelRecorder.take` returned (flattened
    first: half the time of np.array over the tuples, on the writer thread's ~3,000 calls a window)."""
    flat = np.fromiter(itertools.chain.from_iterable(calls), dtype=np.int32, count=4 * len(calls))
    return flat.reshape(len(calls), 4)
