"""Synthetic pipeline-parallel traces: P stages x D pipelines, M micro-batches a step, GPipe or 1F1B, timed as a
real pipeline runs, so tests know the answers (the bubble, who waits for whom and why).

The trace follows the trainer's pipeline contract. Ranks sit on a grid with the pipeline dimension slowest, as
Megatron-LM lays them out (rank = stage x D + pipeline), so a stage is not its rank. The metadata names the
communicators: `pp` (one per pipeline, its ranks in stage order), `dp` (the ranks of one stage, D > 1), `embed`
(first and last stage of a pipeline, P > 1), and the world. Per step, each rank runs its stage's schedule
(`schedule`); on the main thread, a micro-batch m's forward phase is

    [MPI_Recv the activation from stage k-1] [MPI_Wait on the previous forward send] kernels [MPI_Isend to k+1]

and its backward phase the same towards stage k-1 (with `recompute`, the stage's layer kernels run forward again
first, taking `forward_ns` again). The wait on a send request comes before the kernels that overwrite its buffer. A
`dataload` phase (I/O) precedes each forward on the first and the last stage. A receive ends `transfer_ns` after its
matched send starts, or `call_ns` after it is posted when the message is there already; a wait on a send ends when
its receive did (at least `call_ns`); an Isend takes `call_ns`. Then `grad_sync`: waits on the sends still open,
MPI_Allreduce on dp, then on embed (a collective ends `sync_ns` after its last member entered); then `optimizer`
(adamw); counters; the tracer's flush (`trace_flush`, no step). Python between phases takes `gap_ns` (Running).
Workers run every kernel with the main thread (a region without fork or synchronization time) and are Idle
otherwise. Durations are exact integers: no noise.
"""
from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpt2trace.format import communicators as comms
from gpt2trace.format import schema
from gpt2trace.format.grid import GRID_KEY
from gpt2trace.format.grid import as_json as grid_json
from gpt2trace.format.lanes import lane_order
from gpt2trace.format.schema import (
    BYTES,
    COMMUNICATOR,
    END_NS,
    KIND,
    LAYER,
    MICROSTEP,
    NAME,
    PEER,
    RANK,
    SEQ,
    START_NS,
    STATE,
    STEP,
    THREAD,
    VALUE,
    Counter,
    Kind,
    Phase,
    State,
)
from gpt2trace.testing.synthetic import kernel_sequence

GPIPE, ONE_F_ONE_B = "gpipe", "1f1b"
SCHEDULES = (GPIPE, ONE_F_ONE_B)
PP, DP, EMBED = "pp", "dp", "embed"       # communicator names, as the trainer's rank grid names them
F, B = "F", "B"                           # a forward / backward of one micro-batch in a schedule
RECV, ISEND, WAIT, ALLREDUCE = "MPI_Recv", "MPI_Isend", "MPI_Wait", "MPI_Allreduce"
VOCAB = 512


@dataclass(frozen=True)
class PipelineConfig:
    stages: int = 2                   # P
    pipelines: int = 1                # D (data-parallel replicas of the pipeline)
    micro_batches: int = 4            # M (the run's grad_accum)
    schedule: str = ONE_F_ONE_B
    steps: int = 3
    threads: int = 1
    layers: int = 4                   # transformer layers, split into contiguous ranges over the stages
    forward_ns: int = 1_000_000       # one stage's forward kernels for one micro-batch
    backward_ns: int = 2_000_000      # and its backward kernels
    slow_stage: tuple[int, float] | None = None   # (stage, factor on its kernel times)
    transfer_ns: int = 20_000         # a message arrives this long after its send starts
    call_ns: int = 2_000              # an MPI call that does not wait
    gap_ns: int = 3_000               # Python between phases
    dataload_ns: int = 10_000
    optimizer_ns: int = 100_000
    flush_ns: int = 5_000             # the tracer's flush after each step (a step-less phase, as the tracer writes)
    sync_ns: int = 50_000             # a collective ends this long after its last member entered
    recompute: bool = False
    backward_first: bool = True       # GPipe's backward order: B0 first (Megatron) or B(M-1) first
    batch_size: int = 4
    seq_len: int = 64
    channels: int = 64

    def __post_init__(self) -> None:
        for name in ("stages", "pipelines", "micro_batches", "threads", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.layers < self.stages:
            raise ValueError(f"{self.layers} layers cannot fill {self.stages} stages")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")

    @property
    def ranks(self) -> int:
        return self.stages * self.pipelines

    def rank(self, pipeline: int, stage: int) -> int:
        return stage * self.pipelines + pipeline

    @property
    def activation_bytes(self) -> int:
        return self.batch_size * self.seq_len * self.channels * 4           # (B, T, C) float32

    @property
    def tokens(self) -> int:
        """Tokens one pipeline trains on per step (every rank of it writes this `tokens` counter)."""
        return self.batch_size * self.seq_len * self.micro_batches


def schedule(stage: int, stages: int, micro: int, kind: str, backward_first: bool = True) -> list[tuple[str, int]]:
    """The order of one stage's forwards and backwards: GPipe all forwards then all backwards; 1F1B (PipeDream-
    Flush) min(P-k-1, M) warm-up forwards, then one forward and one backward, then the cool-down backwards."""
    if kind == GPIPE:
        back = range(micro) if backward_first else range(micro - 1, -1, -1)
        return [(F, m) for m in range(micro)] + [(B, m) for m in back]
    warm = min(stages - stage - 1, micro)
    ops = [(F, m) for m in range(warm)]
    for i in range(micro - warm):
        ops += [(F, warm + i), (B, i)]
    return ops + [(B, m) for m in range(micro - warm, micro)]


def stage_layers(stage: int, stages: int, layers: int) -> range:
    """A stage's contiguous range of layers; the first L mod P stages take one more."""
    base, extra = divmod(layers, stages)
    first = stage * base + min(stage, extra)
    return range(first, first + base + (stage < extra))


def stage_kernels(cfg: PipelineConfig, stage: int) -> tuple[list, list, list]:
    """(forward, recompute, backward) kernels of a stage as (name, layer); layer -1 outside the blocks: the encoder
    on the first stage, the final layernorm, head and loss on the last."""
    names, layer, phase = kernel_sequence(cfg.layers)
    fwd = [(n, int(lay)) for n, lay, p in zip(names, layer, phase) if p == 0]
    mine = stage_layers(stage, cfg.stages, cfg.layers)
    first, last = stage == 0, stage == cfg.stages - 1
    head = fwd.index(("layernorm_forward", -1), 1)         # the final layernorm opens the head
    fwd = [(n, lay) for i, (n, lay) in enumerate(fwd)
           if lay in mine or (i == 0 and first) or (i >= head and last)]
    recompute = [(n, lay) for n, lay in fwd if lay >= 0]
    bwd = [(n.replace("_forward", "_backward"), lay) for n, lay in reversed(fwd)]
    return fwd, recompute, bwd


def communicator_table(cfg: PipelineConfig) -> list[comms.Communicator]:
    """world, then (in creation order, ids as gpt2trace.format.communicators assigns them) pp, dp, embed."""
    P, D, W = cfg.stages, cfg.pipelines, cfg.ranks
    out = [comms.world(range(W))]
    groups = [(PP, [[cfg.rank(d, k) for k in range(P)] for d in range(D)], P > 1),
              (DP, [[cfg.rank(d, k) for d in range(D)] for k in range(P)], D > 1),
              (EMBED, [[cfg.rank(d, 0), cfg.rank(d, P - 1)] for d in range(D)], P > 1)]
    for creation, (name, members, used) in enumerate(groups, start=1):
        if used:
            out += [comms.Communicator(comms.new_id(creation, W, g), name, tuple(g)) for g in members]
    return out


def generate(cfg: PipelineConfig) -> pa.Table:
    """The trace table (schema types, metadata with the run, the peak and the communicators)."""
    sim = _Simulation(cfg)
    sim.run()
    return sim.table()


def _advance(program: Generator, t: int) -> tuple | None:
    """The next event a rank waits for, after giving it the time of the last one; None when it is done."""
    try:
        return program.send(t)
    except StopIteration:
        return None


def _split(total: int, parts: int) -> np.ndarray:
    """`total` ns over `parts` kernels, whole nanoseconds adding up exactly."""
    return np.diff(np.round(np.linspace(0, total, parts + 1)).astype(np.int64))


class _Lane:
    """One rank's threads, advancing together: the main thread's state between kernels (workers Idle), or a kernel
    that every thread runs."""

    def __init__(self, sim: _Simulation, rank: int):
        self.sim, self.rank, self.t = sim, rank, 0

    def span(self, end: int, main_state: int) -> None:
        if end > self.t:
            for thread in range(self.sim.cfg.threads):
                self.sim.state(self.rank, thread, self.t, end, main_state if thread == 0 else State.IDLE)
            self.t = end

    def kernel(self, name: str, layer: int, ns: int, step: int, micro: int) -> None:
        for thread in range(self.sim.cfg.threads):
            self.sim.state(self.rank, thread, self.t, self.t + ns, State.RUNNING)
            self.sim.add(Kind.KERNEL, self.rank, thread, self.t, self.t + ns, name=name, step=step, micro=micro,
                         layer=layer if layer >= 0 else None)
        self.t += ns


class _Simulation:
    """Each rank is a generator that yields the event it needs (a send started, a receive ended, every member of a
    collective entered) and gets its time back; `run` advances every rank as far as the known events allow."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.rows: list[dict] = []
        self.events: dict[tuple, int] = {}
        self.comms = communicator_table(cfg)
        self.lanes = [_Lane(self, r) for r in range(cfg.ranks)]

    def add(self, kind: str, rank: int, thread: int, start: int, end: int, **cols) -> None:
        row = {KIND: kind, RANK: rank, THREAD: thread, START_NS: int(start), END_NS: int(end)}
        for key, col in (("name", NAME), ("state", STATE), ("step", STEP), ("micro", MICROSTEP),
                         ("layer", LAYER), ("nbytes", BYTES), ("peer", PEER), ("seq", SEQ),
                         ("communicator", COMMUNICATOR), ("value", VALUE)):
            if cols.get(key) is not None:
                row[col] = cols[key]
        self.rows.append(row)

    def state(self, rank: int, thread: int, start: int, end: int, state: int) -> None:
        self.add(Kind.STATE, rank, thread, start, end, state=int(state))

    def comm_of(self, name: str, rank: int) -> comms.Communicator | None:
        return next((c for c in self.comms if c.name == name and rank in c.ranks), None)

    def run(self) -> None:
        programs = {r: self._rank(r) for r in range(self.cfg.ranks)}
        asked = {r: next(p, None) for r, p in programs.items()}
        while any(k is not None for k in asked.values()):
            moved = False
            for r, key in asked.items():
                while key is not None and (t := self._resolve(key)) is not None:
                    key = _advance(programs[r], t)
                    moved = True
                asked[r] = key
            if not moved:
                raise RuntimeError(f"the synthetic pipeline deadlocks: ranks wait for {asked}")
        end = max(lane.t for lane in self.lanes)
        for lane in self.lanes:                                   # the tail: the main thread wraps up
            lane.span(end, State.RUNNING)

    def _resolve(self, key: tuple) -> int | None:
        if key[0] == "collective":
            _, comm, seq = key
            enters = [self.events.get(("enter", comm.id, seq, r)) for r in comm.ranks]
            return None if None in enters else max(enters)
        return self.events.get(key)

    def _rank(self, rank: int) -> Generator[tuple, int, None]:
        cfg, lane = self.cfg, self.lanes[rank]
        P, M = cfg.stages, cfg.micro_batches
        pipeline, stage = rank % cfg.pipelines, rank // cfg.pipelines
        pp, dp, embed = (self.comm_of(n, rank) for n in (PP, DP, EMBED))
        factor = cfg.slow_stage[1] if cfg.slow_stage and cfg.slow_stage[0] == stage else 1.0
        fwd, recompute, bwd = stage_kernels(cfg, stage)
        times = {F: [(fwd, round(cfg.forward_ns * factor))],
                 B: ([(recompute, round(cfg.forward_ns * factor))] if cfg.recompute else [])
                 + [(bwd, round(cfg.backward_ns * factor))]}
        towards = {F: stage + 1, B: stage - 1}                    # the stage each direction sends to
        seqs: dict[int, int] = {}
        for step in range(cfg.steps):
            open_send: dict[str, int] = {}                        # direction -> micro-batch of its open send
            for op, m in schedule(stage, P, M, cfg.schedule, cfg.backward_first):
                if op == F and stage in (0, P - 1):
                    lane.span(lane.t + cfg.gap_ns, State.RUNNING)
                    t0 = lane.t
                    lane.span(t0 + cfg.dataload_ns, State.IO)
                    self.add(Kind.PHASE, rank, 0, t0, lane.t, name=Phase.DATALOAD, step=step, micro=m)
                lane.span(lane.t + cfg.gap_ns, State.RUNNING)
                t0 = lane.t
                source = stage - 1 if op == F else stage + 1
                if 0 <= source < P:
                    sent = yield ("send", pipeline, op, source, step, m)
                    end = max(lane.t + cfg.call_ns, sent + cfg.transfer_ns)
                    self._p2p(lane, RECV, end, State.WAITING_A_MESSAGE, cfg.rank(pipeline, source), pp, step, m)
                    self.events[("received", pipeline, op, stage, step, m)] = end
                if op in open_send:
                    yield from self._wait(lane, pipeline, op, towards[op], step, open_send.pop(op), pp, m)
                for kernels, total in times[op]:
                    for (name, layer), ns in zip(kernels, _split(total, len(kernels))):
                        lane.kernel(name, layer, int(ns), step, m)
                if 0 <= towards[op] < P:
                    self.events[("send", pipeline, op, stage, step, m)] = lane.t
                    self._p2p(lane, ISEND, lane.t + cfg.call_ns, State.IMMEDIATE_SEND,
                              cfg.rank(pipeline, towards[op]), pp, step, m)
                    open_send[op] = m
                self.add(Kind.PHASE, rank, 0, t0, lane.t, name=Phase.FORWARD if op == F else Phase.BACKWARD,
                         step=step, micro=m)
            lane.span(lane.t + cfg.gap_ns, State.RUNNING)
            t0 = lane.t
            for op, m in list(open_send.items()):
                yield from self._wait(lane, pipeline, op, towards[op], step, m, pp, M - 1)
            for comm, nbytes in ((dp, 4 * 1_000_000), (embed if stage in (0, P - 1) else None,
                                                       4 * VOCAB * cfg.channels)):
                if comm is not None:
                    seq = seqs.get(comm.id, 0)
                    seqs[comm.id] = seq + 1
                    enter = lane.t
                    self.events[("enter", comm.id, seq, rank)] = enter
                    last = yield ("collective", comm, seq)
                    lane.span(last + cfg.sync_ns, State.GROUP_COMMUNICATION)
                    self.add(Kind.COMM, rank, 0, enter, lane.t, name=ALLREDUCE, step=step, micro=M - 1,
                             nbytes=nbytes, seq=seq, communicator=comm.id)
            self.add(Kind.PHASE, rank, 0, t0, lane.t, name=Phase.GRAD_SYNC, step=step, micro=M - 1)
            lane.span(lane.t + cfg.gap_ns, State.RUNNING)
            t0 = lane.t
            lane.kernel("adamw", -1, cfg.optimizer_ns, step, M - 1)
            self.add(Kind.PHASE, rank, 0, t0, lane.t, name=Phase.OPTIMIZER, step=step, micro=M - 1)
            for name, value in ((Counter.LOSS, 4.0 - 0.01 * step), (Counter.LR, 3e-4), (Counter.GRAD_NORM, 1.0),
                                (Counter.TOKENS, float(cfg.tokens))):
                self.add(Kind.COUNTER, rank, 0, lane.t, lane.t, name=name, step=step, value=value)
            t0 = lane.t
            lane.span(t0 + cfg.flush_ns, State.RUNNING)
            self.add(Kind.PHASE, rank, 0, t0, lane.t, name=Phase.TRACE_FLUSH)

    def _p2p(self, lane: _Lane, call: str, end: int, state: int, peer: int, pp, step: int, micro: int) -> None:
        start = lane.t
        lane.span(end, state)
        self.add(Kind.COMM, lane.rank, 0, start, end, name=call, step=step, micro=micro,
                 nbytes=self.cfg.activation_bytes, peer=peer, communicator=pp.id)

    def _wait(self, lane: _Lane, pipeline: int, op: str, dest: int, step: int, sent_micro: int, pp,
              micro: int) -> Generator[tuple, int, None]:
        """MPI_Wait on the send of micro-batch `sent_micro` in direction `op`: done when `dest` received it."""
        received = yield ("received", pipeline, op, dest, step, sent_micro)
        start = lane.t
        lane.span(max(start + self.cfg.call_ns, received), State.WAIT_WAITALL)
        self.add(Kind.COMM, lane.rank, 0, start, lane.t, name=WAIT, step=step, micro=micro, communicator=pp.id)

    def table(self) -> pa.Table:
        table = _from_rows(self.rows, _metadata(self.cfg, self.comms))
        return table.take(lane_order(table.column(RANK).to_numpy(), table.column(THREAD).to_numpy(),
                                     table.column(START_NS).to_numpy()))


def _from_rows(rows: list[dict], meta: dict[bytes, bytes]) -> pa.Table:
    columns = {c: pa.array([r.get(c) for r in rows], type=t) for c, t in schema.FIELDS.items()}
    return pa.table(columns, schema=schema.arrow_schema(meta))


def _metadata(cfg: PipelineConfig, table: list[comms.Communicator]) -> dict[bytes, bytes]:
    L, C, T = cfg.layers, cfg.channels, cfg.seq_len
    n_params = VOCAB * C + T * C + L * (12 * C * C + 13 * C) + 2 * C        # GPT-2 with the tied head
    run = {"model": {"n_layer": L, "n_head": 4, "n_embd": C, "vocab_size": VOCAB, "max_seq_len": T,
                     "padded_vocab_size": VOCAB, "num_parameters": n_params},
           "train": {"batch_size": cfg.batch_size, "seq_len": T, "grad_accum": cfg.micro_batches,
                     "steps": cfg.steps},
           "parallel": {"ranks": cfg.ranks, "threads": cfg.threads, "pp": cfg.stages, "pp_schedule": cfg.schedule,
                        "recompute": cfg.recompute, "sp": 1},
           GRID_KEY: grid_json(((DP, cfg.pipelines), (PP, cfg.stages))),       # rank = stage x D + pipeline
           "synthetic": True}
    peak = {"gflops_per_core": 50.0, "cores": cfg.ranks * cfg.threads}
    return {schema.META_RUN: json.dumps(run).encode(), schema.META_PEAK: json.dumps(peak).encode(),
            **comms.to_metadata(table)}
