"""Findings about a task-based run's task size: too fine (the runtime's cost per task is large next to the tasks)
or too coarse (threads idle because the graph has too few ready tasks), each with the numbers behind it
(analysis.tasks; docs/tasks.md says how to read them)."""
from __future__ import annotations

# The target for the runtime's own cost: under 5% of thread time. A task costs the runtime c (Scheduling
# per task) on top of its duration d, a share c / (c + d): at d = 20 c the share is 4.8%, so a median task under
# FINE_RATIO x c means the typical task pays more than the target.
SCHEDULING_SHARE = 0.05
FINE_RATIO = 20
# Thread time lost to starvation (idle threads, fewer ready tasks than idle threads) beyond which the graph
# exposes too little parallelism for the threads: a tenth of the tasks' span.
STARVED_SHARE = 0.10


def task_findings(tasks: dict | None) -> list[dict]:
    """[{metric, lost_fraction None, text}] for the `tasks` key of an analysis result; [] for a fork-join trace."""
    if not tasks:
        return []
    t = tasks["totals"]
    out = []
    share, cost, median = t.get("scheduling_share"), t.get("per_task_runtime_s"), t.get("median_task_s")
    if share is not None and cost and median is not None and share >= SCHEDULING_SHARE and median < FINE_RATIO * cost:
        out.append({"metric": "tasks.totals.scheduling_share", "lost_fraction": None, "text": (
            f"Tasks are too fine: the runtime's Scheduling takes {share:.1%} of thread time, "
            f"{_us(cost)} per task against a median task of {_us(median)} (under {FINE_RATIO}x the runtime's cost); "
            f"larger blocks (--task-block) would spread that cost over more work.")})
    starved = t.get("starved_share")
    if starved is not None and starved >= STARVED_SHARE:
        out.append({"metric": "tasks.totals.starved_share", "lost_fraction": None, "text": (
            f"Tasks are too coarse: threads sit idle for {starved:.1%} of the tasks' thread time while fewer tasks "
            f"are ready than idle threads (average parallelism {t['parallelism']:.2f} on {t['threads']} threads, "
            f"critical path {_us(t['critical_path_s'])} of {_us(t['runtime_s'])} runtime, a speed-up bound of "
            f"{t['speedup_bound']:.2f}x); smaller blocks (--task-block) would expose more parallelism.")})
    return out


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} us" if seconds < 1e-3 else f"{seconds * 1e3:.4g} ms"
