"""Task-based runs: the parallelism profile, the task-size histogram, the runtime's overhead and idle shares, the
critical path of the task graph, and what they say about the task size (docs/tasks.md).

Per rank and analyzed step:
- parallelism profile: over time, the tasks ready (from the end of the last predecessor, or from the start of the
  step's first task for a task with none, until the task starts) and the tasks running (= threads running a task);
- scheduling share: time in Scheduling and Fork/Join (the runtime taking tasks and releasing successors) over
  thread time (threads of the rank x the step); idle share likewise for Idle;
- starved share: thread time, between the step's first task start and last task end, of threads that are idle
  while fewer tasks are ready than idle threads (the graph had no work for them), over threads x that span;
- critical path (analysis.task_graph): its length, runtime / length (the speed-up bound) and the average
  parallelism, total task time / length.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import NS, records
from analysis.steps import steps_table
from analysis.task_graph import TaskGraph, critical_paths, path_by_kernel, task_graph
from analysis.window import Window
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, STATE, STEP, THREAD, Kind, State

BINS_PER_DECADE = 4          # task-size histogram: bins 10^(1/4) = 1.78x wide
ALL_KERNELS = "all tasks"
# What needs the dependency edges, unknown (NaN; the profile's ready count UNKNOWN) when the trace lost them
NEEDS_EDGES = ("critical_path_s", "speedup_bound", "parallelism", "starved_s", "starved_share", "mean_ready")
UNKNOWN = -1


def task_analysis(trace: Trace, window: Window) -> dict | None:
    """The tables of a task trace's analyzed steps, None for a trace without tasks: `steps` (one row per rank and
    step), `profile` (piecewise-constant ready/running per rank and step), `histogram` (all tasks, then per
    kernel), `on_path` (the critical paths' tasks), `path_kernels` (their time by kernel and layer) and `totals`
    (the window's numbers, summed over ranks and steps)."""
    return from_parts([part(trace, window)])


def part(trace: Trace, window: Window, steps: pd.DataFrame | None = None) -> dict | None:
    """What the ranks of `trace` contribute (the tables per rank and step, and each task's duration and name for
    the histogram; the tasks' edges stay on their rank); None without tasks. `steps`: the steps table of the whole
    trace, when `trace` holds some of its ranks."""
    graph = task_graph(trace, window, window.steps)
    if graph is None or len(graph.tasks) == 0:
        return None
    threads = _threads_per_rank(trace)
    prof = profile(graph)
    cp, on_path = critical_paths(graph)
    shares = state_shares(trace, graph, threads, steps)
    starved = starvation(prof, threads)
    steps = cp.merge(shares, on=[RANK, STEP], how="left").merge(starved, on=[RANK, STEP], how="left")
    med = graph.tasks.assign(d=graph.duration_ns).groupby([RANK, STEP])["d"].median().rename("median_task_s") / NS
    steps = steps.merge(med.reset_index(), on=[RANK, STEP], how="left")
    steps["per_task_runtime_s"] = steps["scheduling_s"] / steps["tasks"]
    steps["threads"] = steps[RANK].map(lambda r: threads.get(int(r), 1))
    return {"steps": steps, "profile": prof, "on_path": on_path, "durations": _durations(graph),
            "edges_known": graph.edges_known}


def from_parts(parts: list[dict | None]) -> dict | None:
    """`task_analysis` of the ranks of all `parts` (in rank order); None when none has tasks."""
    parts = [p for p in parts if p is not None]
    if not parts:
        return None
    join = (lambda key: parts[0][key]) if len(parts) == 1 else (
        lambda key: pd.concat([p[key] for p in parts], ignore_index=True))
    steps, prof, on_path = join("steps"), join("profile"), join("on_path")
    edges_known = all(p["edges_known"] for p in parts)
    if not edges_known:
        # without the edges, every task would count as a root: no critical path, no ready counts
        steps[list(NEEDS_EDGES)] = np.nan
        prof["ready"] = UNKNOWN
        on_path = on_path.iloc[:0]
    # the histogram sums the tasks' times in the graph's order, so it takes every task's duration (the result's
    # profile has two rows per task anyway)
    durations = np.concatenate([p["durations"][0] for p in parts])
    names = np.concatenate([np.asarray(p["durations"][1], dtype=object) for p in parts])
    return {"steps": steps, "profile": prof, "histogram": _histogram(durations, names),
            "on_path": on_path, "path_kernels": path_by_kernel(on_path),
            "totals": {**totals(steps), "edges_known": edges_known}}


def ready_ns(graph: TaskGraph) -> np.ndarray:
    """When each task became ready: its last predecessor's end, or its step's first task start for a root; never
    before that first start (a predecessor of an earlier step) nor after the task's own start."""
    df = graph.tasks
    start = df[START_NS].to_numpy()
    step_first = df.groupby([RANK, STEP])[START_NS].transform("min").to_numpy()
    ready = step_first.copy()
    if len(graph.pred):
        np.maximum.at(ready, graph.succ, df[END_NS].to_numpy()[graph.pred])
    return np.minimum(ready, start)


def profile(graph: TaskGraph) -> pd.DataFrame:
    """Per rank and step, the intervals [start_s, end_s) of constant `ready` and `running` task counts, from the
    step's first task start to its last task end."""
    df = graph.tasks
    ready = ready_ns(graph)
    out = []
    for (rank, step), g in df.groupby([RANK, STEP], sort=True):
        idx = g.index.to_numpy()
        s, e, r = g[START_NS].to_numpy(), g[END_NS].to_numpy(), ready[idx]
        times = np.concatenate([s, e, r, s])
        run_d = np.concatenate([np.ones_like(s), -np.ones_like(e), np.zeros_like(r), np.zeros_like(s)])
        rdy_d = np.concatenate([np.zeros_like(s), np.zeros_like(e), np.ones_like(r), -np.ones_like(s)])
        edges = np.unique(times)
        at = np.searchsorted(edges, times)
        running = np.cumsum(np.bincount(at, weights=run_d, minlength=len(edges)))[:-1]
        ready_n = np.cumsum(np.bincount(at, weights=rdy_d, minlength=len(edges)))[:-1]
        out.append(pd.DataFrame({RANK: int(rank), STEP: int(step), "start_s": edges[:-1] / NS, "end_s": edges[1:] / NS,
                                 "ready": np.rint(ready_n).astype(np.int64),
                                 "running": np.rint(running).astype(np.int64)}))
    return pd.concat(out, ignore_index=True)


def histogram(graph: TaskGraph, per_decade: int = BINS_PER_DECADE) -> pd.DataFrame:
    """Task durations in log bins (edges 10^(k / per_decade) s): kernel (ALL_KERNELS first, then each kernel by
    total time), lo_s, hi_s, count, seconds. Bins from the shortest to the longest task, empty ones included."""
    return _histogram(graph.duration_ns, graph.tasks[NAME].to_numpy(), per_decade)


def _durations(graph: TaskGraph) -> tuple[np.ndarray, pd.Categorical]:
    """Each task's duration and kernel name (categorical: compact when pickled), in the graph's order."""
    return graph.duration_ns, pd.Categorical(graph.tasks[NAME].to_numpy())


def _histogram(duration_ns: np.ndarray, names: np.ndarray, per_decade: int = BINS_PER_DECADE) -> pd.DataFrame:
    dur = np.maximum(duration_ns, 1) / NS
    k = np.floor(np.log10(dur) * per_decade + 1e-9).astype(np.int64)
    ks = np.arange(k.min(), k.max() + 1)
    by_time = pd.Series(dur).groupby(names).sum().sort_values(ascending=False, kind="stable")
    out = []
    for kernel in [ALL_KERNELS, *by_time.index]:
        mine = slice(None) if kernel == ALL_KERNELS else names == kernel
        counts = np.bincount(k[mine] - ks[0], minlength=len(ks))
        time = np.bincount(k[mine] - ks[0], weights=dur[mine], minlength=len(ks))
        out.append(pd.DataFrame({"kernel": kernel, "lo_s": 10.0 ** (ks / per_decade),
                                 "hi_s": 10.0 ** ((ks + 1) / per_decade), "count": counts, "seconds": time}))
    return pd.concat(out, ignore_index=True)


def state_shares(trace: Trace, graph: TaskGraph, threads: dict[int, int],
                 steps: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank and step of the graph: thread_s (threads x step time), scheduling_s, idle_s and their shares.
    `steps`: `steps_table(trace)`, or that of the whole trace when `trace` holds some of its ranks."""
    steps = steps_table(trace) if steps is None else steps
    steps = steps[steps[STEP].isin(graph.tasks[STEP].unique())]
    st = records(trace, Kind.STATE, (RANK, THREAD, STATE))
    rows = []
    for rank in sorted(graph.tasks[RANK].unique()):
        mine = st[RANK] == rank
        a, b = steps[START_NS].to_numpy(), steps[END_NS].to_numpy()
        spent = {}
        for key, state in (("scheduling_s", State.SCHEDULING_FORK_JOIN), ("idle_s", State.IDLE)):
            sel = mine & (st[STATE] == state)
            spent[key] = (_time_before(st[START_NS][sel], st[END_NS][sel], b)
                          - _time_before(st[START_NS][sel], st[END_NS][sel], a)) / NS
        thread_s = threads.get(int(rank), 1) * (b - a) / NS
        rows.append(pd.DataFrame({RANK: int(rank), STEP: steps[STEP].to_numpy(), "thread_s": thread_s, **spent}))
    out = pd.concat(rows, ignore_index=True)
    out["scheduling_share"] = out["scheduling_s"] / out["thread_s"]
    out["idle_share"] = out["idle_s"] / out["thread_s"]
    return out


def starvation(prof: pd.DataFrame, threads: dict[int, int]) -> pd.DataFrame:
    """Per rank and step: starved_s, the thread time of threads idle while fewer tasks were ready than idle
    threads, its share of threads x the tasks' span, and the mean ready and running counts over that span."""
    p = prof.copy()
    n = p[RANK].map(lambda r: threads.get(int(r), 1)).to_numpy()
    dt = (p["end_s"] - p["start_s"]).to_numpy()
    idle = np.maximum(n - p["running"].to_numpy(), 0)
    p["starved"] = np.maximum(idle - p["ready"].to_numpy(), 0) * dt
    p["ready_t"], p["running_t"], p["dt"], p["capacity"] = p["ready"] * dt, p["running"] * dt, dt, n * dt
    g = p.groupby([RANK, STEP], as_index=False)[["starved", "ready_t", "running_t", "dt", "capacity"]].sum()
    return pd.DataFrame({RANK: g[RANK], STEP: g[STEP], "starved_s": g["starved"],
                         "starved_share": g["starved"] / g["capacity"], "mean_ready": g["ready_t"] / g["dt"],
                         "mean_running": g["running_t"] / g["dt"]})


def totals(steps: pd.DataFrame) -> dict:
    """The analyzed steps together: sums over ranks and steps and the ratios of the sums (the starved share weighted
    by each step's threads x span, the mean counts by its span; the median task of the steps' medians)."""
    s = steps.sum(numeric_only=True, min_count=1)
    cp = float(s["critical_path_s"]) if pd.notna(s["critical_path_s"]) else None
    return {"tasks": int(s["tasks"]), "task_s": float(s["task_s"]), "runtime_s": float(s["runtime_s"]),
            "critical_path_s": cp, "speedup_bound": float(s["runtime_s"]) / cp if cp else None,
            "parallelism": float(s["task_s"]) / cp if cp else None,
            "scheduling_share": float(s["scheduling_s"] / s["thread_s"]) if s["thread_s"] else None,
            "idle_share": float(s["idle_s"] / s["thread_s"]) if s["thread_s"] else None,
            "starved_share": _weighted(steps, "starved_share", "runtime_s"),
            "mean_ready": _weighted(steps, "mean_ready", "runtime_s", per_thread=False),
            "mean_running": _weighted(steps, "mean_running", "runtime_s", per_thread=False),
            "median_task_s": float(steps["median_task_s"].median()),
            "per_task_runtime_s": float(s["scheduling_s"] / s["tasks"]) if s["tasks"] else None,
            "threads": int(steps["threads"].max()) if "threads" in steps else None}


def _weighted(df: pd.DataFrame, col: str, weight: str, per_thread: bool = True) -> float | None:
    """The mean of `col` over the rows weighted by `weight` (times the row's threads when `per_thread`)."""
    w = df[weight].to_numpy() * (df["threads"].to_numpy() if per_thread else 1)
    value = float((df[col].to_numpy() * w).sum() / w.sum()) if w.sum() > 0 else None
    return value if value is not None and np.isfinite(value) else None


def _time_before(s: np.ndarray, e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each t: the total time of the intervals [s, e) before t (sum of clip(t - s, 0, e - s)), through sorted
    starts and ends: sum over s < t of (t - s) minus sum over e < t of (t - e)."""
    ss, es = np.sort(s), np.sort(e)
    cs, ce = np.r_[0, np.cumsum(ss)], np.r_[0, np.cumsum(es)]
    i, j = np.searchsorted(ss, t), np.searchsorted(es, t)
    return (i * t - cs[i]) - (j * t - ce[j])


def _threads_per_rank(trace: Trace) -> dict[int, int]:
    """Threads of each rank: those with state records (else with task records)."""
    for kind in (Kind.STATE, Kind.TASK):
        r = records(trace, kind, (RANK, THREAD))
        if len(r):
            pairs = np.unique(np.stack([r[RANK], r[THREAD]]), axis=1)
            ranks, counts = np.unique(pairs[0], return_counts=True)
            return {int(a): int(c) for a, c in zip(ranks, counts)}
    return {}
