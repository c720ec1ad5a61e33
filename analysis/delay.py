"""Delay costs: every wait charged back, along chains of waits, to the excess activity that caused it (Scalasca's
root-cause analysis: Böhme et al., "Identifying the root causes of wait states in large-scale parallel
applications", ICPP 2010 and ACM TOPC 3(2), 2016).

A wait state k (`analysis.waits`: the waiter arrives at a_w, the delayer, the rank it waited for, at a_c; wait w)
is explained by what the two ranks did in one synchronization interval: from b, the end of the waiter's previous
synchronizing call (the window's start if none), to each one's arrival. The waiter's part [b, a_w) holds only its
own work; the delayer's [b, a_c) holds everything that made it arrive later, its own wait states included. Per path
p (a kernel with its layer; the time outside kernels: Python, data loading, MPI transfers and postings; waiting) the
delay is the excess e(p) = max(0, t_delayer(p) - t_waiter(p)), and D = sum of e; the differences t_delayer(p) -
t_waiter(p) sum to a_c - a_w, which is the wait of a Wait at NxN.
- Short-term cost: w e(p) / D goes to the delayer's path p (a kernel, or the time outside kernels).
- Propagation: the excess spent waiting is no cause of its own. Its share, w e(waiting) / D, is passed to the
  delayer's wait states in the interval, in proportion to their part of it; they are *propagating* wait states,
  and pass what they received on with their own wait, along the same shares, to what delayed them.
- Long-term cost: what a path receives that way, the waits it caused through a chain of other waits.
Waits are visited from the latest (by the end of the waiting call) to the earliest, so a wait has received all its
propagated time before it passes it on. Nothing is lost: a wait with no excess (D = 0), or the share a chain
cannot pass on (a delayer's wait that ended after the wait it delayed: clocks that disagree), is charged to
"(unattributed)" on the delayer, so short-term + long-term + unattributed costs add up to all the wait time.

Example (a pipeline of three messages): rank 0 computes 4 s and sends to rank 1, which waited 4 s for it, computes
1 s and sends to rank 2, which waited 5.1 s, and so on. Rank 0's 4 s cost 4 s to each of the three downstream
waits: 4 s short-term (rank 1's) and 8 s long-term (ranks 2 and 3). Wait states of the trace that are not given
(`waits` filtered by the caller) count as time outside kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.order import by_value
from analysis.records import NS
from analysis.segments import Segments
from analysis.window import Window
from gpt2trace.format.lanes import distinct_index, time_key
from gpt2trace.format.schema import END_NS, LAYER, RANK, START_NS

OUTSIDE, UNATTRIBUTED = "(outside kernels)", "(unattributed)"
# A path: a kernel's (name code, layer) as name * _LAYERS + layer + 1, or one of these.
_OUTSIDE, _UNATTRIBUTED, _LAYERS = -1, -2, 65538
_CHUNK = 1 << 20             # overlaps of kernel segments with intervals worked on at a time (`_kernels`)
_NOTHING_LEFT = 1e-9         # a share of a wait below this is rounding, not time left unattributed
COLUMNS = [RANK, "kernel", LAYER, "short_s", "long_s", "cost_s", "waits", "share"]


@dataclass(frozen=True)
class DelayCosts:
    causes: pd.DataFrame        # the keys, then COLUMNS, by cost; `waits`: wait states that charge it directly
    total_wait_s: float
    propagating_waits: int      # wait states whose waiting made their rank late for another wait
    propagating_wait_s: float   # their own wait time

    @property
    def unattributed_s(self) -> float:
        return float(self.causes.loc[self.causes["kernel"] == UNATTRIBUTED, "cost_s"].sum())


def delay_costs(calls: pd.DataFrame, waits: pd.DataFrame, segs: Segments, window: Window,
                keys: tuple[str, ...] = (), propagate: bool = True) -> DelayCosts:
    """The delay costs of `waits` (`analysis.waits.wait_states` of `calls`, `mpi.calls` of the window), per cause
    (the delayer's rank, kernel and layer) and per value of `keys` (columns of `waits`: the costs keep the keys
    of the wait they come from, through the chain). `propagate=False` keeps each wait with its direct delayer: the
    excess spent waiting is left out of D, and nothing is long-term."""
    w = waits.reset_index(drop=True)
    total = float(w["wait_ns"].sum()) if len(w) else 0.0
    if w.empty:
        return DelayCosts(pd.DataFrame(columns=[*keys, *COLUMNS]), 0.0, 0, 0.0)
    n = len(w)
    start, end = calls[START_NS].to_numpy().astype(np.int64), calls[END_NS].to_numpy().astype(np.int64)
    rank = calls[RANK].to_numpy().astype(np.int64)
    row, culprit = w["sync_row"].to_numpy(), w["culprit_row"].to_numpy()
    omega = w["wait_ns"].to_numpy().astype(np.float64)
    a_w, a_c = start[row], start[culprit]
    b = np.minimum(np.maximum(calls["sync_end"].to_numpy()[row], window.t0_ns), a_w)
    # intervals 0..n-1: the waiters' [b, a_w); n..2n-1: the delayers' [b, a_c)
    iv_rank = np.r_[rank[row], rank[culprit]]
    lo, hi = np.r_[b, b], np.r_[a_w, np.maximum(a_c, b)]
    clock = _clock(segs, start, end, window)
    in_kernels, ex_k, ex_path, ex_e = _kernels(clock, segs, iv_rank, lo, hi, n)
    piece_start = start[w["row"].to_numpy()]
    order = np.lexsort((piece_start, rank[w["row"].to_numpy()]))             # wait pieces by (rank, start)
    p_iv, p_at, p_ns = _overlaps(clock, rank[w["row"].to_numpy()][order], piece_start[order],
                                 piece_start[order] + omega[order].astype(np.int64), iv_rank, lo, hi)
    p_wait = order[p_at]
    waiting = np.bincount(p_iv, weights=p_ns, minlength=2 * n)
    outside = np.maximum((hi - lo) - in_kernels - waiting, 0)

    e_out = np.maximum(outside[n:] - outside[:n], 0)
    e_wait = np.maximum(waiting[n:] - waiting[:n], 0) if propagate else np.zeros(n)
    D = np.bincount(ex_k, weights=ex_e, minlength=n) + e_out + e_wait
    safe = np.where(D > 0, D, 1.0)

    # what each wait passes to its delayer's paths (frac of its time) and wait states (edges)
    out_k = np.flatnonzero(e_out > 0)
    paths = pd.DataFrame({"k": np.r_[ex_k, out_k],
                          "path": np.r_[ex_path, np.full(len(out_k), _OUTSIDE, dtype=np.int64)],
                          "frac": np.r_[ex_e / safe[ex_k], e_out[out_k] / D[out_k]]})
    mine_p = p_iv >= n
    src, dst = p_iv[mine_p] - n, p_wait[mine_p]
    frac = (e_wait[src] * p_ns[mine_p] / np.where(waiting[n:][src] > 0, waiting[n:][src], 1.0)) / safe[src]
    # visit order: latest end of the waiting call first; an edge must point to a wait visited later
    visit = np.lexsort((-start[row], -end[row]))
    position = np.empty(n, dtype=np.int64)
    position[visit] = np.arange(n)
    ok = (frac > 0) & (position[dst] > position[src])
    src, dst, frac = src[ok], dst[ok], frac[ok]
    passed = np.bincount(paths["k"].to_numpy(), weights=paths["frac"].to_numpy(), minlength=n) + \
        np.bincount(src, weights=frac, minlength=n)
    rest = np.where(D > 0, 1.0 - passed, 1.0)
    rest = np.where(rest > _NOTHING_LEFT, np.minimum(rest, 1.0), 0.0)

    origin = (w.groupby(list(keys), sort=False, dropna=False).ngroup().to_numpy() if keys
              else np.zeros(n, dtype=np.int64))
    n_orig = int(origin.max()) + 1
    phi = _propagate(visit, src, dst, frac, omega, origin, n_orig)

    causes = _charges(paths, rest, omega, phi, origin, rank[culprit])
    first = w.groupby(list(keys), sort=False, dropna=False).head(1) if keys else None
    table = _table(causes, segs.names, keys, first, origin, total)
    propagating = phi.sum(axis=1) > 0
    return DelayCosts(table, total / NS, int(propagating.sum()), float(omega[propagating].sum()) / NS)


def _kernels(clock: _Clock, segs: Segments, iv_rank: np.ndarray, lo: np.ndarray, hi: np.ndarray,
             n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(the ns in kernels of each interval, and `_excess`'s wait, path and excess ns), a block of waits at a time:
    blocks of about _CHUNK overlaps keep the temporaries small (arrays of millions are paid for in page faults
    each time)."""
    first, count = _spans(clock, clock.key(segs.rank, segs.start_ns), segs.rank, segs.end_ns, iv_rank, lo, hi)
    load = np.cumsum(count[:n] + count[n:])
    cuts = np.searchsorted(load, np.arange(1, int(load[-1]) // _CHUNK + 1) * _CHUNK, side="right")
    bounds = np.unique(np.r_[0, cuts, n])
    in_kernels = np.zeros(2 * n)
    blocks = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        at = np.r_[a:b, n + a:n + b]                                  # its waiters' and delayers' intervals
        iv, item, ns = _expand(first[at], count[at], segs.start_ns, segs.end_ns, lo[at], hi[at])
        in_kernels[at] = np.bincount(iv, weights=ns, minlength=len(at))
        path = segs.name[item].astype(np.int64) * _LAYERS + (segs.layer[item].astype(np.int64) + 1)
        k, p, e = _excess(iv, path, ns, b - a)
        blocks.append((k + a, p, e))
    return in_kernels, *(np.concatenate(x) for x in zip(*blocks))


def _excess(iv: np.ndarray, path: np.ndarray, ns: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(wait, path, excess ns), by wait then path, where the delayer (intervals n..2n-1) spent longer in a kernel
    path than the waiter (intervals 0..n-1): the overlaps' ns summed per (wait, path, side) by counting (sums of
    whole nanoseconds, exact in float64)."""
    if not len(iv):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    paths, p = distinct_index(path)
    pair = (iv % n) * len(paths) + p                                    # (wait, path), sorted like the two
    cell, at = distinct_index(pair * 2 + (iv >= n))                     # and the side: the delayer's is odd
    t = np.bincount(at, weights=ns, minlength=len(cell))
    mine, theirs = np.flatnonzero(cell % 2 == 1), np.flatnonzero(cell % 2 == 0)
    ours = cell[mine] // 2
    waiter = np.zeros(len(mine))
    if len(theirs):
        hit = np.minimum(np.searchsorted(cell[theirs] // 2, ours), len(theirs) - 1)
        found = cell[theirs[hit]] // 2 == ours
        waiter[found] = t[theirs[hit[found]]]
    e = np.maximum(t[mine] - waiter, 0)
    ok = e > 0
    return ours[ok] // len(paths), paths[ours[ok] % len(paths)], e[ok]


def _propagate(visit, src, dst, frac, omega, origin, n_orig) -> np.ndarray:
    """phi[k, g]: the wait time of origin g that wait k received from the waits it delayed (its long-term part)."""
    n = len(omega)
    phi = np.zeros((n, n_orig))
    if not len(src):
        return phi
    by_src = np.argsort(src, kind="stable")
    src, dst, frac = src[by_src], dst[by_src], frac[by_src]
    ptr = np.searchsorted(src, np.arange(n + 1))
    for k in visit[np.isin(visit, src)]:                       # only the waits that pass something on
        carried = phi[k].copy()
        carried[origin[k]] += omega[k]
        for i in range(ptr[k], ptr[k + 1]):
            phi[dst[i]] += carried * frac[i]
    return phi


def _charges(paths: pd.DataFrame, rest: np.ndarray, omega: np.ndarray, phi: np.ndarray, origin: np.ndarray,
             delayer: np.ndarray) -> pd.DataFrame:
    """One row per (wait, path, origin): k, path, origin, short and long nanoseconds."""
    loose = np.flatnonzero(rest > 0)
    rows = pd.concat([paths, pd.DataFrame({"k": loose, "path": np.full(len(loose), _UNATTRIBUTED, dtype=np.int64),
                                           "frac": rest[loose]})], ignore_index=True)
    k = rows["k"].to_numpy()
    short = pd.DataFrame({"k": k, "path": rows["path"].to_numpy(), "origin": origin[k],
                          "short": omega[k] * rows["frac"].to_numpy(), "long": 0.0})
    kk, gg = np.nonzero(phi)
    long_ = rows.merge(pd.DataFrame({"k": kk, "origin": gg, "phi": phi[kk, gg]}), on="k")
    long_ = pd.DataFrame({"k": long_["k"], "path": long_["path"], "origin": long_["origin"], "short": 0.0,
                          "long": long_["phi"] * long_["frac"]})
    out = pd.concat([short, long_], ignore_index=True)
    out[RANK] = delayer[out["k"].to_numpy()]
    return out[(out["short"] > 0) | (out["long"] > 0)]


def _table(charges: pd.DataFrame, names: tuple[str, ...], keys: tuple[str, ...], first: pd.DataFrame | None,
           origin: np.ndarray, total_ns: float) -> pd.DataFrame:
    agg = charges.groupby(["origin", RANK, "path"], as_index=False).agg(
        short=("short", "sum"), long=("long", "sum"), waits=("k", "nunique"))
    code = agg["path"].to_numpy()
    name = np.where(code >= 0, code // _LAYERS, code)
    layer = np.where(code >= 0, code % _LAYERS - 1, -1)
    lookup = {**dict(enumerate(names)), _OUTSIDE: OUTSIDE, _UNATTRIBUTED: UNATTRIBUTED}
    out = pd.DataFrame({RANK: agg[RANK].astype(int), "kernel": pd.Series(name).map(lookup),
                        LAYER: _layers(layer),
                        "short_s": agg["short"] / NS, "long_s": agg["long"] / NS})
    out["cost_s"] = out["short_s"] + out["long_s"]
    out["waits"] = agg["waits"].astype(int)
    out["share"] = out["cost_s"] / (total_ns / NS) if total_ns > 0 else 0.0
    if keys:
        key_of = first.assign(origin=origin[first.index.to_numpy()]).set_index("origin")
        for col in reversed(keys):
            out.insert(0, col, key_of[col].reindex(agg["origin"]).to_numpy())
    return by_value(out[[*keys, *COLUMNS]], "cost_s", [*keys, RANK, "kernel", LAYER])


def _layers(layer: np.ndarray) -> pd.Series:
    """Layers as plain ints, None for a path outside the transformer blocks (so JSON says 2, not 2.0)."""
    return pd.Series([int(x) if x >= 0 else None for x in layer], dtype=object)


@dataclass(frozen=True)
class _Clock:
    """(rank, time) keys over a span that covers every time the intervals, segments and calls reach."""
    lo: int
    span: int

    def key(self, rank: np.ndarray, t: np.ndarray) -> np.ndarray:
        return time_key(rank, np.clip(t, self.lo, self.lo + self.span - 1), self.lo, self.span)


def _clock(segs: Segments, start: np.ndarray, end: np.ndarray, window: Window) -> _Clock:
    lows = [window.t0_ns, int(start.min())] + ([int(segs.start_ns.min())] if len(segs) else [])
    highs = [window.t1_ns, int(end.max())] + ([int(segs.end_ns.max())] if len(segs) else [])
    return _Clock(min(lows), max(highs) - min(lows) + 1)


def _overlaps(clock: _Clock, rank: np.ndarray, s: np.ndarray, e: np.ndarray, iv_rank: np.ndarray, lo: np.ndarray,
              hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(interval, item, overlap ns) for the items [s, e) of a rank (sorted by (rank, start), not overlapping each
    other) that overlap each interval [lo, hi) of its rank."""
    if not len(rank) or not len(lo):
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    return _expand(*_spans(clock, clock.key(rank, s), rank, e, iv_rank, lo, hi), s, e, lo, hi)


def _spans(clock: _Clock, key: np.ndarray, rank: np.ndarray, e: np.ndarray, iv_rank: np.ndarray, lo: np.ndarray,
           hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first item, number of items) of `_overlaps`' items that may overlap each interval; `key`: the items'
    `clock.key` of (rank, start)."""
    if not len(rank):
        return np.zeros(len(lo), dtype=np.int64), np.zeros(len(lo), dtype=np.int64)
    first = np.searchsorted(key, clock.key(iv_rank, lo), side="left")
    stop = np.searchsorted(key, clock.key(iv_rank, hi), side="left")
    before = np.maximum(first - 1, 0)
    straddles = (first > 0) & (rank[before] == iv_rank) & (e[before] > lo)   # began before the interval
    first = np.where(straddles, first - 1, first)
    return first, np.maximum(stop - first, 0)


def _expand(first: np.ndarray, count: np.ndarray, s: np.ndarray, e: np.ndarray, lo: np.ndarray,
            hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_overlaps` from `_spans`: the items that do overlap, and by how much."""
    iv = np.repeat(np.arange(len(lo)), count)
    item = np.repeat(first, count) + np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    ns = np.minimum(e[item], hi[iv]) - np.maximum(s[item], lo[iv])
    keep = ns > 0
    return iv[keep], item[keep], ns[keep]


def summary(costs: DelayCosts) -> dict:
    """What `analyze` reports under `delay_costs`: the totals (short_s + long_s + unattributed_s = total_wait_s),
    and the causes summed over the keys, by cost."""
    c = costs.causes
    attributed = c[c["kernel"] != UNATTRIBUTED]
    by = c.assign(layer_key=c[LAYER].fillna(-1)).groupby([RANK, "kernel", "layer_key"], as_index=False).agg(
        short_s=("short_s", "sum"), long_s=("long_s", "sum"), cost_s=("cost_s", "sum"), waits=("waits", "sum"),
        share=("share", "sum"))
    by[LAYER] = _layers(by["layer_key"].to_numpy())
    return {"total_wait_s": costs.total_wait_s, "short_s": float(attributed["short_s"].sum()),
            "long_s": float(attributed["long_s"].sum()), "unattributed_s": costs.unattributed_s,
            "propagating_waits": costs.propagating_waits, "propagating_wait_s": costs.propagating_wait_s,
            "causes": by_value(by[COLUMNS], "cost_s", [RANK, "kernel", LAYER])}


def findings(result: dict, part_of: str) -> list[dict]:
    """The finding that names the top cause of all the waits of an `analyze` result (its `delay_costs`): the rank
    most of the wait time traces back to, and its kernels over all layers, as a detail of the loss `part_of`; none
    without waits."""
    d = result.get("delay_costs")
    causes = pd.DataFrame([c for c in (d or {}).get("causes", []) if c["kernel"] != UNATTRIBUTED])
    if causes.empty or not d["total_wait_s"]:
        return []
    by_rank = causes.groupby(RANK)[["cost_s", "short_s", "long_s"]].sum()        # ties: the lowest rank, first name
    by_rank = by_rank.sort_values("cost_s", ascending=False, kind="stable")
    rank, top = by_rank.index[0], by_rank.iloc[0]
    kernels = causes[causes[RANK] == rank].groupby("kernel")["cost_s"].sum().sort_values(ascending=False, kind="stable")
    named = [f"{'time outside kernels' if k == OUTSIDE else k} ({c / d['total_wait_s']:.0%})"
             for k, c in kernels.head(2).items()]
    how = (f"{top['short_s']:.3g} s directly, {top['long_s']:.3g} s through the waits it caused first"
           if top["long_s"] > 0 else "all directly")
    chains = (f"; {d['propagating_waits']} wait state(s) made their rank late into more waits"
              if d["propagating_waits"] else "")
    return [{"metric": "delay_costs.causes", "lost_fraction": None, "part_of": part_of,
             "text": f"Behind the MPI-level losses, by delay costs (Scalasca): {top['cost_s'] / d['total_wait_s']:.0%}"
                     f" of the {d['total_wait_s']:.4g} s ranks wait in MPI trace back to rank {rank} ({how}), "
                     f"most to {' and '.join(named)} over all layers{chains}."}]
