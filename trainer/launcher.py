"""The one place kernels are called from: picks parallel or serial, hands out trace slots, checks finiteness.

Every call site in the model is one line, `run(kernel, layer, *args)`; this is where instrumentation lives.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from trainer.kernels.launch import NO_TRACE, Kernel


class SlotSource(Protocol):
    """What a tracer offers the launcher (see gpt2trace.record.recorder.KernelRecorder): a key per kernel, asked
    once, and a slot per call for that key plus the call's layer."""

    def kernel_key(self, kernel: str) -> int: ...

    def slot(self, key: int) -> np.ndarray: ...


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
        self._kernel_keys: dict[Kernel, int] = {}    # the recorder's key of each kernel, asked once

    def __call__(self, k: Kernel, layer: int, *args) -> None:
        recorder = self._recorder
        if recorder is None:
            slot = NO_TRACE
        else:
            key = self._kernel_keys.get(k)
            if key is None:
                key = self._kernel_keys[k] = recorder.kernel_key(k.name)
            slot = recorder.slot(key + layer)
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
