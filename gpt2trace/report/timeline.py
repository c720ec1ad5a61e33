"""The timeline's data: one view per record kind (steps, phases, states, kernels, MPI calls), each with its lanes,
categories and colors, a pyramid of level-of-detail overviews, and the exact records the page draws when zoomed in.

Lanes are grouped by rank, and each rank's group is labelled with its coordinates in the run's rank grid
(gpt2trace/format/grid.py): the phases view has one lane per rank, "rank 3 · dp 1 tp 1 pp 0"; the thread views
write it before the first thread of the rank, "rank 3 · dp 1 tp 1 pp 0 · 3.0", and the others as "3.1".

Exact records: every record when the trace is small (`exact_budget` state + kernel records or fewer), else
those of a detail window (by default the analyzed steps from the first one on, as many whole steps as fit the
budget; `--steps`/`--window` choose it). Steps, phases and MPI calls are few and always exact.

A trace bigger than memory is built group of ranks by group of ranks (`survey` each group, then `Fold.add` each
group): lanes are binned independently, so the state and kernel views and the occupancy are folded group by group,
and the steps, phases and MPI views come from every rank's shared records (analysis.rank_groups). `build` is the
same path with the whole trace as the only group.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from analysis import mpi, pipeline
from analysis.records import records, threads
from analysis.steps import steps_table
from gpt2trace.format import grid as rank_grid
from gpt2trace.format.lanes import key_width, lane_key, lane_order
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import (
    BLOCK,
    BYTES,
    END_NS,
    LAYER,
    MICROSTEP,
    NAME,
    PEER,
    PREDS,
    RANK,
    SEQ,
    START_NS,
    STATE,
    STEP,
    TASK,
    THREAD,
    Kind,
    Phase,
    State,
)
from gpt2trace.report import colors
from gpt2trace.report.lod import Level, PyramidFold, coverage, pyramid

EXACT_BUDGET = 300_000        # state + kernel records drawn exactly (~6 MB in the page)
ALWAYS_EXACT = 200_000        # views with at most this many records are exact over the whole trace
RUN_BUDGET = 3_000_000        # runs per view over all its levels (build.py drops levels if the page gets too big)
OCCUPANCY_MAX_BINS = 32_768   # finest binned occupancy (beyond it: exact from the state records, in the page)
MICRO_BATCH_PHASES = (Phase.FORWARD, Phase.BACKWARD, Phase.DATALOAD)
NO_NAME = "(no name)"        # the category of records without a name
NPREDS = "npreds"             # a task's number of predecessors, beside its id and block in the kernels' hover


class ViewKey:
    """The views, one per record kind; the page's script tells them apart by these keys (payload: viewKeys)."""
    STEPS, PHASES, STATES, KERNELS, MPI = "steps", "phases", "states", "kernels", "mpi"
    ALL = (STEPS, PHASES, STATES, KERNELS, MPI)


@dataclass(frozen=True)
class Category:
    name: str
    color: str
    seconds: float = 0.0      # total time of its records (legend order, and absent categories are left out)


@dataclass(frozen=True)
class View:
    key: str                               # a ViewKey
    lanes: tuple[str, ...]                 # lane names, top to bottom ("rank.thread" in the thread views)
    lane_rank: tuple[int, ...]             # the rank of each lane (lanes are grouped by rank)
    cats: tuple[Category, ...]             # by category code
    levels: tuple[Level, ...]
    exact: dict[str, np.ndarray]           # lane, start_ns, end_ns, cat and the view's hover columns
    exact_span: tuple[int, int]            # the time the exact records cover completely
    records: int                           # records of the view in the trace
    empty_competes: bool = True
    ticks: tuple[str, ...] = ()            # what the page writes beside each lane (empty: the lane names)


@dataclass(frozen=True)
class Occupancy:
    ranks: tuple[int, ...]
    threads: tuple[int, ...]
    levels: tuple[tuple[int, float, np.ndarray], ...]   # (bins, bin_ns, (ranks, bins) float32 threads Running)


@dataclass(frozen=True)
class Timeline:
    t0_ns: int
    t1_ns: int
    views: tuple[View, ...]
    occupancy: Occupancy
    steps: pd.DataFrame                    # step, start_ns, end_ns
    detail: tuple[int, int]                # span of exact state and kernel records
    detail_note: str
    notes: tuple[str, ...] = field(default=())


def build(trace: Trace, analyzed: tuple[int, int], window: tuple[int, int] | None = None,
          exact_budget: int = EXACT_BUDGET, run_budget: int = RUN_BUDGET) -> Timeline:
    """The timeline of a trace. `analyzed` is the analysis window (ns); when the trace is too big to draw every
    record exactly, the exact records are those of `window` (ns, cut to the budget) or else of the analyzed
    steps from the first one on."""
    fold = Fold([survey(trace)], trace, threads(trace), steps_table(trace), analyzed, window, exact_budget,
                run_budget)
    fold.add(trace)
    return fold.timeline()


@dataclass(frozen=True)
class Survey:
    """Pass 1 over one group of ranks: what fixes the whole timeline's extent, categories and exact records."""
    extent: tuple[int, int] | None         # earliest start, latest end of any record; None: no records
    top_rank: int                          # -1: no records
    kernel_ns: dict                        # kernel name (None: no name) -> total ns, for every name used
    state_ns: np.ndarray                   # total ns per state id
    states: int
    kernels: int
    records: int                           # of every kind


def survey(group: Trace) -> Survey:
    parts = [p for p in group.parts.values() if p.num_rows]
    extent = ((min(int(pc.min(p.column(START_NS)).as_py()) for p in parts),
               max(int(pc.max(p.column(END_NS)).as_py()) for p in parts)) if parts else None)
    top = max((int(pc.max(p.column(RANK)).as_py()) for p in parts), default=-1)
    kern = records(group, Kind.KERNEL, (NAME,))
    codes = np.where(kern[NAME] < 0, len(kern.names), kern[NAME])
    ns = np.bincount(codes, weights=kern[END_NS] - kern[START_NS], minlength=len(kern.names) + 1)
    used = np.bincount(codes, minlength=len(kern.names) + 1) > 0
    names = list(kern.names) + [None]
    st = records(group, Kind.STATE, (STATE,))
    state = st[STATE].astype(np.int64)
    state_ns = np.bincount(state, weights=st[END_NS] - st[START_NS]) if len(state) else np.zeros(0)
    # Sums of integer ns in float64 are exact below 2**53 ns (104 days): the same in any grouping.
    return Survey(extent, top, {names[i]: int(ns[i]) for i in np.flatnonzero(used)}, state_ns.astype(np.int64),
                  len(st), len(kern), group.num_rows)


class Fold:
    """The timeline built group of ranks by group of ranks (groups of consecutive ranks, in rank order), the same
    as from the whole trace: `add` each group once (pass 2), then `timeline()`.

    `surveys` are every group's pass 1; `shared` holds every rank's phase and MPI records (analysis.rank_groups),
    `pairs` the (rank, thread) pairs of all ranks, `steps` the steps table. The levels of the state and kernel views
    are folded lane group by lane group (lod.PyramidFold), the occupancy rank by rank; exact records are kept only
    from the detail window's start on, at most the budget's worth of starts after it (the window ends before the
    budget runs out, whatever the groups hold), so memory follows the group and the budgets.
    """

    def __init__(self, surveys: list[Survey], shared: Trace, pairs: pd.DataFrame, steps: pd.DataFrame,
                 analyzed: tuple[int, int], window: tuple[int, int] | None = None, exact_budget: int = EXACT_BUDGET,
                 run_budget: int = RUN_BUDGET):
        extents = [s.extent for s in surveys if s.extent]
        self.t0 = min(e[0] for e in extents)
        self.t1 = max(max(e[1] for e in extents), self.t0 + 1)
        self.shared, self.pairs, self.steps, self.analyzed, self.run_budget = shared, pairs, steps, analyzed, run_budget
        top = max(s.top_rank for s in surveys)
        self.grid = rank_grid.from_run(shared.run, top + 1 if top >= 0 else 1, (shared.comm_table or {}).values())
        self.names = rank_names(self.grid, pairs[RANK].unique())
        self.lane_of = _lane_index(pairs)
        self.labels = tuple(f"{r}.{t}" for r, t in zip(pairs[RANK], pairs[THREAD]))
        self.lane_rank = tuple(int(r) for r in pairs[RANK])
        self.states = sum(s.states for s in surveys)
        self.kernels = sum(s.kernels for s in surveys)
        self.state_cats = _state_categories([s.state_ns for s in surveys])
        self.kernel_cats, self.kernel_code = _kernel_categories([s.kernel_ns for s in surveys])
        lanes = len(pairs)
        self.folds = {key: PyramidFold(n, lanes, self.t0, self.t1, max(len(cats), 1), True, budget_runs=run_budget)
                      for key, n, cats in ((ViewKey.STATES, self.states, self.state_cats),
                                           (ViewKey.KERNELS, self.kernels, self.kernel_cats)) if n}
        self.budget = exact_budget
        self.everywhere = self.states + self.kernels <= exact_budget
        self.want, self.by_steps = (window, False) if window is not None else (analyzed, True)
        self.start = self.t0 if self.everywhere else self._detail_start()
        self.exact: dict[str, dict[str, np.ndarray]] = {}
        self.per_step = np.zeros(len(steps), dtype=np.int64)
        self.occ_ranks = np.unique(pairs[RANK].to_numpy())
        self.rank_of_lane = np.searchsorted(self.occ_ranks, pairs[RANK].to_numpy())
        self.occ_bins = [2048 * 4**k for k in range(8) if 2048 * 4**k <= OCCUPANCY_MAX_BINS]
        self.occ = [np.zeros((len(self.occ_ranks), b)) for b in self.occ_bins]

    def _detail_start(self) -> int:
        """Where the detail window starts (`_detail_window` starts it there in every case)."""
        if self.by_steps and not self.steps.empty:
            s = self.steps[START_NS].to_numpy().astype(np.int64)
            return int(s[max(int(np.searchsorted(s, self.want[0], side="right")) - 1, 0)])
        return int(self.want[0])

    def add(self, group: Trace) -> None:
        """Pass 2 over one group of ranks."""
        pairs = threads(group)
        if not len(pairs):
            return
        lanes = self.lane_of[pairs[RANK].to_numpy(), pairs[THREAD].to_numpy()]
        first = int(lanes[0])
        st = records(group, Kind.STATE, (RANK, THREAD, STATE))
        states = {"lane": self.lane_of[st[RANK], st[THREAD]], START_NS: st[START_NS], END_NS: st[END_NS],
                  "cat": st[STATE].astype(np.int64)}
        self._occupancy(states, first, len(lanes))
        kern = records(group, Kind.KERNEL, (RANK, THREAD, NAME, STEP, LAYER))
        lookup = np.array([self.kernel_code.get(n, -1) for n in kern.names] + [self.kernel_code.get(None, -1)],
                          dtype=np.int64)
        kernels = {"lane": self.lane_of[kern[RANK], kern[THREAD]], START_NS: kern[START_NS], END_NS: kern[END_NS],
                   "cat": lookup[np.where(kern[NAME] < 0, len(kern.names), kern[NAME])], STEP: kern[STEP],
                   LAYER: kern[LAYER], **_task_columns(group, kern)}
        if len(self.steps):
            s = self.steps[START_NS].to_numpy().astype(np.int64)
            starts = np.concatenate([states[START_NS], kernels[START_NS]])
            self.per_step += np.bincount(np.clip(np.searchsorted(s, starts, side="right") - 1, 0, len(s) - 1),
                                         minlength=len(s))
        for key, cols in ((ViewKey.STATES, states), (ViewKey.KERNELS, kernels)):
            if key in self.folds:
                cols = _sorted(cols)
                self.folds[key].add(cols["lane"] - first, cols[START_NS], cols[END_NS], cols["cat"], first, len(lanes))
                self._keep_exact(key, cols)
        self._trim_exact()

    def _occupancy(self, states: dict, first: int, lanes: int) -> None:
        run = states["cat"] == State.RUNNING
        rank_of_lane = self.rank_of_lane[first:first + lanes]
        for bins, per_rank in zip(self.occ_bins, self.occ):
            cov = coverage(states["lane"][run] - first, states[START_NS][run], states[END_NS][run], lanes, self.t0,
                           self.t1, bins)
            np.add.at(per_rank, rank_of_lane, cov)

    def _keep_exact(self, key: str, cols: dict) -> None:
        if not self.everywhere:
            keep = cols[END_NS] > self.start
            cols = {k: v[keep] for k, v in cols.items()}
        held = self.exact.get(key)
        self.exact[key] = cols if held is None else {k: np.concatenate([held[k], cols[k]]) for k in held}

    def _trim_exact(self) -> None:
        """Drops the records that start after the budget's worth of starts from the detail window's start on: the
        window ends before them whatever the other groups hold (they can only add starts)."""
        if self.everywhere:
            return
        starts = np.concatenate([c[START_NS] for c in self.exact.values()])
        after = starts[starts >= self.start]
        if len(after) <= self.budget:
            return
        last = np.partition(after, self.budget)[self.budget]       # kept: `_detail_window` may cut there
        for key, cols in self.exact.items():
            keep = cols[START_NS] <= last
            self.exact[key] = {k: v[keep] for k, v in cols.items()}

    def timeline(self) -> Timeline:
        t0, t1, run_budget = self.t0, self.t1, self.run_budget
        if self.everywhere:
            detail, note = (t0, t1), "every record is exact: zoom in to see each one"
        else:
            starts = np.concatenate([c[START_NS] for c in self.exact.values()])
            detail, note = _detail_window(self.steps, self.want, self.by_steps, self.budget, self.per_step, starts)
        views = [_steps_view(self.steps, self.analyzed, t0, t1, run_budget),
                 _phases_view(self.shared, self.names, self.grid.degree(rank_grid.PP) > 1, t0, t1, detail,
                              run_budget)]
        for key, cats in ((ViewKey.STATES, self.state_cats), (ViewKey.KERNELS, self.kernel_cats)):
            if key in self.folds:
                n = self.states if key == ViewKey.STATES else self.kernels
                exact, span = _exact(self.exact[key], detail, detail == (t0, t1), t0, t1)
                views.append(View(key, self.labels, self.lane_rank, tuple(cats), tuple(self.folds[key].levels()),
                                  exact, span, n))
        comm = _mpi_view(self.shared, self.lane_of, self.labels, t0, t1, detail, run_budget)
        notes = ()
        if comm is not None:
            views.append(comm)
        else:
            notes = ("MPI: this trace has no MPI calls (one rank, or traced without MPI), so there is no MPI view.",)
        views = [v for v in views if v is not None]
        if any(" · " in n for n in self.names.values()):
            views = [_with_rank_names(v, self.names) for v in views]
        nthreads = self.pairs.groupby(RANK).size().reindex(self.occ_ranks).to_numpy()
        levels = (tuple((b, (t1 - t0) / b, per_rank.astype(np.float32)) for b, per_rank in zip(self.occ_bins, self.occ))
                  if self.states else ())
        occ = Occupancy(tuple(int(r) for r in self.occ_ranks), tuple(int(t) for t in nthreads), levels)
        return Timeline(t0, t1, tuple(views), occ, self.steps[[STEP, START_NS, END_NS]].reset_index(drop=True),
                        detail, note, notes)


def _state_categories(per_group: list[np.ndarray]) -> list[Category]:
    ids = max((len(a) for a in per_group), default=0)
    ns = np.zeros(ids, dtype=np.int64)
    for a in per_group:
        ns[:len(a)] += a
    seconds = ns.astype(np.float64) / 1e9
    return [Category(colors.state_name(i), colors.state_color(i), float(seconds[i])) for i in range(ids)]


def _kernel_categories(per_group: list[dict]) -> tuple[list[Category], dict]:
    """The kernel names used, by total time (then name), as `_compact` orders them; their codes by name."""
    ns: dict = {}
    for d in per_group:
        for name, v in d.items():
            ns[name] = ns.get(name, 0) + v
    shown = {name: NO_NAME if name is None else name for name in ns}
    order = sorted(ns, key=lambda n: (-(ns[n] / 1e9), shown[n]))
    cats = [Category(shown[n], colors.kernel_color(shown[n]), ns[n] / 1e9) for n in order]
    return cats, {n: i for i, n in enumerate(order)}


def rank_names(grid: rank_grid.Grid, ranks) -> dict[int, str]:
    """'rank 3 · dp 1 tp 1 pp 0' for each rank; 'rank 3' in a grid of one rank, or when the trace has no grid (its
    one dimension of all ranks would repeat the rank)."""
    known = grid.source != rank_grid.FROM_RANKS
    return {int(r): " · ".join(filter(None, (f"rank {r}", grid.label(int(r)) if known else ""))) for r in ranks}


def _with_rank_names(v: View, names: dict[int, str]) -> View:
    """A thread view's ticks: the rank's name before the first lane of each rank group."""
    if v.key not in (ViewKey.STATES, ViewKey.KERNELS, ViewKey.MPI):
        return v
    ticks = tuple(f"{names[r]} · {lane}" if i == 0 or r != v.lane_rank[i - 1] else lane
                  for i, (lane, r) in enumerate(zip(v.lanes, v.lane_rank)))
    return replace(v, ticks=ticks)


def _lane_index(pairs: pd.DataFrame) -> np.ndarray:
    """A lookup [rank, thread] -> lane row, -1 where no such thread."""
    width = key_width(pairs[THREAD].to_numpy())
    table = np.full((int(pairs[RANK].max()) + 1) * width, -1, dtype=np.int64)
    table[lane_key(pairs[RANK].to_numpy(), pairs[THREAD].to_numpy(), width)] = np.arange(len(pairs))
    return table.reshape(-1, width)


def _compact(codes: np.ndarray, durations: np.ndarray, names, color) -> tuple[np.ndarray, list]:
    """Dictionary codes -> codes of the names present, ordered by total time (then name); -1 (null) is named."""
    names = list(names) + [NO_NAME]
    codes = np.where(codes < 0, len(names) - 1, codes)
    used = np.unique(codes)
    seconds = np.bincount(np.searchsorted(used, codes), weights=durations, minlength=len(used)) / 1e9
    order = sorted(range(len(used)), key=lambda i: (-seconds[i], names[used[i]]))
    remap = np.full(int(used.max()) + 1 if len(used) else 1, -1, dtype=np.int64)
    remap[used[order]] = np.arange(len(used))
    cats = [Category(names[used[i]], color(names[used[i]]), float(seconds[i])) for i in order]
    return remap[codes], cats


def _exact(cols: dict[str, np.ndarray], detail: tuple[int, int], everywhere: bool, t0: int, t1: int):
    """The records drawn exactly (all, or those overlapping the detail window) and the span they cover."""
    if everywhere:
        return cols, (t0, t1)
    keep = (cols[END_NS] > detail[0]) & (cols[START_NS] < detail[1])
    return {k: v[keep] for k, v in cols.items()}, detail


def _view(key, lanes, lane_rank, cats, cols, t0, t1, detail, run_budget, everywhere=None,
          empty_competes=True) -> View:
    n = len(cols[START_NS])
    levels = pyramid(cols["lane"], cols[START_NS], cols[END_NS], cols["cat"], len(lanes), t0, t1,
                     max(len(cats), 1), empty_competes, budget_runs=run_budget)
    exact, span = _exact(cols, detail, n <= ALWAYS_EXACT if everywhere is None else everywhere, t0, t1)
    return View(key, tuple(lanes), tuple(lane_rank), tuple(cats), tuple(levels), exact, span, n,
                empty_competes)


def _steps_view(steps: pd.DataFrame, analyzed, t0, t1, run_budget) -> View | None:
    if steps.empty:
        return None
    step = steps[STEP].to_numpy().astype(np.int64)
    s, e = steps[START_NS].to_numpy().astype(np.int64), steps[END_NS].to_numpy().astype(np.int64)
    inside = (s >= analyzed[0]) & (e <= analyzed[1])
    cat = np.where(inside, 0, 2) + (np.arange(len(step)) % 2)
    shades = [colors.hex_color(c) for c in colors.STEP_RGB]
    cats = [Category("analyzed step", shades[0]), Category("analyzed step", shades[1]),
            Category("step left out of the analysis", "#ececec"), Category("step left out of the analysis",
                                                                          "#dcdcdc")]
    cols = {"lane": np.zeros(len(step), dtype=np.int64), START_NS: s, END_NS: e, "cat": cat, STEP: step}
    return _view(ViewKey.STEPS, ["steps"], [-1], cats, cols, t0, t1, None, run_budget, everywhere=True)


def _phases_view(trace: Trace, names: dict[int, str], named_stages: bool, t0, t1, detail, run_budget
                 ) -> View | None:
    """One lane per rank, named by its coordinates; `named_stages`: they include the pipeline stage (pp), else a
    pipeline's stage is said in words."""
    rec = records(trace, Kind.PHASE, (RANK, NAME, STEP, MICROSTEP))
    if not len(rec):
        return None
    ranks = np.unique(rec[RANK])
    s, e = rec[START_NS], rec[END_NS]
    cat, cats = _compact(rec[NAME], e - s, rec.names, colors.phase_color)
    cols = {"lane": np.searchsorted(ranks, rec[RANK]), START_NS: s, END_NS: e, "cat": cat, STEP: rec[STEP],
            MICROSTEP: _micro_batches(rec)}
    lay = pipeline.layout(trace)
    stage = lay.stage_of() if lay and not named_stages else {}
    labels = [names[r] + (f" stage {stage[r]}" if r in stage else "") for r in ranks]
    return _view(ViewKey.PHASES, labels, ranks.tolist(), cats, _sorted(cols), t0, t1, detail, run_budget)


def _micro_batches(rec) -> np.ndarray:
    """The micro-batch of the phases that have one (forward, backward, data loading) when a step has several, so
    the page can label them (F3, B3) and a schedule such as 1F1B shows; -1 elsewhere."""
    per_micro = np.isin(rec[NAME], [i for i, n in enumerate(rec.names) if n in MICRO_BATCH_PHASES])
    if not (per_micro & (rec[MICROSTEP] > 0)).any():
        return np.full(len(rec), -1, dtype=np.int64)
    return np.where(per_micro, rec[MICROSTEP], -1)


def _task_columns(trace: Trace, kern) -> dict[str, np.ndarray]:
    """For a task trace, each kernel record's task (the task record of the same thread and times): its id, block
    and number of predecessors, -1 for a kernel record that is no task's body; nothing for a fork-join trace."""
    part = trace.records(Kind.TASK)
    if not part.num_rows or TASK not in part.column_names:
        return {}
    t = records(trace, Kind.TASK, (RANK, THREAD, TASK, BLOCK))
    npreds = (pc.fill_null(pc.list_value_length(part.column(PREDS)), -1).to_numpy() if PREDS in part.column_names
              else np.full(len(t), -1))
    tasks = pd.DataFrame({RANK: t[RANK], THREAD: t[THREAD], START_NS: t[START_NS], END_NS: t[END_NS],
                          TASK: t[TASK], BLOCK: t[BLOCK], NPREDS: npreds}).drop_duplicates([RANK, THREAD, START_NS,
                                                                                            END_NS])
    bodies = pd.DataFrame({RANK: kern[RANK], THREAD: kern[THREAD], START_NS: kern[START_NS], END_NS: kern[END_NS]})
    joined = bodies.merge(tasks, how="left", on=[RANK, THREAD, START_NS, END_NS])
    return {c: joined[c].fillna(-1).to_numpy().astype(np.int64) for c in (TASK, BLOCK, NPREDS)}


def _mpi_view(trace, lane_of, labels, t0, t1, detail, run_budget) -> View | None:
    """MPI calls on the lanes that make them; `inst` joins a collective's calls across ranks (analysis.mpi),
    `partner` is the matched send of a receive."""
    if not trace.records(Kind.COMM).num_rows:
        return None
    df = mpi.calls(trace, None)
    lane_all = lane_of[df[RANK].to_numpy(), df[THREAD].to_numpy()]
    used = np.unique(lane_all)
    s, e = df[START_NS].to_numpy().astype(np.int64), df[END_NS].to_numpy().astype(np.int64)
    names = sorted({str(n) for n in df[NAME]})
    codes = np.searchsorted(np.array(names, dtype=object), df[NAME].to_numpy().astype(str).astype(object))
    cat, cats = _compact(codes, e - s, names, colors.mpi_color)
    cols = {"lane": np.searchsorted(used, lane_all), START_NS: s, END_NS: e, "cat": cat,
            STEP: df[STEP].to_numpy().astype(np.int64), BYTES: df[BYTES].to_numpy().astype(np.int64),
            SEQ: df[SEQ].to_numpy().astype(np.int64), PEER: df[PEER].to_numpy().astype(np.int64),
            "inst": df["inst"].to_numpy().astype(np.int64), "partner": df["send_of"].to_numpy().astype(np.int64)}
    # `partner` points at rows of `df`; the view keeps df's order, so the rows stay valid after _exact
    # only when every record is exact (MPI views are small: ALWAYS_EXACT).
    return _view(ViewKey.MPI, [labels[i] for i in used], [int(labels[i].split(".")[0]) for i in used],
                 cats, cols, t0, t1, detail, run_budget, everywhere=True, empty_competes=False)


def _sorted(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Records by (lane, start): the order the binning and the page expect."""
    order = lane_order(cols["lane"], np.zeros_like(cols["lane"]), cols[START_NS])
    return {k: v[order] for k, v in cols.items()}


def _detail_window(steps: pd.DataFrame, want: tuple[int, int], by_steps: bool, budget: int, per_step: np.ndarray,
                   starts: np.ndarray) -> tuple[tuple[int, int], str]:
    """With `by_steps`, whole steps from the one holding want[0] to the one holding want[1], as many as the
    state + kernel records budget allows; else the window itself. Cut in time when even one step (or the
    window) holds more records than the budget. `per_step`: the state and kernel records starting in each step;
    `starts`: their starts, at least all of them from the window's start to the budget's worth after it."""
    a, b = want
    tail = "; elsewhere each pixel column shows its dominant category"
    if by_steps and not steps.empty:
        s = steps[START_NS].to_numpy().astype(np.int64)
        e = steps[END_NS].to_numpy().astype(np.int64)
        step = steps[STEP].to_numpy()
        first = max(int(np.searchsorted(s, a, side="right")) - 1, 0)
        last_wanted = max(int(np.searchsorted(s, b - 1, side="right")) - 1, first)
        fits = np.cumsum(per_step[first:last_wanted + 1]) <= budget     # True up to the last step that fits
        last = first + int(fits.sum()) - 1
        if last >= first:
            total = int(per_step[first:last + 1].sum())
            what = f"step {step[first]}" if last == first else f"steps {step[first]}-{step[last]}"
            return (int(s[first]), int(e[last])), f"exact records for {what} ({total:,} records){tail}"
        a, b = int(s[first]), int(e[first])
    inside = np.sort(starts[(starts >= a) & (starts < b)])
    if len(inside) > budget:
        b = int(inside[budget])
        return (a, b), (f"exact records from {a / 1e9:.6f} s to {b / 1e9:.6f} s (the first {budget:,} records "
                        f"of the selection, the budget){tail}")
    return (a, b), f"exact records from {a / 1e9:.6f} s to {b / 1e9:.6f} s ({len(inside):,} records){tail}"
