"""Lanes: one timeline each, a (rank, thread) pair, and the few NumPy idioms every reader of records needs.

A lane's key is `rank * width + thread` with `width` one more than the largest thread id, so keys sort as
(rank, thread) does and split back exactly. A (lane, time) key `lane * span + (t - lo)` sorts records by lane
then time in one integer sort; callers check that it fits in int64 (`time_key_fits`).
"""
from __future__ import annotations

import numpy as np

LIMIT = 2**62          # composite keys stay below this, with room for the arithmetic around them
_COUNTING_MAX = 1 << 24        # lane keys below this are counted (bincount), larger ones sorted


def key_width(thread: np.ndarray) -> int:
    """The key width for these thread ids: one more than the largest (1 when there are none)."""
    return int(np.max(thread)) + 1 if len(thread) else 1


def lane_key(rank: np.ndarray, thread: np.ndarray, width: int) -> np.ndarray:
    """(rank, thread) as one int64 that sorts like the pair."""
    return np.asarray(rank).astype(np.int64) * width + thread


def split_key(key: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(rank, thread) of lane keys."""
    return key // width, key % width


def lane_index(rank: np.ndarray, thread: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, thread) of the distinct lanes, sorted, and each record's lane: its position among them.

    By counting when the ids are small (no sort), as per-record tables of millions of states need.
    """
    w = key_width(thread)
    present, lane = distinct_index(lane_key(rank, thread, w))
    return *split_key(present, w), lane


def distinct_index(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(key, return_inverse=True) for non-negative int keys (int64 results): by counting when the keys
    are small, as per-record tables of millions need; else by sorting."""
    key = np.asarray(key).astype(np.int64, copy=False)
    if not len(key):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if is_sorted(key):          # records grouped by lane, as readers give them: runs, no counting
        first = run_starts(key)
        return key[first], np.repeat(np.arange(len(first), dtype=np.int64), np.diff(np.r_[first, len(key)]))
    if int(key.max()) < _COUNTING_MAX:
        present = np.flatnonzero(np.bincount(key))
        position = np.full(int(present[-1]) + 1, -1, dtype=np.int64)
        position[present] = np.arange(len(present))
        return present.astype(np.int64), position[key]
    present, index = np.unique(key, return_inverse=True)
    return present, index.ravel().astype(np.int64)


def lane_runs(rank: np.ndarray, thread: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Records grouped by lane in (rank, thread) order, as readers give them: the lanes' rank and thread and
    where each lane's records start (then the number of records: lane i's are bound[i]:bound[i + 1]); None for
    records in another order."""
    w = key_width(thread)
    key = lane_key(rank, thread, w)
    if not is_sorted(key):
        return None
    first = run_starts(key)
    return *split_key(key[first], w), np.r_[first, len(key)]


def distinct_lanes(rank: np.ndarray, thread: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (rank, thread) pairs, sorted (`lane_index` without each record's lane, a pass less)."""
    w = key_width(thread)
    key = lane_key(rank, thread, w)
    if len(key) and int(key.max()) < _COUNTING_MAX:
        return split_key(np.flatnonzero(np.bincount(key)).astype(np.int64), w)
    return split_key(np.unique(key), w)


def is_sorted(a: np.ndarray) -> bool:
    """Whether `a` is in ascending order (ties allowed)."""
    return bool((a[1:] >= a[:-1]).all())


def in_lane_order(lane: np.ndarray, t: np.ndarray) -> bool:
    """Whether records are sorted by (lane, t), as per-thread buffers write them: then `lane_order` is the
    identity."""
    if len(lane) < 2:
        return True
    step = lane[1:] - lane[:-1]
    return bool((step >= 0).all() and not ((step == 0) & (t[1:] < t[:-1])).any())


def time_key_fits(lanes: int, span: int) -> bool:
    """Whether (lane, time) keys for `lanes` lanes over `span` time units fit (see `time_key`)."""
    return lanes * span < LIMIT


def time_key(lane: np.ndarray, t: np.ndarray, lo: int, span: int) -> np.ndarray:
    """(lane, t) as one sortable int64: lane * span + (t - lo), for lo <= t < lo + span."""
    lane, t = np.asarray(lane), np.asarray(t, dtype=np.int64)
    if lane.shape != t.shape:
        return lane.astype(np.int64) * span + (t - lo)
    key = lane.astype(np.int64)                     # one array, the arithmetic in place
    key *= span
    key -= lo
    key += t
    return key


def lane_order(rank: np.ndarray, thread: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The stable permutation sorting records by (rank, thread, start).

    Cheap when each thread's records are already in time order (as a per-thread buffer writes them): a radix
    sort on the lane, then a check; otherwise one full sort.
    """
    lane = lane_key(rank, thread, key_width(thread))
    small = lane.astype(np.int16) if len(lane) and lane.max() < 2**15 else lane
    order = np.argsort(small, kind="stable")
    s, ln = start[order], lane[order]
    if len(s) < 2 or not ((s[1:] < s[:-1]) & (ln[1:] == ln[:-1])).any():
        return order
    lo = int(start.min())
    span = int(start.max()) - lo + 1
    if time_key_fits(int(lane.max()) + 1, span):
        return np.argsort(time_key(lane, start, lo, span), kind="stable")
    return np.lexsort((start, lane))


def run_starts(key: np.ndarray) -> np.ndarray:
    """Index of the first element of each run of equal keys (keys grouped, e.g. sorted)."""
    return np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=np.int64)


def ordinal(key: np.ndarray) -> np.ndarray:
    """For each element, how many elements with the same key come before it (pandas' groupby cumcount)."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    first = run_starts(k)
    out = np.empty(len(k), dtype=np.int64)
    out[order] = np.arange(len(k)) - np.repeat(first, np.diff(np.r_[first, len(k)]))
    return out
