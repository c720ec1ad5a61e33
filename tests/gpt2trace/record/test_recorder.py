"""KernelRecorder: the log the kernels write their calls into, and what `take` hands the tracer."""
from __future__ import annotations

import numpy as np

from gpt2trace.format import raw_window
from gpt2trace.record.recorder import NO_VALUE, RING, KernelRecorder, call_meta
from trainer.kernels import launch
from trainer.kernels.residual import residual_forward
from trainer.kernels.zero import zero_fill
from trainer.launcher import Launcher


def test_the_kernels_keys_are_the_traces():
    assert launch.LAYER_BITS == raw_window.LAYER_BITS and launch.NO_LAYER == NO_VALUE
    assert launch.NO_BLOCK == NO_VALUE


def _slot(rec, kernel, layer):
    """A call's row, as a kernel's region_begin takes it."""
    return rec.slot(rec.kernel_key(kernel) + layer)


def _fill(slot, enter, exit_, *blocks):
    slot[0, :2] = enter, exit_
    for t, (s, e, tid) in enumerate(blocks):
        slot[1 + t] = s, e, tid


def test_slot_is_a_view_marked_absent():
    rec = KernelRecorder(nthreads=2, capacity=8)
    slot = _slot(rec, "matmul_forward", 3)
    assert slot.shape == (3, 3) and slot.dtype == np.int64 and slot.flags.c_contiguous
    assert np.shares_memory(slot, rec.log[1])       # the first row of the ring, after the header
    assert slot[0, 2] == 3 and rec.log[0, 0].tolist() == [1, 0, 0]
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


def test_a_window_nothing_was_spilled_from_is_handed_out_from_the_ring():
    rec = KernelRecorder(nthreads=2, capacity=4)
    _fill(_slot(rec, "zero_fill", -1), 1, 2, (1, 2, 99), (1, 2, 98))
    times, _ = rec.take()
    assert np.shares_memory(times, rec.log[1]) and times[0, 0, :2].tolist() == [1, 2]
    assert times[0, 1:].tolist() == [[1, 2, 99], [1, 2, 98]]
    again = _slot(rec, "zero_fill", -1)      # the next window's first call takes the same row
    assert np.shares_memory(again, rec.log[1]) and (again[1:, 2] == NO_VALUE).all()   # its blocks not run yet


def test_a_kernel_marks_the_blocks_of_a_reused_row_not_run():
    # a row the first window's call filled on both threads, taken, then reused by a one-thread call: its second
    # block must read as not run, not as the earlier call's
    x = np.ones(64, np.float32)
    out = np.empty_like(x)
    rec = KernelRecorder(nthreads=2)
    launcher = Launcher(2, rec)
    launcher(residual_forward, 0, out, x, x)
    first, _ = rec.take()
    assert (first[0, 1:, 2] > 0).all()
    launcher.nthreads = 1
    launcher(residual_forward, 0, out, x, x)
    times, _ = rec.take()
    assert times[0, 1, 2] > 0 and times[0, 2, 2] == NO_VALUE


def test_the_ring_is_reused_and_the_window_grows_keeping_every_call():
    # 2 rings and 5 calls: the ring's rows are handed out again from call RING on, each call's times kept in the
    # window, spilled every half ring, which grows from 2 calls to RING / 2 (first spill), RING, 2 RING, then 4 RING
    # (the take spills the last 5)
    n = 2 * RING + 5
    rec = KernelRecorder(nthreads=1, capacity=2)
    for i in range(n):
        slot = _slot(rec, "k", i)
        assert np.shares_memory(slot, rec.log[1 + i % RING]) and slot[1, 2] == NO_VALUE   # reused, marked not run
        assert rec.n - int(rec.log[0, 0, 1]) <= RING // 2        # never more than half the ring unread
        _fill(slot, 10 * i, 10 * i + 5, (10 * i, 10 * i + 5, 1))
    times, calls = rec.take()
    assert len(times) == n and len(rec.times) == 4 * RING
    assert times[:, 0, 0].tolist() == [10 * i for i in range(n)] and times[:, 1, 2].tolist() == [1] * n
    assert call_meta(calls)[:, 1].tolist() == list(range(n))
    for i in range(n):                       # the next window spills into the other buffer: the one taken holds
        _fill(_slot(rec, "k", i), -1, -1, (-1, -1, 2))
    assert times[:, 0, 0].tolist() == [10 * i for i in range(n)] and times[:, 1, 2].tolist() == [1] * n
    assert rec.take()[0][:, 1, 2].tolist() == [2] * n


def test_take_upto_drops_the_calls_after_it_and_starts_again_at_the_first_row():
    rec = KernelRecorder(nthreads=1, capacity=4)
    for i in range(3):
        _fill(_slot(rec, "k", i), 10 * i, 10 * i + 5, (10 * i, 10 * i + 5, 1))
    times, calls = rec.take(upto=2)             # the third call belonged to a step cut short
    assert times[:, 0, 0].tolist() == [0, 10] and call_meta(calls)[:, 1].tolist() == [0, 1]
    assert rec.n == 0 and call_meta(rec.take()[1]).shape == (0, 4)
    for i in range(3):                          # the rows are taken again from the first, blocks marked not run
        slot = _slot(rec, "k", i)
        assert np.shares_memory(slot, rec.log[1 + i]) and slot[1, 2] == NO_VALUE


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



def test_the_launcher_hands_the_log_and_the_kernels_write_their_keys():
    # three calls of residual_forward (layers 0, 1, 0) and one of zero_fill (no layer): the kernels wrote their
    # rows and keys, named by the launcher's kernel registry; untraced calls write nothing
    x = np.ones(64, np.float32)
    out = np.empty_like(x)
    rec = KernelRecorder(2)
    launcher = Launcher(2, rec)
    assert rec.kernel_names is launch.KERNEL_NAMES
    for layer in (0, 1, 0):
        launcher(residual_forward, layer, out, x, x)
    launcher(zero_fill, launch.NO_LAYER, out)
    assert rec.n == 4
    times, calls = rec.take()
    meta = call_meta(calls)
    assert [rec.kernel_names[k] for k in meta[:, 0]] == ["residual_forward"] * 3 + ["zero_fill"]
    assert meta[:, 1].tolist() == [0, 1, 0, -1]
    assert (times[:, 1:, 2] > 0).all()                   # both blocks of every call ran
    assert (out == 0).all()
    launcher.recorder = None                             # untraced: nothing written
    launcher(residual_forward, 0, out, x, x)
    assert rec.n == 0 and (out == 2).all()


def test_the_launcher_spills_when_the_kernel_says_and_keeps_every_call():
    # 2 rings and 5 calls: a kernel says when half the ring is unread, the launcher spills, the window grows to hold
    # them all, and the log stays the same array
    x = np.ones(64, np.float32)
    out = np.empty_like(x)
    rec = KernelRecorder(nthreads=2, capacity=2)
    log = rec.log
    launcher = Launcher(2, rec)
    n = 2 * RING + 5
    for layer in range(n):
        launcher(residual_forward, layer, out, x, x)
        assert rec.n - int(rec.log[0, 0, 1]) < RING // 2
    assert rec.log is log
    times, calls = rec.take()
    assert call_meta(calls)[:, 1].tolist() == list(range(n))
    # every call's region and both blocks were written by the kernel, in call order
    assert (times[:, 0, :2] > 0).all() and (times[:, 0, 1] >= times[:, 0, 0]).all() and (times[:, 1:, 2] > 0).all()
    assert (times[1:, 0, 0] >= times[:-1, 0, 1]).all()
    launcher(residual_forward, 7, out, x, x)
    assert rec.log is log and rec.n == 1 and call_meta(rec.take()[1])[:, 1].tolist() == [7]
