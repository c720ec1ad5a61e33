"""Per-call buffers that kernels write their timestamps into (the hot path of tracing).

Before each kernel call the launcher appends the call's key to `keys` and passes the call's slot, an int64 array
(nthreads + 1, 3), to the kernel, which fills it from inside Numba code (see trainer/kernels/launch.py). A call's
key is its kernel's key (`kernel_key`, asked once per kernel and kept by the launcher) plus its layer. The launcher
does this itself, on plain lists (trainer/launcher.py): a method call here cost ~120 ns more a call.

Slots come from a ring of RING calls (`slots`, views made once): call i writes into slots[i % RING], and before a
slot is reused (`spill`, every RING calls) the ring's calls are copied to `times`, the window's buffer. A slot of
its own per call (a view of `times`) was last touched a window earlier, so each call paid cache misses on it
(~0.3-0.4 us a call with a kernel's 0.25-2 MB between calls, against ~0.1 us for the ring). A spill's two NumPy
assignments cost ~2 us alone but ~40 us inside a training step (its code and data out of cache after the kernels),
whatever the ring's size: with a ring of 64 that was ~0.4 us a call, ~0.2% of the `small` model's step, hence
1024. `keys` and `slots` stay the same list objects for the recorder's life, so the launcher can hold them.

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
RING = 1024                           # slots reused in turn by the calls (a power of two: the launcher masks)


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
        self._marks = [(0, NO_VALUE, NO_VALUE)]
        self._ring = _slots(RING, nthreads)
        self.slots: list[np.ndarray] = list(self._ring)   # call i writes into slots[i % RING]
        self.times = _slots(capacity, nthreads)   # the calls spilled from the ring since the last take
        self._spare = _slots(capacity, nthreads)  # what the last take returned; the next window's `times`

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

    def spill(self, i: int) -> None:
        """Before call i (a multiple of RING) reuses the ring: its calls i - RING .. i - 1, all returned, go to
        `times`."""
        if i:
            self._keep(i - RING, RING)

    def _keep(self, first: int, count: int) -> None:
        """The ring's first `count` slots, calls `first`.., into `times` (grown when full); they are marked not
        run again."""
        end = first + count
        if end > len(self.times):
            size = len(self.times)
            while size < end:
                size *= 2
            grown = _slots(size, self.nthreads)
            grown[:first] = self.times[:first]
            self.times = grown
        self.times[first:end] = self._ring[:count]
        self._ring[:count, 1:, 2] = NO_VALUE

    def kernel_key(self, kernel: str) -> int:
        """The key of `kernel`'s calls (add the layer: `slot(kernel_key(name) + layer)`)."""
        base = self._kernel_keys.get(kernel)
        if base is None:
            base = self._kernel_keys[kernel] = len(self.kernel_names) << _LAYER_BITS
            self.kernel_names.append(kernel)
        return base

    def slot(self, key: int) -> np.ndarray:
        """The next call's slot; `key`: its kernel's key plus its layer (what the launcher does inline). The slot
        is the call's until RING more slots are handed out."""
        i = len(self.keys)
        self.keys.append(key)
        if i % RING == 0:
            self.spill(i)
        return self.slots[i % RING]

    def take(self, upto: int | None = None) -> tuple[np.ndarray, Calls]:
        """The first `upto` calls recorded since the last take (all by default): times (n, nthreads+1, 3), valid
        until the next take, and their kernels, layers, steps and microsteps (`Calls`). The calls after `upto`
        are dropped (a step cut short); the next call starts a new window in the ring's first slot.

        Runs on the training loop's thread at a window's end: ~0.2 ms for the ~6,500 calls of 1 s of the `small`
        model, most of it turning the keys into an array; the per-call conversion happens in the merge. The
        window's buffer is handed out and the spare one kept from the take before becomes the next window's: no
        copy, and no new pages (a new ~0.5 MB buffer per take cost its page faults, ~0.2 ms in this project's
        VMs)."""
        recorded = len(self.keys)
        n = recorded if upto is None else min(upto, recorded)
        if recorded:                                   # the calls still in the ring
            first = (recorded - 1) // RING * RING
            self._keep(first, recorded - first)
        times = self.times[:n]
        self.times, self._spare = self._spare, self.times
        if len(self.times) < len(self._spare):          # the window that grew it: the next may need as much
            self.times = _slots(len(self._spare), self.nthreads)
        keys = np.fromiter(self.keys, np.int64, n)
        marks = np.array([m for m in self._marks if m[0] < n], dtype=np.int64).reshape(-1, 3)
        self.keys.clear()
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
