"""What every trace the trainer writes must satisfy, as reusable checks.

Shared by the tests over fresh traces (test_tracer_invariants.py), the sample traces and the recovered trace
of a killed run (test_crash.py). Each check raises AssertionError with what broke.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpt2trace.format import communicators as comms
from gpt2trace.format import schema as S
from gpt2trace.format.matching import match_messages
from gpt2trace.format.mpi_calls import IRECV, ISEND, RECV, SEND, SENDRECV, is_mpi, operation
from gpt2trace.format.reader import Trace, check_states, load
from gpt2trace.format.schema import State

# Per step, a worker's Running time equals the sum of its kernel blocks exactly: both are the same clipped
# clock reads (states.py derives Running from the blocks; records of one thread never overlap, since a thread's
# blocks of consecutive regions are separated by the main thread's region exit/enter reads). Tolerance: 0 ns.
RUNNING_TOLERANCE_NS = 0
COMPUTE_PHASES = S.Phase.COMPUTE


def records(trace: Trace, kind: str) -> pd.DataFrame:
    """The records of one kind with every column (the reader leaves out columns null for the whole kind)."""
    df = trace.records(kind).to_pandas()
    for name in S.FIELDS:
        if name not in df.columns and name != S.KIND:
            df[name] = pd.Series(np.nan, index=df.index, dtype=object if name == S.NAME else float)
    return df


def check_columns(path: Path, version: int = S.SCHEMA_VERSION) -> None:
    """Columns, order and Arrow types as documented in schema.py / docs/trace-format.md; the version key (an older
    `version` for traces kept from earlier releases)."""
    schema = pq.read_schema(path)
    assert int(schema.metadata[S.META_VERSION]) == version, schema.metadata[S.META_VERSION]
    # version 1 had every column but `communicator` (its MPI calls all ran on the world) and `tag`, version 2 all
    # but `tag`, version 3 all but the task columns
    added = {S.COMMUNICATOR: 2, S.TAG: 3, S.TASK: 4, S.BLOCK: 4, S.PREDS: 4}
    fields = {n: t for n, t in S.FIELDS.items() if version >= added.get(n, 1)}
    assert schema.names == list(fields), schema.names
    for name, typ in fields.items():
        assert schema.field(name).type == typ, (name, schema.field(name).type)


def check_metadata(trace: Trace, threads: int, steps: int) -> None:
    run, machine, peak, clock = trace.run, trace.machine, trace.peak, trace.clock
    assert run["parallel"]["threads"] == threads and run["parallel"]["ranks"] == 1
    assert run["train"]["steps"] == steps and run["model"]["num_parameters"] > 0
    assert machine["cores"] >= 1 and machine["threading_layer"] and machine["python"]
    assert machine["blas"]["library"] and "numba" in machine["packages"]
    assert peak["gflops_per_core"] > 0
    assert clock["source"] == "CLOCK_MONOTONIC" and clock["offsets_ns"] == [0]


def check_partition(trace: Trace, threads: int, mpi: bool = False) -> None:
    """For every thread 0..threads-1: state records in time order, back to back, covering the whole span; with
    `mpi`, the main thread may also be in MPI states."""
    span0 = min(int(trace.records(k).column(S.START_NS).to_numpy().min()) for k in trace.parts)
    span1 = max(int(trace.records(k).column(S.END_NS).to_numpy().max()) for k in trace.parts)
    st = records(trace, S.Kind.STATE)
    assert sorted(st[S.THREAD].unique()) == list(range(threads))
    assert st[S.STATE].isin([int(s) for s in State]).all()
    for thread, g in st.groupby(S.THREAD):
        g = g.sort_values(S.START_NS)
        s, e = g[S.START_NS].to_numpy(), g[S.END_NS].to_numpy()
        assert (e > s).all(), f"thread {thread}: an empty state record"
        assert s[0] == span0 and e[-1] == span1, f"thread {thread} covers [{s[0]}, {e[-1]}) of [{span0}, {span1})"
        gaps = np.flatnonzero(s[1:] != e[:-1])
        assert len(gaps) == 0, f"thread {thread}: gap or overlap at {e[gaps[0]]} ns"
        allowed = {State.RUNNING, State.SCHEDULING_FORK_JOIN, State.SYNCHRONIZATION}
        allowed |= {State.IO} if thread == 0 else {State.IDLE}
        allowed |= set(S.MPI_STATES) if mpi and thread == 0 else set()
        assert set(g[S.STATE].unique()) <= allowed, (thread, set(g[S.STATE].unique()))
    assert check_states(trace) == []              # the reader's own check agrees


def _running_before(st: pd.DataFrame, thread: int):
    """t -> Running ns of `thread` in [span start, t): cumulative over its (partitioning) state records."""
    g = st[st[S.THREAD] == thread].sort_values(S.START_NS)
    s, e = g[S.START_NS].to_numpy(), g[S.END_NS].to_numpy()
    run = (g[S.STATE] == State.RUNNING).to_numpy()
    cum = np.concatenate([[0], np.cumsum(np.where(run, e - s, 0))])

    def at(t: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(s, t, side="right") - 1, 0, len(s) - 1)
        return cum[i] + np.where(run[i], np.clip(t - s[i], 0, e[i] - s[i]), 0)
    return at


def check_kernels(trace: Trace, threads: int, n_layer: int, grad_accum: int) -> None:
    """Kernel records lie inside a compute phase of their step and microstep, and inside their thread's
    Running time."""
    k, ph, st = records(trace, S.Kind.KERNEL), records(trace, S.Kind.PHASE), records(trace, S.Kind.STATE)
    if k.empty:
        return
    assert k[S.THREAD].between(0, threads - 1).all() and k[S.NAME].notna().all()
    assert k[S.STEP].notna().all() and k[S.MICROSTEP].between(0, grad_accum - 1).all()
    assert k[S.LAYER].dropna().between(0, n_layer - 1).all()
    outside = np.ones(len(k), dtype=bool)
    for p in ph[ph[S.NAME].isin(COMPUTE_PHASES)].itertuples(index=False):
        p = p._asdict()
        outside &= ~((k[S.STEP] == p[S.STEP]) & (k[S.MICROSTEP] == p[S.MICROSTEP])
                     & (k[S.START_NS] >= p[S.START_NS]) & (k[S.END_NS] <= p[S.END_NS])).to_numpy()
    assert not outside.any(), f"{outside.sum()} kernel record(s) outside the compute phases of their step " \
                              f"and microstep, first:\n{k[outside].head(1)}"
    k = records(trace, S.Kind.KERNEL)
    for thread, g in k.groupby(S.THREAD):
        running = _running_before(st, thread)
        covered = running(g[S.END_NS].to_numpy()) - running(g[S.START_NS].to_numpy())
        dur = (g[S.END_NS] - g[S.START_NS]).to_numpy()
        assert (covered == dur).all(), f"thread {thread}: a kernel record is not inside Running time"


def step_spans(trace: Trace) -> pd.DataFrame:
    """[start, end) of each step: from its first phase's start to its last phase's end."""
    ph = records(trace, S.Kind.PHASE).dropna(subset=[S.STEP])
    return ph.astype({S.STEP: int}).groupby(S.STEP).agg(start=(S.START_NS, "min"), end=(S.END_NS, "max"))


def check_running_per_step(trace: Trace) -> None:
    """Per step and thread: workers' Running == the sum of their kernel blocks (RUNNING_TOLERANCE_NS); the
    main thread's Running >= its blocks, since it also runs the step's Python between regions."""
    st, k = records(trace, S.Kind.STATE), records(trace, S.Kind.KERNEL)
    for step, span in step_spans(trace).iterrows():
        for thread in sorted(st[S.THREAD].unique()):
            running = _running_before(st, thread)
            run_ns = int(np.diff(running(np.array([span["start"], span["end"]])))[0])
            mine = k[(k[S.THREAD] == thread) & (k[S.STEP] == step)]
            blocks_ns = int((mine[S.END_NS] - mine[S.START_NS]).sum())
            if thread == 0:
                assert run_ns >= blocks_ns, (step, thread, run_ns, blocks_ns)
            else:
                assert abs(run_ns - blocks_ns) <= RUNNING_TOLERANCE_NS, \
                    f"step {step} thread {thread}: Running {run_ns} ns, kernel blocks {blocks_ns} ns"


def check_steps(trace: Trace, steps: int, grad_accum: int, tokens: int, lr: float, closed: bool = True,
                rss: bool = True) -> None:
    """Counters once per step (end == start), the phases of every step, the resident memory at every phase end of
    the sampled steps (each rank's first, then one every `memory_every_s`) and of every checkpoint, the tracer's
    flushes (one per step; the last flush's own `trace_flush` phase would be in the next window,
    which a killed run never writes). `rss` False: a trace recorded before the tracer sampled memory, which has
    no samples."""
    co = records(trace, S.Kind.COUNTER)
    assert (co[S.END_NS] == co[S.START_NS]).all() and co[S.VALUE].notna().all()
    samples, co = co[co[S.NAME] == S.Counter.RSS_BYTES], co[co[S.NAME] != S.Counter.RSS_BYTES]
    counts = co.groupby([S.STEP, S.NAME]).size()
    assert len(counts) == steps * len(S.Counter.PER_STEP) and (counts == 1).all(), f"counters per step:\n{counts}"
    if steps:
        assert set(co[S.NAME]) == set(S.Counter.PER_STEP)
        assert (co[co[S.NAME] == S.Counter.TOKENS][S.VALUE] == tokens).all()
        assert (co[co[S.NAME] == "lr"][S.VALUE] == lr).all()
    ph = records(trace, S.Kind.PHASE)
    assert set(ph[S.NAME]) <= set(S.PHASES)
    per_step = ph.dropna(subset=[S.STEP]).groupby([S.STEP, S.NAME]).size().unstack(fill_value=0)
    want = {S.Phase.DATALOAD: grad_accum, S.Phase.FORWARD: grad_accum, S.Phase.BACKWARD: grad_accum,
            S.Phase.GRAD_SYNC: 1, S.Phase.OPTIMIZER: 1}
    assert len(per_step) == steps
    for name, n in want.items():
        assert steps == 0 or (per_step[name] == n).all(), (name, per_step)
    flushes = ph[ph[S.NAME] == S.Phase.TRACE_FLUSH]
    assert flushes[S.STEP].isna().all() and len(flushes) == (steps if closed else max(steps - 1, 0))
    if not rss:
        assert samples.empty, "resident memory samples in a trace said to have none"
        return
    # a sample is a phase's end, with its rank, step and micro-batch: of every phase of a sampled step
    cols = [S.RANK, S.END_NS, S.STEP, S.MICROSTEP]
    ends = ph[ph[S.NAME] != S.Phase.TRACE_FLUSH][[*cols, S.NAME]]
    m = ends.merge(samples[cols].assign(sampled=True), on=cols, how="left")
    assert len(m) == len(ends) and m["sampled"].notna().sum() == len(samples), \
        "resident memory: a sample at no phase end, or two at one"
    m["sampled"] = m["sampled"].notna()
    always = (m[S.NAME] == S.Phase.CHECKPOINT) | m[S.STEP].isna()
    assert m[always]["sampled"].all(), "resident memory: a checkpoint or a phase outside the steps not sampled"
    per_step = m[~always].groupby([S.RANK, S.STEP])["sampled"]
    assert (per_step.all() == per_step.any()).all(), "resident memory: a step sampled at some phase ends only"
    if steps:
        first = m[~always].sort_values(S.STEP, kind="stable").groupby(S.RANK).head(1)
        assert first["sampled"].all(), "resident memory: a rank's first step not sampled"
    assert (samples[S.VALUE] > 0).all(), "resident memory: a sample <= 0"


def check_messages(trace: Trace) -> None:
    """Every point-to-point message of a trace this tool recorded has both ends (`format.matching` pairs them):
    each Send/Isend is received exactly once on its peer and each Recv/Irecv receives exactly one send; a
    Sendrecv takes part in at least one message (its one `peer` is its destination, or its source when it sends to
    no one, so the trace cannot say which halves it had). A pair is on one communicator; a send and the plain
    receive (Recv/Irecv) it pairs with have the same bytes, and the same tag where both record one (a Sendrecv's
    bytes and tag are its send half's). Imported traces may lack ends (tracing switched off on a rank): not for
    them."""
    c = records(trace, S.Kind.COMM)
    if c.empty:
        return
    c = c.reset_index(drop=True)
    op = np.array([operation(n) for n in c[S.NAME]], dtype=np.int64)
    peer = c[S.PEER].fillna(-1).to_numpy(np.int64)
    sends, recvs = match_messages(c[S.RANK].to_numpy(), peer, op, c[S.START_NS].to_numpy(), c[S.END_NS].to_numpy())
    problems = []

    def call(i: int) -> str:
        tag = "" if pd.isna(c[S.TAG][i]) else f", tag {int(c[S.TAG][i])}"
        size = "" if pd.isna(c[S.BYTES][i]) else f", {int(c[S.BYTES][i])} bytes"
        return (f"rank {int(c[S.RANK][i])}'s {c[S.NAME][i]} at {int(c[S.START_NS][i])} ns (peer "
                f"{int(peer[i])}{tag}{size})")

    as_send, as_recv = np.bincount(sends, minlength=len(c)), np.bincount(recvs, minlength=len(c))
    has_peer = peer >= 0
    for i in np.flatnonzero(np.isin(op, (SEND, ISEND)) & has_peer & (as_send != 1)):
        problems.append(f"{call(i)} is received {as_send[i]} times on its peer, not once")
    for i in np.flatnonzero(np.isin(op, (RECV, IRECV)) & has_peer & (as_recv != 1)):
        problems.append(f"{call(i)} receives {as_recv[i]} sends, not one")
    for i in np.flatnonzero((op == SENDRECV) & has_peer & (as_send + as_recv == 0)):
        problems.append(f"{call(i)} is part of no message")
    comm = c[S.COMMUNICATOR].fillna(comms.WORLD_ID).to_numpy(np.int64)
    for s, r in zip(sends, recvs):
        if comm[s] != comm[r]:
            problems.append(f"{call(s)} on communicator {comm[s]} pairs with {call(r)} on communicator {comm[r]}")
        if op[r] == SENDRECV:
            continue
        if pd.notna(c[S.BYTES][s]) and pd.notna(c[S.BYTES][r]) and c[S.BYTES][s] != c[S.BYTES][r]:
            problems.append(f"{call(s)} pairs with {call(r)}: different bytes")
        if pd.notna(c[S.TAG][s]) and pd.notna(c[S.TAG][r]) and c[S.TAG][s] != c[S.TAG][r]:
            problems.append(f"{call(s)} pairs with {call(r)}: different tags")
    assert not problems, f"{len(problems)} point-to-point problem(s), first: " + "; ".join(problems[:3])


def check_tasks(trace: Trace) -> None:
    """A task trace (schema version 4): task ids unique on their rank; predecessors are tasks of the same rank that
    end before the task starts; each task body is a kernel (or, for a communication task, comm) record of the same
    thread and times; each thread's states partition the rank's span (Running, Scheduling and Fork/Join, Idle, and
    MPI states on the main thread), every task inside Running; per rank and step the critical path through the
    predecessors (computed here on its own, not by analysis/tasks.py) no longer than the runtime, first task start
    to last task end. No-op on a trace without tasks."""
    t = records(trace, S.Kind.TASK)
    if t.empty:
        return
    assert t[S.TASK].notna().all() and t[S.NAME].notna().all(), "a task record without id or name"
    assert not t.duplicated([S.RANK, S.TASK]).any(), \
        f"duplicate task ids: {t[t.duplicated([S.RANK, S.TASK])][[S.RANK, S.TASK]].head(3).values.tolist()}"
    for rank, g in t.groupby(S.RANK):
        ids = g[S.TASK].astype(int).to_numpy()
        ends = dict(zip(ids, g[S.END_NS].astype(int)))
        for tid, preds, s in zip(ids, g[S.PREDS], g[S.START_NS].astype(int)):
            assert preds is not None, f"rank {rank} task {tid}: null preds (a task with none has an empty list)"
            for p in preds:
                assert p in ends, f"rank {rank} task {tid}: predecessor {p} is no task of the rank"
                assert ends[p] <= s, f"rank {rank} task {tid} starts at {s} ns, before its predecessor {p} ends " \
                                     f"({ends[p]} ns)"
    # a computing task's body is a kernel record of the same thread and times; a communication task's (named by
    # its MPI call) holds that call's comm record, which the MPI layer timed inside the task
    key = [S.RANK, S.THREAD, S.START_NS, S.END_NS, S.NAME]
    is_comm = t[S.NAME].astype(str).map(is_mpi)
    found = t.loc[~is_comm, key].astype({S.NAME: str}).merge(
        records(trace, S.Kind.KERNEL)[key].astype({S.NAME: str}).drop_duplicates(), how="left", indicator=True)
    assert (found["_merge"] == "both").all(), f"{(found['_merge'] != 'both').sum()} task(s) without their kernel " \
                                             "record"
    comm = records(trace, S.Kind.COMM)
    for row in t[is_comm].itertuples(index=False):
        r = row._asdict()
        inside = comm[(comm[S.RANK] == r[S.RANK]) & (comm[S.THREAD] == r[S.THREAD]) & (comm[S.NAME] == r[S.NAME])
                      & (comm[S.START_NS] >= r[S.START_NS]) & (comm[S.END_NS] <= r[S.END_NS])]
        assert len(inside) == 1, f"rank {r[S.RANK]} task {r[S.TASK]} ({r[S.NAME]}): {len(inside)} comm records " \
                                 "inside its body, not 1"
    ranks = sorted(records(trace, S.Kind.STATE)[S.RANK].unique())
    for rank in ranks:
        mine = replace(trace, parts={k: p.filter(pc.equal(p.column(S.RANK), rank)) for k, p in trace.parts.items()})
        _check_task_lanes(mine, t[t[S.RANK] == rank])
    for (rank, step), g in t.groupby([S.RANK, S.STEP]):
        length = _longest_path(g)
        runtime = int(g[S.END_NS].max() - g[S.START_NS].min())
        assert length <= runtime, f"rank {rank} step {step}: critical path {length} ns > runtime {runtime} ns"


def _check_task_lanes(trace: Trace, tasks: pd.DataFrame) -> None:
    st = records(trace, S.Kind.STATE)
    span0 = min(int(trace.records(k).column(S.START_NS).to_numpy().min()) for k in trace.parts)
    span1 = max(int(trace.records(k).column(S.END_NS).to_numpy().max()) for k in trace.parts)
    for thread, g in st.groupby(S.THREAD):
        g = g.sort_values(S.START_NS)
        s, e = g[S.START_NS].to_numpy(), g[S.END_NS].to_numpy()
        assert s[0] == span0 and e[-1] == span1 and (s[1:] == e[:-1]).all(), \
            f"rank.thread {g[S.RANK].iloc[0]}.{thread}: states do not partition [{span0}, {span1})"
        allowed = {State.RUNNING, State.SCHEDULING_FORK_JOIN, State.IDLE, State.SYNCHRONIZATION}
        allowed |= set(S.MPI_STATES) | {State.IO} if thread == 0 else set()
        assert set(g[S.STATE].unique()) <= allowed, (thread, set(g[S.STATE].unique()))
        running = _running_before(st, thread)
        # a communication task's body is in its MPI call's state around the call, Running around it
        mine = tasks[(tasks[S.THREAD] == thread) & ~tasks[S.NAME].astype(str).map(is_mpi)]
        covered = running(mine[S.END_NS].to_numpy()) - running(mine[S.START_NS].to_numpy())
        assert (covered == (mine[S.END_NS] - mine[S.START_NS]).to_numpy()).all(), \
            f"thread {thread}: a task body is not inside Running time"


def _longest_path(tasks: pd.DataFrame) -> int:
    """The longest chain of a step's tasks through their predecessors (of the same step), weighted by duration."""
    order = tasks.sort_values([S.START_NS, S.END_NS])
    finish: dict[int, int] = {}
    for tid, preds, s, e in zip(order[S.TASK].astype(int), order[S.PREDS], order[S.START_NS], order[S.END_NS]):
        finish[tid] = int(e - s) + max((finish[p] for p in preds if p in finish), default=0)
    return max(finish.values())


def check_trace(path: Path, *, threads: int, steps: int, grad_accum: int = 1, n_layer: int = 2,
                tokens: int | None = None, lr: float = 1e-3, closed: bool = True,
                version: int = S.SCHEMA_VERSION, rss: bool = True) -> Trace:
    """All of the above on a trace file written by `gpt2trace run` (or recovered); returns the loaded trace.
    `rss` False: recorded before the tracer sampled resident memory."""
    check_columns(path, version)
    trace = load(path)
    check_metadata(trace, threads, trace.run["train"]["steps"])
    if trace.records(S.Kind.TASK).num_rows:
        check_tasks(trace)                     # states and kernels of a task run: see check_tasks
    else:
        check_partition(trace, threads)
        check_kernels(trace, threads, n_layer, grad_accum)
        check_running_per_step(trace)
    check_messages(trace)
    if tokens is not None:
        check_steps(trace, steps, grad_accum, tokens, lr, closed, rss)
    return trace


def check_ranks(trace: Trace, threads: int, n_layer: int, grad_accum: int) -> None:
    """The per-thread checks above on each rank of a multi-rank trace by itself (MPI states allowed on the main
    thread): states partition every thread's span, kernels lie in their step's and micro-batch's compute phases
    and in Running time, workers run exactly their kernels."""
    ranks = sorted(records(trace, S.Kind.STATE)[S.RANK].unique())
    assert ranks, "no state records"
    for rank in ranks:
        mine = replace(trace, parts={k: t.filter(pc.equal(t.column(S.RANK), rank)) for k, t in trace.parts.items()})
        check_partition(mine, threads, mpi=True)
        check_kernels(mine, threads, n_layer, grad_accum)
        check_running_per_step(mine)
