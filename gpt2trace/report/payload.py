"""The page's data: a JSON-able dict whose arrays live in deflated binary blobs, and the contract with the page's
script (report.js).

The contract: the TypedDicts below list every key of every object the script gets, and the `*_ARRAYS` tuples the
arrays inside each kind of blob; the constants the script needs (view keys, the Running state id) travel in
`constants`, built from the schema and the timeline, never copied into the script.
tests/gpt2trace/report/test_payload.py holds the payload to these declarations and the script's reads to them
(in report.js, payload objects go by fixed names so that the test can find the reads: DATA, TL, occ, st, v, sv,
c, lv, ex, ref).

Levels: per lane, runs as (gap to the previous run's end, length, category), in bins. Exact records: start as
the difference to the previous record's start and the duration, both float64 holding integers (ns), which
deflate well; the page rebuilds absolute times with a running sum.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

import numpy as np

from gpt2trace.format.schema import BLOCK, BYTES, END_NS, LAYER, MICROSTEP, PEER, SEQ, START_NS, STEP, TASK, State
from gpt2trace.report.colors import text_color
from gpt2trace.report.lod import Level
from gpt2trace.report.pack import Blobs
from gpt2trace.report.timeline import NPREDS, Timeline, View, ViewKey

# Hover columns of exact records and the type they travel in (-1 = null).
_EXTRA = {STEP: np.int32, LAYER: np.int16, MICROSTEP: np.int16, BYTES: np.float64, SEQ: np.float64,
          PEER: np.int32, "inst": np.int32, "partner": np.int32, TASK: np.float64, BLOCK: np.int32,
          NPREDS: np.int32}
OCCUPANCY_SCALE = 1000        # occupancy travels as uint16 thousandths of a thread

# Arrays inside the blobs, by the object that refers to the blob.
LEVEL_ARRAYS = ("count", "gap", "len", "cat")
EXACT_ARRAYS = ("lane", "ds", "dur", "cat") + tuple(_EXTRA)      # the extra ones where the view has them
OCCUPANCY_ARRAYS = ("value",)
CRITICAL_ARRAYS = ("lane", "ds", "dur")                          # the critical path's stretches, as exact records
TASK_PROFILE_ARRAYS = ("rank", "ds", "dur", "ready", "running")  # the parallelism profile's intervals


class BlobRef(TypedDict):
    blob: str                      # id of the <script type="application/octet-stream"> element
    arrays: dict                   # name -> [type, byte offset, length] (pack.Blobs.add)


class LevelData(BlobRef):          # LEVEL_ARRAYS
    bins: int
    binNs: float


class ExactData(BlobRef):          # EXACT_ARRAYS
    n: int


class CategoryData(TypedDict):
    name: str
    color: str
    text: str                      # label color on it
    present: bool                  # listed in the legend


class ViewData(TypedDict):
    key: str                       # a ViewKey
    title: str                     # the legend's title
    heading: str                   # above the panel
    noun: str                      # what one record is: "each pixel column shows its dominant <noun>"
    barLimit: int                  # exact records drawn as bars at most, else the overview
    lanes: list[str]               # lane names ("rank.thread" in the thread views)
    ticks: list[str]               # what the page writes beside each lane: the rank's coordinates on its first
    laneRank: list[int]
    cats: list[CategoryData]
    levels: list[LevelData]
    exact: ExactData
    exactSpan: list[int]           # [start, end) ns that the exact records cover


class OccupancyLevelData(BlobRef):  # OCCUPANCY_ARRAYS
    bins: int
    binNs: float


class OccupancyData(TypedDict):
    ranks: list[int]
    threads: list[int]
    levels: list[OccupancyLevelData]
    scale: int


class StepsData(TypedDict):
    startNs: list[int]


class TimelineData(TypedDict):
    t0Ns: int
    t1Ns: int
    analyzed: list[int]
    detail: list[int]
    notes: list[str]
    steps: StepsData
    views: list[ViewData]
    occupancy: OccupancyData


class ConstantsData(TypedDict):
    viewKeys: dict                 # ViewKey attribute name in lower case -> key
    runningState: int              # Paraver's Running id: the states view's category code for Running


class CriticalPathData(BlobRef):   # CRITICAL_ARRAYS: stretches of the path on one thread, in time order
    n: int
    view: str                      # the key of the view whose lanes `lane` indexes (the overlay's panel)


class TaskProfileData(BlobRef):    # TASK_PROFILE_ARRAYS: intervals of constant ready/running counts, by rank and time
    n: int
    ranks: list[int]               # `rank` indexes this list
    threads: list[int]             # threads of each of those ranks


class PageData(TypedDict):
    timeline: TimelineData
    figures: dict                  # element id -> plotly figure dict (figures.py), or None
    rankColors: list[str]
    constants: ConstantsData
    criticalPath: CriticalPathData | None     # None: the analysis found no path (an empty window)
    taskProfile: TaskProfileData | None       # None: not a task-based run (analysis.tasks)


@dataclass(frozen=True)
class Panel:
    """How the page names and draws a view (ViewData's title, heading, noun, barLimit)."""
    title: str
    heading: str
    noun: str
    bar_limit: int


PANELS = {
    ViewKey.STEPS: Panel("Steps", "Steps", "step", 2000),
    ViewKey.PHASES: Panel("Phases", "Phases per rank", "phase", 2000),
    ViewKey.STATES: Panel("States", "Thread states (Paraver colors), one row per rank.thread", "state", 4000),
    ViewKey.KERNELS: Panel("Kernels", "Kernels, one row per rank.thread", "kernel", 4000),
    ViewKey.MPI: Panel("MPI calls", "MPI calls", "MPI call", 2000),
}


def page_data(tl: Timeline, blobs: Blobs, analyzed: tuple[int, int], figures: dict,
              rank_colors: list[str], critical_segments: dict | None = None, tasks: dict | None = None) -> PageData:
    """`critical_segments` are the `segments` of analyze's `critical_path`: columns rank, thread, start_s, end_s;
    `tasks` analyze's `tasks` (None for a fork-join trace)."""
    return {"timeline": timeline_data(tl, blobs, analyzed), "figures": figures, "rankColors": rank_colors,
            "constants": {"viewKeys": {name.lower(): key for name, key in vars(ViewKey).items()
                                       if isinstance(key, str) and name.isupper()},
                          "runningState": int(State.RUNNING)},
            "criticalPath": critical_path_data(tl, critical_segments or {}, blobs),
            "taskProfile": task_profile_data(tasks, blobs) if tasks else None}


def task_profile_data(tasks: dict, blobs: Blobs) -> TaskProfileData:
    """The parallelism profile (analysis.tasks.profile, columns) by rank in time order, as exact records travel."""
    prof = tasks["profile"]
    rank = np.asarray(prof["rank"], dtype=np.int64)
    start = np.rint(np.asarray(prof["start_s"], dtype=np.float64) * 1e9).astype(np.int64)
    end = np.rint(np.asarray(prof["end_s"], dtype=np.float64) * 1e9).astype(np.int64)
    order = np.lexsort((start, rank))
    ranks = np.unique(rank)
    threads = {r["rank"]: r["threads"] for r in tasks["steps"]}
    return {"n": int(len(order)), "ranks": ranks.tolist(), "threads": [int(threads.get(int(r), 1)) for r in ranks],
            **blobs.add({"rank": np.searchsorted(ranks, rank[order]).astype(np.uint16),
                         "ds": np.diff(start[order], prepend=0).astype(np.float64),
                         "dur": (end - start)[order].astype(np.float64),
                         "ready": np.asarray(prof["ready"], dtype=np.int32)[order],
                         "running": np.asarray(prof["running"], dtype=np.int32)[order]})}


def critical_path_data(tl: Timeline, segments: dict, blobs: Blobs) -> CriticalPathData | None:
    """The path's stretches on the kernels view's lanes (rank.thread rows), as exact records travel."""
    view = next((v for v in tl.views if v.key == ViewKey.KERNELS), None)
    if view is None or not segments or not len(segments.get("rank", ())):
        return None
    lane_of = {label: i for i, label in enumerate(view.lanes)}
    lane = np.array([lane_of.get(f"{r}.{t}", -1) for r, t in zip(segments["rank"], segments["thread"])],
                    dtype=np.int64)
    start = np.rint(np.asarray(segments["start_s"], dtype=np.float64) * 1e9).astype(np.int64)
    end = np.rint(np.asarray(segments["end_s"], dtype=np.float64) * 1e9).astype(np.int64)
    keep = lane >= 0
    lane, start, end = lane[keep], start[keep], end[keep]
    return {"n": int(len(lane)), "view": view.key,
            **blobs.add({"lane": lane.astype(np.uint16), "ds": np.diff(start, prepend=0).astype(np.float64),
                         "dur": (end - start).astype(np.float64)})}


def timeline_data(tl: Timeline, blobs: Blobs, analyzed: tuple[int, int]) -> TimelineData:
    return {
        "t0Ns": tl.t0_ns, "t1Ns": tl.t1_ns, "analyzed": list(analyzed), "detail": list(tl.detail),
        "notes": list(tl.notes), "steps": {"startNs": tl.steps[START_NS].astype(int).tolist()},
        "views": [_view(v, blobs) for v in tl.views],
        "occupancy": {"ranks": list(tl.occupancy.ranks), "threads": list(tl.occupancy.threads),
                      "levels": [{"bins": bins, "binNs": bin_ns,
                                  **blobs.add({"value": np.minimum(np.round(values * OCCUPANCY_SCALE),
                                                                   65535).astype(np.uint16).ravel()})}
                                 for bins, bin_ns, values in tl.occupancy.levels],
                      "scale": OCCUPANCY_SCALE},
    }


def _view(v: View, blobs: Blobs) -> ViewData:
    present = _present(v)
    panel = PANELS[v.key]
    return {"key": v.key, "title": panel.title, "heading": panel.heading, "noun": panel.noun,
            "barLimit": panel.bar_limit, "lanes": list(v.lanes), "ticks": list(v.ticks or v.lanes),
            "laneRank": list(v.lane_rank),
            "cats": [{"name": c.name, "color": c.color, "text": text_color(c.color), "present": bool(p)}
                     for c, p in zip(v.cats, present)],
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


def _level(lv: Level, ncat: int, blobs: Blobs) -> LevelData:
    end = lv.start + lv.length
    prev = np.r_[0, end[:-1]]
    prev[lv.offsets[:-1][np.diff(lv.offsets) > 0]] = 0        # the first run of each lane: gap from bin 0
    cat_type = np.uint8 if ncat <= 256 else np.uint16
    return {"bins": lv.bins, "binNs": lv.bin_ns,
            **blobs.add({"count": np.diff(lv.offsets).astype(np.uint32),
                         "gap": (lv.start - prev).astype(np.uint32), "len": lv.length.astype(np.uint32),
                         "cat": lv.cat.astype(cat_type)})}


def _exact(v: View, blobs: Blobs) -> ExactData:
    rec = v.exact
    start = rec[START_NS].astype(np.int64)
    arrays = {"lane": rec["lane"].astype(np.uint16), "ds": np.diff(start, prepend=0).astype(np.float64),
              "dur": (rec[END_NS] - start).astype(np.float64), "cat": rec["cat"].astype(np.uint16)}
    for name, typ in _EXTRA.items():
        if name in rec:
            arrays[name] = rec[name].astype(typ)
    return {"n": int(len(start)), **blobs.add(arrays)}
