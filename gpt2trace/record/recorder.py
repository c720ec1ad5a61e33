"""Preallocated per-call buffers that kernels write their timestamps into (the hot path of tracing).

The launcher asks `slot(key)` before each kernel call and passes the returned int64 view (nthreads + 1, 3) to the
kernel, which fills it from inside Numba code (see trainer/kernels/launch.py). A call's key is its kernel's key
(`kernel_key`, asked once per kernel and kept by the launcher) plus its layer. Per call, Python appends the key to
a list and hands out a view made in advance (~110 ns, where looking the kernel's name up per call cost ~200 ns):
nothing is allocated but a small int, and the buffer grows only in the first steps.

A call's step and microstep are not stored per call but as the call index at which they changed (they change a
few times a step, calls come by the hundred): the merge turns keys and marks into columns with a few NumPy
operations (gpt2trace.format.raw_window).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpt2trace.format import raw_window

NO_VALUE = raw_window.NO_VALUE
_LAYER_BITS = raw_window.LAYER_BITS   # a call's key: kernel id << 32, plus its layer (-1: none); key + 1 splits


@dataclass(frozen=True)
class Calls:
    """The calls `KernelRecorder.take` returned: `keys` (kernel id and layer, one int a call) and `marks`,
    (first call, step, microstep) where those changed, the first at call 0. `call_meta` makes them an array."""
    keys: list[int]
    marks: list[tuple[int, int, int]]

    def __len__(self) -> int:
        return len(self.keys)


class KernelRecorder:
    def __init__(self, nthreads: int, capacity: int = 4096):
        self.nthreads = nthreads
        self.kernel_names: list[str] = []
        self._kernel_keys: dict[str, int] = {}   # kernel name -> its id << _LAYER_BITS
        self._step = NO_VALUE
        self._microstep = NO_VALUE
        self._keys: list[int] = []                # one a call since the last take
        self._marks = [(0, NO_VALUE, NO_VALUE)]
        self._alloc(capacity)

    @property
    def n(self) -> int:
        """Calls recorded since the last take."""
        return len(self._keys)

    @property
    def step(self) -> int:
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = value
        self._mark()

    @property
    def microstep(self) -> int:
        return self._microstep

    @microstep.setter
    def microstep(self, value: int) -> None:
        self._microstep = value
        self._mark()

    def _mark(self) -> None:
        mark = (self.n, self._step, self._microstep)
        if self._marks[-1][0] == self.n:       # no call since the last change: it applies to none
            self._marks[-1] = mark
        else:
            self._marks.append(mark)

    def _alloc(self, capacity: int) -> None:
        self.times = np.zeros((capacity, self.nthreads + 1, 3), dtype=np.int64)
        self.times[:, 1:, 2] = NO_VALUE   # a block a thread did not run stays marked as absent
        self._slots = list(self.times)    # one view per call, made once

    def _grow(self) -> None:
        times = self.times
        self._alloc(2 * len(times))
        self.times[: len(times)] = times

    def kernel_key(self, kernel: str) -> int:
        """The key of `kernel`'s calls (add the layer: `slot(kernel_key(name) + layer)`)."""
        base = self._kernel_keys.get(kernel)
        if base is None:
            base = self._kernel_keys[kernel] = len(self.kernel_names) << _LAYER_BITS
            self.kernel_names.append(kernel)
        return base

    def slot(self, key: int) -> np.ndarray:
        """The next call's slot; `key`: its kernel's key plus its layer."""
        keys = self._keys
        i = len(keys)
        keys.append(key)
        try:
            return self._slots[i]
        except IndexError:                 # free when not raised: the buffer is full only in the first steps
            self._grow()
            return self._slots[i]

    def take(self, upto: int | None = None) -> tuple[np.ndarray, Calls]:
        """The first `upto` calls recorded since the last take (all by default): times (n, nthreads+1, 3) as a
        copy, and their kernels, layers, steps and microsteps (`Calls`). Every slot is reset for reuse,
        including the calls after `upto`, which are dropped (a step cut short).

        Runs on the training loop's thread at a window's end, so it only copies: ~0.1 ms for the ~6,600 calls
        of 1 s of the `small` model; the per-call conversion happens in the merge."""
        n = self.n if upto is None else min(upto, self.n)
        times = self.times[:n].copy()
        self.times[: self.n, 1:, 2] = NO_VALUE
        calls = Calls(self._keys[:n], [m for m in self._marks if m[0] < n])
        self._keys = []
        self._marks = [(0, self._step, self._microstep)]
        return times, calls


def call_meta(calls: Calls) -> np.ndarray:
    """(n, 4) int32: kernel id, layer, step, microstep of each call `KernelRecorder.take` returned."""
    return raw_window.call_meta(np.array(calls.keys, dtype=np.int64), np.array(calls.marks, dtype=np.int64))
