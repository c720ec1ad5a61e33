"""The one place kernels are called from: picks parallel or serial, hands out trace slots, checks finiteness.

Every call site in the model is one line, `run(kernel, layer, *args)`; this is where instrumentation lives.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from trainer.kernels.launch import NO_TRACE, Kernel


class SlotSource(Protocol):
    """What a tracer offers the launcher (see gpt2trace.record.tracer.KernelRecorder)."""

    def slot(self, kernel: str, layer: int) -> np.ndarray: ...


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

    def __call__(self, k: Kernel, layer: int, *args) -> None:
        slot = self.recorder.slot(k.name, layer) if self.recorder is not None else NO_TRACE
        k(self.nthreads, *args, slot)
        if self.check_finite:
            for a in args:
                if (isinstance(a, np.ndarray) and a.dtype == np.float32 and not np.isfinite(a).all()
                        and not any(np.shares_memory(a, b) for b in self.may_hold_inf)):
                    raise NonFiniteOutput(k.name, layer)
