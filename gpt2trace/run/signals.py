"""SIGINT and SIGTERM during a run: stop at a step boundary, keep the whole steps, exit 128 + the signal.

The first signal asks the run to stop after the step in progress: the loop sees the request when the next step
would begin (`StopAtStepBoundary.begin_step`), and the run ends as a finished run does (the trace is merged, the
metrics file renamed); the request is told at once (`StopAtStepBoundary`'s `on_stop`, with the step the run stops
after), so that a long step does not look ignored. Slurm sends SIGTERM at a job's time limit and SIGKILL some
time later (KillWait, 30 s by default), so finishing the step is the right trade for steps well under that; a
second signal stops at once (`Interrupted` with `at_step_boundary=False`), and the step in progress is dropped
from the trace.

With MPI (`gpt2trace run --ranks N` sends both signals to every rank, as mpiexec and srun do) the ranks must stop
after the same step, or the ones that go on wait forever in the next step's collectives. So at every step
boundary the ranks combine their requests (one Allreduce MAX of an int on the raw communicator, a few
microseconds) and all stop together; the end of the run is then the normal one (clock sync, rank 0 merges).

A rank whose parent (mpiexec's hydra proxy, or srun's step daemon) is gone stops at the next step boundary as
for a SIGTERM: the kernel sends one (gpt2trace.run.mpiexec.die_with_parent), and where it cannot, the rank
sees at the boundary that it was reparented.

Python runs signal handlers on the main thread between bytecodes, i.e. after the Numba kernel or MPI call in
progress returns. A second signal while the tracer marks a step's end (`deferred`) is only a request: that step
is complete a few microseconds later, so the run stops at the boundary, and the bookkeeping is never cut in half.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator

import numpy as np

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The run was stopped by `signum`: at a step boundary (every step so far is complete), inside a step, or
    after training, while its files were being written (`after_training`)."""

    def __init__(self, signum: int, at_step_boundary: bool, after_training: bool = False):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum, self.at_step_boundary, self.after_training = signum, at_step_boundary, after_training

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum     # the shell's convention: 130 for SIGINT, 143 for SIGTERM


class StopSignals:
    """While active (a context manager, on the main thread), SIGINT and SIGTERM request a stop instead of
    killing the process; the previous handlers come back on exit."""

    def __init__(self, second_stops_at_once: bool = True):
        self.second_stops_at_once = second_stops_at_once
        self.requested: int | None = None     # the first signal received
        self.on_request: Callable[[int], None] | None = None    # hears the first signal, in the handler
        self._deferred = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for s in SIGNALS:
                self._previous[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame) -> None:
        first = self.requested is None
        if first or not self.second_stops_at_once or self._deferred:
            self.requested = self.requested or signum
            if first and self.on_request is not None:
                self.on_request(signum)
        else:
            raise Interrupted(signum, at_step_boundary=False)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """In this block a second signal, too, only requests a stop at the next step boundary."""
        self._deferred += 1
        try:
            yield
        finally:
            self._deferred -= 1


class StopAtStepBoundary:
    """The trainer's Observer around another one: raises `Interrupted` at the start of a step once a stop was
    requested (on any rank of `comm`), and marks step ends with signals deferred.

    `on_stop(signum, step)` hears a signal that asks for a stop (the first one this process receives), from the
    handler: `step` is the step the run will stop after (the one in progress, or the last one that ended), None
    before the first step begins. A signal that comes while a boundary decides whether the next step runs is told
    once that is decided, with the step it stops after. Set `on_stop` to None once training is over (the run ends
    as it would have anyway)."""

    def __init__(self, inner, signals: StopSignals, comm=None,
                 on_stop: Callable[[int, int | None], None] | None = None):
        self.inner, self.signals, self.comm, self.on_stop = inner, signals, comm, on_stop
        self._request = np.zeros(1, dtype=np.int32)
        self._parent = os.getppid() if comm is not None else None
        self._step: int | None = None        # the step in progress, or the last one that ended
        self._deciding = False               # in begin_step, before the step is known to run
        self._untold: int | None = None      # a signal that came meanwhile
        signals.on_request = self._requested

    def _requested(self, signum: int) -> None:
        if self._deciding:
            self._untold = signum
        elif self.on_stop is not None:
            self.on_stop(signum, self._step)

    def _orphaned(self) -> bool:
        return self._parent is not None and os.getppid() != self._parent

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def begin_step(self, step: int) -> None:
        self._deciding = True
        try:
            if self._orphaned():
                self.signals.requested = self.signals.requested or int(signal.SIGTERM)
            requested = self.signals.requested or 0
            if self.comm is not None:
                from mpi4py import MPI
                self._request[0] = requested
                self.comm.Allreduce(MPI.IN_PLACE, self._request, op=MPI.MAX)
                requested = int(self._request[0])
            if requested:
                raise Interrupted(requested, at_step_boundary=True)
            self._step = step
        finally:
            self._deciding = False
            if self._untold is not None:      # told with the step that now runs, or the last one if none does
                signum, self._untold = self._untold, None
                self._requested(signum)
        self.inner.begin_step(step)

    def end_step(self, step: int) -> None:
        with self.signals.deferred():
            self.inner.end_step(step)
