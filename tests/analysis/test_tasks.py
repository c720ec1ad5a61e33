"""analysis/tasks.py and task_graph.py on task traces written to real Parquet files: a hand-built graph whose
every number is worked out below, a too-fine and a too-coarse graph for the findings, and random DAGs (hypothesis)
for the properties that hold on any schedule."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze
from analysis.task_findings import task_findings
from analysis.tasks import ALL_KERNELS, task_analysis
from analysis.window import select
from gpt2trace.format.reader import load
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_tasks as tk
from gpt2trace.testing.invariants import check_tasks

US = 1e-6


def _write(tmp_path, tasks, cfg, name="tasks.parquet"):
    path = tmp_path / name
    syn.write(tk.task_table(tasks, cfg), path)
    return load(path)


@pytest.fixture
def hand(tmp_path):
    return _write(tmp_path, *tk.hand_built())


def test_hand_built_critical_path_and_bound(hand):
    # durations: A 30, B 20, C 10, D 10, E 5 us (total 75); paths A-D-E 45 us, B-C-E 35 us: the critical path is
    # A, D, E = 45 us. Runtime: first start 11 to last end 59 = 48 us; bound 48 / 45 = 1.0667; average
    # parallelism 75 / 45 = 1.667.
    t = task_analysis(hand, select(hand))
    row = t["steps"].iloc[0]
    assert row["tasks"] == 5 and row["task_s"] == pytest.approx(75 * US)
    assert row["critical_path_s"] == pytest.approx(45 * US) and row["runtime_s"] == pytest.approx(48 * US)
    assert row["speedup_bound"] == pytest.approx(48 / 45) and row["parallelism"] == pytest.approx(75 / 45)
    assert t["on_path"]["task"].tolist() == [0, 3, 4]
    assert t["on_path"]["name"].tolist() == ["matmul_forward", "gelu_forward", "residual_forward"]
    # by kernel: matmul_forward 30 of 45 us (2/3), gelu_forward 10 (2/9), residual_forward 5 (1/9)
    pk = t["path_kernels"]
    assert pk["name"].tolist() == ["matmul_forward", "gelu_forward", "residual_forward"]
    assert pk["share"].tolist() == pytest.approx([30 / 45, 10 / 45, 5 / 45]) and pk["layer"].tolist() == [0, 0, 0]


def test_hand_built_profile(hand):
    # ready: A, B at 11 (roots: the step's first start) and start at once; C from 31 (B ends) to 33; D from 41 to
    # 43; E from 53 (D ends, after C at 43) to 54. Intervals (us): [11,31) 2 running; [31,33) 1 running, 1 ready;
    # [33,41) 2; [41,43) 1 + 1 ready; [43,53) 1; [53,54) 0 running, 1 ready; [54,59) 1.
    p = task_analysis(hand, select(hand))["profile"]
    assert (p["start_s"] / US).round(6).tolist() == [11, 31, 33, 41, 43, 53, 54]
    assert (p["end_s"] / US).round(6).tolist() == [31, 33, 41, 43, 53, 54, 59]
    assert p["running"].tolist() == [2, 1, 2, 1, 1, 0, 1] and p["ready"].tolist() == [0, 1, 0, 1, 0, 1, 0]
    dt = p["end_s"] - p["start_s"]
    # integrals: running 40 + 2 + 16 + 2 + 10 + 5 = 75 us = the task time; ready 2 + 2 + 1 = 5 us
    assert (p["running"] * dt).sum() == pytest.approx(75 * US) and (p["ready"] * dt).sum() == pytest.approx(5 * US)


def test_hand_built_shares(hand):
    # step 0 spans [0, 70) us (dataload [0,10), forward [10,70)): thread time 2 x 70 = 140 us.
    # Scheduling: thread 0 [10,11) [41,43) [53,54) = 4 us; thread 1 [10,11) [31,33) [43,44) [53,54) [59,60) = 6 us:
    # 10 / 140 = 7.14%, 2 us per task. Idle: thread 0 [54,60) = 6; thread 1 [0,10) [44,53) [60,70) = 29: 35 / 140.
    # Starved, over [11, 59) on 2 threads (96 us): 1 idle thread and nothing ready over [43,53) and [54,59), and
    # over [53,54) 2 idle threads for 1 ready task: 10 + 5 + 1 = 16 us, 16 / 96 = 16.7%.
    row = task_analysis(hand, select(hand))["steps"].iloc[0]
    assert row["thread_s"] == pytest.approx(140 * US)
    assert row["scheduling_s"] == pytest.approx(10 * US) and row["scheduling_share"] == pytest.approx(10 / 140)
    assert row["idle_s"] == pytest.approx(35 * US) and row["idle_share"] == pytest.approx(35 / 140)
    assert row["starved_s"] == pytest.approx(16 * US) and row["starved_share"] == pytest.approx(16 / 96)
    # median of 30, 20, 10, 10, 5 us; mean running 75 / 48, mean ready 5 / 48
    assert row["median_task_s"] == pytest.approx(10 * US) and row["per_task_runtime_s"] == pytest.approx(2 * US)
    assert row["mean_running"] == pytest.approx(75 / 48) and row["mean_ready"] == pytest.approx(5 / 48)


def test_hand_built_histogram(hand):
    # 4 bins per decade: 5 us in [10^-5.5, 10^-5.25) = [3.16, 5.62) us; 10, 10 in [10, 17.8) us; 20 in
    # [17.8, 31.6) us; 30 also in [17.8, 31.6). Bins from the shortest's to the longest's: 4 (one empty).
    h = task_analysis(hand, select(hand))["histogram"]
    every = h[h["kernel"] == ALL_KERNELS]
    assert every["count"].tolist() == [1, 0, 2, 2]
    assert (every["lo_s"] / US).round(2).tolist() == [3.16, 5.62, 10.0, 17.78]
    assert every["seconds"].sum() == pytest.approx(75 * US)
    # per kernel, by total time: matmul_forward (50 us) first, both in the last bin
    assert h["kernel"].unique().tolist() == [ALL_KERNELS, "matmul_forward", "gelu_forward", "residual_forward"]
    assert h[h["kernel"] == "matmul_forward"]["count"].tolist() == [0, 0, 0, 2]


def test_analyze_has_a_tasks_key_and_findings(hand):
    res = analyze(hand)
    t = res["tasks"]
    assert t["totals"]["critical_path_s"] == pytest.approx(45 * US) and t["totals"]["threads"] == 2
    assert len(t["profile"]["ready"]) == 7 and t["steps"][0]["speedup_bound"] == pytest.approx(48 / 45)
    # scheduling 7.1% >= 5% and the median task 10 us < 20 x 2 us: too fine; starved 16.7% >= 10%: too coarse too
    metrics = [f["metric"] for f in res["findings"]]
    assert "tasks.totals.scheduling_share" in metrics and "tasks.totals.starved_share" in metrics


def test_a_fork_join_trace_has_no_tasks_key(tmp_path):
    path = tmp_path / "fj.parquet"
    syn.write(syn.generate(syn.SyntheticConfig(ranks=1, steps=2)), path)
    assert analyze(load(path))["tasks"] is None and task_findings(None) == []


def _chain_graph(n: int, dur_ns: int) -> list[tk.TaskSpec]:
    return [tk.TaskSpec(i, "matmul_forward", dur_ns, (i - 1,) if i else ()) for i in range(n)]


def test_too_coarse_names_the_idle_threads(tmp_path):
    # a chain of 4 tasks of 100 us on 4 threads, 1 us runtime costs: each next task is taken by another (free)
    # thread 1 us after its predecessor ends, so the span is 4 x 100 + 3 x 1 = 403 us. While a task runs, 3 threads
    # are idle with nothing ready; in each 1 us hand-over 4 are idle for 1 ready task: starved 3 x 400 + 3 x 3 =
    # 1209 us of 4 x 403 = 1612 (75.0%). Scheduling 4 x 2 = 8 us of 4 x 425 us (the step): 0.47%, not too fine.
    cfg = tk.TaskTraceConfig(threads=4)
    trace = _write(tmp_path, tk.run_steps([_chain_graph(4, 100_000)], cfg), cfg)
    t = task_analysis(trace, select(trace))["totals"]
    assert t["starved_share"] == pytest.approx(1209 / 1612) and t["parallelism"] == pytest.approx(1.0)
    found = task_findings({"totals": t})
    assert [f["metric"] for f in found] == ["tasks.totals.starved_share"]
    assert "threads sit idle for 75.0%" in found[0]["text"] and "on 4 threads" in found[0]["text"]


def test_too_fine_names_the_runtime_cost(tmp_path):
    # 40 independent tasks of 3 us on 2 threads with 1 + 1 us of runtime per task: each thread runs 20 tasks, 5 us
    # apiece: 100 us of runtime + 10 + 10 us of Python per step; scheduling 80 us of 2 x 120: 33.3%, 2 us per task
    # against a median of 3 us.
    cfg = tk.TaskTraceConfig(threads=2)
    graph = [tk.TaskSpec(i, "gelu_forward", 3_000) for i in range(40)]
    trace = _write(tmp_path, tk.run_steps([graph], cfg), cfg)
    t = task_analysis(trace, select(trace))["totals"]
    assert t["scheduling_share"] == pytest.approx(80 / 240) and t["per_task_runtime_s"] == pytest.approx(2 * US)
    found = task_findings({"totals": t})
    assert [f["metric"] for f in found] == ["tasks.totals.scheduling_share"]
    assert "33.3% of thread time, 2 us per task against a median task of 3 us" in found[0]["text"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40), threads=st.integers(1, 4), steps=st.integers(1, 3),
       take=st.integers(0, 3_000))
def test_random_dags(tmp_path, seed, n, threads, steps, take):
    """On any graph and schedule: the critical path is no longer than the runtime, the running profile integrates
    to the task time and the ready one to the time tasks waited ready, predecessors end before their task starts."""
    rng = np.random.default_rng(seed)
    cfg = tk.TaskTraceConfig(threads=threads, costs=tk.RuntimeCosts(take_ns=take, release_ns=take // 2))
    trace = _write(tmp_path, tk.run_steps([tk.random_dag(rng, n) for _ in range(steps)], cfg), cfg,
                   f"dag{seed}.parquet")
    check_tasks(trace)
    window = select(trace, "0:")
    t = task_analysis(trace, window)
    s = t["steps"]
    assert (s["critical_path_s"] <= s["runtime_s"] + 1e-12).all()
    assert (s["task_s"] <= s["threads"] * s["runtime_s"] + 1e-12).all()   # P threads run at most P x the span
    p = t["profile"]
    dt = p["end_s"] - p["start_s"]
    per_step = (p["running"] * dt).groupby(p["step"]).sum()
    assert per_step.to_numpy() == pytest.approx(s.set_index("step")["task_s"].loc[per_step.index].to_numpy())
    assert (p["running"] <= threads).all() and (p["ready"] >= 0).all()
    # the ready curve integrates to the time tasks waited ready, worked out here from the records: from the last
    # predecessor's end (not before the step's first task start) to the task's start
    tasks = trace.records("task").to_pandas()
    end_of = dict(zip(tasks["task"], tasks["end_ns"]))
    first = tasks.groupby("step")["start_ns"].transform("min")
    ready = [max([f] + [end_of[q] for q in preds]) for f, preds in zip(first, tasks["preds"])]
    waited = (tasks["start_ns"] - ready).groupby(tasks["step"]).sum() / 1e9
    got = (p["ready"] * dt).groupby(p["step"]).sum()
    assert got.to_numpy() == pytest.approx(waited.loc[got.index].to_numpy(), abs=1e-12)
    assert 0 <= t["totals"]["starved_share"] <= 1 and 0 <= t["totals"]["scheduling_share"] <= 1
