"""Synthetic task traces (schema version 4): task graphs placed on threads, written as a task-based run writes them.

A graph is a list of `TaskSpec` (kernel, duration, predecessors); `schedule` places it on threads as a greedy
dependency-driven runtime would (each free thread takes the task that became ready first, paying `take_ns` of
Scheduling before it and `release_ns` after it to release its successors); `task_table` turns placed `Task`s into
trace records: per task a `task` record and its `kernel` record (same times; a task named after an MPI call is a
`comm` record instead), per thread the states (Running in task bodies, Scheduling and Fork/Join around them, Idle
in between), per step its phases and counters, and the run metadata with `parallel.schedule` = "tasks".

Hand-built traces give `Task`s with chosen times (tests work their numbers out by hand); random DAGs (`random_dag`)
go through `schedule`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from gpt2trace.format import schema
from gpt2trace.format.lanes import lane_order
from gpt2trace.format.schema import (
    BLOCK,
    END_NS,
    KIND,
    LAYER,
    MICROSTEP,
    NAME,
    PREDS,
    RANK,
    START_NS,
    STATE,
    STEP,
    TASK,
    THREAD,
    VALUE,
    Counter,
    Kind,
    Phase,
    Schedule,
    State,
)

MPI_PREFIX = "MPI_"      # a communication task is named by its MPI call


@dataclass(frozen=True)
class Task:
    """One executed task: its body [start_ns, end_ns) on `thread` of `rank`."""
    id: int
    name: str
    start_ns: int
    end_ns: int
    thread: int
    preds: tuple[int, ...] = ()
    layer: int | None = None
    block: int = 0
    step: int = 0
    rank: int = 0
    microstep: int = 0


@dataclass(frozen=True)
class TaskSpec:
    """A task of a graph before it ran: ids in topological order (every predecessor has a smaller id)."""
    id: int
    name: str
    duration_ns: int
    preds: tuple[int, ...] = ()
    layer: int | None = None
    block: int = 0


@dataclass(frozen=True)
class RuntimeCosts:
    """What the runtime spends per task on the thread that runs it, and the Python around each step."""
    take_ns: int = 1_000        # Scheduling before a task: taking it from the ready queue
    release_ns: int = 1_000     # Scheduling after it: releasing its successors
    gap_ns: int = 10_000        # the main thread's Python before and after the runtime in each step


@dataclass(frozen=True)
class TaskTraceConfig:
    threads: int = 2
    costs: RuntimeCosts = field(default_factory=RuntimeCosts)
    ranks: int = 1


def schedule(graph: list[TaskSpec], threads: int, start_ns: int, costs: RuntimeCosts = RuntimeCosts(),
             step: int = 0, rank: int = 0, first_id: int = 0) -> list[Task]:
    """The graph run by `threads` workers from `start_ns`: the earliest-free thread takes the task that became ready
    first (ready: when its last predecessor ended, `start_ns` for a root), ties by id. Ids are offset by
    `first_id` (task ids are unique on a rank over the whole trace)."""
    free = [start_ns] * threads
    end: dict[int, int] = {}
    pending = {t.id: t for t in graph}
    out = []
    while pending:
        ready = [(max((end[p] for p in t.preds), default=start_ns), t.id) for t in pending.values()
                 if all(p in end for p in t.preds)]
        ready_ns, tid = min(ready)
        thread = int(np.argmin(free))
        spec = pending.pop(tid)
        begin = max(free[thread], ready_ns) + costs.take_ns
        end[tid] = begin + spec.duration_ns
        free[thread] = end[tid] + costs.release_ns
        out.append(Task(tid + first_id, spec.name, begin, end[tid], thread, tuple(p + first_id for p in spec.preds),
                        spec.layer, spec.block, step, rank))
    return out


def run_steps(graphs: list[list[TaskSpec]], cfg: TaskTraceConfig = TaskTraceConfig(), rank: int = 0,
              start_ns: int = 0) -> list[Task]:
    """One graph per step, each scheduled after the previous step's Python (ids unique over the steps)."""
    out: list[Task] = []
    t, first_id = start_ns + cfg.costs.gap_ns, 0
    for step, graph in enumerate(graphs):
        placed = schedule(graph, cfg.threads, t, cfg.costs, step, rank, first_id)
        out += placed
        first_id += len(graph)
        t = max(x.end_ns for x in placed) + cfg.costs.release_ns + 2 * cfg.costs.gap_ns
    return out


def random_dag(rng: np.random.Generator, n: int, max_preds: int = 3, mean_ns: int = 50_000) -> list[TaskSpec]:
    """`n` tasks, each depending on up to `max_preds` earlier ones, durations log-normal around `mean_ns`."""
    names = ("matmul_forward", "gelu_forward", "layernorm_forward", "attention_forward")
    out = []
    for i in range(n):
        k = int(rng.integers(0, min(i, max_preds) + 1))
        preds = tuple(sorted(int(p) for p in rng.choice(i, size=k, replace=False))) if k else ()
        dur = max(1, int(mean_ns * rng.lognormal(0.0, 0.7)))
        out.append(TaskSpec(i, names[int(rng.integers(len(names)))], dur, preds, int(rng.integers(0, 2)),
                            int(rng.integers(0, 4))))
    return out


def task_table(tasks: list[Task], cfg: TaskTraceConfig = TaskTraceConfig()) -> pa.Table:
    """A valid task trace table (schema types and metadata) of the placed tasks.

    Per rank and step the runtime spans [first task start - take_ns, last task end + release_ns); the main thread
    runs Python for gap_ns before and after it (a `dataload` phase before), the workers are Idle outside it. Each
    lane covers [0, the latest end of any rank). Raises ValueError when a thread's tasks and their Scheduling
    overlap, or steps overlap."""
    costs, threads = cfg.costs, cfg.threads
    recs: list[dict] = []
    span_end = 0
    lanes: dict[tuple[int, int], list[tuple[int, int, int]]] = {}      # (rank, thread) -> (start, end, state)
    ranks = sorted({t.rank for t in tasks} | set(range(cfg.ranks)))
    for rank in ranks:
        mine = [t for t in tasks if t.rank == rank]
        prev_end = 0
        for step in sorted({t.step for t in mine}):
            st = [t for t in mine if t.step == step]
            r0 = min(t.start_ns for t in st) - costs.take_ns
            r1 = max(t.end_ns for t in st) + costs.release_ns
            s0, s1 = r0 - costs.gap_ns, r1 + costs.gap_ns
            if s0 < prev_end:
                raise ValueError(f"rank {rank} step {step} starts at {s0} ns, before the previous step ends "
                                 f"({prev_end} ns)")
            for thread in range(threads):
                lane = lanes.setdefault((rank, thread), [])
                lane.append((prev_end, s0, State.RUNNING if thread == 0 else State.IDLE))      # between steps
                lane.append((s0, r0, State.RUNNING if thread == 0 else State.IDLE))
                lane += _runtime_states(rank, thread, [t for t in st if t.thread == thread], r0, r1, costs)
                lane.append((r1, s1, State.RUNNING if thread == 0 else State.IDLE))
            recs += _step_records(rank, step, st, s0, r0, r1, s1)
            prev_end = s1
        span_end = max(span_end, prev_end)
    for (rank, thread), lane in sorted(lanes.items()):
        last = lane[-1][1]
        lane.append((last, span_end, State.RUNNING if thread == 0 else State.IDLE))
        recs += [{KIND: Kind.STATE, RANK: rank, THREAD: thread, START_NS: a, END_NS: b, STATE: int(s)}
                 for a, b, s in lane if b > a]
    for t in tasks:
        body = {RANK: t.rank, THREAD: t.thread, START_NS: t.start_ns, END_NS: t.end_ns, NAME: t.name, STEP: t.step,
                LAYER: t.layer, MICROSTEP: t.microstep}
        recs.append({KIND: Kind.TASK, **body, TASK: t.id, BLOCK: t.block, PREDS: list(t.preds)})
        recs.append({KIND: Kind.COMM if t.name.startswith(MPI_PREFIX) else Kind.KERNEL, **body})
    return _table(recs, _metadata(cfg, tasks))


def _runtime_states(rank: int, thread: int, tasks: list[Task], r0: int, r1: int,
                    costs: RuntimeCosts) -> list[tuple[int, int, int]]:
    out, t = [], r0
    for task in sorted(tasks, key=lambda x: x.start_ns):
        take = task.start_ns - costs.take_ns
        if take < t:
            raise ValueError(f"rank {rank} thread {thread}: task {task.id} at {task.start_ns} ns overlaps the "
                             f"previous task or its Scheduling (free from {t} ns)")
        out += [(t, take, State.IDLE), (take, task.start_ns, State.SCHEDULING_FORK_JOIN),
                (task.start_ns, task.end_ns, State.RUNNING),
                (task.end_ns, task.end_ns + costs.release_ns, State.SCHEDULING_FORK_JOIN)]
        t = task.end_ns + costs.release_ns
    if t > r1:
        raise ValueError(f"rank {rank} thread {thread}: tasks run past the runtime's end")
    out.append((t, r1, State.IDLE))
    return out


def _step_records(rank: int, step: int, tasks: list[Task], s0: int, r0: int, r1: int, s1: int) -> list[dict]:
    """Phases that tile the step: dataload, then forward / backward / optimizer cut where the first task of the
    next phase starts (in a task run they overlap; the cut keeps them a partition), then the counters."""
    def first(suffix: str) -> int | None:
        starts = [t.start_ns for t in tasks if t.name.endswith(suffix)]
        return min(starts) if starts else None
    cuts = [r0] + [c for c in (first("_backward"), first("adamw")) if c is not None] + [s1]
    names = [Phase.FORWARD, Phase.BACKWARD, Phase.OPTIMIZER][:len(cuts) - 1]
    out = [{KIND: Kind.PHASE, RANK: rank, THREAD: 0, START_NS: s0, END_NS: r0, NAME: Phase.DATALOAD, STEP: step,
            MICROSTEP: 0}]
    out += [{KIND: Kind.PHASE, RANK: rank, THREAD: 0, START_NS: a, END_NS: b, NAME: n, STEP: step, MICROSTEP: 0}
            for a, b, n in zip(cuts, cuts[1:], names) if b > a]
    out += [{KIND: Kind.COUNTER, RANK: rank, THREAD: 0, START_NS: s1, END_NS: s1, NAME: c, STEP: step, VALUE: v}
            for c, v in ((Counter.LOSS, 4.0 - 0.01 * step), (Counter.LR, 1e-3), (Counter.GRAD_NORM, 1.0),
                         (Counter.TOKENS, 256.0))]
    return out


def _metadata(cfg: TaskTraceConfig, tasks: list[Task]) -> dict[bytes, bytes]:
    steps = len({t.step for t in tasks})
    run = {"model": {"n_layer": 2, "n_head": 4, "n_embd": 128, "vocab_size": 512, "max_seq_len": 128,
                     "num_parameters": 500_000},
           "train": {"batch_size": 4, "seq_len": 64, "grad_accum": 1, "steps": steps, "lr": 1e-3},
           "parallel": {"ranks": max(cfg.ranks, 1 + max((t.rank for t in tasks), default=0)),
                        "threads": cfg.threads, "schedule": Schedule.TASKS},
           "synthetic": True}
    return {schema.META_RUN: json.dumps(run).encode()}


def _table(recs: list[dict], meta: dict[bytes, bytes]) -> pa.Table:
    columns = {c: pa.array([r.get(c) for r in recs], type=t) for c, t in schema.FIELDS.items()}
    table = pa.table(columns, schema=schema.arrow_schema(meta))
    order = lane_order(np.array([r[RANK] for r in recs]), np.array([r[THREAD] for r in recs]),
                       np.array([r[START_NS] for r in recs]))
    return table.take(order)


def _us(t: float) -> int:
    return int(round(t * 1_000))


def hand_built() -> tuple[list[Task], TaskTraceConfig]:
    """Five tasks of one step on 2 threads, times in us, runtime costs 1 us before and after each task, 10 us of
    Python around the runtime (tests/analysis/test_tasks.py works out its numbers):

        thread 0:  A matmul_forward  [11, 41)            D gelu_forward [43, 53)
        thread 1:  B matmul_forward  [11, 31)  C gelu_forward [33, 43)           E residual_forward [54, 59)
        edges: A -> D, B -> C, C -> E, D -> E
    """
    us = _us
    tasks = [Task(0, "matmul_forward", us(11), us(41), 0, (), 0, 0),
             Task(1, "matmul_forward", us(11), us(31), 1, (), 0, 1),
             Task(2, "gelu_forward", us(33), us(43), 1, (1,), 0, 1),
             Task(3, "gelu_forward", us(43), us(53), 0, (0,), 0, 0),
             Task(4, "residual_forward", us(54), us(59), 1, (2, 3), 0, 0)]
    return tasks, TaskTraceConfig(threads=2, costs=RuntimeCosts(take_ns=1_000, release_ns=1_000, gap_ns=10_000))
