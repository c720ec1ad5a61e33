"""The one place kernels are called from: picks parallel or serial, hands kernels the trace log, checks finiteness.

Every call site in the model is one line, `run(kernel, layer, *args)`; this is where instrumentation lives.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from trainer.kernels.launch import KERNEL_NAMES, NO_TRACE, Kernel


class TraceLog(Protocol):
    """What a tracer offers the launcher (see gpt2trace.record.recorder.KernelRecorder): `log`, the ring every traced
    kernel writes its call into (trainer/kernels/launch.py), and `spill()`, called when a kernel says the ring is
    half unread. `log` stays the same array for the recorder's life. The launcher binds `kernel_names` to the
    names of the kernel ids the calls' keys hold."""
    log: np.ndarray
    kernel_names: list[str]

    def spill(self) -> None: ...


class NonFiniteOutput(Exception):
    def __init__(self, kernel: str, layer: int):
        super().__init__(kernel, layer)
        self.kernel, self.layer = kernel, layer


class Launcher:
    def __init__(self, nthreads: int, recorder: TraceLog | None = None):
        self.nthreads = nthreads
        self.recorder = recorder
        # When set (only while re-running a step that went NaN), every float32 array argument is checked after
        # each call, so the first kernel that produced a non-finite value is named.
        self.check_finite = False
        self.may_hold_inf: list[np.ndarray] = []  # buffers allowed to hold -inf (attention's masked scores)

    @property
    def recorder(self) -> TraceLog | None:
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: TraceLog | None) -> None:
        self._recorder = recorder
        self._log = NO_TRACE if recorder is None else recorder.log
        if recorder is not None:
            recorder.kernel_names = KERNEL_NAMES

    def __call__(self, k: Kernel, layer: int, *args) -> None:
        # Traced or not, the same Python: the kernel finds its row in the log and writes its key there itself
        # (each Python operation here cost ~1 us a call inside a training step, its code and data out of cache),
        # and its compiled twin is called from here, not through Kernel.call (a Python frame less).
        nthreads = self.nthreads
        if nthreads == 1:
            full = k.serial(*args, self._log, k.kid, layer, 1)
        else:
            full = k.parallel(*args, self._log, k.kid, layer, nthreads)
        if full:
            self._recorder.spill()
        if self.check_finite:
            for a in args:
                if (isinstance(a, np.ndarray) and a.dtype == np.float32 and not np.isfinite(a).all()
                        and not any(np.shares_memory(a, b) for b in self.may_hold_inf)):
                    raise NonFiniteOutput(k.name, layer)

    def taskwait(self) -> None:
        """Forkjoin kernels are done when their call returns: nothing to wait for (trainer.tasks waits here)."""

    def close(self) -> None:
        """Forkjoin keeps no threads of its own (Numba's pool is the process's)."""
