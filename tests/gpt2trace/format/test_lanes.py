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


def test_distinct_index_of_sorted_keys_goes_by_runs():
    key = np.array([0, 0, 3, 3, 3, 7], np.int32)             # grouped, as a reader gives lane keys: no counting
    present, index = lanes.distinct_index(key)
    assert present.tolist() == [0, 3, 7] and index.dtype == np.int64 and index.tolist() == [0, 0, 1, 1, 1, 2]
    p, i = np.unique(key, return_inverse=True)
    assert present.tolist() == p.tolist() and index.tolist() == i.tolist()


@pytest.mark.parametrize("rank, thread, start, in_order", [
    ([0, 0, 1, 1], [0, 1, 0, 0], [5, 0, 1, 2], True),         # lane by lane, each in time order
    ([0, 0, 1, 1], [0, 1, 0, 0], [5, 0, 2, 1], False),        # rank 1 thread 0 goes back in time
    ([1, 0], [0, 0], [0, 1], False),                          # lanes out of order
    ([3], [2], [9], True),
])
def test_in_lane_order_and_lane_runs(rank, thread, start, in_order):
    rank, thread, start = np.array(rank), np.array(thread), np.array(start)
    assert lanes.in_lane_order(lanes.lane_key(rank, thread, lanes.key_width(thread)), start) == in_order
    runs = lanes.lane_runs(rank, thread)
    if in_order:         # (these are grouped by lane; the other two cases are not, except for the times)
        r, t, bound = runs
        assert list(zip(r.tolist(), t.tolist())) == list(zip(*lanes.distinct_lanes(rank, thread)))
        assert bound[-1] == len(rank) and (np.diff(bound) > 0).all()


def test_lane_runs_of_records_out_of_lane_order():
    assert lanes.lane_runs(np.array([1, 0]), np.array([0, 0])) is None
    r, t, bound = lanes.lane_runs(np.array([0, 0, 0, 2]), np.array([1, 1, 3, 0]))
    assert r.tolist() == [0, 0, 2] and t.tolist() == [1, 3, 0] and bound.tolist() == [0, 2, 3, 4]


def test_time_key_in_place_is_the_formula():
    lane, t = np.array([0, 2, 1], np.int32), np.array([10, 11, 19])
    assert lanes.time_key(lane, t, 10, 10).tolist() == [0, 21, 19]            # lane x 10 + (t - 10)
    assert lanes.time_key(1, t, 10, 10).tolist() == [10, 11, 19]              # a scalar lane: broadcast
