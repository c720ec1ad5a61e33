"""Root cause of communication waits: which kernel on which rank made the others wait (Scalasca's delay idea).

For a wait on rank w caused by rank c (the last to arrive), compare what each did in its synchronization interval:
from the end of its previous synchronizing MPI call (one that can wait for another rank: a blocking collective or
point-to-point call, a wait) up to where it arrived (the waiter at its call, or at the wait completing its
nonblocking collective or Irecv; the culprit at its call, posting or send). Postings and local calls do not end
the interval: they synchronize nothing, so the delay a late rank builds up before them still counts. Per kernel
(name, layer), the wall time of that kernel's segments starting in the interval, plus "(outside kernels)" for the
rest of it. The culprit's excess over the waiter, max(0, t_c - t_w) per kernel, is the delay; the wait is charged to the
kernels in proportion to it. A wait where the culprit did no more than the waiter stays "(unattributed)".
Causes are kept per communicator (`group`): a sequence group's waits and the gradient sync's have different causes.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.mpi import GROUP
from analysis.records import NS
from analysis.segments import Segments
from analysis.window import Window
from gpt2trace.format import communicators
from gpt2trace.format.lanes import time_key
from gpt2trace.format.schema import END_NS, LAYER, NAME, RANK, START_NS

OUTSIDE, UNATTRIBUTED = "(outside kernels)", "(unattributed)"
_OUTSIDE_CODE, _UNATTRIBUTED_CODE = -2, -3


def interval_times(calls: pd.DataFrame, segs: Segments, window: Window, rows: np.ndarray) -> pd.DataFrame:
    """Per comm row in `rows` and kernel (code, layer): nanoseconds of the rank's segments in the row's
    synchronization interval [end of the previous synchronizing call, the row's start)."""
    rows = np.asarray(rows, dtype=np.int64)
    rank = calls[RANK].to_numpy().astype(np.int64)
    start, end = calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
    begin = np.minimum(np.maximum(calls["sync_end"].to_numpy(), window.t0_ns), start)
    length = start - begin
    frames = []
    in_kernels = np.zeros(len(calls))
    if len(segs) and len(rows):
        lo = min(segs.lo, window.t0_ns, int(start.min()))
        width = max(segs.lo + segs.width, window.t1_ns, int(end.max())) - lo + 1
        skey = time_key(segs.rank, segs.start_ns, lo, width)       # sorted: segments are in (rank, start) order
        first = np.searchsorted(skey, time_key(rank[rows], begin[rows], lo, width), side="left")
        stop = np.searchsorted(skey, time_key(rank[rows], start[rows], lo, width), side="left")
        count = np.maximum(stop - first, 0)
        # Intervals of one rank can overlap (a posting's and the wait's after it), so each (row, segment) pair
        # is listed rather than each segment given to one call.
        iv = np.repeat(rows, count)
        offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        seg = np.repeat(first, count) + offset
        seg_df = pd.DataFrame({"iv": iv, NAME: segs.name[seg], LAYER: segs.layer[seg],
                               "ns": np.minimum(segs.end_ns[seg], start[iv]) - segs.start_ns[seg]})
        seg_df = seg_df.groupby(["iv", NAME, LAYER], as_index=False)["ns"].sum()
        frames.append(seg_df)
        in_kernels = np.bincount(seg_df["iv"].to_numpy(), weights=seg_df["ns"].to_numpy(), minlength=len(calls))
    rest = pd.DataFrame({"iv": rows, NAME: _OUTSIDE_CODE, LAYER: -1,
                         "ns": np.maximum(length[rows] - in_kernels[rows], 0)})
    frames.append(rest)
    return pd.concat(frames, ignore_index=True)


def root_causes(calls: pd.DataFrame, waits: pd.DataFrame, segs: Segments, window: Window,
                keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """Waits charged to (group, culprit rank, kernel, layer): wait_s, waits (count), share of all wait time;
    sorted. `keys` are more columns of `waits` to keep the charges apart by (and to return), such as the pipeline
    stage that waited."""
    cols = [GROUP, *keys, RANK, "kernel", LAYER, "wait_s", "waits", "share"]
    if waits.empty:
        return pd.DataFrame(columns=cols)
    w = waits.reset_index(drop=True)
    w["wid"] = np.arange(len(w))
    rows = np.unique(np.r_[w["sync_row"].to_numpy(), w["culprit_row"].to_numpy()])
    times = interval_times(calls, segs, window, rows)
    c = w[["wid", "culprit_row"]].merge(times, left_on="culprit_row", right_on="iv")[["wid", NAME, LAYER, "ns"]]
    s = w[["wid", "sync_row"]].merge(times, left_on="sync_row", right_on="iv")[["wid", NAME, LAYER, "ns"]]
    both = c.merge(s, on=["wid", NAME, LAYER], how="left", suffixes=("_c", "_w")).fillna({"ns_w": 0})
    both["excess"] = np.maximum(both["ns_c"] - both["ns_w"], 0)
    total = both.groupby("wid")["excess"].transform("sum")
    both = both[both["excess"] > 0]
    wait = w["wait_ns"].to_numpy()[both["wid"].to_numpy()]
    both["charged"] = wait * both["excess"] / total[both.index]
    charged = both[["wid", NAME, LAYER, "charged"]]
    covered = np.zeros(len(w), dtype=bool)
    covered[both["wid"].to_numpy()] = True
    loose = w[~covered]
    charged = pd.concat([charged, pd.DataFrame({"wid": loose["wid"], NAME: _UNATTRIBUTED_CODE, LAYER: -1,
                                                "charged": loose["wait_ns"].astype(float)})], ignore_index=True)
    charged[RANK] = w["culprit"].to_numpy()[charged["wid"].to_numpy()]
    for col in (GROUP, *keys):
        charged[col] = w[col].to_numpy()[charged["wid"].to_numpy()]
    agg = charged.groupby([GROUP, *keys, RANK, NAME, LAYER], as_index=False).agg(wait_ns=("charged", "sum"),
                                                                                 waits=("wid", "nunique"))
    lookup = {**dict(enumerate(segs.names)), _OUTSIDE_CODE: OUTSIDE, _UNATTRIBUTED_CODE: UNATTRIBUTED}
    out = pd.DataFrame({GROUP: agg[GROUP], **{k: agg[k] for k in keys}, RANK: agg[RANK].astype(int),
                        "kernel": agg[NAME].map(lookup),
                        LAYER: agg[LAYER].where(agg[LAYER] >= 0).astype("Int64"),
                        "wait_s": agg["wait_ns"] / NS, "waits": agg["waits"].astype(int)})
    out["share"] = out["wait_s"] / (w["wait_ns"].sum() / NS)
    return out[cols].sort_values("wait_s", ascending=False, kind="stable").reset_index(drop=True)


def sentence(row: dict) -> str:
    """'X s of waits caused by kernel K (layer L) on rank r', and in which group unless it is the world."""
    layer = f" (layer {row[LAYER]})" if row.get(LAYER) is not None else ""
    what = f"kernel {row['kernel']}" if not str(row["kernel"]).startswith("(") else row["kernel"]
    group = row.get(GROUP)
    where = f" in {communicators.describe(group)}" if group and group != communicators.WORLD_NAME else ""
    return f"{row['wait_s']:.3g} s of waits{where} caused by {what}{layer} on rank {row[RANK]}"
