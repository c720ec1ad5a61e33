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

from dataclasses import dataclass, fields

import numpy as np

from analysis.records import NS, Records
from gpt2trace.format.lanes import distinct_lanes, key_width, lane_index, time_key, time_key_fits
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

    Rank by rank (a rank's regions and sums involve only its own records), so that the temporaries, a dozen
    arrays the length of the records, are those of one rank: 10 M records in 8 ranks peaked 800 MB over the
    records at once."""
    rank = states[RANK]
    ranks = np.unique(distinct_lanes(rank, states[THREAD])[0])
    if len(ranks) < 2:
        return _split(states, kern)
    by_rank = np.argsort(rank.astype(np.int16) if ranks[-1] < 2**15 else rank, kind="stable")
    bounds = np.searchsorted(rank[by_rank], ranks, side="right")
    k_by_rank = np.argsort(kern[RANK], kind="stable")
    k_bounds = np.searchsorted(kern[RANK][k_by_rank], ranks, side="right")
    parts = [_split(states.take(by_rank[a:b]), kern.take(k_by_rank[ka:kb]))
             for a, b, ka, kb in zip(np.r_[0, bounds[:-1]], bounds, np.r_[0, k_bounds[:-1]], k_bounds)]
    return Split(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Split)))


def _split(states: Records, kern: Records) -> Split:
    rank, thread = states[RANK].astype(np.int64), states[THREAD].astype(np.int64)
    lane_rank, lane_thread, lane = lane_index(rank, thread)        # by counting: no sort of the records
    ranks, lane_ri = np.unique(lane_rank, return_inverse=True)
    lane_ri = lane_ri.ravel()
    ri = lane_ri[lane]
    nthreads = np.bincount(lane_ri, minlength=len(ranks))
    master = np.full(len(ranks), key_width(thread), dtype=np.int64)
    np.minimum.at(master, lane_ri, lane_thread)
    # A thread's position among its rank's threads: the column of its useful time per region.
    local = lane - np.searchsorted(lane_ri, np.arange(len(ranks)))[ri]
    dur = states[END_NS] - states[START_NS]
    running = (states[STATE] == State.RUNNING) & (dur > 0)
    is_master = thread == master[ri]
    multi = nthreads[ri] >= 2
    useful = np.bincount(ri, weights=dur * running, minlength=len(ranks))
    master_useful = np.bincount(ri, weights=dur * (running & is_master), minlength=len(ranks))
    zero = np.zeros(len(ranks))
    if not multi.any():
        return Split(ranks, nthreads, useful, zero, master_useful, zero, zero, zero.astype(np.int64))

    kr = np.searchsorted(ranks, kern[RANK].astype(np.int64))
    known = (kr < len(ranks)) & (ranks[np.minimum(kr, len(ranks) - 1)] == kern[RANK])
    kin = known & (kern[END_NS] > kern[START_NS])
    kin[known] &= nthreads[kr[known]] >= 2
    sin = multi & (dur > 0) & (np.isin(states[STATE], _FORK_JOIN) | (running & ~is_master))
    lo = int(min(states[START_NS].min(), kern[START_NS].min() if len(kern) else states[START_NS].min()))
    hi = int(max(states[END_NS].max(), kern[END_NS].max() if len(kern) else states[END_NS].max()))
    width = hi - lo + 1
    if not time_key_fits(len(ranks), width):
        raise ValueError("trace span too long for composite keys")
    cs = np.concatenate([time_key(ri[sin], states[START_NS][sin], lo, width),
                         time_key(kr[kin], kern[START_NS][kin], lo, width)])
    ce = np.concatenate([time_key(ri[sin], states[END_NS][sin], lo, width),
                         time_key(kr[kin], kern[END_NS][kin], lo, width)])
    order = np.argsort(cs, kind="stable")
    cs, ce = cs[order], ce[order]
    reach = np.maximum.accumulate(ce)
    new = np.ones(len(cs), dtype=bool)
    new[1:] = cs[1:] > reach[:-1]                       # touching intervals are one region
    starts = np.flatnonzero(new)
    c_start, c_end = cs[starts], np.maximum.reduceat(ce, starts)
    c_rank = c_start // width

    # Useful time of each thread in each region: a Running record can overlap several regions.
    run = np.flatnonzero(running & multi)
    s = time_key(ri[run], states[START_NS][run], lo, width)
    e = time_key(ri[run], states[END_NS][run], lo, width)
    i0 = np.searchsorted(c_end, s, side="right")
    i1 = np.searchsorted(c_start, e, side="left")
    count = np.maximum(i1 - i0, 0)
    rec = np.repeat(run, count)
    comp = np.repeat(i0, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    overlap = (np.minimum(np.repeat(e, count), c_end[comp]) - np.maximum(np.repeat(s, count), c_start[comp]))
    overlap = np.maximum(overlap, 0)
    cols = int(nthreads.max())
    per = np.bincount(comp * cols + local[rec], weights=overlap, minlength=len(c_start) * cols)
    per = per.reshape(len(c_start), cols)
    top, total = per.max(axis=1), per.sum(axis=1)
    n = nthreads[c_rank]
    wall = c_end - c_start
    nr = len(ranks)
    region = np.bincount(c_rank, weights=wall, minlength=nr)
    in_master = np.bincount(ri[rec], weights=overlap * is_master[rec], minlength=nr)
    return Split(rank=ranks, threads=nthreads, useful_ns=useful, region_ns=region,
                 serial_useful_ns=master_useful - in_master,
                 imbalance_ns=np.bincount(c_rank, weights=n * top - total, minlength=nr),
                 scheduling_ns=np.bincount(c_rank, weights=n * (wall - top), minlength=nr),
                 regions=np.bincount(c_rank, minlength=nr))


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
