"""Level-of-detail binning of a timeline: the dominant category of each lane in each time bin, as Paraver draws
a pixel column, stored as runs.

A level cuts [t0, t1) into `bins` equal bins. A bin wholly inside a record takes the record's category; a bin
that holds pieces of several records (a "mixed" bin) takes the category with the most time in it (ties: the
smallest category code). With `empty_competes`, the time no record covers competes too, and a bin where it wins
stays empty (drawn transparent); without it, any record in a bin colors it, so short rare records (MPI calls)
stay visible in the overview. A level is stored as runs of equal bins per lane, so its size follows the records,
not the bins: a pyramid of levels, each `factor` times finer, costs about as much as its finest level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DENSE_MAX = 1 << 23       # (lane, bin, category) cells summed densely (64 MB of float64) before sorting instead


@dataclass(frozen=True)
class Level:
    """Runs of one level: lane i owns runs offsets[i]:offsets[i+1], sorted and disjoint, over bins
    [start, start + length)."""
    bins: int
    bin_ns: float
    offsets: np.ndarray    # (lanes + 1,) int64
    start: np.ndarray      # int64 bin index
    length: np.ndarray     # int64 bins
    cat: np.ndarray        # int32 category code

    @property
    def runs(self) -> int:
        return len(self.start)

    def dense(self, empty: int = -1) -> np.ndarray:
        """(lanes, bins) category per bin, `empty` where no run (tests and small levels only)."""
        lanes = len(self.offsets) - 1
        out = np.full((lanes, self.bins), empty, dtype=np.int64)
        for lane in range(lanes):
            for i in range(self.offsets[lane], self.offsets[lane + 1]):
                out[lane, self.start[i]:self.start[i] + self.length[i]] = self.cat[i]
        return out


def dominant(lane: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, cat: np.ndarray, lanes: int, t0: int,
             t1: int, bins: int, ncat: int, empty_competes: bool = True, dense_max: int = DENSE_MAX) -> Level:
    """The level of `bins` bins over [t0, t1) for records (lane index, start, end, category code < ncat)."""
    w = (t1 - t0) / bins
    xs = (np.clip(start_ns, t0, t1) - t0) / w                 # positions in bins
    xe = (np.clip(end_ns, t0, t1) - t0) / w
    keep = xe > xs
    if not keep.all():
        lane, cat, xs, xe = lane[keep], cat[keep], xs[keep], xe[keep]
    lane, cat = lane.astype(np.int64, copy=False), cat.astype(np.int64, copy=False)
    fs, fe = np.ceil(xs).astype(np.int64), np.floor(xe).astype(np.int64)
    within = fs > fe                                          # inside one bin, touching neither edge
    # Full bins [fs, fe); a head piece in bin fs-1 and a tail piece in bin fe where the record does not
    # start or end on a bin edge; a record inside one bin is one piece.
    full = ~within & (fe > fs)
    head = ~within & (xs < fs)
    tail = ~within & (xe > fe)
    p_lane = np.concatenate([lane[within], lane[head], lane[tail]])
    p_bin = np.concatenate([fe[within], fs[head] - 1, fe[tail]])
    p_cat = np.concatenate([cat[within], cat[head], cat[tail]])
    p_amt = np.concatenate([(xe - xs)[within], (fs - xs)[head], (xe - fe)[tail]])
    m_lane, m_bin, m_cat = _mixed(p_lane, np.minimum(p_bin, bins - 1), p_cat, p_amt, lanes, bins, ncat,
                                  empty_competes, dense_max)
    r_lane = np.concatenate([lane[full], m_lane])
    r_start = np.concatenate([fs[full], m_bin])
    r_len = np.concatenate([(fe - fs)[full], np.ones(len(m_bin), dtype=np.int64)])
    r_cat = np.concatenate([cat[full], m_cat])
    r_single = np.concatenate([np.zeros(full.sum(), dtype=np.int64), np.ones(len(m_bin), dtype=np.int64)])
    return _runs(r_lane, r_start, r_len, r_cat, r_single, lanes, bins, w)


def _mixed(lane, b, cat, amt, lanes: int, bins: int, ncat: int, empty_competes: bool, dense_max: int):
    """Per (lane, bin) holding pieces: the category with the most time (lane, bin, category of each).

    Coarse levels sum into a dense (cell, category) table with one bincount; fine ones sort the pieces (they
    come nearly sorted, so the stable sort is a cheap merge). Both give the same answer.
    """
    if not len(lane):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    cell = lane * bins + b
    if lanes * bins * ncat <= dense_max:
        acc = np.bincount(cell * ncat + cat, weights=amt, minlength=lanes * bins * ncat).reshape(-1, ncat)
        cells = np.unique(cell)
        acc = acc[cells]
        best = acc.argmax(axis=1)                             # the first max: ties go to the smaller code
        top = acc[np.arange(len(cells)), best]
        covered = acc.sum(axis=1)
    else:
        key = cell * ncat + cat
        order = np.argsort(key, kind="stable")
        key, amt = key[order], amt[order]
        first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        key, amt = key[first], np.add.reduceat(amt, first)   # time per (lane, bin, category)
        kcell = key // ncat
        gfirst = np.flatnonzero(np.r_[True, kcell[1:] != kcell[:-1]])
        gid = np.repeat(np.arange(len(gfirst)), np.diff(np.r_[gfirst, len(kcell)]))
        gmax = np.maximum.reduceat(amt, gfirst)
        hit = np.flatnonzero(amt >= gmax[gid])               # categories ascending: the first max wins ties
        hit = hit[np.r_[True, gid[hit][1:] != gid[hit][:-1]]]
        cells, best, top = kcell[hit], key[hit] % ncat, amt[hit]
        covered = np.add.reduceat(amt, gfirst)
    if empty_competes:
        ok = (1.0 - covered) <= top                          # amounts are in bins: a bin holds 1.0
        cells, best = cells[ok], best[ok]
    return cells // bins, cells % bins, best


def _runs(lane, start, length, cat, single, lanes: int, bins: int, w: float) -> Level:
    """Sorted, disjoint runs per lane (a bin a longer run already covers is dropped), equal neighbours merged."""
    key = (lane * (bins + 1) + start) * 2 + single            # full runs before single bins at the same start
    order = np.argsort(key, kind="stable")
    lane, start, cat = lane[order], start[order], cat[order]
    end = start + length[order]
    same = lane[1:] == lane[:-1]
    if len(lane) and (same & (start[1:] < end[:-1])).any():
        # Records that overlap on a lane (nested phases): a run starts where the lane's earlier runs end.
        reach = np.maximum.accumulate(lane * (bins + 1) + end) - lane * (bins + 1)
        prev = np.r_[0, reach[:-1]]
        prev[np.r_[True, ~same]] = 0
        start = np.maximum(start, prev)
        keep = end > start
        lane, start, end, cat = lane[keep], start[keep], end[keep], cat[keep]
    if len(lane):
        joined = np.r_[False, (lane[1:] == lane[:-1]) & (start[1:] == end[:-1]) & (cat[1:] == cat[:-1])]
        head = np.flatnonzero(~joined)
        end = np.maximum.reduceat(end, head)
        lane, start, cat = lane[head], start[head], cat[head]
    offsets = np.searchsorted(lane, np.arange(lanes + 1)).astype(np.int64)
    return Level(bins=bins, bin_ns=w, offsets=offsets, start=start.astype(np.int64),
                 length=(end - start).astype(np.int64), cat=cat.astype(np.int32))


def coverage(lane: np.ndarray, start_ns: np.ndarray, end_ns: np.ndarray, lanes: int, t0: int, t1: int,
             bins: int) -> np.ndarray:
    """(lanes, bins) fraction of each bin the records cover (records of a lane must not overlap)."""
    w = (t1 - t0) / bins
    xs = (np.clip(start_ns, t0, t1).astype(np.float64) - t0) / w
    xe = (np.clip(end_ns, t0, t1).astype(np.float64) - t0) / w
    keep = xe > xs
    lane, xs, xe = lane[keep].astype(np.int64), xs[keep], xe[keep]
    fs, fe = np.ceil(xs).astype(np.int64), np.floor(xe).astype(np.int64)
    within = fs > fe
    full = ~within & (fe > fs)
    out = np.zeros(lanes * (bins + 1))
    # Full bins through a difference array: +1 at fs, -1 at fe, summed along each lane.
    np.add.at(out, lane[full] * (bins + 1) + fs[full], 1.0)
    np.add.at(out, lane[full] * (bins + 1) + fe[full], -1.0)
    out = np.cumsum(out.reshape(lanes, bins + 1), axis=1)[:, :bins].ravel()
    head, tail = ~within & (xs < fs), ~within & (xe > fe)
    idx = np.concatenate([lane[within] * bins + fe[within], lane[head] * bins + fs[head] - 1,
                          lane[tail] * bins + np.minimum(fe[tail], bins - 1)])
    amt = np.concatenate([(xe - xs)[within], (fs - xs)[head], (xe - fe)[tail]])
    out += np.bincount(idx, weights=amt, minlength=lanes * bins)
    return out.reshape(lanes, bins)


def pyramid(lane, start_ns, end_ns, cat, lanes: int, t0: int, t1: int, ncat: int, empty_competes: bool = True,
            base_bins: int = 2048, factor: int = 4, budget_runs: int = 1_000_000, max_levels: int = 12) -> list[Level]:
    """Levels from `base_bins` bins, each `factor` times finer, while they add detail and fit the budget.

    A finer level is built while the last one has fewer runs than half the records (bins still merge records)
    and its bins are wider than 1 ns; the pyramid stops before a level that would take the total past
    `budget_runs`, judged before building it from the last level's runs times `factor` (runs grow at most that
    much while bins are wider than records, and never past about two per record). Level 0 is always kept, so
    the overview exists whatever the budget.
    """
    levels: list[Level] = []
    total, n, bins = 0, len(start_ns), base_bins
    span = t1 - t0
    while len(levels) < max_levels:
        level = dominant(lane, start_ns, end_ns, cat, lanes, t0, t1, bins, ncat, empty_competes)
        if levels and total + level.runs > budget_runs:
            break
        levels.append(level)
        total += level.runs
        guess = min(level.runs * factor, 2 * n + lanes)
        if level.runs >= n / 2 or span / (bins * factor) < 1.0 or bins * factor >= 2**31 \
                or total + guess > budget_runs:
            break
        bins *= factor
    return levels


class PyramidFold:
    """`pyramid` of records given a group of lanes at a time (groups of consecutive lanes, in lane order): the same
    levels, while only one group's records are in memory.

    Lanes are binned independently, so a level is its groups' levels side by side. Where the pyramid stops depends
    on the runs of all lanes: a group builds its levels while the runs of the groups so far (a lower bound of the
    whole's) leave room in the budget, and `levels` applies `pyramid`'s rule to the summed runs at the end.
    `records` and `lanes` are the whole's (`pyramid`'s `len(start_ns)` and `lanes`).
    """

    def __init__(self, records: int, lanes: int, t0: int, t1: int, ncat: int, empty_competes: bool = True,
                 base_bins: int = 2048, factor: int = 4, budget_runs: int = 1_000_000, max_levels: int = 12):
        self.n, self.lanes, self.t0, self.t1, self.ncat = records, lanes, t0, t1, ncat
        self.empty_competes, self.base_bins, self.factor = empty_competes, base_bins, factor
        self.budget, self.cap = budget_runs, max_levels
        self.groups: list[list[Level]] = []
        self.runs: list[int] = []          # per level, the runs of the groups so far
        self.next_lane = 0

    def add(self, lane, start_ns, end_ns, cat, first_lane: int, lanes: int) -> None:
        """One group's records; `lane` counts from the group's first lane, `first_lane` (its index in the whole)."""
        if first_lane != self.next_lane:
            raise ValueError(f"lane groups must come in order: expected lane {self.next_lane}, got {first_lane}")
        self.next_lane += lanes
        levels: list[Level] = []
        bins, total = self.base_bins, 0
        for k in range(self.cap):
            # The dense or sorted summation as the whole would choose it: both agree, this keeps even the order.
            dense = DENSE_MAX if self.lanes * bins * self.ncat <= DENSE_MAX else 0
            level = dominant(lane, start_ns, end_ns, cat, lanes, self.t0, self.t1, bins, self.ncat,
                             self.empty_competes, dense_max=dense)
            runs = level.runs + (self.runs[k] if k < len(self.runs) else 0)
            if k and total + runs > self.budget:
                self.cap = k                     # the whole's runs are at least these: it stops before level k
                break
            levels.append(level)
            total += runs
            if self._last(runs, total, bins):
                self.cap = k + 1
                break
            bins *= self.factor
        self.runs = [(self.runs[k] if k < len(self.runs) else 0) + lv.runs for k, lv in enumerate(levels)]
        self.groups.append(levels)

    def _last(self, runs: int, total: int, bins: int) -> bool:
        """`pyramid`'s test after a level (true for the whole once true for some of its groups)."""
        guess = min(runs * self.factor, 2 * self.n + self.lanes)
        return (runs >= self.n / 2 or (self.t1 - self.t0) / (bins * self.factor) < 1.0
                or bins * self.factor >= 2**31 or total + guess > self.budget)

    def levels(self) -> list[Level]:
        """The whole's levels, as `pyramid` of all the records gives them."""
        if self.next_lane != self.lanes:
            raise ValueError(f"lanes {self.next_lane}..{self.lanes - 1} were never added")
        built = min(len(g) for g in self.groups)
        runs = [sum(g[k].runs for g in self.groups) for k in range(built)]
        keep, total, bins = 0, 0, self.base_bins
        for k in range(built):
            if k and total + runs[k] > self.budget:
                break
            keep, total = k + 1, total + runs[k]
            if self._last(runs[k], total, bins):
                break
            bins *= self.factor
        return [_joined([g[k] for g in self.groups]) for k in range(keep)]


def _joined(parts: list[Level]) -> Level:
    """One level from the levels of consecutive lane groups."""
    if len(parts) == 1:
        return parts[0]
    base = np.cumsum([0] + [p.runs for p in parts[:-1]])
    offsets = np.concatenate([[0]] + [p.offsets[1:] + b for p, b in zip(parts, base)]).astype(np.int64)
    return Level(bins=parts[0].bins, bin_ns=parts[0].bin_ns, offsets=offsets,
                 start=np.concatenate([p.start for p in parts]), length=np.concatenate([p.length for p in parts]),
                 cat=np.concatenate([p.cat for p in parts]))
