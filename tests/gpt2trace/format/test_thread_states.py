"""thread_states on hand-made kernel calls, every expected interval worked out in the comments (times in ns).

A call is (enter, exit, [(block start, block end, thread index or -1 if the block was not run), ...]).
State letters: R Running, F Scheduling and Fork/Join, S Synchronization, I Idle, O I/O.
"""
from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from gpt2trace.format.schema import State
from gpt2trace.format.thread_states import Blocks, blocks_of, main_overlays, thread_states

R, F, S, I, O = State.RUNNING, State.SCHEDULING_FORK_JOIN, State.SYNCHRONIZATION, State.IDLE, State.IO


def _calls(*calls):
    """Each call's region (enter, exit) and the blocks that were run, in call order."""
    enter = np.array([c[0] for c in calls], dtype=np.int64)
    exit_ = np.array([c[1] for c in calls], dtype=np.int64)
    run = [(i, s, e, t) for i, (_, _, blocks) in enumerate(calls) for s, e, t in blocks if t >= 0]
    call, start, end, thread = (np.array(c, dtype=np.int64) for c in zip(*run)) if run else [np.zeros(0, np.int64)] * 4
    return enter, exit_, Blocks(call, thread.astype(np.int32), start, end)


def _states(calls, nthreads, window=(0, 100), overlays=None):
    enter, exit_, blocks = _calls(*calls)
    out = thread_states(enter, exit_, blocks, nthreads, window, overlays)
    return [(int(t), int(s), int(e), State(int(st))) for t, s, e, st in
            zip(out["thread"], out["start"], out["end"], out["state"])]


def test_one_region_two_threads():
    # region [10, 60): the main thread's block [12, 40), the worker's [15, 50)
    got = _states([(10, 60, [(12, 40, 0), (15, 50, 1)])], nthreads=2)
    assert got == [
        (0, 0, 10, R),    # Python before the region
        (0, 10, 12, F),   # region start to its block
        (0, 12, 40, R),   # its block
        (0, 40, 60, S),   # waits for the worker at the join
        (0, 60, 100, R),  # Python after
        (1, 0, 10, I),
        (1, 10, 15, F),
        (1, 15, 50, R),
        (1, 50, 60, S),
        (1, 60, 100, I),
    ]


def test_region_where_the_main_thread_ran_no_block():
    # 3 threads; region [10, 60) whose blocks ran on workers 1 [11, 30) and 2 [12, 55): the main thread
    # waits at the join for the whole region
    got = _states([(10, 60, [(11, 30, 1), (12, 55, 2)])], nthreads=3)
    assert got == [
        (0, 0, 10, R), (0, 10, 60, S), (0, 60, 100, R),
        (1, 0, 10, I), (1, 10, 11, F), (1, 11, 30, R), (1, 30, 60, S), (1, 60, 100, I),
        (2, 0, 10, I), (2, 10, 12, F), (2, 12, 55, R), (2, 55, 60, S), (2, 60, 100, I),
    ]


def test_two_blocks_of_one_thread_in_a_region():
    # region [10, 60) of 3 blocks on 2 threads: main [10, 20); the worker runs block 1 [35, 50) and block 2
    # [12, 30) (listed out of time order: they are sorted by start)
    got = _states([(10, 60, [(10, 20, 0), (35, 50, 1), (12, 30, 1)])], nthreads=2)
    assert got == [
        (0, 0, 10, R), (0, 10, 20, R),         # no Fork/Join: its block starts with the region
        (0, 20, 60, S), (0, 60, 100, R),
        (1, 0, 10, I), (1, 10, 12, F), (1, 12, 30, R),
        (1, 30, 35, S),                        # between its two blocks
        (1, 35, 50, R), (1, 50, 60, S), (1, 60, 100, I),
    ]


def test_io_overlay_on_the_main_thread():
    # dataload [5, 20) is I/O on the main thread; then a region [30, 60): main [30, 45), worker [31, 58)
    io = (np.array([5]), np.array([20]), np.array([O]))
    got = _states([(30, 60, [(30, 45, 0), (31, 58, 1)])], nthreads=2, overlays=io)
    assert got == [
        (0, 0, 5, R), (0, 5, 20, O), (0, 20, 30, R), (0, 30, 45, R), (0, 45, 60, S), (0, 60, 100, R),
        (1, 0, 30, I), (1, 30, 31, F), (1, 31, 58, R), (1, 58, 60, S), (1, 60, 100, I),
    ]


def test_empty_window():
    # no kernel call in [100, 200): the main thread runs Python, the worker idles
    assert _states([], nthreads=2, window=(100, 200)) == [(0, 100, 200, R), (1, 100, 200, I)]
    # a window of no time has no state at all
    assert _states([], nthreads=2, window=(100, 100)) == []


def test_regions_split_by_the_window():
    # the window [20, 50) cuts region [10, 60) (main block [10, 30), worker [15, 55)): states are clipped to it
    got = _states([(10, 60, [(10, 30, 0), (15, 55, 1)])], nthreads=2, window=(20, 50))
    assert got == [(0, 20, 30, R), (0, 30, 50, S), (1, 20, 50, R)]


@pytest.mark.parametrize("seed", range(5))
def test_random_calls_partition_the_window(seed):
    # Random sequences of regions (threads in random order, some blocks not run, I/O between some regions):
    # every thread's records are back to back over the window; a worker's Running time is exactly the sum of
    # its blocks, the main thread's is that plus the Python between regions.
    rng = np.random.default_rng(seed)
    nthreads, t, calls, io = 3, 0, [], ([], [], [])
    for _ in range(20):
        if rng.random() < 0.3:
            io[0].append(t + 1), io[1].append(t + 5), io[2].append(int(O))
            t += 6
        enter = t + int(rng.integers(0, 5))
        blocks = []
        for th in rng.permutation(nthreads):
            s = enter + int(rng.integers(0, 10))
            blocks.append((s, s + int(rng.integers(0, 30)), int(th) if rng.random() > 0.2 else -1))
        exit_ = max(b[1] for b in blocks) + int(rng.integers(0, 5))
        calls.append((enter, exit_, blocks))
        t = exit_
    window = (0, t + 10)
    got = _states(calls, nthreads, window, tuple(np.array(c, dtype=np.int64) for c in io))
    _, _, blocks = _calls(*calls)
    for th in range(nthreads):
        mine = [g for g in got if g[0] == th]
        assert mine[0][1] == window[0] and mine[-1][2] == window[1]
        assert all(a[2] == b[1] and a[2] > a[1] for a, b in pairwise(mine))
        running = sum(e - s for _, s, e, st in mine if st == R)
        in_blocks = int((blocks.end - blocks.start)[blocks.thread == th].sum())
        assert running == in_blocks if th else running >= in_blocks
        assert {st for *_, st in mine} <= ({R, F, S, O} if th == 0 else {R, F, S, I})


@pytest.mark.parametrize("calls,nthreads,says", [
    ([(10, 60, [(12, 40, 0), (15, 50, 2)])], 2, "a block of thread 2 but only 2 threads"),
    ([(10, 60, [(12, 40, 0)])], 0, "a block of thread 0 but only 0 threads"),
])
def test_a_thread_index_beyond_nthreads_is_refused(calls, nthreads, says):
    with pytest.raises(ValueError, match=says):
        _states(calls, nthreads)


def test_a_block_of_a_call_that_is_not_there_is_refused():
    # the compiled pass does not bounds-check: a part whose block names call 1 of a single call is refused first
    enter, exit_, blocks = _calls((10, 60, [(12, 40, 0)]))
    with pytest.raises(ValueError, match="a block of call 1 but only 1 calls"):
        thread_states(enter, exit_, Blocks(blocks.call + 1, blocks.thread, blocks.start, blocks.end), 1, (0, 100))


def test_main_overlays_cut_the_io_of_a_phase_around_its_mpi_calls():
    # dataload [5, 40) with an MPI_Scatter [10, 30) in it: I/O [5, 10), the call's state [10, 30), I/O [30, 40);
    # the checkpoint [50, 70) is I/O throughout; forward is computation (no overlay); a send [80, 85) after it
    calls = [(10, 30, int(State.GROUP_COMMUNICATION)), (80, 85, int(State.BLOCKING_SEND))]
    phases = [("dataload", 5, 40), ("checkpoint", 50, 70), ("forward", 71, 79)]
    start, end, state = main_overlays(phases, calls)
    assert list(zip(start.tolist(), end.tolist(), state.tolist())) == [
        (5, 10, O), (10, 30, State.GROUP_COMMUNICATION), (30, 40, O), (50, 70, O), (80, 85, State.BLOCKING_SEND)]
    assert main_overlays([("forward", 0, 10)], []) is None


def test_blocks_are_clipped_into_their_region():
    # clocks of two cores disagree by a few ns: the worker's block read [8, 62) in region [10, 60); the block
    # of the second column of call 1 was not run (thread index -1). A call as the recorder holds it: (enter,
    # exit, -), then (start, end, -) per block column.
    times = np.array([[[10, 60, 0], [10, 30, 0], [8, 62, 0]],
                      [[70, 90, 0], [71, 89, 0], [0, 0, 0]]], dtype=np.int64)
    index = np.array([[0, 1], [0, -1]], dtype=np.int32)
    blocks = blocks_of(times[:, 0, 0], times[:, 0, 1], times[:, 1:, 0], times[:, 1:, 1], index)
    assert blocks.call.tolist() == [0, 0, 1] and blocks.thread.tolist() == [0, 1, 0]
    assert blocks.start.tolist() == [10, 10, 71] and blocks.end.tolist() == [30, 60, 89]
    # so the worker is Running for the whole first region, never before or after it, and idles through the
    # second, in which it ran nothing
    st = thread_states(times[:, 0, 0], times[:, 0, 1], blocks, 2, (0, 100))
    worker = [(s, e, x) for t, s, e, x in zip(st["thread"].tolist(), st["start"].tolist(), st["end"].tolist(),
                                              st["state"].tolist()) if t == 1]
    assert worker == [(0, 10, State.IDLE), (10, 60, State.RUNNING), (60, 100, State.IDLE)]
