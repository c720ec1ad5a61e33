"""Runs every analysis on a trace (or several) and returns one JSON-able dict; what `gpt2trace analyze` prints.

Fractions in [0, 1], times in seconds; tables become lists of row dicts with None for missing values.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import (
    comm_groups,
    delay,
    groups,
    imbalance,
    mpi,
    occupancy,
    pipeline,
    pop,
    rank_groups,
    registry,
    rootcause,
    scaling,
    segments,
    state_profile,
    tasks,
    waits,
)
from analysis.comm_matrix import comm_matrix
from analysis.critical_path import critical_path_tables, main_threads
from analysis.findings import findings
from analysis.order import by_value
from analysis.plain import Plain, columns, jsonable, rows
from analysis.sections import Inputs, Sections
from analysis.summary import summary, token_ranks
from gpt2trace.format import grid as rank_grid
from gpt2trace.format.reader import Reads, Trace
from gpt2trace.format.schema import RANK


def analyze(trace: Trace, steps: str | None = None, top: int = 10, peak_gflops: float | None = None,
            bins: int = 100, explain: bool = True, sections: Sequence[str] | None = None) -> dict:
    """Everything about one trace: summary, pop, counters, parallel (the layout), imbalance, waits (per call and
    group, per communicator, per communicator name), comm_dimensions (per parallel dimension), pipeline (None
    without pipeline parallelism), memory (resident memory per rank; None without samples), root_causes,
    delay_costs, states, occupancy, step_phases, kernel_threads, critical_path, bursts, tasks (a task-based run's
    task graph: analysis.tasks; None for a fork-join trace), findings, warnings (problems with the trace or with the
    replay's numbers).

    `steps` is '--steps A:B' (B excluded); `top` limits the findings and serial sections, not the tables.
    `explain=False` leaves out the costliest explanations, the critical path, the delay costs (root_causes empty)
    and the communication matrix (None), which `diff` does not compare.
    `sections`: the keys of the declared sections (analysis.registry: counters, comm_dimensions, memory, ...) to
    compute; the others are left out of the result (None: all of them), and the findings say nothing of them. The
    sections not declared yet are always computed.
    Raises TraceError for an invalid trace, WindowError for a `steps` that does not fit it and ValueError for a
    section key that no section has.
    """
    return analyze_groups([trace], steps, top, peak_gflops, bins, explain, prefetch=False,      # nothing to load
                          sections=sections)


def analyze_groups(groups: Sequence[Trace | Callable[[Reads], Trace]], steps: str | None = None, top: int = 10,
                   peak_gflops: float | None = None, bins: int = 100, explain: bool = True,
                   prefetch: bool = True, sections: Sequence[str] | None = None) -> dict:
    """`analyze` of a trace given as groups of its ranks, in the order of their lowest rank: each a `Trace` of some
    ranks with the trace's metadata, or a function that loads one given what the pass reads of it (called once per
    pass). With `prefetch` (for a process with a core to spare) the next group loads in a thread while the current
    one is worked on, so at most two are in memory at a time; else one at a time. Two passes over each
    (`analysis.rank_groups`); the same result as `analyze` of the whole; `sections` as `analyze`'s. Raises
    rank_groups.NotCombinable for groups that overlap or are out of rank order."""
    kept: list[Trace] = []
    with loading(prefetch) as pool:
        gathered, meta = gather_groups(pool, groups, kept)
        whole = groups[0] if len(groups) == 1 and isinstance(groups[0], Trace) else None
        ctx = rank_groups.context(gathered, meta, steps, whole=whole,
                                  sections=None if sections is None else tuple(sections))
        del gathered
        parts = part_groups(pool, groups, kept, ctx, top, bins)
    return combine(ctx, parts, top, peak_gflops, explain)


@contextlib.contextmanager
def loading(prefetch: bool) -> Iterator[ThreadPoolExecutor | None]:
    """The thread that loads the next group ahead (`prefetched`), or None without `prefetch`."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="load-group") if prefetch else None
    try:
        yield pool
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)      # on an error or Ctrl-C, not after one more load


def gather_groups(pool: ThreadPoolExecutor | None, groups: Sequence[Trace | Callable[[Reads], Trace]],
                  kept: list[Trace]) -> tuple[list, Trace | None]:
    """Pass 1 over `groups` (loaded ahead on `pool`, if any): what each gathers, and the trace's metadata (that of
    the first group). The last group is read for pass 2 too and appended to `kept`, so it is loaded once."""
    gathered, meta = [], None
    reads = [rank_groups.GATHER_READS] * (len(groups) - 1) + [rank_groups.GATHER_READS | rank_groups.PART_READS]
    for group in prefetched(pool, groups, reads):     # not enumerate: its tuple holds the group a load longer
        gathered.append(rank_groups.gather(group))
        meta = meta or rank_groups.metadata(group)
        if len(gathered) == len(groups):
            kept.append(group)
        del group
    return gathered, meta


def part_groups(pool: ThreadPoolExecutor | None, groups: Sequence[Trace | Callable[[Reads], Trace]],
                kept: list[Trace], ctx: rank_groups.Context, top: int, bins: int) -> list[rank_groups.Part]:
    """Pass 2 over `groups`, in their order: the last one (in `kept`, emptied) first, while the first of the others
    loads on `pool`, if any."""
    if not groups:
        return []
    loads = prefetched(pool, groups[:-1], [rank_groups.PART_READS] * (len(groups) - 1))
    last = rank_groups.part(kept.pop(), ctx, top, bins)     # freed when part returns: nothing else holds it
    parts = []
    for group in loads:
        parts.append(rank_groups.part(group, ctx, top, bins))
        del group       # before the next load (without the pool, that is when it is asked for)
    return parts + [last]


def prefetched(pool: ThreadPoolExecutor | None, groups: Sequence[Trace | Callable[[Reads], Trace]],
               reads: Sequence[Reads]) -> Iterator[Trace]:
    """The `groups` loaded for their `reads`, in order, each next one loading on `pool` (started now, before the
    first is asked for) while the caller works on the current one; without a pool, each when it is asked for.
    Parquet decoding releases the GIL, so on one process it runs on another core: `analyze` of a 100 M-record
    trace took 49.4 and 46.3 s instead of 60.7 and 52.2 s, alternated, for ~0.14 GB more at the peak
    (benchmarks/big_trace.py's trace, 2 cores)."""
    if pool is None:
        return (load_group(g, r) for g, r in zip(groups, reads))
    ahead = pool.submit(load_group, groups[0], reads[0]) if len(groups) else None

    def loaded() -> Iterator[Trace]:
        nonlocal ahead
        for i in range(len(groups)):
            group = ahead.result()
            ahead = pool.submit(load_group, groups[i + 1], reads[i + 1]) if i + 1 < len(groups) else None
            yield group
            del group
    return loaded()


def load_group(group: Trace | Callable[[Reads], Trace], reads: Reads) -> Trace:
    """A group of `analyze_groups`: itself, or what its loader gives for `reads`."""
    return group if isinstance(group, Trace) else group(reads)


@dataclass(frozen=True)
class Explained:
    """The explanations that need every rank's kernel regions (the critical path) or every MPI call of the window
    paired across ranks (the communication matrix), JSON-ready: under MPI another process than the one that
    combines the rest computes them (`analysis.distributed`), and receives only the regions for it. The root causes
    and delay costs need the segments, which the combining process has."""
    comm_matrix: dict | None
    critical_path: dict | None
    warnings: tuple[str, ...] = ()


def kernel_view(ctx: rank_groups.Context, parts: list[rank_groups.Part]) -> dict:
    """The critical path's view of the kernels: the records of a whole trace, else the regions of every group."""
    if parts[0].kern is not None:
        return {"kern": parts[0].kern}
    return {"regions": (pd.concat([p.regions for p in parts], ignore_index=True), ctx.kernel_names)}


def explanations(ctx: rank_groups.Context, kernel_view: dict, calls: pd.DataFrame | None = None) -> Explained:
    """The `Explained` part of the result, from the `kernel_view` (`calls`: the window's MPI calls, when the caller
    has them)."""
    trace, window = ctx.shared, ctx.window
    calls = mpi.calls(trace, window) if calls is None else calls
    said: list[str] = []
    section = Sections(said)
    path = section("critical path", lambda: critical_path_tables(
        trace, window, calls, main=main_threads(trace, ctx.pairs), steps=ctx.steps, **kernel_view))
    return Explained(
        comm_matrix=section("communication matrix", lambda: {k: rows(v) for k, v in comm_matrix(calls).items()}),
        # the path's segments as columns: one row per stretch would be most of the JSON on a large trace
        critical_path={k: (columns(v) if k == "segments" else rows(v) if isinstance(v, pd.DataFrame) else v)
                       for k, v in path.items()} if path is not None else None,
        warnings=tuple(said))


def combine(ctx: rank_groups.Context, parts: list[rank_groups.Part], top: int = 10,
            peak_gflops: float | None = None, explain: bool = True,
            explained: Explained | Callable[[], Explained] | None = None) -> dict:
    """`analyze`'s result from the groups' `Part`s (in rank order) and the `Context` of all of them; `explained`:
    `explanations` (or what waits for them) when another process computes them.

    The tables every other one is built from (the window's MPI calls and waits, the kernel segments, the states,
    occupancy and POP) are computed first; each section after them is computed on its own, so one that fails on
    a trace is None in the result and named in `warnings` ("critical path: not computed: ..."), and every other
    section is still there. The declared sections (analysis.registry) come last, from what the others share
    (`analysis.sections.Inputs`) and their own parts."""
    trace, window = ctx.shared, ctx.window
    warnings = [f"import: {note}" for note in trace.notes] + list(ctx.warnings)
    section = Sections(warnings)
    ranks = np.unique(ctx.pairs[RANK].to_numpy())
    grid = rank_grid.from_run(trace.run, int(ranks.max()) + 1 if len(ranks) else 1, (trace.comm_table or {}).values())
    if grid.note:
        warnings.append(f"rank coordinates from the {grid.source} ({grid.text()}): {grid.note}")
    segs = segments.concat([p.segs for p in parts])
    calls = mpi.calls(trace, window)
    wait_rows = waits.wait_states(calls)
    total_wait = wait_rows["wait_ns"].sum() / 1e9
    occ = occupancy.from_parts([p.occupancy for p in parts], segs, top)
    per_rank = occ["per_rank"]
    factors = pop.from_parts([p.pop for p in parts], calls, window)
    warnings += pop.warnings(factors)
    layout = section("parallel layout", lambda: groups.parallel(trace), {})
    pipe = section("pipeline", lambda: pipeline.pipeline(trace, window, calls, wait_rows, segs, ctx.steps))
    summ = section("summary", lambda: summary(trace, window, peak_gflops, token_ranks(pipe, grid, ranks), grid,
                                              ctx.pairs, ctx.steps))
    task_tables = section("tasks", lambda: tasks.from_parts([p.tasks for p in parts]))   # None: a fork-join trace
    if task_tables and not task_tables["totals"]["edges_known"]:
        warnings.append(f"{trace.name}: its task records have no predecessors (a .prv import keeps none), so the "
                        "task graph's critical path, the ready tasks and the starvation are not known")
    running_ns = sum(float(p.pop.times["useful_ns"].sum()) for p in parts)
    inputs = Inputs(trace, window, ctx.steps, ctx.pairs, ranks, grid, calls, wait_rows, segs, layout, summ,
                    running_ns, top)
    root_causes = delay_costs = explained_now = None
    if explain:                             # last: under MPI, another process computes `Explained` meanwhile
        costs = section("delay costs", lambda: delay.delay_costs(calls, wait_rows, segs, window, keys=(mpi.GROUP,)))
        if costs is not None:
            root_causes = section("root causes", lambda: Plain({**r, "text": rootcause.sentence(r)}
                                                                for r in rows(rootcause.table(costs))))
            delay_costs = section("delay costs", lambda: {k: (rows(v) if isinstance(v, pd.DataFrame) else v)
                                                          for k, v in delay.summary(costs).items()})
        explained_now = section("critical path and communication matrix", lambda: explained() if callable(explained)
                                else (explained or explanations(ctx, kernel_view(ctx, parts), calls)))
        warnings += explained_now.warnings if explained_now else []
    result = {
        "trace": trace.name,
        "window": {"t0_s": window.t0_ns / 1e9, "t1_s": window.t1_ns / 1e9, "steps": list(window.steps)},
        "summary": {k: (rows(v) if isinstance(v, pd.DataFrame) else v) for k, v in summ.items()} if summ else None,
        "pop": factors,
        "parallel": layout,
        "imbalance": section("load imbalance", lambda: rows(_imbalance(segs, ranks, parts, layout))),
        "waits": {"total_wait_s": total_wait,
                  "calls": section("MPI calls", lambda: rows(_per_call(calls, wait_rows, layout))),
                  "states": rows(_wait_states(wait_rows, total_wait)),
                  "communicators": section("communicators", lambda: rows(
                      groups.per_communicator(calls, wait_rows, trace, layout))),
                  "groups": section("communication groups", lambda: rows(comm_groups.per_group(calls, wait_rows)))},
        "pipeline": {k: (rows(v) if isinstance(v, pd.DataFrame) else v) for k, v in pipe.items()} if pipe else None,
        "comm_matrix": explained_now.comm_matrix if explained_now else None,                   # per rank pair
        "root_causes": root_causes if explain else [],
        "delay_costs": delay_costs,                                              # root causes through chains
        "states": {k: rows(v) for k, v in
                   state_profile.from_lanes(state_profile.LaneStates.concat([p.states for p in parts]),
                                            window).items()},
        "occupancy": {"mean_occupancy": float(per_rank["mean_occupancy"].mean()) if len(per_rank) else None,
                      "serial_s": float(per_rank["serial_s"].sum()),
                      **{k: (rows(v) if isinstance(v, pd.DataFrame) else v) for k, v in occ.items()}},
        "critical_path": explained_now.critical_path if explained_now else None,
        "tasks": _tasks_json(task_tables) if task_tables else None,
        **_declared(ctx, parts, inputs, section),
        "warnings": warnings,
    }
    result = jsonable(result)
    result["findings"] = section("findings", lambda: findings(result, top), [])
    result["warnings"] = warnings
    return result


def _declared(ctx: rank_groups.Context, parts: list[rank_groups.Part], inputs: Inputs, section: Sections) -> dict:
    """The declared sections asked for (analysis.registry), by key, each from the `inputs` and its groups' parts."""
    return {s.key: section(s.title, lambda s=s: s.combine(inputs, [p.sections[s.key] for p in parts]
                                                          if s.part is not None else []))
            for s in registry.chosen(ctx.sections)}


def _imbalance(segs, ranks: np.ndarray, parts: list[rank_groups.Part], layout: dict) -> pd.DataFrame:
    table = imbalance.from_parts(segs, ranks, [p.imbalance for p in parts])
    table["cause"] = [groups.cause(k, layout) if s == "ranks" else None
                      for k, s in zip(table["kernel"], table["scope"])]
    return table


def _per_call(calls: pd.DataFrame, wait_rows: pd.DataFrame, layout: dict) -> pd.DataFrame:
    table = waits.per_call(calls, wait_rows)
    table["split"] = [groups.split_of(g, layout) for g in table[mpi.GROUP]]
    return table


def _wait_states(wait_rows: pd.DataFrame, total_wait: float) -> pd.DataFrame:
    by_state = (wait_rows.groupby("wait_state", as_index=False)
                .agg(count=("wait_ns", "size"), wait_s=("wait_ns", "sum")))
    by_state = by_value(by_state, "wait_s", ["wait_state"])
    by_state["wait_s"] = by_state["wait_s"] / 1e9
    by_state["share"] = by_state["wait_s"] / total_wait if total_wait > 0 else 0.0
    return by_state


def _tasks_json(tables: dict) -> dict:
    """The task tables: the profile and histogram as columns (long tables of few columns), the others as rows."""
    return {k: (columns(v) if k in ("profile", "histogram") else rows(v) if isinstance(v, pd.DataFrame) else v)
            for k, v in tables.items()}


def analyze_many(traces: list[Trace], steps: str | None = None, top: int = 10,
                 peak_gflops: float | None = None) -> dict:
    """One result per trace and, with two or more, the model-factors table with the first as reference."""
    return many([analyze(t, steps, top, peak_gflops) for t in traces])


def many(results: list[dict]) -> dict:
    """The results of several traces' `analyze` together, and with two or more the model-factors table with the
    first as reference."""
    out: dict = {"traces": results}
    if len(results) > 1:
        table = scaling.modelfactors(results)
        out["scaling"] = rows(table)
        out["scaling_work_unit"] = table.attrs.get("work_unit")
    return out
