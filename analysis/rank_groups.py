"""`analyze` group of ranks by group of ranks: what each group contributes, in two passes over its records.

A trace too large for memory is analyzed a group of its ranks at a time (a `Trace` that holds only those ranks, in
the order of their lowest rank; no rank in two groups). Pass 1 (`gather`) takes from each group what every rank
shares and is small next to its kernel and state records: its step bounds, (rank, thread) pairs, kernel names,
and its phase, MPI and token / resident-memory counter records. From all of them, `context` fixes the window and
builds one small `Trace` of the shared records of every rank, on which the analyses across ranks run (waits, root
causes, delay costs, pipeline bubbles, communication matrix, network load, replay, critical path). Pass 2 (`part`)
reduces each group's kernel, state, counter and task records to a `Part`: per-thread and per-rank sums (integer
nanoseconds, exact in any order), per-rank and per-step rows, its kernel segments and parallel regions (one per
kernel invocation on a rank, not per thread: what the delay costs, the pipeline's late senders and the critical
path read of every rank), and what each declared section (analysis.sections.Section.part) takes of the group.
`analysis.analyze.combine` joins the parts and the shared records into `analyze`'s result: the
in-memory `analyze` is the same path with the whole trace as the only group.

Everything is picklable, so groups can be spread over processes (mpi4py) and their parts reduced on one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from analysis import (
    imbalance,
    occupancy,
    pop,
    registry,
    segments,
    state_profile,
    steps,
    tasks,
)
from analysis.critical_path import kernel_regions
from analysis.records import Records, extent, records, threads
from analysis.sections import GroupView
from analysis.window import Window, of_steps
from gpt2trace.format import communicators as comms
from gpt2trace.format.reader import Reads, Trace, check_states
from gpt2trace.format.schema import (
    BLOCK,
    FIELDS,
    LAYER,
    NAME,
    PREDS,
    RANK,
    STATE,
    STEP,
    TASK,
    THREAD,
    VALUE,
    Counter,
    Kind,
)

SHARED_KINDS = (Kind.PHASE, Kind.COMM)               # every rank's records of these kinds go to every analysis
SHARED_COUNTERS = (Counter.TOKENS, Counter.RSS_BYTES)  # and these counters (one per phase or step and rank)

# What each pass reads of a group (a loader may give more; tests/analysis/test_rank_groups.py holds them to what
# `gather` and `part` use). Parquet decodes a column for every record, so pass 1, which needs every kind (the
# pairs, the extent, the state check) but the other columns of the shared records only, leaves out the state ids
# (of most records), the kernels' layers and the task graph; pass 2 reads its kinds' columns, and what the declared
# sections' parts read (analysis.registry).
GATHER_READS = Reads(columns=tuple(c for c in FIELDS if c not in (STATE, LAYER, TASK, BLOCK, PREDS)))
PART_READS = Reads(columns=(STATE, NAME, STEP, LAYER, VALUE, TASK, BLOCK, PREDS),
                   kinds=(Kind.STATE, Kind.KERNEL, Kind.COUNTER, Kind.TASK)) | registry.reads(registry.SECTIONS)


class NotCombinable(ValueError):
    """Groups of ranks that overlap or are out of rank order; the message says so."""


@dataclass(frozen=True)
class Gathered:
    """Pass 1: what a group of ranks tells every other (see the module docstring)."""
    bounds: steps.Bounds
    pairs: pd.DataFrame
    extent: tuple[int, int] | None
    kernel_names: tuple[str, ...]
    shared: dict[str, pa.Table]
    warnings: tuple[str, ...]
    has_states: bool


def gather(group: Trace) -> Gathered:
    """Pass 1 over one group, of at least its GATHER_READS (its state records are checked here: an overlap raises
    TraceError)."""
    shared = {k: group.parts[k] for k in SHARED_KINDS if k in group.parts}
    counter = group.records(Kind.COUNTER)
    if counter.num_rows and NAME in counter.column_names:
        keep = pc.is_in(counter.column(NAME).cast(pa.string()), pa.array(SHARED_COUNTERS, pa.string()))
        counter = counter.filter(pc.fill_null(keep, False))
        if counter.num_rows:
            shared[Kind.COUNTER] = counter
    kern = group.records(Kind.KERNEL)
    names = tuple(kern.column(NAME).chunks[0].dictionary.to_pylist()) if (
        NAME in kern.column_names and kern.column(NAME).num_chunks) else ()
    bounds = steps.bounds(group)
    span = extent(group) if bounds.level == steps.NO_STEPS else None         # the window of a trace without steps
    return Gathered(bounds, threads(group), span, names, shared,
                    tuple(check_states(group)), group.records(Kind.STATE).num_rows > 0)


@dataclass(frozen=True)
class Context:
    """What pass 2 and the combination need from pass 1: the window, the steps, every rank's (rank, thread) pairs,
    the kernel names of all groups (their codes in every part), the shared records of all ranks as one `Trace` with
    the trace's metadata, the warnings about the state records, and the keys of the declared sections asked for
    (analysis.registry; None: all of them)."""
    window: Window
    steps: pd.DataFrame
    pairs: pd.DataFrame
    kernel_names: tuple[str, ...]
    shared: Trace
    warnings: tuple[str, ...]
    groups: int
    sections: tuple[str, ...] | None = None


def context(gathered: list[Gathered], meta: Trace, spec: str | None = None, whole: Trace | None = None,
            sections: tuple[str, ...] | None = None) -> Context:
    """The `Context` of the groups' `gathered` (in rank order); `meta`: any group (its metadata is the trace's);
    `whole`: the trace itself when there is one group (its shared records are not copied); `sections`: the keys of
    the declared sections to compute (None: all). Raises WindowError for a `spec` ('--steps A:B') that does not fit
    the trace, NotCombinable for groups that overlap or are out of rank order and ValueError for a section key that
    no section has."""
    chosen = None if sections is None else tuple(s.key for s in registry.chosen(sections))
    firsts = [int(g.pairs[RANK].min()) for g in gathered if len(g.pairs)]
    if firsts != sorted(firsts) or len(set().union(*(set(g.pairs[RANK]) for g in gathered))) != sum(
            g.pairs[RANK].nunique() for g in gathered):
        raise NotCombinable(f"{meta.name}: groups of ranks must be disjoint and ordered by their lowest rank")
    table = steps.from_bounds([g.bounds for g in gathered])
    window = of_steps(table, lambda: (min(g.extent[0] for g in gathered), max(g.extent[1] for g in gathered)),
                      meta.name, spec)
    pairs = (gathered[0].pairs if len(gathered) == 1 else
             pd.concat([g.pairs for g in gathered], ignore_index=True))
    names = tuple(dict.fromkeys(n for g in gathered for n in g.kernel_names))   # first appearance, group by group
    shared = whole if whole is not None else _shared_trace(gathered, meta, pairs)
    return Context(window, table, pairs, names, shared, _state_warnings(gathered), len(gathered), chosen)


def _shared_trace(gathered: list[Gathered], meta: Trace, pairs: pd.DataFrame) -> Trace:
    parts = {}
    for kind in Kind.ALL:
        tables = [g.shared[kind] for g in gathered if kind in g.shared]
        if tables:
            parts[kind] = pa.concat_tables(tables, promote_options="default").unify_dictionaries()
    # a trace without a communicator table ran on the world of all its ranks, not only of those with shared records
    table = meta.comm_table or {comms.WORLD_ID: comms.world(np.unique(pairs[RANK]))}
    return Trace(parts=parts, path=meta.path, version=meta.version, run=meta.run, machine=meta.machine,
                 peak=meta.peak, clock=meta.clock, extra_columns=meta.extra_columns, comm_table=table,
                 notes=meta.notes)


_GAPS = re.compile(r"^(?P<name>.*): (?P<n>\d+) gap\(s\) between state records, (?P<rest>first on .*)$")


def _state_warnings(gathered: list[Gathered]) -> tuple[str, ...]:
    """`check_states`' warnings of the whole trace from those of its groups: 'no state records' only when no group
    has any, the gaps counted over all groups with the first group's first gap."""
    if len(gathered) == 1:
        return gathered[0].warnings
    if not any(g.has_states for g in gathered):
        return gathered[0].warnings
    gaps = [m for g in gathered if g.has_states for m in map(_GAPS.match, g.warnings) if m]
    if not gaps:
        return ()
    total = sum(int(m["n"]) for m in gaps)
    return (f"{gaps[0]['name']}: {total} gap(s) between state records, {gaps[0]['rest']}",)


@dataclass(frozen=True)
class Part:
    """Pass 2: what one group of ranks contributes to the analyses (see the module docstring)."""
    states: state_profile.LaneStates
    occupancy: dict
    pop: pop.Part
    imbalance: tuple[pd.DataFrame, pd.DataFrame]
    tasks: dict | None          # a task-based run's (None: fork-join)
    segs: segments.Segments
    regions: pd.DataFrame | None   # the critical path's view of the kernels (None: see `kern`)
    kern: Records | None        # the records themselves, when the group is the whole trace (the critical path's)
    sections: dict[str, object]     # the declared sections' parts, by key (analysis.sections.Section.part)


def part(group: Trace, ctx: Context, top: int = 10, bins: int = 100) -> Part:
    """Pass 2 over one group (of at least its PART_READS): its window's kernel and state records, reduced."""
    window = ctx.window
    kern = _recode(segments.kernel_records(group, window), ctx.kernel_names)
    timed = segments.by_time(kern)          # sorted once for the segments and the regions
    segs = segments.segments(timed)
    states = records(group, Kind.STATE, (RANK, THREAD, STATE), window)
    times = state_profile.lane_states(states)                # and the threads with state records, found once
    view = GroupView(group, window, ctx.steps, kern, segs, states, times, top, bins)
    return Part(states=times, occupancy=occupancy.part(states, window, segs, top, bins, (times.rank, times.thread)),
                pop=pop.part(states, kern, times), imbalance=imbalance.threads_part(kern),
                tasks=tasks.part(group, window, ctx.steps), segs=segs,
                regions=kernel_regions(timed) if ctx.groups > 1 else None, kern=kern if ctx.groups == 1 else None,
                sections={s.key: s.part(view) for s in registry.chosen(ctx.sections) if s.part is not None})


def _recode(kern: Records, names: tuple[str, ...]) -> Records:
    """The kernel records with their name codes into `names` (the kernel names of every group)."""
    if kern.names == names[:len(kern.names)]:
        return Records(kern.cols, names)
    lookup = np.array([names.index(n) for n in kern.names] + [-1], dtype=np.int32)
    code = kern[NAME]
    return Records({**kern.cols, NAME: lookup[np.where(code < 0, len(kern.names), code)]}, names)


def metadata(trace: Trace) -> Trace:
    """The trace's metadata without its records (what `context` keeps of a group)."""
    return Trace(parts={}, path=trace.path, version=trace.version, run=trace.run, machine=trace.machine,
                 peak=trace.peak, clock=trace.clock, extra_columns=trace.extra_columns, comm_table=trace.comm_table,
                 notes=trace.notes)


def subset(trace: Trace, ranks) -> Trace:
    """The records of `ranks` only, with the trace's metadata: a group of ranks of a trace already in memory."""
    wanted = pa.array(sorted(int(r) for r in ranks), pa.int64())
    parts = {k: t.filter(pc.is_in(t.column(RANK).cast(pa.int64()), wanted)) for k, t in trace.parts.items()}
    return Trace(parts={k: t for k, t in parts.items() if t.num_rows}, path=trace.path, version=trace.version,
                 run=trace.run, machine=trace.machine, peak=trace.peak, clock=trace.clock,
                 extra_columns=trace.extra_columns, comm_table=trace.comm_table, notes=trace.notes)


def split(trace: Trace, groups: int) -> list[Trace]:
    """The trace as `groups` groups of consecutive ranks (as even as the ranks allow; fewer when it has fewer)."""
    ranks = np.unique(threads(trace)[RANK].to_numpy())
    return [subset(trace, r) for r in np.array_split(ranks, min(groups, len(ranks))) if len(r)]
