"""The tracer's writer thread: turns closed windows into trace parts off the training loop's critical path.

The loop only hands a window over (a copy of the recorder's slots and the lists of phases, counters and MPI
calls); building its table of raw events (one row per kernel call, gpt2trace.format.parts) and writing the part
(an LZ4 Arrow IPC file) happen here. What holds the GIL here can hold up the loop, which needs it between
kernels: the writer's Python work is a few NumPy and Arrow calls per window, not per record.

One window at a time: `submit` waits while the previous one is still being written. At the tracer's default
interval that never happens, but it bounds both memory and what a kill can lose to one window being written
plus the one being filled. After a failure (a full disk) nothing more is written, so the parts on disk stay a
contiguous run of whole steps; the error is raised on the training loop's thread by `check`.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

W = TypeVar("W")


class WriterThread(Generic[W]):
    def __init__(self, write: Callable[[W], None], name: str = "gpt2trace-writer"):
        self._write = write
        self._cv = threading.Condition()
        self._pending: W | None = None
        self._busy = False
        self._closing = False
        self.error: BaseException | None = None
        self.busy_ns = 0          # wall time spent building and writing parts (benchmarks/trace_overhead.py)
        self.cpu_ns = 0           # CPU time of that (less than busy_ns when the cores are shared)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, window: W) -> None:
        """Queue `window`; waits while an earlier one is still queued or being written (a writer starved of the
        GIL by a busy loop must not let windows pile up: a kill loses at most the one being written and the one
        being filled). Dropped after a failure."""
        with self._cv:
            while (self._pending is not None or self._busy) and self.error is None:
                self._cv.wait()
            if self.error is None:
                self._pending = window
                self._cv.notify_all()

    def wait(self) -> None:
        """Until every submitted window is written (or writing failed)."""
        with self._cv:
            while (self._pending is not None or self._busy) and self.error is None:
                self._cv.wait()

    def check(self) -> None:
        """Raise the writer's failure, if any, on the calling thread."""
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while self._pending is None and not self._closing:
                    self._cv.wait()
                if self._pending is None:
                    return
                window, self._pending, self._busy = self._pending, None, True
                self._cv.notify_all()
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            try:
                self._write(window)
            except BaseException as exc:   # kept for the loop's thread, which reports it
                self.error = exc
            finally:
                self.busy_ns += time.perf_counter_ns() - t0
                self.cpu_ns += time.thread_time_ns() - c0
                with self._cv:
                    self._busy = False
                    if self.error is not None:
                        self._pending = None
                    self._cv.notify_all()
