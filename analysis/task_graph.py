"""The task graph of a task-based trace: the `task` records of the analyzed steps and their dependency edges, and
the critical path through them.

A task's `preds` name tasks of its rank by id; an edge whose predecessor is not among the loaded tasks (a step
outside the window) is dropped. The critical path is computed per rank and step, through the edges inside the step:
the longest chain of tasks weighted by their durations, the time the step's graph would take on infinitely many
threads with a free runtime.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis.order import by_value
from analysis.records import NS, Span
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import BLOCK, END_NS, FIELDS, LAYER, NAME, PREDS, RANK, START_NS, STEP, TASK, THREAD, Kind

COLUMNS = (RANK, STEP, TASK, NAME, LAYER, BLOCK, THREAD, START_NS, END_NS)


@dataclass(frozen=True)
class TaskGraph:
    """`tasks`: one row per task (COLUMNS; layer, step and block -1 where null), ordered by rank, step, start;
    `pred`/`succ`: row indices of the edges (pred ran before succ, both on one rank); `edges_known` False when
    some task's `preds` is null (a trace imported from a .prv, which holds no edges)."""
    tasks: pd.DataFrame
    pred: np.ndarray
    succ: np.ndarray
    edges_known: bool = True

    @property
    def duration_ns(self) -> np.ndarray:
        return (self.tasks[END_NS] - self.tasks[START_NS]).to_numpy()


def task_graph(trace: Trace, window: Span | None = None, steps: tuple[int, ...] = ()) -> TaskGraph | None:
    """The tasks of `steps` (all when empty; then those overlapping `window`, if given) and their edges; None
    when the trace has no task records."""
    part = trace.records(Kind.TASK)
    if part.num_rows == 0 or TASK not in part.column_names:
        return None
    df = pd.DataFrame({c: _column(part, c) for c in COLUMNS})
    keep = np.ones(len(df), dtype=bool)
    if steps:
        keep &= df[STEP].isin(steps).to_numpy()
    elif window is not None:
        keep &= ((df[START_NS] < window.t1_ns) & (df[END_NS] > window.t0_ns)).to_numpy()
    preds = part.column(PREDS) if PREDS in part.column_names else pa.nulls(part.num_rows, FIELDS[PREDS])
    preds = preds.filter(pa.array(keep)) if not keep.all() else preds
    df = df[keep].reset_index(drop=True)
    order = np.lexsort((df[END_NS].to_numpy(), df[START_NS].to_numpy(), df[STEP].to_numpy(), df[RANK].to_numpy()))
    df = df.iloc[order].reset_index(drop=True)
    preds = preds.combine_chunks() if isinstance(preds, pa.ChunkedArray) else preds
    preds = preds.take(pa.array(order))
    return TaskGraph(df, *_edges(df, preds), edges_known=preds.null_count == 0)


def _column(part: pa.Table, name: str) -> np.ndarray:
    if name not in part.column_names:
        return np.full(part.num_rows, -1, dtype=np.int64)
    col = part.column(name)
    if name == NAME:
        return np.asarray(col.cast(pa.string()).to_pylist(), dtype=object)
    return pc.fill_null(col, -1).to_numpy()


def _edges(df: pd.DataFrame, preds: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Row indices of (predecessor, successor) pairs: `preds` ids looked up among the rank's tasks."""
    if len(df) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    succ = pc.list_parent_indices(preds).to_numpy()
    pid = pc.list_flatten(preds).to_numpy()
    rank = df[RANK].to_numpy().astype(np.int64)
    ids = df[TASK].to_numpy().astype(np.int64)
    # one int key per (rank, id): ranks are < 2^31, ids below 2^32 in any trace we write
    key = (rank << 32) + ids
    order = np.argsort(key, kind="stable")
    want = (rank[succ] << 32) + pid
    at = np.clip(np.searchsorted(key[order], want), 0, len(key) - 1)
    found = key[order][at] == want
    return order[at][found].astype(np.int64), succ[found].astype(np.int64)


def critical_paths(graph: TaskGraph) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per rank and step: the critical path (`steps`: rank, step, tasks, task_s (total task time), runtime_s (first
    task start to last task end), critical_path_s, speedup_bound = runtime / critical path, parallelism = task time /
    critical path) and the tasks on it (`on_path`: rank, step, task, name, layer, block, seconds, in path order)."""
    df, dur = graph.tasks, graph.duration_ns
    n = len(df)
    group = df[RANK].to_numpy().astype(np.int64) * (1 << 32) + df[STEP].to_numpy().astype(np.int64)
    inside = group[graph.pred] == group[graph.succ]
    pred, succ = graph.pred[inside], graph.succ[inside]
    # rows are in start order within each step and a predecessor ends before its successor starts, so one pass
    # in row order sees every predecessor's finished path first
    by_succ = np.argsort(succ, kind="stable")
    pred, succ = pred[by_succ], succ[by_succ]
    first = np.searchsorted(succ, np.arange(n + 1))
    longest, via = _longest_paths(first.tolist(), pred.tolist(), dur.tolist())
    longest, via = np.asarray(longest, dtype=np.int64), np.asarray(via, dtype=np.int64)
    rows, path_rows = [], []
    for (rank, step), g in df.groupby([RANK, STEP], sort=True):
        idx = g.index.to_numpy()
        end = int(idx[np.argmax(longest[idx])])
        chain = []
        while end >= 0:
            chain.append(end)
            end = int(via[end])
        length = int(longest[chain[0]])
        runtime = int(g[END_NS].max() - g[START_NS].min())
        task_ns = int(dur[idx].sum())
        rows.append({RANK: int(rank), STEP: int(step), "tasks": len(idx), "task_s": task_ns / NS,
                     "runtime_s": runtime / NS, "critical_path_s": length / NS,
                     "speedup_bound": runtime / length if length else None,
                     "parallelism": task_ns / length if length else None})
        for i in reversed(chain):
            path_rows.append({RANK: int(rank), STEP: int(step), TASK: int(df[TASK].iat[i]), "name": df[NAME].iat[i],
                              LAYER: _opt(df[LAYER].iat[i]), BLOCK: _opt(df[BLOCK].iat[i]), "seconds": dur[i] / NS})
    cols = [RANK, STEP, TASK, "name", LAYER, BLOCK, "seconds"]
    # layer and block: ints, NA where a task has none (a column of ints and Nones would be floats)
    return pd.DataFrame(rows), pd.DataFrame(path_rows, columns=cols).astype({LAYER: "Int64", BLOCK: "Int64"})


def _longest_paths(first: list[int], pred: list[int], dur: list[int]) -> tuple[list[int], list[int]]:
    """longest[i]: the longest chain ending with task i (its duration included), via[i] the predecessor it comes
    through (-1: none; the first of equal ones), for tasks in topological order; pred[first[i]:first[i + 1]] are
    i's predecessors. Plain Python over lists (a reading of a trace does not load Numba): ~1 s per million
    edges."""
    longest, via = [0] * len(dur), [-1] * len(dur)
    for i, d in enumerate(dur):
        best = -1
        for j in pred[first[i]:first[i + 1]]:
            if best < 0 or longest[j] > longest[best]:
                best = j
        via[i] = best
        longest[i] = d + (longest[best] if best >= 0 else 0)
    return longest, via


def path_by_kernel(on_path: pd.DataFrame) -> pd.DataFrame:
    """The critical paths' time by kernel and layer over all analyzed steps and ranks: name, layer, tasks, seconds,
    share of the paths' total, longest first."""
    if on_path.empty:
        return pd.DataFrame(columns=["name", LAYER, "tasks", "seconds", "share"])
    g = on_path.assign(layer=on_path[LAYER].fillna(-1).astype(np.int64)).groupby(["name", LAYER], as_index=False).agg(
        tasks=("seconds", "size"), seconds=("seconds", "sum"))
    g["share"] = g["seconds"] / g["seconds"].sum()
    g[LAYER] = g[LAYER].astype("Int64").mask(g[LAYER] < 0)
    return by_value(g, "seconds", ["name", LAYER])


def _opt(v) -> int | None:
    return None if v < 0 else int(v)
