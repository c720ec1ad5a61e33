"""The one place kernels are called from: picks parallel or serial, hands out trace slots, checks finiteness.

Every call site in the model is one line, `run(kernel, layer, *args)`; this is where instrumentation lives.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from trainer.kernels.launch import NO_TRACE, Kernel


class SlotSource(Protocol):
    """What a tracer offers the launcher (see gpt2trace.record.recorder.KernelRecorder): a key per kernel, asked
    once; per call, the launcher appends the call's key (the kernel's plus the layer) to `keys` and passes call i
    the slot `slots[i % len(slots)]` (a power of two of them, reused in turn), calling `spill(i)` first when i is a
    multiple of len(slots). Both lists stay the same objects."""
    keys: list[int]
    slots: list[np.ndarray]

    def kernel_key(self, kernel: str) -> int: ...

    def spill(self, i: int) -> None: ...


class NonFiniteOutput(Exception):
    def __init__(self, kernel: str, layer: int):
        super().__init__(kernel, layer)
        self.kernel, self.layer = kernel, layer


class Launcher:
    def __init__(self, nthreads: int, recorder: SlotSource | None = None):
        self.nthreads = nthreads
        self.recorder = recorder
        # When set (only while re-running a step that went NaN), every float32 array argument is checked after
        # each call, so the first kernel that produced a non-finite value is named.
        self.check_finite = False
        self.may_hold_inf: list[np.ndarray] = []  # buffers allowed to hold -inf (attention's masked scores)

    @property
    def recorder(self) -> SlotSource | None:
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: SlotSource | None) -> None:
        self._recorder = recorder
        self._keys = None if recorder is None else recorder.keys
        self._slots = None if recorder is None else recorder.slots
        self._mask = 0 if recorder is None else len(recorder.slots) - 1
        self._kernel_keys: dict[Kernel, int] = {}    # the recorder's key of each kernel, asked once

    def __call__(self, k: Kernel, layer: int, *args) -> None:
        keys = self._keys
        if keys is None:
            slot = NO_TRACE
        else:
            # The slot handed out here, on the recorder's lists, rather than by a method of the recorder: the
            # call and its lookups cost ~120 ns on every kernel call.
            key = self._kernel_keys.get(k)
            if key is None:
                key = self._kernel_keys[k] = self._recorder.kernel_key(k.name)
            i = len(keys)
            keys.append(key + layer)
            j = i & self._mask
            if not j:
                self._recorder.spill(i)
            slot = self._slots[j]
        k(self.nthreads, *args, slot)
        if self.check_finite:
            for a in args:
                if (isinstance(a, np.ndarray) and a.dtype == np.float32 and not np.isfinite(a).all()
                        and not any(np.shares_memory(a, b) for b in self.may_hold_inf)):
                    raise NonFiniteOutput(k.name, layer)

    def taskwait(self) -> None:
        """Forkjoin kernels are done when their call returns: nothing to wait for (trainer.tasks waits here)."""

    def close(self) -> None:
        """Forkjoin keeps no threads of its own (Numba's pool is the process's)."""
