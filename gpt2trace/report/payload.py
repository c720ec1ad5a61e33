"""The timeline as the page's data: a JSON-able dict whose arrays live in deflated binary blobs.

Levels: per lane, runs as (gap to the previous run's end, length, category), in bins. Exact records: start as
the difference to the previous record's start and the duration, both float64 holding integers (ns), which
deflate well; the page rebuilds absolute times with a running sum.
"""
from __future__ import annotations

import numpy as np

from gpt2trace.report.colors import text_color
from gpt2trace.report.lod import Level
from gpt2trace.report.pack import Blobs
from gpt2trace.report.timeline import Timeline, View
from gpt2trace.format.schema import BYTES, END_NS, LAYER, PEER, SEQ, START_NS, STEP

# Hover columns of exact records and the type they travel in (-1 = null).
_EXTRA = {STEP: np.int32, LAYER: np.int16, BYTES: np.float64, SEQ: np.float64, PEER: np.int32, "inst": np.int32,
          "partner": np.int32}
OCCUPANCY_SCALE = 1000        # occupancy travels as uint16 thousandths of a thread


def timeline_data(tl: Timeline, blobs: Blobs, analyzed: tuple[int, int]) -> dict:
    return {
        "t0Ns": tl.t0_ns, "t1Ns": tl.t1_ns, "analyzed": list(analyzed), "detail": list(tl.detail),
        "detailNote": tl.detail_note, "notes": list(tl.notes),
        "steps": {"step": tl.steps[STEP].astype(int).tolist(), "startNs": tl.steps[START_NS].astype(int).tolist(),
                  "endNs": tl.steps[END_NS].astype(int).tolist()},
        "views": [_view(v, blobs) for v in tl.views],
        "occupancy": {"ranks": list(tl.occupancy.ranks), "threads": list(tl.occupancy.threads),
                      "levels": [{"bins": bins, "binNs": bin_ns,
                                  **blobs.add({"value": np.minimum(np.round(values * OCCUPANCY_SCALE),
                                                                   65535).astype(np.uint16).ravel()})}
                                 for bins, bin_ns, values in tl.occupancy.levels],
                      "scale": OCCUPANCY_SCALE},
    }


def _view(v: View, blobs: Blobs) -> dict:
    present = _present(v)
    return {"key": v.key, "title": v.title, "lanes": list(v.lanes), "laneRank": list(v.lane_rank),
            "cats": [{"name": c.name, "color": c.color, "text": text_color(c.color), "seconds": c.seconds,
                      "present": bool(p)} for c, p in zip(v.cats, present)],
            "emptyCompetes": v.empty_competes, "records": v.records,
            "levels": [_level(lv, len(v.cats), blobs) for lv in v.levels],
            "exact": _exact(v, blobs), "exactSpan": list(v.exact_span)}


def _present(v: View) -> np.ndarray:
    """Categories with at least one record (the legend lists only those)."""
    seen = np.zeros(len(v.cats), dtype=bool)
    for lv in v.levels[:1]:
        seen[np.unique(lv.cat)] = True
    if len(v.exact["cat"]):
        seen[np.unique(v.exact["cat"])] = True
    seconds = np.array([c.seconds for c in v.cats])
    return seen | (seconds > 0)


def _level(lv: Level, ncat: int, blobs: Blobs) -> dict:
    end = lv.start + lv.length
    prev = np.r_[0, end[:-1]]
    prev[lv.offsets[:-1][np.diff(lv.offsets) > 0]] = 0        # the first run of each lane: gap from bin 0
    cat_type = np.uint8 if ncat <= 256 else np.uint16
    return {"bins": lv.bins, "binNs": lv.bin_ns, "runs": lv.runs,
            **blobs.add({"count": np.diff(lv.offsets).astype(np.uint32),
                         "gap": (lv.start - prev).astype(np.uint32), "len": lv.length.astype(np.uint32),
                         "cat": lv.cat.astype(cat_type)})}


def _exact(v: View, blobs: Blobs) -> dict:
    rec = v.exact
    start = rec[START_NS].astype(np.int64)
    arrays = {"lane": rec["lane"].astype(np.uint16), "ds": np.diff(start, prepend=0).astype(np.float64),
              "dur": (rec[END_NS] - start).astype(np.float64), "cat": rec["cat"].astype(np.uint16)}
    for name, typ in _EXTRA.items():
        if name in rec:
            arrays[name] = rec[name].astype(typ)
    return {"n": int(len(start)), **blobs.add(arrays)}
