"""The critical path through ranks and threads: the chain of dependent activity that sets the run's length, as
Scalasca and pipit find it (Böhme et al., "Scalable critical-path based performance analysis", IPDPS 2012).

Built backward from the end of the window, on the rank whose last kernel or MPI call ends last. On a rank, time
is a tiling of parallel regions (one invocation: the kernel records of its threads that overlap), MPI calls and
the serial code between them on the main thread. Going back through a region, the path follows the thread whose
block ends last (the join waits for it) through its block and its fork delay, then leaves the region at its
start (the fork). Going back through an MPI call, the path stays on the rank unless the call waited for another
rank, then it moves there, to the partner's own call:
  receive (or Sendrecv)   the matched send, when it started after the receive (Late Sender);
  synchronous send        the matched receive, when it started after the send (Late Receiver);
  all-to-all collective   the member that entered last; a broadcast's non-root: the root; a reduce's root: the
                          member that entered last;
  wait                    of the requests it completes (a nonblocking collective: as its blocking twin; Irecv: the
                          send; Isend: the receive), the partner that entered last before the wait returned.
The path lands on the partner at the end of the partner's call (or earlier, where the waiting call ended first),
so the call's time after the landing is the waiting rank's transfer, and the partner's own call is on the path.
Wait time is therefore never on the path: it is what the path explains.

Each piece of the path is a real interval of one record, so the pieces tile the window and the path's length (the
sum of its pieces) equals the window's time, on any input. Clocks that disagree (a partner whose call starts
after the waiting call ended: a message received before it was sent) are counted (`clock_violations`); the path
then moves to the partner at the time it left, onto what the partner ran before its call. Where a landing would
repeat one made at the same time (calls of several threads of a rank that overlap, so that the tiling shows
another call than the partner's), the call is taken as not waiting: time never goes up, so the walk ends.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import mpi
from analysis.order import by_value
from analysis.records import NS, Records, decode, records, threads
from analysis.steps import steps_table
from analysis.window import Window
from gpt2trace.format import mpi_calls as C
from gpt2trace.format.lanes import run_starts, time_key, time_key_fits
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, LAYER, NAME, RANK, START_NS, STEP, THREAD, Kind

KERNEL, FORK, MPI, SERIAL = "kernel", "fork/join", "mpi", "serial"   # what a piece of the path is
SERIAL_NAME = "serial code"            # the main thread between kernels and calls: Python, I/O, the tracer
NO_PHASE = "(no phase)"
_GAP, _REGION, _CALL = 0, 1, 2         # kinds of the entries that tile a rank's time
PIECES = (RANK, THREAD, START_NS, END_NS, "category", NAME, LAYER, "phase", STEP)


@dataclass(frozen=True)
class CriticalPath:
    pieces: pd.DataFrame       # PIECES, in time order; layer -1 and step -1 when none
    t0_ns: int
    t1_ns: int
    clock_violations: int      # jumps to a partner that started after the waiting call ended

    @property
    def length_ns(self) -> int:
        return int((self.pieces[END_NS] - self.pieces[START_NS]).sum())


def critical_path(trace: Trace, window: Window, calls: pd.DataFrame | None = None,
                  kern: Records | None = None, main: pd.Series | None = None,
                  regions: tuple[pd.DataFrame, tuple[str, ...]] | None = None,
                  steps: pd.DataFrame | None = None) -> CriticalPath:
    """The critical path of the window. `calls` is `mpi.calls(trace, window)`, `kern` the window's kernel
    records (`segments.kernel_records`), `main` `main_threads(trace)` and `steps` `steps_table(trace)`, when the
    caller has them; `regions`: `kernel_regions(kern)` and the kernel names, instead of `kern` (rank-local: the
    regions of groups of ranks, concatenated in rank order, are those of all)."""
    if calls is None:
        calls = mpi.calls(trace, window)
    if regions is None:
        if kern is None:
            kern = records(trace, Kind.KERNEL, (RANK, THREAD, NAME, LAYER), window)
        regions = (kernel_regions(kern), kern.names)
    steps = steps_table(trace) if steps is None else steps
    steps = steps[steps[STEP].isin(window.steps)] if window.steps else steps.iloc[:0]
    ph = records(trace, Kind.PHASE, (RANK, NAME), window)
    phases = pd.DataFrame({RANK: ph[RANK].astype(np.int64), START_NS: ph[START_NS], END_NS: ph[END_NS],
                           NAME: decode(ph[NAME], ph.names)})
    return _path(calls, *regions, main_threads(trace) if main is None else main, window.t0_ns, window.t1_ns,
                 steps[[STEP, START_NS]], phases)


def main_threads(trace: Trace, pairs: pd.DataFrame | None = None) -> pd.Series:
    """Each rank's main thread (its lowest id), indexed by rank; `pairs`: `threads(trace)` when the caller has it."""
    return (threads(trace) if pairs is None else pairs).groupby(RANK)[THREAD].min()


def timeline_path(calls: pd.DataFrame, kern: Records, main: pd.Series, t0: int, t1: int, steps: pd.DataFrame,
                  phases: pd.DataFrame) -> CriticalPath:
    """The critical path of [t0, t1) of a timeline, the trace's or a replay's: `calls` as `mpi.calls` gives them
    (times, classes, matches), `kern` the kernel records, `main` each rank's main thread, `steps` (step,
    start_ns) of the steps to cut the path at, `phases` (rank, start_ns, end_ns, name) to label it with."""
    return _path(calls, kernel_regions(kern), kern.names, main, t0, t1, steps, phases)


def _path(calls: pd.DataFrame, regions: pd.DataFrame, names: tuple[str, ...], main: pd.Series, t0: int, t1: int,
          steps: pd.DataFrame, phases: pd.DataFrame) -> CriticalPath:
    tiles = _tiling(regions, calls, main.index.to_numpy(), t0, t1)
    walk = _Walk(tiles, calls, _partners(calls), t0)
    walk.run(*_end_point(tiles, t1))
    pieces = _pieces(walk, tiles, regions, calls, main, names)
    return CriticalPath(_label(pieces, steps, phases, t0, t1), t0, t1, walk.violations)


# ---------- a rank's time as a tiling: regions, calls, serial gaps ----------

def kernel_regions(kern: Records) -> pd.DataFrame:
    """One row per parallel region (kernel records of a rank that overlap): rank, start_ns, end_ns and the thread,
    block start, name code and layer of the record that ends last (the one the join waits for)."""
    cols = [RANK, START_NS, END_NS, THREAD, "block_ns", NAME, LAYER]
    keep = np.flatnonzero(kern[END_NS] > kern[START_NS])
    if not len(keep):
        return pd.DataFrame({c: np.zeros(0, np.int64) for c in cols})
    rank, thread = kern[RANK][keep].astype(np.int64), kern[THREAD][keep].astype(np.int64)
    start, end = kern[START_NS][keep].astype(np.int64, copy=False), kern[END_NS][keep].astype(np.int64, copy=False)
    lo, width = int(start.min()), int(end.max()) - int(start.min()) + 1
    # (rank, start), stable; by (rank, time) keys, which also make one cumulative max the latest end so far on
    # each rank (a rank's keys are all above the previous rank's)
    fits = time_key_fits(int(rank.max()) + 1, width)
    order = np.argsort(time_key(rank, start, lo, width), kind="stable") if fits else np.lexsort((start, rank))
    rank, thread, start, end = rank[order], thread[order], start[order], end[order]
    first_of_rank = np.r_[True, rank[1:] != rank[:-1]]
    if fits:
        reach = np.maximum.accumulate(time_key(rank, end, lo, width)) - rank * width + lo
    else:
        reach = end.copy()
        bounds = np.flatnonzero(first_of_rank)
        for a, b in zip(bounds, np.r_[bounds[1:], len(end)]):    # one cumulative max per rank
            reach[a:b] = np.maximum.accumulate(end[a:b])
    cut = np.ones(len(end), dtype=bool)
    cut[1:] = first_of_rank[1:] | (start[1:] >= reach[:-1])
    region = np.cumsum(cut) - 1
    first = np.flatnonzero(cut)
    region_end = np.maximum.reduceat(end, first)
    # the record of each region that ends last (ties: the lowest thread, then the first): the one the join waits for
    ends_last = np.flatnonzero(end == region_end[region])
    lowest = np.minimum.reduceat(thread[ends_last], run_starts(region[ends_last]))
    waited = ends_last[thread[ends_last] == lowest[region[ends_last]]]
    last = waited[run_starts(region[waited])]
    at = keep[order[last]]                                          # in `kern`
    return pd.DataFrame({RANK: rank[first], START_NS: start[first], END_NS: region_end, THREAD: thread[last],
                         "block_ns": start[last], NAME: kern[NAME][at].astype(np.int64),
                         LAYER: kern[LAYER][at].astype(np.int64)})


@dataclass(frozen=True)
class _Tiles:
    """Entries tiling [t0, t1) on every rank, sorted by (rank, start): kind, the region or call row, and for each
    entry the last call entry at or before it on its rank (-1: none)."""
    rank: np.ndarray
    start: np.ndarray
    end: np.ndarray
    kind: np.ndarray
    ref: np.ndarray
    prev_call: np.ndarray
    ranks: np.ndarray          # sorted rank ids; entries of ranks[k] are ptr[k]:ptr[k+1]
    ptr: np.ndarray


_CHUNK = 1 << 20        # region records per block of ranks that `_tiling` works on at a time


def _tiling(regions: pd.DataFrame, calls: pd.DataFrame, ranks: np.ndarray, t0: int, t1: int) -> _Tiles:
    """The tiling of every rank, built a block of consecutive ranks at a time when the regions and calls come in
    rank order (as `kernel_regions` and `mpi.calls` give them): a rank's tiling is its own, and blocks of about
    _CHUNK records keep the temporaries small (arrays of millions are paid for in page faults each time)."""
    rr, cr = regions[RANK].to_numpy(), calls[RANK].to_numpy()
    cols = [(regions[c].to_numpy(), calls[c].to_numpy()) for c in (RANK, START_NS, END_NS)]
    ranks = np.asarray(ranks)
    if len(rr) > _CHUNK and (rr[1:] >= rr[:-1]).all() and (cr[1:] >= cr[:-1]).all():
        cuts = np.unique(rr[_CHUNK::_CHUNK])                          # a block starts at each of these ranks
    else:
        cuts = np.zeros(0, rr.dtype)
    r_at = np.r_[0, np.searchsorted(rr, cuts), len(rr)]
    c_at = np.r_[0, np.searchsorted(cr, cuts), len(cr)]
    k_at = np.r_[0, np.searchsorted(ranks, cuts), len(ranks)]
    # each entry, a gap before it and one after it (a rank's last), a gap per idle rank: at most; the pages past
    # the tiling's end are never touched
    bound = 3 * (len(rr) + len(cr)) + len(ranks)
    out = {f: np.empty(bound, dtype=np.int8 if f == "kind" else np.int64)
           for f in ("rank", "start", "end", "kind", "ref", "prev_call")}
    firsts, offset = [], 0
    for i in range(len(r_at) - 1):
        (ra, rb), (ca, cb) = r_at[i:i + 2], c_at[i:i + 2]
        size, first = _tile_block(*(np.r_[r[ra:rb], c[ca:cb]] for r, c in cols), rb - ra, ra, ca,
                                  ranks[k_at[i]:k_at[i + 1]], t0, t1, out, offset)
        firsts.append(first + offset)
        offset += size
    ptr = np.r_[np.concatenate(firsts), offset]
    rank = out["rank"][:offset]
    return _Tiles(rank=rank, start=out["start"][:offset], end=out["end"][:offset], kind=out["kind"][:offset],
                  ref=out["ref"][:offset], prev_call=out["prev_call"][:offset], ranks=rank[ptr[:-1]], ptr=ptr)


def _tile_block(rank: np.ndarray, start: np.ndarray, end: np.ndarray, regions: int, first_region: int,
                first_call: int, ranks: np.ndarray, t0: int, t1: int, out: dict[str, np.ndarray],
                offset: int) -> tuple[int, np.ndarray]:
    """Writes the tiling of a block of ranks into `out` from `offset` on, from its regions' and calls' rank, start,
    end (the regions first, their rows from first_region and first_call on), `ranks` the block's ranks; returns
    its length and where each of its ranks starts in it."""
    rank = rank.astype(np.int64)
    start = np.clip(start, t0, t1).astype(np.int64)
    end = np.clip(end, t0, t1).astype(np.int64)
    is_call = np.arange(len(rank)) >= regions
    order = _by_rank_time(rank, start, t0, t1, ~is_call)              # a call before a region starting with it
    rank, start, end, is_call = rank[order], start[order], end[order], is_call[order]
    # A record overlapping the one before it on its rank (a call inside a region) keeps only what is after it.
    start = np.maximum(start, _reach_before(rank, end, t0, t1))
    keep = end > start
    if not keep.all():
        order, rank, start, end, is_call = order[keep], rank[keep], start[keep], end[keep], is_call[keep]
    # Serial gaps: before each entry (from the previous one's end or t0) and after each rank's last one; each
    # entry and gap written where it belongs in (rank, start) order.
    first = np.r_[True, rank[1:] != rank[:-1]] if len(rank) else np.zeros(0, bool)
    gap_start = np.where(first, t0, np.r_[t0, end[:-1]])
    lead = start > gap_start
    tail = np.r_[first[1:], True] & (end < t1) if len(rank) else np.zeros(0, bool)
    present = rank[first]
    idle = np.setdiff1d(ranks, present).astype(np.int64)             # ranks with nothing but serial code
    leads, tails = np.cumsum(lead), np.cumsum(tail)
    rank_no = np.cumsum(first) - 1
    at = (np.arange(len(rank)) + leads + np.r_[0, tails[first[1:].nonzero()[0]]][rank_no]
          + np.searchsorted(idle, present)[rank_no])                  # the entries' places
    before = np.searchsorted(rank, idle)                              # entries of the ranks below an idle rank
    idle_at = before + np.r_[0, leads][before] + np.r_[0, tails][before] + np.arange(len(idle))
    size = len(rank) + int(leads[-1] if len(leads) else 0) + int(tails[-1] if len(tails) else 0) + len(idle)
    places = (at, at[lead] - 1, at[tail] + 1, idle_at)

    def tile(field, entries, leading, trailing, alone) -> np.ndarray:
        block = out[field][offset:offset + size]
        for where, what in zip(places, (entries, leading, trailing, alone)):
            block[where] = what
        return block

    block_rank = tile("rank", rank, rank[lead], rank[tail], idle)
    tile("start", start, gap_start[lead], end[tail], t0)
    tile("end", end, start[lead], t1, t1)
    kind = tile("kind", np.where(is_call, _CALL, _REGION), _GAP, _GAP, _GAP)
    tile("ref", np.where(is_call, order - regions + first_call, order + first_region), -1, -1, -1)
    firsts = run_starts(block_rank)
    # the last call at or before each entry, if it is on the entry's rank (at or after the rank's first entry)
    position = np.arange(size)
    prev = np.maximum.accumulate(np.where(kind == _CALL, position, -1)) if size else position
    out["prev_call"][offset:offset + size] = np.where(prev >= np.repeat(firsts, np.diff(np.r_[firsts, size])),
                                                      prev + offset, -1)
    return size, firsts


def _by_rank_time(rank: np.ndarray, t: np.ndarray, t0: int, t1: int, later: np.ndarray) -> np.ndarray:
    """The stable order by (rank, t, later) of times in [t0, t1]: one integer sort, which finds the sorted runs the
    entries come in (the regions, the calls) and merges them."""
    lo = int(rank.min()) if len(rank) else 0
    if not time_key_fits(int(rank.max()) - lo + 1 if len(rank) else 0, 2 * (t1 - t0 + 1)):
        return np.lexsort((later, t, rank))
    return np.argsort(time_key(rank - lo, t, t0, t1 - t0 + 1) * 2 + later, kind="stable")


def _reach_before(rank: np.ndarray, end: np.ndarray, t0: int, t1: int) -> np.ndarray:
    """For entries sorted by rank, the latest end of the earlier entries of the same rank (t0 for its first)."""
    span = t1 - t0 + 1
    first = np.r_[True, rank[1:] != rank[:-1]] if len(rank) else np.zeros(0, bool)
    lane = np.cumsum(first) - 1                                      # a rank's position: keys grow with it
    if not time_key_fits(int(lane[-1]) + 1 if len(lane) else 0, span):
        reach = pd.Series(end).groupby(rank).cummax().to_numpy()
    else:
        reach = np.maximum.accumulate(time_key(lane, end, t0, span)) - lane * span + t0
    return np.where(first, t0, np.r_[t0, reach[:-1]])


def _end_point(tiles: _Tiles, t1: int) -> tuple[int, int]:
    """Where the path ends: t1 on the rank whose last region or call ends last (the lowest such rank)."""
    end = np.where(tiles.kind != _GAP, tiles.end, np.iinfo(np.int64).min)
    if not len(end) or end.max() == np.iinfo(np.int64).min:
        return (int(tiles.ranks[0]) if len(tiles.ranks) else -1), t1
    return int(tiles.rank[np.argmax(end == end.max())]), t1              # the first: tiles are in rank order


# ---------- who each call waited for ----------

def _partners(calls: pd.DataFrame) -> np.ndarray:
    """For each call row, the row of the partner call it waited for (see the module's docstring), or -1."""
    n = len(calls)
    dep = np.full(n, -1, dtype=np.int64)
    if not n:
        return dep
    start, end = calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
    op, cls, inst = (calls[c].to_numpy() for c in ("op", "cls", "inst"))
    root, send_of, recv_of = (calls[c].to_numpy() for c in ("is_root", "send_of", "recv_of"))
    # The partner each call or request waits for, whether or not it came late.
    partner = np.full(n, -1, dtype=np.int64)
    recv = np.isin(op, (C.RECV, C.IRECV, C.SENDRECV))
    partner[recv] = send_of[recv]
    sends = np.isin(op, (C.SEND, C.ISEND))
    partner[sends] = recv_of[sends]
    both = (op == C.SENDRECV) & (recv_of >= 0)                        # its send half may be the later one
    later = both & ((send_of < 0) | (start[np.maximum(recv_of, 0)] > start[np.maximum(send_of, 0)]))
    partner[later] = recv_of[later]
    coll = np.flatnonzero(inst >= 0)
    if len(coll):
        g = pd.DataFrame({"row": coll, "inst": inst[coll], "s": start[coll], "root": root[coll]})
        last = g.loc[g.groupby("inst")["s"].idxmax()].set_index("inst")["row"]
        roots = g[g["root"]].drop_duplicates("inst").set_index("inst")["row"]
        by_last = last.reindex(g["inst"]).to_numpy()
        by_root = roots.reindex(g["inst"]).fillna(-1).to_numpy().astype(np.int64)
        c = cls[coll]
        pick = np.where(c == C.NXN, by_last, np.where(c == C.ONE_TO_ALL, np.where(root[coll], -1, by_root),
                                                      np.where(root[coll], by_last, -1)))
        partner[coll] = pick
    # Blocking calls wait for their partner; a wait for the partners of the requests it completes.
    blocking = np.isin(op, (C.RECV, C.SEND, C.SENDRECV, C.COLL))
    dep[blocking] = partner[blocking]
    req = np.flatnonzero(np.isin(op, (C.COLL_POST, C.IRECV, C.ISEND)) & (partner >= 0))
    if len(req):
        completer = _completers(calls)[req]
        ok = completer >= 0
        w, p = completer[ok], partner[req[ok]]
        came = start[p] <= end[w]                                     # a partner after the wait returned: not it
        w, p = w[came], p[came]
        if len(w):
            best = pd.DataFrame({"w": w, "p": p, "s": start[p]}).sort_values(["w", "s"]).drop_duplicates(
                "w", keep="last")
            dep[best["w"].to_numpy()] = best["p"].to_numpy()
    late = dep >= 0
    late[late] = start[dep[late]] > start[late]
    return np.where(late, dep, -1)


def _completers(calls: pd.DataFrame) -> np.ndarray:
    """The wait that completes each request: `mpi.post_waits` for postings and Irecvs, and an Isend's the first
    wait after it on its rank that names no collective."""
    out = mpi.post_waits(calls)
    op, rank = calls["op"].to_numpy(), calls[RANK].to_numpy()
    isend = np.flatnonzero(op == C.ISEND)
    waits = np.flatnonzero((op == C.WAIT) & (calls["wait_inst"].to_numpy() < 0))
    if len(isend) and len(waits):                                     # rows are sorted by rank, then start
        nxt = np.minimum(np.searchsorted(waits, isend, side="right"), len(waits) - 1)
        cand = waits[nxt]
        out[isend] = np.where((cand > isend) & (rank[cand] == rank[isend]), cand, -1)
    return out


# ---------- the backward walk ----------

class _Walk:
    """Walks back from (rank, t) to t0. Between calls a rank's entries go on the path whole (`spans`: first and last
    tiling index and the time the last is cut at); a call adds a piece (`calls`: rank row, start, end, call row)."""

    def __init__(self, tiles: _Tiles, calls: pd.DataFrame, dep: np.ndarray, t0: int):
        self.tiles, self.dep, self.t0 = tiles, dep, t0
        self.c_start, self.c_end = calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
        self.c_rank = calls[RANK].to_numpy()
        self.spans: list[tuple[int, int, int]] = []
        self.calls: list[tuple[int, int, int]] = []
        self.violations = 0

    def run(self, rank: int, t: int) -> None:
        """Total on any input: time never goes up, and at one time each rank is landed on at most once (the walk's
        state is its rank and time, so landing again where a turn started would repeat the walk); the bound below
        is what those two facts allow, so reaching it is a bug, never a property of the trace."""
        tl = self.tiles
        if rank < 0 or not self._has(rank):
            return
        self._at, self._here = None, set()                            # ranks a turn started on at time _at
        for _ in range((2 * len(tl.kind) + len(self.dep) + 2) * (len(tl.ranks) + 1)):
            if t <= self.t0:
                return
            if t != self._at:
                self._at, self._here = t, set()
            self._here.add(rank)
            k = int(np.searchsorted(tl.ranks, rank))
            lo, hi = tl.ptr[k], tl.ptr[k + 1]
            i = lo + int(np.searchsorted(tl.start[lo:hi], t, side="left")) - 1
            if i < lo:
                return
            j = int(tl.prev_call[i])
            if j != i:
                self.spans.append((max(j + 1, lo), i, t))
                if j < 0:
                    return
                t = int(tl.end[j])
            rank, t = self._call(j, t)
        raise RuntimeError("critical path: the walk does not end")   # a bug, not a trace problem

    def _has(self, rank: int) -> bool:
        k = int(np.searchsorted(self.tiles.ranks, rank))
        return k < len(self.tiles.ranks) and int(self.tiles.ranks[k]) == rank

    def _call(self, j: int, t: int) -> tuple[int, int]:
        """Adds call entry j's piece up to t and says where the path goes on."""
        tl = self.tiles
        row, begin, here = int(tl.ref[j]), int(tl.start[j]), int(tl.rank[j])
        p = int(self.dep[row])
        if p >= 0:
            to, land = int(self.c_rank[p]), min(int(self.c_end[p]), t)
            if self._has(to) and not (land == self._at and to in self._here):
                # Received before it was sent (the clocks disagree): the path moves to the partner at the same
                # time, before its call, onto the work that delayed it, as a logical clock would shift the send.
                self.violations += int(self.c_start[p] > t)
                self.calls.append((row, land, t))
                return to, land
        self.calls.append((row, begin, t))
        return here, begin


# ---------- the pieces, labelled ----------

def _pieces(walk: _Walk, tiles: _Tiles, regions: pd.DataFrame, calls: pd.DataFrame, main: pd.Series,
            names: tuple[str, ...]) -> pd.DataFrame:
    frames = []
    if walk.spans:
        sp = np.array(walk.spans, dtype=np.int64)
        count = sp[:, 1] - sp[:, 0] + 1
        idx = np.repeat(sp[:, 0] - np.r_[0, np.cumsum(count)[:-1]], count) + np.arange(count.sum())
        cut = np.full(len(idx), np.iinfo(np.int64).max)
        cut[np.cumsum(count) - 1] = sp[:, 2]
        rank, start, end, kind, ref = (a[idx] for a in (tiles.rank, tiles.start, tiles.end, tiles.kind, tiles.ref))
        end = np.minimum(end, cut)
        gap = kind == _GAP
        frames.append(pd.DataFrame({RANK: rank[gap], THREAD: main.reindex(rank[gap]).to_numpy(),
                                    START_NS: start[gap], END_NS: end[gap], "category": SERIAL,
                                    NAME: SERIAL_NAME, LAYER: -1}))
        r = regions.iloc[ref[~gap]]
        block = np.clip(r["block_ns"].to_numpy(), start[~gap], end[~gap])
        kname = decode(r[NAME].to_numpy(), names)
        for category, s, e in ((FORK, start[~gap], block), (KERNEL, block, end[~gap])):
            frames.append(pd.DataFrame({RANK: rank[~gap], THREAD: r[THREAD].to_numpy(), START_NS: s, END_NS: e,
                                        "category": category, NAME: kname, LAYER: r[LAYER].to_numpy()}))
    if walk.calls:
        cp = np.array(walk.calls, dtype=np.int64)
        rows = cp[:, 0]
        frames.append(pd.DataFrame({RANK: calls[RANK].to_numpy()[rows], THREAD: calls[THREAD].to_numpy()[rows],
                                    START_NS: cp[:, 1], END_NS: cp[:, 2], "category": MPI,
                                    NAME: calls[NAME].to_numpy()[rows], LAYER: -1}))
    if not frames:
        return pd.DataFrame({c: [] for c in PIECES[:-2]})
    out = pd.concat(frames, ignore_index=True)
    out = out[out[END_NS] > out[START_NS]]
    for col in (RANK, THREAD, START_NS, END_NS, LAYER):
        out[col] = out[col].astype(np.int64)
    return out.sort_values([START_NS, END_NS, RANK, THREAD], kind="stable").reset_index(drop=True)


def _label(pieces: pd.DataFrame, steps: pd.DataFrame, phases: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    """Pieces cut at the step boundaries and at their rank's phase edges, with their step (-1: none) and phase."""
    phases = phases.sort_values([RANK, START_NS], kind="stable")
    if pieces.empty:
        return pieces.assign(phase=NO_PHASE, **{STEP: -1})[list(PIECES)]
    rank, s, e = (pieces[c].to_numpy().astype(np.int64) for c in (RANK, START_NS, END_NS))
    lo = min(t0, int(s.min()))
    span = max(t1, int(e.max())) - lo + 1
    path_ranks = np.unique(rank)
    bounds = steps[START_NS].to_numpy()[1:].astype(np.int64)
    on_path = phases[phases[RANK].isin(path_ranks)]
    edges = np.r_[np.repeat(path_ranks, len(bounds)) * span + (np.tile(bounds, len(path_ranks)) - lo),
                  on_path[RANK].to_numpy() * span + (np.clip(on_path[START_NS].to_numpy(), lo, lo + span - 1) - lo),
                  on_path[RANK].to_numpy() * span + (np.clip(on_path[END_NS].to_numpy(), lo, lo + span - 1) - lo)]
    edges = np.unique(edges)                                          # (rank, time) keys where a piece is cut
    ks, ke = rank * span + (s - lo), rank * span + (e - lo)
    k0, k1 = np.searchsorted(edges, ks, side="right"), np.searchsorted(edges, ke, side="left")
    parts = np.maximum(k1 - k0 + 1, 1)
    rep = np.repeat(np.arange(len(pieces)), parts)
    j = np.arange(parts.sum()) - np.repeat(np.r_[0, np.cumsum(parts)[:-1]], parts)
    k = k0[rep] + j
    cut = lambda i: edges[np.clip(i, 0, max(len(edges) - 1, 0))] - rank[rep] * span + lo  # noqa: E731
    out = pieces.iloc[rep].reset_index(drop=True)
    out[START_NS] = np.where(j == 0, s[rep], cut(k - 1)) if len(edges) else s[rep]
    out[END_NS] = np.where(j == parts[rep] - 1, e[rep], cut(k)) if len(edges) else e[rep]
    step_ids = steps[STEP].to_numpy().astype(np.int64)
    at_step = np.searchsorted(steps[START_NS].to_numpy(), out[START_NS].to_numpy(), side="right") - 1
    out[STEP] = step_ids[np.maximum(at_step, 0)] if len(step_ids) else -1
    out["phase"] = _phases(out, phases)
    return out[list(PIECES)]


def _phases(pieces: pd.DataFrame, phases: pd.DataFrame) -> np.ndarray:
    """The phase of each piece: the one of its rank that holds its middle (the latest started), or NO_PHASE."""
    out = np.full(len(pieces), NO_PHASE, dtype=object)
    mid = (pieces[START_NS].to_numpy() + pieces[END_NS].to_numpy()) // 2
    prank = pieces[RANK].to_numpy()
    for rank, sub in phases.groupby(RANK):                            # one iteration per rank
        here = np.flatnonzero(prank == rank)
        at = np.searchsorted(sub[START_NS].to_numpy(), mid[here], side="right") - 1
        ok = (at >= 0) & (mid[here] < sub[END_NS].to_numpy()[np.maximum(at, 0)])
        out[here[ok]] = sub[NAME].to_numpy()[at[ok]]
    return out


# ---------- tables ----------

PER_STEP_ITEMS = 10     # the largest items of each step's path that `tables` lists (every one is in `items`)

def critical_path_tables(trace: Trace, window: Window, calls: pd.DataFrame | None = None,
                         kern: Records | None = None, **given) -> dict:
    """`tables` of the window's critical path (what `analyze` reports under `critical_path`); `given`: the other
    arguments of `critical_path`."""
    return tables(critical_path(trace, window, calls, kern, **given))


def tables(cp: CriticalPath) -> dict:
    """What `analyze` reports: length against the window, the items (kernels with their layer, MPI calls, fork/join,
    serial code) and phases on the path with their time and share, summed and per step, the lanes it runs through,
    and the path itself as merged segments (one per stretch on one thread) for the report's overlay."""
    p = cp.pieces
    length = cp.length_ns
    dur = (p[END_NS] - p[START_NS]).to_numpy()
    df = p.assign(time_s=dur / NS)
    window_s = (cp.t1_ns - cp.t0_ns) / NS

    def shares(t: pd.DataFrame, total_s: float, ties: list[str]) -> pd.DataFrame:
        t["share"] = t["time_s"] / total_s if total_s > 0 else 0.0
        return by_value(t, "time_s", ties)

    keys = ["category", NAME, LAYER]
    items = shares(df.groupby(keys, as_index=False).agg(time_s=("time_s", "sum"), pieces=("time_s", "size")),
                   length / NS, keys)
    items[LAYER] = _layers(items[LAYER])
    phases = shares(df.groupby("phase", as_index=False).agg(time_s=("time_s", "sum")), length / NS, ["phase"])
    lanes = shares(df.groupby([RANK, THREAD], as_index=False).agg(time_s=("time_s", "sum")), length / NS,
                   [RANK, THREAD])
    # per step, in one grouping (a per-step loop costs seconds on 10 M records)
    stepped = df[df[STEP] >= 0]
    per_step = (stepped.groupby([STEP] + keys, as_index=False, dropna=False).agg(time_s=("time_s", "sum")))
    totals = per_step.groupby(STEP)["time_s"].transform("sum")
    per_step["share"] = np.where(totals > 0, per_step["time_s"] / totals.where(totals > 0, 1.0), 0.0)
    per_step = per_step.sort_values([STEP, "time_s", *keys], ascending=[True, False, True, True, True],
                                    kind="stable").reset_index(drop=True)
    per_step[LAYER] = _layers(per_step[LAYER])
    top_items = per_step.groupby(STEP).head(PER_STEP_ITEMS).reset_index(drop=True)
    steps = []
    if len(stepped):
        st, rk = stepped[STEP].to_numpy(), stepped[RANK].to_numpy()
        switch = np.r_[False, (rk[1:] != rk[:-1]) & (st[1:] == st[:-1])]
        length_by = stepped.groupby(STEP)["time_s"].sum()
        switches = pd.Series(switch, index=stepped.index).groupby(st).sum()
        ranks_by = stepped.groupby(STEP)[RANK].unique()
        top = top_items.groupby(STEP).head(1).set_index(STEP)
        for step in length_by.index:
            layer = top.at[step, LAYER]
            steps.append({STEP: int(step), "length_s": float(length_by[step]), "switches": int(switches[step]),
                          "ranks": sorted(int(r) for r in ranks_by[step]),
                          "top": f"{top.at[step, NAME]}" + (f" (layer {layer})" if layer is not None else "")})
    return {"length_s": length / NS, "window_s": window_s,
            "length_ratio": length / (cp.t1_ns - cp.t0_ns) if cp.t1_ns > cp.t0_ns else None,
            "clock_violations": cp.clock_violations,
            "rank_switches": int((p[RANK].to_numpy()[1:] != p[RANK].to_numpy()[:-1]).sum()),
            "items": items, "phases": phases, "lanes": lanes, "steps": steps,
            "per_step": top_items,
            "segments": segments(p)}


def _layers(col: pd.Series) -> pd.Series:
    return col.astype(object).where(col >= 0, None)


def segments(pieces: pd.DataFrame) -> pd.DataFrame:
    """The path as stretches on one thread: consecutive pieces on the same (rank, thread) merged; seconds."""
    if pieces.empty:
        return pd.DataFrame({RANK: [], THREAD: [], "start_s": [], "end_s": []})
    lane = pieces[RANK].to_numpy() * (int(pieces[THREAD].max()) + 1) + pieces[THREAD].to_numpy()
    new = np.r_[True, lane[1:] != lane[:-1]]
    first = np.flatnonzero(new)
    return pd.DataFrame({RANK: pieces[RANK].to_numpy()[first], THREAD: pieces[THREAD].to_numpy()[first],
                         "start_s": pieces[START_NS].to_numpy()[first] / NS,
                         "end_s": np.maximum.reduceat(pieces[END_NS].to_numpy(), first) / NS})
