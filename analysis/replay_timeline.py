"""A replayed run as a timeline: when each record of the trace happens in a replay (`analysis.replay.play`), so that
the analyses of a timeline (the critical path) run on a predicted run as on the measured one.

A rank's window is a sequence of bursts and calls (`replay.Program`): burst i over [since_i, start_i), call i over
[start_i, end_i), and the tail after the last call. The replay plays call i over [enter_i, leave_i), with enter_i =
leave_{i-1} + burst'_i (burst'_i: the burst after the model's changes; leave_{-1} = 0), so burst i runs over
[leave_{i-1}, enter_i). A time inside a burst moves with it: shifted when the burst keeps its length; a scaled
kernel's segment takes its new length and what follows it in the burst shifts by the change; a balanced burst is
stretched or shrunk as a whole to its new length (after the scaling). A call's start goes to its enter and its end
to its leave. Where the trace has two anchors at one time (a call that takes no time in the trace), a record's
start takes the later and its end the earlier, so records never swallow a replayed call's wait.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.replay import Played, Program

_SINCE, _STRETCH, _START, _END = 0, 1, 2, 3        # anchor kinds, in their order at one time


@dataclass(frozen=True)
class Stretches:
    """Scaled kernel segments: the rank (index into Program.ranks), the segment's start and end in the trace and
    its new length (ns from the window's start), and the program row whose burst holds it (-1: the tail)."""
    rank: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    new_ns: np.ndarray
    row: np.ndarray

    @classmethod
    def none(cls) -> Stretches:
        z = np.zeros(0, dtype=np.int64)
        return cls(z, z, z, z.astype(np.float64), z)


@dataclass(frozen=True)
class TimeMap:
    """Anchors (trace time -> replay time) of every rank, sorted by (rank, trace time); ns from the window's
    start."""
    key: np.ndarray             # rank index * span + trace time
    replay_ns: np.ndarray
    span: int
    enter_ns: np.ndarray        # per program row: when the call starts in the replay
    leave_ns: np.ndarray

    def moved(self, rank: np.ndarray, t_ns: np.ndarray, end: bool) -> np.ndarray:
        """Replay times (ns from the window's start) of trace times t on ranks `rank` (indices into
        Program.ranks): `end` for the end of a record, else its start."""
        key = np.asarray(rank, dtype=np.int64) * self.span + np.clip(t_ns, 0, self.span - 2)
        if end:
            hi = np.clip(np.searchsorted(self.key, key, side="left"), 1, len(self.key) - 1)
            lo = hi - 1
        else:
            lo = np.clip(np.searchsorted(self.key, key, side="right") - 1, 0, len(self.key) - 2)
            hi = lo + 1
        dx = (self.key[hi] - self.key[lo]).astype(np.float64)
        slope = np.divide(self.replay_ns[hi] - self.replay_ns[lo], dx, out=np.zeros(len(key)), where=dx > 0)
        return self.replay_ns[lo] + (key - self.key[lo]) * slope


def time_map(prog: Program, burst: np.ndarray, tail: np.ndarray, played: Played, runtime_ns: int,
             stretches: Stretches | None = None) -> TimeMap:
    """The map of the replay `played` of `prog` with the bursts `burst` and `tail` (the model's changes made, the
    kernel segments in `stretches` scaled among them); `runtime_ns`, the window's length in the trace."""
    stretches = stretches or Stretches.none()
    n, nrank = len(prog.op), len(prog.ranks)
    row_rank = np.repeat(np.arange(nrank), np.diff(prog.ptr))
    first = np.zeros(n, dtype=bool)
    first[prog.ptr[:-1][np.diff(prog.ptr) > 0]] = True
    leave = played.leave_ns.astype(np.float64)
    prev_leave = np.where(first, 0.0, np.r_[0.0, leave[:-1]])
    enter = prev_leave + burst
    start, end = prog.start_ns.astype(np.float64), prog.end_ns.astype(np.float64)
    since = np.minimum(prog.since_ns, prog.start_ns).astype(np.float64)
    # each rank's tail: from the end of its last call (0 without calls) to the window's end
    has = np.diff(prog.ptr) > 0
    last = prog.ptr[1:] - 1
    tail_from = np.zeros(nrank)
    tail_at = np.zeros(nrank)
    if has.any():
        tail_from[has] = np.maximum.reduceat(end, prog.ptr[:-1][has])
        tail_at[has] = leave[last[has]]
    # scaled segments: where each lands in its (scaled) burst, then the burst stretched to its final length
    srow, srank = stretches.row, stretches.rank
    s_start, s_end = stretches.start_ns.astype(np.float64), stretches.end_ns.astype(np.float64)
    delta = stretches.new_ns - (s_end - s_start)
    holder = np.where(srow >= 0, srow, n + srank)                       # bursts 0..n-1, tails n..n+nrank-1
    order = np.lexsort((s_start, holder))
    holder, srank, s_start, s_end, new, delta = (a[order] for a in (holder, srank, s_start, s_end,
                                                                    stretches.new_ns, delta))
    shift = np.bincount(holder, weights=delta, minlength=n + nrank)   # each burst's total change
    before = np.cumsum(delta) - delta                                  # changes earlier in the same burst
    before -= (np.cumsum(np.r_[0.0, shift])[holder] if len(holder) else 0)
    origin = np.r_[since, tail_from][holder]
    base = np.r_[prev_leave, tail_at][holder]
    scaled_len = np.r_[prog.burst, prog.tail] + shift
    final_len = np.r_[burst, tail].astype(np.float64)
    ratio = np.divide(final_len, scaled_len, out=np.zeros(n + nrank), where=scaled_len > 0)
    at_start = base + ratio[holder] * (s_start - origin + before)
    at_end = base + ratio[holder] * (s_start - origin + before + new)

    anchors_rank = np.r_[row_rank, row_rank, row_rank, srank, srank, np.arange(nrank), np.arange(nrank)]
    x = np.r_[since, start, end, s_start, s_end, tail_from, np.full(nrank, float(runtime_ns))]
    y = np.r_[prev_leave, enter, leave, at_start, at_end, tail_at, tail_at + tail]
    seq = np.r_[np.arange(n), np.arange(n), np.arange(n), np.where(holder < n, holder, prog.ptr[1:][srank]),
                np.where(holder < n, holder, prog.ptr[1:][srank]), prog.ptr[1:], prog.ptr[1:]]
    kind = np.r_[np.full(n, _SINCE), np.full(n, _START), np.full(n, _END), np.full(2 * len(srank), _STRETCH),
                 np.full(2 * nrank, _END + 1)]
    span = int(max(runtime_ns, int(end.max()) if n else 0)) + 2
    key = anchors_rank.astype(np.int64) * span + np.rint(x).astype(np.int64)
    by = np.lexsort((kind, seq, key))
    return TimeMap(key[by], y[by], span, enter, leave)
