"""KernelRecorder: preallocated slots the kernels write into, and what `take` hands the tracer."""
from __future__ import annotations

import numpy as np

from gpt2trace.record.recorder import NO_VALUE, RING, KernelRecorder, call_meta
from trainer.kernels.residual import residual_forward
from trainer.launcher import Launcher


def _slot(rec, kernel, layer):
    """A call's slot as the launcher asks for it."""
    return rec.slot(rec.kernel_key(kernel) + layer)


def _fill(slot, enter, exit_, *blocks):
    slot[0, :2] = enter, exit_
    for t, (s, e, tid) in enumerate(blocks):
        slot[1 + t] = s, e, tid


def test_slot_is_a_view_marked_absent():
    rec = KernelRecorder(nthreads=2, capacity=8)
    slot = _slot(rec, "matmul_forward", 3)
    assert slot.shape == (3, 3) and slot.dtype == np.int64 and slot.flags.c_contiguous
    assert slot is rec.slots[0]                      # the first slot of the ring
    assert (slot[1:, 2] == NO_VALUE).all()          # blocks no thread has run yet


def test_take_returns_the_calls_and_their_meta():
    rec = KernelRecorder(nthreads=2, capacity=8)
    rec.mark(4, 1)
    _fill(_slot(rec, "matmul_forward", 0), 100, 200, (110, 150, 7), (120, 190, 8))
    _fill(_slot(rec, "gelu_forward", -1), 210, 260, (215, 250, 7))      # the second block was not run
    rec.mark(5, 1)
    _fill(_slot(rec, "matmul_forward", 1), 300, 400, (301, 399, 7), (302, 398, 8))
    times, calls = rec.take()
    meta = call_meta(calls)
    assert times.shape == (3, 3, 3) and meta.dtype == np.int32
    # kernel ids in order of first appearance: matmul_forward 0, gelu_forward 1
    assert rec.kernel_names == ["matmul_forward", "gelu_forward"]
    assert meta.tolist() == [[0, 0, 4, 1], [1, -1, 4, 1], [0, 1, 5, 1]]
    assert times[1, 2, 2] == NO_VALUE and times[0, 2].tolist() == [120, 190, 8]
    assert rec.n == 0 and rec.take()[0].shape == (0, 3, 3)


def test_take_copies_and_resets_the_slots():
    rec = KernelRecorder(nthreads=1, capacity=4)
    slot = _slot(rec, "zero_fill", -1)
    _fill(slot, 1, 2, (1, 2, 99))
    times, _ = rec.take()
    slot[0, 0] = 12345                       # the slot is reused by the next call: the copy must not change
    assert times[0, 0, 0] == 1
    again = _slot(rec, "zero_fill", -1)
    assert again[1, 2] == NO_VALUE           # a reused slot starts with its blocks marked absent again


def test_the_ring_is_reused_and_the_window_grows_keeping_every_call():
    # 2 rings and 5 calls: the ring's slots are handed out again from call RING on, each call's times kept in the
    # window, which grows from 2 calls to RING (first spill), 2 RING, then 4 RING (the take keeps the last 5)
    n = 2 * RING + 5
    rec = KernelRecorder(nthreads=1, capacity=2)
    for i in range(n):
        slot = _slot(rec, "k", i)
        assert slot is rec.slots[i % RING] and slot[1, 2] == NO_VALUE      # reused, marked not run again
        _fill(slot, 10 * i, 10 * i + 5, (10 * i, 10 * i + 5, 1))
    times, calls = rec.take()
    assert len(times) == n and len(rec.times) == 4 * RING
    assert times[:, 0, 0].tolist() == [10 * i for i in range(n)] and times[:, 1, 2].tolist() == [1] * n
    assert call_meta(calls)[:, 1].tolist() == list(range(n))
    for i in range(n):                       # the next window spills into the other buffer: the one taken holds
        _fill(_slot(rec, "k", i), -1, -1, (-1, -1, 2))
    assert times[:, 0, 0].tolist() == [10 * i for i in range(n)] and times[:, 1, 2].tolist() == [1] * n
    assert rec.take()[0][:, 1, 2].tolist() == [2] * n


def test_take_upto_drops_the_calls_after_it_and_resets_every_slot():
    rec = KernelRecorder(nthreads=1, capacity=4)
    for i in range(3):
        _fill(_slot(rec, "k", i), 10 * i, 10 * i + 5, (10 * i, 10 * i + 5, 1))
    times, calls = rec.take(upto=2)             # the third call belonged to a step cut short
    assert times[:, 0, 0].tolist() == [0, 10] and call_meta(calls)[:, 1].tolist() == [0, 1]
    assert rec.n == 0 and all((s[1:, 2] == NO_VALUE).all() for s in rec.slots)
    assert call_meta(rec.take()[1]).shape == (0, 4)


def test_step_changes_between_takes_and_without_calls():
    rec = KernelRecorder(nthreads=1, capacity=4)
    rec.mark(0, 0)
    _slot(rec, "a", 2)
    rec.mark(0, 1)
    rec.mark(NO_VALUE, 1)                       # changed twice with no call between: only the last counts
    rec.mark(1, 1)
    _slot(rec, "b", -1)
    _slot(rec, "a", 70_000)                      # layers beyond 16 bits keep their value
    _, calls = rec.take()
    assert call_meta(calls).tolist() == [[0, 2, 0, 0], [1, -1, 1, 1], [0, 70_000, 1, 1]]
    _slot(rec, "b", 0)                            # the next window starts in the step the last one ended in
    rec.mark(2, 1)
    _, calls = rec.take()
    assert call_meta(calls).tolist() == [[1, 0, 1, 1]]



class _CountingRecorder(KernelRecorder):
    def __init__(self, nthreads):
        super().__init__(nthreads)
        self.asked: list[str] = []

    def kernel_key(self, kernel):
        self.asked.append(kernel)
        return super().kernel_key(kernel)


def test_the_launcher_asks_a_kernels_key_once_per_recorder():
    # three calls of residual_forward (layers 0, 1, 0): one key asked, three slots with the layer in their key;
    # a new recorder (the next traced block of a benchmark) is asked again, never given the old one's keys
    x = np.ones(64, np.float32)
    out = np.empty_like(x)
    first, second = _CountingRecorder(2), _CountingRecorder(2)
    launcher = Launcher(2, first)
    for layer in (0, 1, 0):
        launcher(residual_forward, layer, out, x, x)
    assert first.asked == ["residual_forward"] and first.n == 3
    assert call_meta(first.take()[1])[:, :2].tolist() == [[0, 0], [0, 1], [0, 0]]
    launcher.recorder = second
    second.kernel_key("other_kernel")                # ids differ between recorders
    launcher(residual_forward, 2, out, x, x)
    assert second.asked == ["other_kernel", "residual_forward"]
    times, calls = second.take()
    assert call_meta(calls)[:, :2].tolist() == [[1, 2]] and (times[0, 1:, 2] > 0).all()   # both blocks ran
    assert (out == 2).all()
    launcher.recorder = None                         # untraced: no slot asked
    launcher(residual_forward, 0, out, x, x)
    assert second.n == 0


def test_the_launcher_grows_the_slots_and_keeps_the_lists_it_holds():
    # the launcher hands out slots on the recorder's own lists, a take clears them in place, and the next calls
    # still land in the recorder
    x = np.ones(64, np.float32)
    out = np.empty_like(x)
    rec = KernelRecorder(nthreads=2, capacity=2)
    keys, slots = rec.keys, rec.slots
    launcher = Launcher(2, rec)
    n = 2 * RING + 5                                  # the ring reused twice, the window grown to hold them all
    for layer in range(n):
        launcher(residual_forward, layer, out, x, x)
    assert rec.keys is keys and rec.slots is slots
    times, calls = rec.take()
    assert call_meta(calls)[:, 1].tolist() == list(range(n))
    # every call's region and both blocks were written by the kernel, in call order
    assert (times[:, 0, :2] > 0).all() and (times[:, 0, 1] >= times[:, 0, 0]).all() and (times[:, 1:, 2] > 0).all()
    assert (times[1:, 0, 0] >= times[:-1, 0, 1]).all()
    launcher(residual_forward, 7, out, x, x)
    assert rec.keys is keys and rec.n == 1 and call_meta(rec.take()[1])[:, 1].tolist() == [7]
