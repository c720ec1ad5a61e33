"""The task-trace generator writes what check_tasks holds, and check_tasks catches each way a task trace can be
wrong (on real Parquet files)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from gpt2trace.format.reader import load
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_tasks as tk
from gpt2trace.testing.invariants import check_columns, check_tasks


def _load(tmp_path, tasks, cfg):
    path = tmp_path / "tasks.parquet"
    syn.write(tk.task_table(tasks, cfg), path)
    return path, load(path)


def test_generated_traces_pass(tmp_path):
    path, trace = _load(tmp_path, *tk.hand_built())
    check_tasks(trace)
    rng = np.random.default_rng(3)
    cfg = tk.TaskTraceConfig(threads=3, ranks=2)
    tasks = [t for rank in (0, 1) for t in tk.run_steps([tk.random_dag(rng, 25) for _ in range(2)], cfg, rank)]
    path, trace = _load(tmp_path, tasks, cfg)
    check_tasks(trace)
    check_columns(path)                                # version 4's columns and types


def test_the_schedule_respects_dependencies_and_threads():
    # a diamond on 2 threads, 1 us before and after each task: 0 [1, 11) on thread 0; 1 and 2 ready at 11, taken
    # by thread 1 (free since 0) at 12 and thread 0 (free at 12) at 13; 3 after both
    graph = [tk.TaskSpec(0, "a", 10_000), tk.TaskSpec(1, "b", 5_000, (0,)), tk.TaskSpec(2, "c", 5_000, (0,)),
             tk.TaskSpec(3, "d", 1_000, (1, 2))]
    placed = {t.id: t for t in tk.schedule(graph, 2, 0)}
    assert (placed[0].start_ns, placed[0].end_ns, placed[0].thread) == (1_000, 11_000, 0)
    assert (placed[1].start_ns, placed[1].thread) == (12_000, 1) and (placed[2].start_ns, placed[2].thread) == (
        13_000, 0)
    # 3 is ready when 2 ends (18 us); thread 1 is free from 18 us: it starts at 19 us
    assert (placed[3].start_ns, placed[3].thread, placed[3].preds) == (19_000, 1, (1, 2))


def _broken(tasks, i, **change):
    return [replace(t, **change) if k == i else t for k, t in enumerate(tasks)]


@pytest.mark.parametrize("change,message", [
    ({"preds": (3,)}, "before its predecessor 3 ends"),           # task 0 [11, 41) depends on 3 [43, 53)
    ({"preds": (9,)}, "predecessor 9 is no task of the rank"),
    ({"id": 1}, "duplicate task ids"),
])
def test_broken_graphs_are_caught(tmp_path, change, message):
    tasks, cfg = tk.hand_built()
    _, trace = _load(tmp_path, _broken(tasks, 0, **change), cfg)
    with pytest.raises(AssertionError, match=message):
        check_tasks(trace)


def test_a_task_outside_running_is_caught(tmp_path):
    tasks, cfg = tk.hand_built()
    _, trace = _load(tmp_path, tasks, cfg)
    # move task E's record (not its states) 1 us earlier: it starts in its thread's Scheduling time
    shifted = dict(trace.parts)
    t = trace.records("task").to_pandas()
    t.loc[t["task"] == 4, "start_ns"] -= 1_000
    shifted["task"] = pa.Table.from_pandas(t, schema=trace.records("task").schema, preserve_index=False)
    with pytest.raises(AssertionError, match="without their kernel|not inside Running"):
        check_tasks(replace(trace, parts=shifted))


def test_overlapping_tasks_on_a_thread_are_refused_by_the_generator():
    tasks, cfg = tk.hand_built()
    with pytest.raises(ValueError, match="overlaps the previous task"):
        tk.task_table(_broken(tasks, 3, start_ns=40_000), cfg)
