"""Lane helpers on hand-made (rank, thread, time) columns."""
import numpy as np
import pytest

from gpt2trace.format import lanes


def test_key_sorts_like_the_pair_and_splits_back():
    rank, thread = np.array([1, 0, 1, 0], np.int32), np.array([0, 2, 2, 0], np.int32)
    w = lanes.key_width(thread)
    assert w == 3                                       # threads 0..2
    key = lanes.lane_key(rank, thread, w)
    assert key.dtype == np.int64 and key.tolist() == [3, 2, 5, 0]
    r, t = lanes.split_key(key, w)
    assert r.tolist() == rank.tolist() and t.tolist() == thread.tolist()
    assert lanes.key_width(np.zeros(0, np.int32)) == 1


@pytest.mark.parametrize("offset", [0, 1 << 24], ids=["counting", "sorting"])
def test_distinct_index_is_unique_with_inverse(offset):
    key = np.array([7, 3, 7, 0, 3, 3], np.int32) + offset        # from 2**24 up the keys are sorted, not counted
    present, index = lanes.distinct_index(key)
    assert (present - offset).tolist() == [0, 3, 7]
    assert index.dtype == np.int64 and index.tolist() == [2, 1, 2, 0, 1, 1]
    assert lanes.distinct_index(np.zeros(0, np.int64))[0].tolist() == []


@pytest.mark.parametrize("big", [False, True], ids=["counting", "sorting"])
def test_lane_index(big):
    base = 10**7 if big else 0                          # 10**7 ranks x 2 threads: past what is counted
    rank = np.array([2, 0, 2, 0, 0]) + base
    thread = np.array([1, 0, 1, 1, 0])
    r, t, lane = lanes.lane_index(rank, thread)
    # distinct lanes (0,0), (0,1), (2,1); records 0..4 are on lanes 2, 0, 2, 1, 0
    assert list(zip((r - base).tolist(), t.tolist())) == [(0, 0), (0, 1), (2, 1)]
    assert lane.tolist() == [2, 0, 2, 1, 0] and lane.dtype == np.int64
    assert [a.tolist() for a in lanes.distinct_lanes(rank, thread)] == [r.tolist(), t.tolist()]


def test_lane_index_of_nothing():
    assert [len(a) for a in lanes.lane_index(np.zeros(0, np.int32), np.zeros(0, np.int32))] == [0, 0, 0]


def test_time_key_sorts_by_lane_then_time():
    lane, t = np.array([1, 0, 1, 0]), np.array([105, 110, 100, 101])
    key = lanes.time_key(lane, t, lo=100, span=11)
    # lane * 11 + (t - 100): 16, 10, 11, 1
    assert key.tolist() == [16, 10, 11, 1]
    assert np.argsort(key).tolist() == [3, 1, 2, 0]
    assert lanes.time_key_fits(2, 11) and not lanes.time_key_fits(2**31, 2**31)


@pytest.mark.parametrize("start", [[0, 5, 1, 2, 9], [0, 5, 1, 9, 2]], ids=["in-time-order", "one-out-of-order"])
def test_lane_order(start):
    rank = np.array([1, 0, 1, 0, 0])
    thread = np.array([0, 1, 0, 1, 1])
    start = np.array(start)
    order = lanes.lane_order(rank, thread, start)
    assert order.tolist() == np.lexsort((start, thread, rank)).tolist()


def test_lane_order_keeps_ties_in_row_order():
    rank, thread, start = np.array([0, 0, 0, 0]), np.array([0, 0, 0, 0]), np.array([3, 1, 1, 0])
    assert lanes.lane_order(rank, thread, start).tolist() == [3, 1, 2, 0]


def test_runs_and_ordinal():
    key = np.array([4, 4, 7, 7, 7, 2])
    assert lanes.run_starts(key).tolist() == [0, 2, 5]
    assert lanes.run_starts(np.zeros(0, np.int64)).tolist() == []
    # the k-th occurrence of each key, in the given order (keys need not be grouped)
    assert lanes.ordinal(np.array([5, 3, 5, 5, 3, 9])).tolist() == [0, 0, 1, 2, 1, 0]
