"""Level-of-detail binning: the dominant category per time bin, on hand-made lanes whose answer is worked out in
the comments, then against a brute-force reference on random lanes."""
import numpy as np
import pytest

from gpt2trace.format.schema import State
from gpt2trace.report.lod import coverage, dominant, pyramid

IDLE, RUN, SYNC, FORK = State.IDLE, State.RUNNING, State.SYNCHRONIZATION, State.SCHEDULING_FORK_JOIN
NCAT = 17
E = -1   # an empty bin


def bins_of(records, t1=12, nbins=3, lanes=1, empty_competes=True, dense_max=1 << 23):
    """records: (lane, start, end, category); bins of width t1 / nbins over [0, t1)."""
    lane, s, e, c = (np.array(x, dtype=np.int64) for x in zip(*records))
    return dominant(lane, s, e, c, lanes, 0, t1, nbins, NCAT, empty_competes, dense_max).dense().tolist()


# Bins of 4 ns over [0, 12): bin0 = [0,4), bin1 = [4,8), bin2 = [8,12).
CASES = [
    ("one record covers every bin", [(0, 0, 12, RUN)], [[RUN, RUN, RUN]]),
    # bin1: Running 1 ns, Synchronization 3 ns
    ("the longer state wins a mixed bin", [(0, 0, 5, RUN), (0, 5, 12, SYNC)], [[RUN, SYNC, SYNC]]),
    # bin1: Running 2 ns, Synchronization 2 ns: a tie goes to the smaller state id (Running = 1 < 5)
    ("a tie goes to the smaller id", [(0, 0, 6, RUN), (0, 6, 12, SYNC)], [[RUN, RUN, SYNC]]),
    # bin0: Fork/Join 1, Running 2, Synchronization 1: Running has the most even though it is not the majority
    # of records
    ("three records in one bin", [(0, 0, 1, FORK), (0, 1, 3, RUN), (0, 3, 4, SYNC), (0, 4, 12, IDLE)],
     [[RUN, IDLE, IDLE]]),
    # bin2: Synchronization 2 ns, nothing 2 ns: the empty time must be strictly more to win
    ("a record ties with empty time", [(0, 0, 8, RUN), (0, 8, 10, SYNC)], [[RUN, RUN, SYNC]]),
    # bin2: Synchronization 1 ns, nothing 3 ns
    ("empty time wins", [(0, 0, 8, RUN), (0, 8, 9, SYNC)], [[RUN, RUN, E]]),
    # bin1: kernel 3 for 1 ns and kernel 1 for 1 ns, 2 ns empty: empty wins
    ("short records lose to empty time", [(0, 4, 5, 3), (0, 6, 7, 1)], [[E, E, E]]),
    ("two lanes are independent", [(0, 0, 12, RUN), (1, 0, 2, SYNC), (1, 2, 12, IDLE)],
     [[RUN, RUN, RUN], [IDLE, IDLE, IDLE]]),
    # clipped to [0, 12): bin0 holds 3 ns of the first record (from 0) and 1 ns of Running; bin2 holds 2 ns of
    # Running and 2 ns of the last record (to 12): a tie, Idle (0) wins
    ("records clipped to the window", [(0, -4, 3, SYNC), (0, 3, 10, RUN), (0, 10, 20, IDLE)], [[SYNC, RUN, IDLE]]),
]


@pytest.mark.parametrize("name,records,expected", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dense", [True, False], ids=["dense", "sorted"])
def test_dominant_hand_checked(name, records, expected, dense):
    lanes = len(expected)
    assert bins_of(records, lanes=lanes, dense_max=1 << 30 if dense else 0) == expected


def test_without_empty_competition_any_record_colors_its_bin():
    # bin1 holds 1 ns of an MPI call and 3 ns of nothing: the overview still shows the call
    assert bins_of([(0, 4, 5, 3)], empty_competes=False) == [[E, 3, E]]


def test_runs_merge_neighbours_of_one_category():
    # three Running records back to back make one run of 3 bins; Idle then one more run
    lv = dominant(np.zeros(4, np.int64), np.array([0, 3, 7, 12]), np.array([3, 7, 12, 16]),
                  np.array([RUN, RUN, RUN, IDLE]), 1, 0, 16, 4, NCAT)
    assert (lv.start.tolist(), lv.length.tolist(), lv.cat.tolist()) == ([0, 3], [3, 1], [RUN, IDLE])


def test_nested_records_keep_the_first_one():
    # backward [0,12) holds grad_sync [4,8) on the same lane: the bins show the record that started first
    assert bins_of([(0, 0, 12, 1), (0, 4, 8, 2)]) == [[1, 1, 1]]


def test_coverage_fractions():
    # lane 0: [0,6) covers bin0 fully and half of bin1; lane 1: [1,2) a quarter of bin0
    cov = coverage(np.array([0, 1]), np.array([0, 1]), np.array([6, 2]), 2, 0, 12, 3)
    assert cov.tolist() == [[1.0, 0.5, 0.0], [0.25, 0.0, 0.0]]


def brute_force(lane, s, e, c, lanes, t1, nbins, empty_competes):
    """Per bin, the time of each category by direct overlap; argmax with the same tie rules."""
    w = t1 / nbins
    out = np.full((lanes, nbins), E)
    for ln in range(lanes):
        for b in range(nbins):
            lo, hi = b * w, (b + 1) * w
            time = np.zeros(NCAT)
            sel = lane == ln
            np.add.at(time, c[sel], np.clip(np.minimum(e[sel], hi) - np.maximum(s[sel], lo), 0, None))
            if time.max() > 0 and not (empty_competes and (w - time.sum()) > time.max() + 1e-9):
                out[ln, b] = int(np.argmax(time))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("nbins", [5, 64, 1000])
@pytest.mark.parametrize("empty_competes", [True, False])
def test_matches_brute_force(seed, nbins, empty_competes):
    rng = np.random.default_rng(seed)
    lanes, n = 3, 300
    lane = np.sort(rng.integers(0, lanes, n))
    dur, gap = rng.integers(1, 40, n), rng.integers(0, 6, n) * rng.integers(0, 2, n)
    s, e = np.zeros(n, np.int64), np.zeros(n, np.int64)
    for ln in range(lanes):          # non-overlapping records per lane, some gaps
        idx = np.flatnonzero(lane == ln)
        end = np.cumsum(dur[idx] + gap[idx])
        s[idx], e[idx] = end - dur[idx], end
    c = rng.integers(0, 6, n)
    t1 = int(e.max())
    got = dominant(lane, s, e, c, lanes, 0, t1, nbins, NCAT, empty_competes).dense()
    # float rounding can flip exact ties between a category and the empty time: compare where the reference
    # has a clear winner
    ref = brute_force(lane, s, e, c, lanes, t1, nbins, empty_competes)
    assert (got == ref).mean() > 0.99


def test_pyramid_stops_when_bins_reach_the_records():
    # 1000 records of 1000 ns on one lane: level 0 has 100 bins of 10,000 ns (10 records each); level 1 400
    # bins; level 2 1600 bins of 625 ns: 1600 runs >= 1000 / 2 records, so no finer level is built
    n = 1000
    s = np.arange(n, dtype=np.int64) * 1000
    levels = pyramid(np.zeros(n, np.int64), s, s + 1000, np.arange(n) % 3, 1, 0, n * 1000, 3, base_bins=100)
    assert [lv.bins for lv in levels] == [100, 400, 1600]


def test_pyramid_respects_the_run_budget():
    n = 1000
    s = np.arange(n, dtype=np.int64) * 1000
    levels = pyramid(np.zeros(n, np.int64), s, s + 1000, np.arange(n) % 3, 1, 0, n * 1000, 3, base_bins=100,
                     budget_runs=150)
    # level 0 always exists; level 1 (400 runs) would pass the budget
    assert [lv.bins for lv in levels] == [100]
