"""Preallocated per-call buffers that kernels write their timestamps into (the hot path of tracing).

Before each kernel call the launcher appends the call's key to `keys` and passes `slots[len(keys) - 1]`, an int64
view (nthreads + 1, 3) of `times`, to the kernel, which fills it from inside Numba code (see
trainer/kernels/launch.py). A call's key is its kernel's key (`kernel_key`, asked once per kernel and kept by the
launcher) plus its layer. The launcher does this itself, on the two plain lists (trainer/launcher.py): a method
call here cost ~120 ns more a call. Nothing is allocated per call but a small int, and `times` grows only in the
first steps; `keys` and `slots` stay the same list objects for the recorder's life (cleared and extended in
place), so the launcher can hold them.

A call's step and microstep are not stored per call but as the call index at which they changed (`mark`: a few
times a step, where calls come by the hundred): the merge turns keys and marks into columns with a few NumPy
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
    """The calls `KernelRecorder.take` returned: `keys` (n,) int64 (kernel id and layer, one a call) and `marks`
    (m, 3) int64, (first call, step, microstep) where those changed, the first at call 0. `call_meta` makes them
    columns."""
    keys: np.ndarray
    marks: np.ndarray

    def __len__(self) -> int:
        return len(self.keys)


class KernelRecorder:
    def __init__(self, nthreads: int, capacity: int = 4096):
        self.nthreads = nthreads
        self.kernel_names: list[str] = []
        self._kernel_keys: dict[str, int] = {}   # kernel name -> its id << _LAYER_BITS
        self.step = NO_VALUE                      # of the calls from now on: set both with `mark`
        self.microstep = NO_VALUE
        self.keys: list[int] = []                 # one a call since the last take
        self.slots: list[np.ndarray] = []         # slots[i]: the times of call i, a view of `times`
        self._marks = [(0, NO_VALUE, NO_VALUE)]
        self.times = self._alloc(capacity)
        self._taken = np.empty_like(self.times)   # what `take` returns: kept, so a cut touches no new pages

    @property
    def n(self) -> int:
        """Calls recorded since the last take."""
        return len(self.keys)

    def mark(self, step: int, microstep: int) -> None:
        """The step and microstep of the calls from now on."""
        self.step, self.microstep = step, microstep
        n = len(self.keys)
        if self._marks[-1][0] == n:       # no call since the last change: it applies to none
            self._marks[-1] = (n, step, microstep)
        else:
            self._marks.append((n, step, microstep))

    def _alloc(self, capacity: int) -> np.ndarray:
        times = np.zeros((capacity, self.nthreads + 1, 3), dtype=np.int64)
        times[:, 1:, 2] = NO_VALUE        # a block a thread did not run stays marked as absent
        self.slots[:] = list(times)       # one view per call, made once
        return times

    def grow(self) -> None:
        """Double `times` (and `slots`), keeping what the calls so far recorded."""
        old = self.times
        self.times = self._alloc(2 * len(old))
        self.times[: len(old)] = old

    def kernel_key(self, kernel: str) -> int:
        """The key of `kernel`'s calls (add the layer: `slot(kernel_key(name) + layer)`)."""
        base = self._kernel_keys.get(kernel)
        if base is None:
            base = self._kernel_keys[kernel] = len(self.kernel_names) << _LAYER_BITS
            self.kernel_names.append(kernel)
        return base

    def slot(self, key: int) -> np.ndarray:
        """The next call's slot; `key`: its kernel's key plus its layer (what the launcher does inline)."""
        self.keys.append(key)
        if len(self.keys) > len(self.slots):     # the buffer is full only in the first steps
            self.grow()
        return self.slots[len(self.keys) - 1]

    def take(self, upto: int | None = None) -> tuple[np.ndarray, Calls]:
        """The first `upto` calls recorded since the last take (all by default): times (n, nthreads+1, 3), a copy
        valid until the next take, and their kernels, layers, steps and microsteps (`Calls`). Every slot is reset
        for reuse, including the calls after `upto`, which are dropped (a step cut short).

        Runs on the training loop's thread at a window's end, so it only copies: ~0.2 ms for the ~6,500 calls
        of 1 s of the `small` model, most of it turning the keys into an array; the per-call conversion happens
        in the merge. The copy goes to a buffer kept from one take to the next: a new one each time cost page
        faults on ~0.5 MB, ~0.2 ms in this project's VMs."""
        recorded = len(self.keys)
        n = recorded if upto is None else min(upto, recorded)
        if len(self._taken) < n:
            self._taken = np.empty_like(self.times)
        times = self._taken[:n]
        times[:] = self.times[:n]
        self.times[:recorded, 1:, 2] = NO_VALUE
        keys = np.fromiter(self.keys, np.int64, n)
        marks = np.array([m for m in self._marks if m[0] < n], dtype=np.int64).reshape(-1, 3)
        self.keys.clear()
        self._marks = [(0, self.step, self.microstep)]
        return times, Calls(keys, marks)


def call_meta(calls: Calls) -> np.ndarray:
    """(n, 4) int32: kernel id, layer, step, microstep of each call `KernelRecorder.take` returned."""
    return raw_window.call_meta(calls.keys, calls.marks)
