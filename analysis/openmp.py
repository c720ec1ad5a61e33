"""Fork-join parallel regions of a window and POP's OpenMP factors: serial code, and load balance and scheduling
inside the regions (the thread level of POP's additive hybrid model; docs/analyze.md gives the sources).

A rank with two or more threads is inside a parallel region while any of these holds: one of its threads is in a
kernel record (our kernels are the trainer's parallel regions; an imported Extrae trace's OpenMP outlined
functions, event 60000018, become kernel records too), one of its threads is in Scheduling and Fork/Join or in
Synchronization, or a worker (any thread but the rank's lowest, the master) is Running: workers only compute
inside regions. Each connected stretch of that is one region execution (two regions that touch count as one).
A one-thread rank has no regions: all its useful time is serial, which costs nothing.

Per rank p with n_p threads: R_p its time in regions, S_p the master's useful time outside them, and for region r
(W_r long) U_{t,r} thread t's useful time in it. The thread time lost to thread parallelism splits into
    serial      (n_p - 1) S_p                      workers idle while the master runs serial code (Amdahl)
    imbalance   sum_t (max_t U_{t,r} - U_{t,r})    per region: less useful work than the busiest thread
    scheduling  n_p (W_r - max_t U_{t,r})          per region: fork/join, scheduling, waiting beyond that
and R_p + S_p is the rank's computing time, which the MPI level takes as its time outside MPI.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.records import NS, Records
from gpt2trace.format.lanes import is_sorted, run_starts
from gpt2trace.format.schema import END_NS, RANK, START_NS, STATE, THREAD, State

_FORK_JOIN = (State.SCHEDULING_FORK_JOIN, State.SYNCHRONIZATION)


@dataclass(frozen=True)
class Split:
    """Per rank (sorted), nanoseconds: how its threads' time divides between serial code and regions."""
    rank: np.ndarray
    threads: np.ndarray          # n_p: threads with state records
    useful_ns: np.ndarray        # Running time of all its threads
    region_ns: np.ndarray        # R_p
    serial_useful_ns: np.ndarray  # S_p
    imbalance_ns: np.ndarray     # thread-ns lost to imbalance inside its regions
    scheduling_ns: np.ndarray    # thread-ns lost to the rest of its regions' overhead
    regions: np.ndarray          # region executions

    @property
    def computing_ns(self) -> np.ndarray:
        """R_p + S_p: in a region or computing serially (neither in MPI nor in I/O or any other state)."""
        return self.region_ns + self.serial_useful_ns

    @property
    def serial_lost_ns(self) -> np.ndarray:
        return (self.threads - 1) * self.serial_useful_ns


def split(states: Records, kern: Records) -> Split:
    """The regions of every rank with state records in the window (`states` and `kern` clipped to it).

    Rank by rank (a rank's regions and sums involve only its own records): the temporaries, a dozen arrays the
    length of the records, are those of one rank, and no array carries a rank id or a (rank, time) key."""
    ranks, s_at = _by_rank(states[RANK])
    k_ranks, k_at = _by_rank(kern[RANK])
    k_of = dict(zip(k_ranks.tolist(), k_at))
    none = slice(0, 0)
    rows = [_rank_split(states.take(at), kern.take(k_of.get(r, none))) for r, at in zip(ranks.tolist(), s_at)]
    counts = np.array([r[:2] for r in rows], dtype=np.int64).reshape(len(rows), 2)
    sums = np.array([r[2:] for r in rows], dtype=np.float64).reshape(len(rows), 5)   # integer ns, exact
    return Split(rank=ranks.astype(np.int64), threads=counts[:, 0], useful_ns=sums[:, 0], region_ns=sums[:, 1],
                 serial_useful_ns=sums[:, 2], imbalance_ns=sums[:, 3], scheduling_ns=sums[:, 4],
                 regions=counts[:, 1])


def _by_rank(rank: np.ndarray) -> tuple[np.ndarray, list]:
    """The distinct ranks, sorted, and for each the slice (records sorted by rank, as a reader gives them) or the
    index array of its records."""
    if not len(rank):
        return np.zeros(0, np.int64), []
    if (rank[1:] >= rank[:-1]).all():
        cut = np.flatnonzero(rank[1:] != rank[:-1]) + 1
        first = np.r_[0, cut]
        return rank[first], [slice(a, b) for a, b in zip(first.tolist(), np.r_[cut, len(rank)].tolist())]
    order = np.argsort(rank, kind="stable")
    cut = np.flatnonzero(rank[order][1:] != rank[order][:-1]) + 1
    return rank[order][np.r_[0, cut]], np.split(order, cut)


def _rank_split(states: Records, kern: Records) -> tuple[int, int, int, int, int, int, int]:
    """One rank's (n_p, regions, useful, R_p, S_p, imbalance, scheduling), nanoseconds."""
    thread = states[THREAD]
    if not is_sorted(thread):                   # thread by thread (as a reader gives them): sums in any order
        states = states.take(np.argsort(thread, kind="stable"))
        thread = states[THREAD]
    bound = np.r_[run_starts(thread), len(thread)]      # thread j's records: bound[j]:bound[j + 1]
    n, m = len(bound) - 1, int(bound[1])                # the master (lowest thread id) first
    start, end, state = states[START_NS], states[END_NS], states[STATE]
    dur = end - start
    running = (state == State.RUNNING) & (dur > 0)
    useful, master_useful = int(np.dot(dur, running)), int(np.dot(dur[:m], running[:m]))     # no copy of a subset
    if n < 2:
        return n, 0, useful, 0, master_useful, 0, 0

    sin = (state == _FORK_JOIN[0]) | (state == _FORK_JOIN[1])
    sin[m:] |= running[m:]                      # workers only compute inside regions
    sin &= dur > 0
    kin = kern[END_NS] > kern[START_NS]
    # The union of the intervals (touching ones joined) from their starts and their ends sorted apart: the i-th
    # start opens a region when the i intervals that start before it have all ended, i.e. when the i-th smallest
    # end is before it (no other interval ends before it); those i ends are then the i smallest, so a region ends
    # at the last end before the next region opens. Each sort merges runs already in order, one per thread.
    cs = np.concatenate([start[sin], kern[START_NS][kin]])
    ce = np.concatenate([end[sin], kern[END_NS][kin]])
    cs.sort(kind="stable")
    ce.sort(kind="stable")
    starts = np.flatnonzero(np.r_[True, cs[1:] > ce[:-1]]) if len(cs) else np.zeros(0, np.int64)
    c_start, c_end = cs[starts], ce[np.r_[starts[1:], len(ce)] - 1] if len(ce) else ce

    # Useful time of each thread in each region (`per`, thread by thread). The master's Running records can
    # overlap several regions, or none; a worker's is one of the intervals: it lies in one region, the first that
    # ends after it starts.
    run = np.flatnonzero(running[:m])
    s, e = start[run], end[run]
    i0 = np.searchsorted(c_end, s, side="right")
    i1 = np.searchsorted(c_start, e, side="left")
    count = np.maximum(i1 - i0, 0)
    rec = np.repeat(run, count)
    comp = np.repeat(i0, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    overlap = np.maximum(np.minimum(end[rec], c_end[comp]) - np.maximum(start[rec], c_start[comp]), 0)
    per = np.empty((n, len(c_start)), dtype=np.int64)   # integer ns
    per[0] = np.bincount(comp, weights=overlap, minlength=len(c_start))
    for j, (a, b) in enumerate(zip(bound[1:-1].tolist(), bound[2:].tolist()), start=1):   # one per worker
        worker = running[a:b]
        per[j] = np.bincount(np.searchsorted(c_end, start[a:b][worker], side="right"), weights=dur[a:b][worker],
                             minlength=len(c_start))
    top = per.max(axis=0) if len(c_start) else np.zeros(0, np.int64)
    wall = c_end - c_start
    in_master = int(overlap.sum())
    return (n, len(c_start), useful, int(wall.sum()), master_useful - in_master,
            int((n * top).sum() - per.sum()), int((n * (wall - top)).sum()))


def factors(sp: Split, runtime_ns: int) -> dict | None:
    """POP's OpenMP factors of the window, each 1 - loss / (P x T) with P all threads: thread_efficiency splits
    additively into serial_region_efficiency and region_efficiency, and region_efficiency into
    region_load_balance and region_scheduling_efficiency (each loss is counted once). None without a rank of two
    or more threads; the times behind them in seconds (the losses in thread-seconds)."""
    if not len(sp.rank) or sp.threads.max() < 2 or runtime_ns <= 0:
        return None
    capacity = float(sp.threads.sum()) * runtime_ns
    serial, imbalance, scheduling = (float(x.sum()) for x in (sp.serial_lost_ns, sp.imbalance_ns, sp.scheduling_ns))
    return {
        "thread_efficiency": 1 - (serial + imbalance + scheduling) / capacity,
        "serial_region_efficiency": 1 - serial / capacity,
        "region_efficiency": 1 - (imbalance + scheduling) / capacity,
        "region_load_balance": 1 - imbalance / capacity,
        "region_scheduling_efficiency": 1 - scheduling / capacity,
        "regions": int(sp.regions.sum()),
        "in_regions_avg_s": float((sp.threads * sp.region_ns).sum()) / float(sp.threads.sum()) / NS,
        "serial_useful_s": float(sp.serial_useful_ns[sp.threads >= 2].sum()) / NS,
        "serial_lost_s": serial / NS,
        "region_imbalance_lost_s": imbalance / NS,
        "region_scheduling_lost_s": scheduling / NS,
    }
