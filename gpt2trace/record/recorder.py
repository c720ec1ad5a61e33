"""The log traced kernels write their calls into (the hot path of tracing), and the window's buffer it is copied to.

Every traced kernel call writes its own row of `log`, an int64 array (1 + RING, nthreads + 1, 3), from inside
Numba code (trainer/kernels/launch.py): after a header row holding how many calls were written since the last
take and how many of them were copied out, call n fills row 1 + n % RING with its region's times and key (its
kernel's id << LAYER_BITS plus its layer) and its blocks' times and thread ids. The Python around a traced call
does nothing more than around an untraced one: inside a training step, with the kernels' data between calls,
each Python operation on the launcher's path cost ~1 us a call (its code and data out of cache), ~1% of the
`small` model's step for the few the launcher did to hand out slots and keys.

The log is a ring: a kernel returns True once half of it holds calls not yet copied out, and the launcher then
calls `spill`, which copies them to `times`, the window's buffer; so no call overwrites one not yet copied. The
ring holds a whole window of the `small` model (~6,500 calls a second) below its half, so in the common case
nothing is spilled and a window's calls are handed out where the kernels wrote them, the ring's first rows (`take`).
Spilling them cost ~0.05-0.07% of `small`'s time inside the training steps (half a 2,048-row ring at a time, or all
at the window's end alike); handed out in place, most of that moves into the cut's write, which now reads the
rows cold, and ~0.04% is saved (benchmarks/tracer_in_situ.py, three runs alternated). A row is no warmer in a small
ring than in a large one: the kernels' data evicts it between its uses either way.

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
RING = 16384                          # rows of the log (a power of two: the kernels mask)
_CALLS, _TAKEN = (0, 0, 0), (0, 0, 1)  # the log's header: calls written since the last take, and copied out


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
    """`kernel_names` by kernel id: a launcher binds it to the ids its kernels write (trainer.kernels.launch's
    registry); calls filled by hand (`slot`) name their kernels with `kernel_key`."""

    def __init__(self, nthreads: int, capacity: int = 4096):
        self.nthreads = nthreads
        self.kernel_names: list[str] = []
        self.step = NO_VALUE                      # of the calls from now on: set both with `mark`
        self.microstep = NO_VALUE
        self._marks = [(0, NO_VALUE, NO_VALUE)]
        self.log = _slots(1 + RING, nthreads)     # row 0: the header
        self.log[0] = 0
        self.times = _slots(capacity, nthreads)   # the calls spilled from the ring since the last take, if any
        self._spare = _slots(capacity, nthreads)  # what the last spilled take returned; the next spills' buffer

    @property
    def n(self) -> int:
        """Calls recorded since the last take."""
        return self.log.item(0)            # the header's first field (_CALLS): a Python int, read fast

    def mark(self, step: int, microstep: int) -> None:
        """The step and microstep of the calls from now on."""
        self.step, self.microstep = step, microstep
        n = self.n
        if self._marks[-1][0] == n:       # no call since the last change: it applies to none
            self._marks[-1] = (n, step, microstep)
        else:
            self._marks.append((n, step, microstep))

    def spill(self) -> None:
        """The calls written to the ring and not yet copied out, all returned, go to `times` (a kernel marks its
        row's blocks not run when it takes the row again)."""
        first, end = int(self.log[_TAKEN]), int(self.log[_CALLS])
        if end > len(self.times):
            size = len(self.times)
            while size < end:
                size *= 2
            grown = _slots(size, self.nthreads)
            grown[:first] = self.times[:first]
            self.times = grown
        while first < end:                        # at most two runs of rows: the ring may wrap
            row = first % RING
            count = min(end - first, RING - row)
            rows = self.log[1 + row:1 + row + count]
            self.times[first:first + count] = rows
            first += count
        self.log[_TAKEN] = end

    def kernel_key(self, kernel: str) -> int:
        """The key of `kernel`'s calls filled by hand (add the layer: `slot(kernel_key(name) + layer)`)."""
        try:
            kid = self.kernel_names.index(kernel)
        except ValueError:
            kid = len(self.kernel_names)
            self.kernel_names.append(kernel)
        return kid << _LAYER_BITS

    def slot(self, key: int) -> np.ndarray:
        """What a kernel's `region_begin` does, for calls filled by hand (tests, benchmarks): the next call's row,
        (nthreads + 1, 3), its key written; `key`: its kernel's key plus its layer. The row is the call's until
        the ring has been spilled past it."""
        n = self.n
        if 2 * (n - int(self.log[_TAKEN])) >= RING:     # the calls before, filled by now: as a kernel's return
            self.spill()
        row = self.log[1 + n % RING]
        self.log[_CALLS] = n + 1
        row[0, 2] = key
        row[1:, 2] = NO_VALUE
        return row

    def take(self, upto: int | None = None) -> tuple[np.ndarray, Calls]:
        """The first `upto` calls recorded since the last take (all by default): times (n, nthreads+1, 3), valid
        until the next kernel call, and their kernels, layers, steps and microsteps (`Calls`). The calls after
        `upto` are dropped (a step cut short); the next call starts a new window in the ring's first row.

        Runs on the training loop's thread at a window's end. A window nothing was spilled from is the ring's first
        rows, handed out as they are. Otherwise the rest is spilled and the window's buffer handed out, and the
        spare one kept from the take before becomes the next spills' buffer: no copy, and no new pages (a new
        ~0.5 MB buffer per take cost its page faults, ~0.2 ms in this project's VMs)."""
        recorded = self.n
        n = recorded if upto is None else min(upto, recorded)
        if int(self.log[_TAKEN]) == 0:      # never more than half the ring unread: calls 0..n-1 in rows 1..n
            times = self.log[1:1 + n]
        else:
            self.spill()
            times = self.times[:n]
            self.times, self._spare = self._spare, self.times
            if len(self.times) < len(self._spare):      # the window that grew it: the next may need as much
                self.times = _slots(len(self._spare), self.nthreads)
        keys = times[:, 0, 2].copy()
        marks = np.array([m for m in self._marks if m[0] < n], dtype=np.int64).reshape(-1, 3)
        self.log[0] = 0
        self._marks = [(0, self.step, self.microstep)]
        return times, Calls(keys, marks)


def _slots(calls: int, nthreads: int) -> np.ndarray:
    """Room for `calls` calls' times, every block marked not run (a block a thread did not run stays so)."""
    times = np.zeros((calls, nthreads + 1, 3), dtype=np.int64)
    times[:, 1:, 2] = NO_VALUE
    return times


def call_meta(calls: Calls) -> np.ndarray:
    """(n, 4) int32: kernel id, layer, step, microstep of each call `KernelRecorder.take` returned."""
    return raw_window.call_meta(calls.keys, calls.marks)
