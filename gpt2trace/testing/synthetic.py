"""Synthetic traces that follow the schema, built with NumPy (10 million records in seconds).

Each rank runs `steps` training steps shaped like the trainer's: dataload (main thread in I/O), the forward and
backward kernels of every layer (each a parallel region: per thread Scheduling/Fork-Join, Running in its block,
Synchronization until the slowest thread ends), an optional MPI_Allreduce of the gradients (ranks leave it when the
last one has entered plus a transfer time), then AdamW. Between regions the main thread runs Python (Running) and
the workers are Idle. Imbalance, a slow thread, a late rank and a serial section can be injected.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format import schema
from gpt2trace.format.lanes import lane_order
from gpt2trace.format.rank_order import MERGED_ROW_GROUP, RankOrderedWriter
from gpt2trace.format.schema import (
    BYTES,
    COMMUNICATOR,
    END_NS,
    KIND,
    LAYER,
    NAME,
    PEER,
    RANK,
    SEQ,
    START_NS,
    STATE,
    STEP,
    TAG,
    THREAD,
    VALUE,
    Counter,
    Kind,
    Phase,
    State,
)

_LAYER_FORWARD = ("layernorm_forward", "matmul_forward", "attention_forward", "matmul_forward", "residual_forward",
                  "layernorm_forward", "matmul_forward", "gelu_forward", "matmul_forward", "residual_forward")
ALLREDUCE = "MPI_Allreduce"
SENDRECV = "MPI_Sendrecv"
# `rss`: the resident memory a rank reports, growing by phase within a step (bytes)
_RSS_BYTES, _RSS_PHASE_BYTES = 300_000_000, 20_000_000


@dataclass(frozen=True)
class SyntheticConfig:
    ranks: int = 2
    threads: int = 2
    steps: int = 3
    layers: int = 2
    seed: int = 0
    kernel_ns: int = 100_000        # mean duration of one thread's block
    gap_ns: int = 5_000             # Python work of the main thread between regions
    fork_ns: int = 2_000            # mean Scheduling and Fork/Join delay of a worker
    dataload_ns: int = 50_000
    noise: float = 0.05             # relative spread of every duration
    slow_thread: tuple[int, int, float] | None = None   # (rank, thread, factor on its blocks)
    late_rank: tuple[int, float] | None = None           # (rank, factor on all its blocks)
    serial_ns: int = 0              # extra serial Python work before the optimizer, every step
    allreduce: bool = True          # gradient MPI_Allreduce after backward (grad_sync phase)
    allreduce_bytes: int = 4 * 1_000_000
    transfer_ns: int = 30_000
    metadata: bool = True
    p2p: bool = False               # an MPI_Sendrecv with the partner rank (0-1, 2-3, ...) before the Allreduce
    p2p_bytes: int = 1_000_000
    p2p_ns: int = 20_000
    rss: bool = False               # rss_bytes counters at each phase end

    def __post_init__(self) -> None:
        for name in ("ranks", "threads", "layers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.p2p and not self.allreduce:
            raise ValueError("p2p exchanges are part of the gradient sync: they need allreduce")


def kernel_sequence(layers: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Kernel names, layers (-1 = not a layer kernel) and phases (0 forward, 1 backward, 2 optimizer) of one step."""
    fwd = [("encoder_forward", -1)] + [(k, l) for l in range(layers) for k in _LAYER_FORWARD]
    fwd += [("layernorm_forward", -1), ("matmul_forward", -1), ("crossentropy_forward", -1)]
    bwd = [(k.replace("_forward", "_backward"), l) for k, l in reversed(fwd)]
    seq = fwd + bwd + [("adamw", -1)]
    phase = np.array([0] * len(fwd) + [1] * len(bwd) + [2], dtype=np.int8)
    return [k for k, _ in seq], np.array([l for _, l in seq], dtype=np.int16), phase


def generate(cfg: SyntheticConfig) -> pa.Table:
    """A valid trace table (schema types and metadata) for the configuration."""
    rng = np.random.default_rng(cfg.seed)
    base = _kernel_times(cfg, rng)
    ranks = np.arange(cfg.ranks)
    d = _durations(cfg, rng, base, ranks)
    plan = _schedule(cfg, d.pre, d.post)
    return _rank_records(cfg, d, ranks, plan)


def generate_by_rank(cfg: SyntheticConfig) -> Iterator[pa.Table]:
    """The trace of `generate`'s shape, one rank's records at a time (in lane order), in memory of one rank: traces
    longer than memory. Each rank draws from its own stream (seeded with (seed, rank)), so the numbers differ from
    `generate`'s, which draws every rank from one. Two passes: the ranks' step durations first (the collectives
    need every rank's arrival), then each rank's records, drawn again from its stream."""
    base = _kernel_times(cfg, np.random.default_rng(cfg.seed))
    stream = lambda r: np.random.default_rng([cfg.seed, r])  # noqa: E731
    pre, post = np.empty((cfg.ranks, cfg.steps), np.int64), np.empty((cfg.ranks, cfg.steps), np.int64)
    for r in range(cfg.ranks):
        d = _durations(cfg, stream(r), base, np.array([r]))
        pre[r], post[r] = d.pre[0], d.post[0]
    plan = _schedule(cfg, pre, post)
    for r in range(cfg.ranks):
        yield _rank_records(cfg, _durations(cfg, stream(r), base, np.array([r])), np.array([r]), plan)


def _kernel_times(cfg: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
    """(J,) mean block time of each kernel of a step, the same on every rank."""
    return cfg.kernel_ns * rng.uniform(0.5, 1.5, len(kernel_sequence(cfg.layers)[0]))


@dataclass(frozen=True)
class _Durations:
    """Some ranks' random durations (leading axis: those ranks), and what the schedule needs of them."""
    work: np.ndarray     # (n, S, J, TH) each thread's block of each region
    fork: np.ndarray     # (n, S, J, TH) its Scheduling and Fork/Join delay
    gap: np.ndarray      # (n, S, J + 2) the main thread's Python work before each slot
    slot: np.ndarray     # (n, S, J + 2) io, the regions, comm (0 until scheduled), adamw
    pre: np.ndarray      # (n, S) step start -> comm enter
    post: np.ndarray     # (n, S) comm exit -> step end


def _durations(cfg: SyntheticConfig, rng: np.random.Generator, base: np.ndarray, ranks: np.ndarray) -> _Durations:
    S, TH, J = cfg.steps, cfg.threads, len(base)
    n = len(ranks)
    vary = lambda shape: 1.0 + cfg.noise * rng.uniform(-1.0, 1.0, shape)  # noqa: E731
    work = base[None, None, :, None] * vary((n, S, J, TH))                # (n, S, J, TH)
    if cfg.late_rank is not None:
        work[ranks == cfg.late_rank[0]] *= cfg.late_rank[1]
    if cfg.slow_thread is not None:
        work[ranks == cfg.slow_thread[0], :, :, cfg.slow_thread[1]] *= cfg.slow_thread[2]
    fork = cfg.fork_ns * vary((n, S, J, TH))
    fork[..., 0] = 0                                                      # the main thread starts at once
    work, fork = work.astype(np.int64), fork.astype(np.int64)
    region = (fork + work).max(axis=-1)                                   # (n, S, J)

    # Slots of a step: io, the J-1 forward/backward regions, comm, adamw; each preceded by a Python gap.
    nslot = J + 2
    gap = (cfg.gap_ns * vary((n, S, nslot))).astype(np.int64)
    gap[..., nslot - 1] += cfg.serial_ns
    slot = np.zeros((n, S, nslot), dtype=np.int64)
    slot[..., 0] = (cfg.dataload_ns * vary((n, S))).astype(np.int64)
    slot[..., 1:J] = region[..., :J - 1]
    slot[..., J + 1] = region[..., J - 1]
    if not cfg.allreduce:
        gap[..., J] = 0
    pre = gap[..., :J + 1].sum(-1) + slot[..., :J].sum(-1)
    post = gap[..., J + 1] + slot[..., J + 1]
    return _Durations(work, fork, gap, slot, pre, post)


@dataclass(frozen=True)
class _Plan:
    """Every rank's step starts and the gradient sync's times, which depend on all ranks."""
    start: np.ndarray      # (R, S + 1) each step's start on each rank; the last column: the rank's end
    exchanged: np.ndarray  # (R, S) the end of the rank's Sendrecv (its comm enter when it has none)
    leave: np.ndarray      # (S,) when every rank leaves the Allreduce
    span: int              # the trace's end


def partner(ranks: int) -> np.ndarray:
    """Each rank's Sendrecv partner (pairs 0-1, 2-3, ...; -1: the last of an odd count has none)."""
    p = np.arange(ranks) ^ 1
    return np.where(p < ranks, p, -1)


def _schedule(cfg: SyntheticConfig, pre: np.ndarray, post: np.ndarray) -> _Plan:
    """A rank leaves the Allreduce when the last one has entered plus a transfer time; with `p2p`, it first
    exchanges with its partner, which ends once both have entered plus `p2p_ns`."""
    R, S = pre.shape
    pair = partner(R)
    start = np.zeros((R, S + 1), dtype=np.int64)
    exchanged = np.zeros((R, S), dtype=np.int64)
    leave = np.zeros(S, dtype=np.int64)
    for s in range(S):                                                   # one iteration per step, not per record
        enter = start[:, s] + pre[:, s]
        if cfg.allreduce:
            x = enter
            if cfg.p2p:
                x = np.where(pair >= 0, np.maximum(enter, enter[pair]) + cfg.p2p_ns, enter)
            exchanged[:, s] = x
            leave[s] = x.max() + cfg.transfer_ns
            start[:, s + 1] = leave[s] + post[:, s]
        else:
            start[:, s + 1] = enter + post[:, s]
    return _Plan(start, exchanged, leave, int(start[:, S].max()))


def _rank_records(cfg: SyntheticConfig, d: _Durations, ranks: np.ndarray, plan: _Plan) -> pa.Table:
    """The records of `ranks` (whose durations `d` holds) on the schedule of every rank."""
    R, S, TH = len(ranks), cfg.steps, cfg.threads
    knames, klayer, kphase = kernel_sequence(cfg.layers)
    J = len(knames)                                                      # regions per step, adamw last
    nslot = J + 2
    work, fork, gap, slot = d.work, d.fork, d.gap, d.slot.copy()
    region = (fork + work).max(axis=-1)
    start = plan.start[ranks]
    if cfg.allreduce:
        slot[..., J] = plan.leave[None, :] - (start[:, :S] + d.pre)
    seq = np.empty((R, S, 2 * nslot), dtype=np.int64)
    seq[..., 0::2], seq[..., 1::2] = gap, slot
    bound = start[:, :S, None] + np.concatenate([np.zeros((R, S, 1), np.int64), seq.cumsum(-1)], axis=-1)
    span = plan.span

    names = list(dict.fromkeys(knames)) + list(schema.PHASES) + [ALLREDUCE] + list(schema.COUNTERS)
    if cfg.p2p:
        names.append(SENDRECV)
    code = {n: i for i, n in enumerate(names)}
    kcode = np.array([code[k] for k in knames], dtype=np.int32)
    out = _Records()
    r_idx, s_idx = np.meshgrid(ranks, np.arange(S), indexing="ij")

    # Regions: slot index of region j is 1 + j, adamw's is J + 1.
    rslot = np.r_[np.arange(1, J), J + 1]
    rstart = bound[:, :, 2 * rslot + 1]                                  # (R, S, J)
    rr = np.broadcast_to(r_idx[:, :, None, None], work.shape)
    ss = np.broadcast_to(s_idx[:, :, None, None], work.shape)
    tt = np.broadcast_to(np.arange(TH), work.shape)
    jj = np.broadcast_to(np.arange(J)[:, None], work.shape)
    b0 = rstart[..., None] + fork
    b1 = b0 + work
    rend = (rstart + region)[..., None]
    out.add(Kind.STATE, rr, tt, rstart[..., None] + 0 * fork, b0, state=State.SCHEDULING_FORK_JOIN)
    out.add(Kind.STATE, rr, tt, b0, b1, state=State.RUNNING)
    out.add(Kind.STATE, rr, tt, b1, np.broadcast_to(rend, b1.shape), state=State.SYNCHRONIZATION)
    out.add(Kind.KERNEL, rr, tt, b0, b1, name=kcode[jj], step=ss, layer=klayer[jj])

    # Gaps and the io/comm slots: main thread in its state, the workers Idle. With `p2p` the main thread is in
    # Send Receive until its exchange ends, then in Group Communication.
    g_r = np.broadcast_to(r_idx[:, :, None], gap.shape)
    enter, leave = bound[..., 2 * J + 1:2 * J + 2], bound[..., 2 * J + 2:2 * J + 3]
    exchanged = plan.exchanged[ranks][..., None] if cfg.p2p else enter
    for first, last, main_first, main_state in (
            (bound[..., 0:-1:2], bound[..., 1::2], bound[..., 0:-1:2], State.RUNNING),
            (bound[..., 1:2], bound[..., 2:3], bound[..., 1:2], State.IO),
            (enter, leave, exchanged, State.GROUP_COMMUNICATION)):
        rk = g_r[..., :first.shape[-1]]
        out.add(Kind.STATE, rk, np.zeros_like(rk), main_first, last, state=main_state)
        for t in range(1, TH):
            out.add(Kind.STATE, rk, np.full_like(rk, t), first, last, state=State.IDLE)
    if cfg.p2p:
        out.add(Kind.STATE, r_idx, 0 * r_idx, enter[..., 0], exchanged[..., 0], state=State.SEND_RECEIVE)
    # The tail to the global end: the main thread wraps up (Running), the workers are Idle.
    tail = np.broadcast_to(start[:, S][:, None], (R, TH))
    out.add(Kind.STATE, np.broadcast_to(ranks[:, None], (R, TH)), np.broadcast_to(np.arange(TH), (R, TH)),
            tail, np.full((R, TH), span), state=np.where(np.arange(TH) == 0, State.RUNNING, State.IDLE)[None, :])

    # Phases: dataload, forward, backward, grad_sync, optimizer tile the step; with `rss`, the rank's resident
    # memory at each phase end (as the tracer samples it).
    nf = int((kphase == 0).sum())
    edges = [(0, 2), (2, 2 + 2 * nf), (2 + 2 * nf, 2 * J), (2 * J, 2 * J + 2), (2 * J + 2, 2 * nslot)]
    for i, ((a, b), phase) in enumerate(zip(edges, (Phase.DATALOAD, Phase.FORWARD, Phase.BACKWARD, Phase.GRAD_SYNC,
                                                    Phase.OPTIMIZER))):
        if phase != Phase.GRAD_SYNC or cfg.allreduce:
            out.add(Kind.PHASE, r_idx, 0 * r_idx, bound[..., a], bound[..., b], name=code[phase], step=s_idx)
            if cfg.rss:
                out.add(Kind.COUNTER, r_idx, 0 * r_idx, bound[..., b], bound[..., b], name=code[Counter.RSS_BYTES],
                        step=s_idx, value=_RSS_BYTES + (i + 1) * _RSS_PHASE_BYTES + 0 * s_idx)
    if cfg.allreduce:
        out.add(Kind.COMM, r_idx, 0 * r_idx, exchanged[..., 0], leave[..., 0], name=code[ALLREDUCE],
                step=s_idx, nbytes=cfg.allreduce_bytes, seq=s_idx)
    if cfg.p2p:
        peer = partner(cfg.ranks)[ranks][:, None] + 0 * s_idx
        has = peer >= 0
        out.add(Kind.COMM, r_idx[has], 0 * r_idx[has], enter[..., 0][has], exchanged[..., 0][has],
                name=code[SENDRECV], step=s_idx[has], nbytes=cfg.p2p_bytes, peer=peer[has], tag=0)
    tokens = 4 * 64
    step_end = start[:, 1:]
    for counter, value in ((Counter.LOSS, 4.0 - 0.01 * s_idx), (Counter.LR, 3e-4 + 0 * s_idx),
                           (Counter.GRAD_NORM, 1.0 + 0 * s_idx),
                           (Counter.TOKENS, tokens + 0 * s_idx)):
        out.add(Kind.COUNTER, r_idx, 0 * r_idx, step_end, step_end, name=code[counter], step=s_idx, value=value)
    meta = _metadata(cfg, tokens) if cfg.metadata else {}
    return out.table(names, meta)


def records_per_step(cfg: SyntheticConfig) -> int:
    """Records one more step adds (measured on a 1- and 2-step trace of the same shape)."""
    from dataclasses import replace
    return generate(replace(cfg, steps=2)).num_rows - generate(replace(cfg, steps=1)).num_rows


def write(table: pa.Table, path: str | Path, row_group_size: int = MERGED_ROW_GROUP) -> None:
    """`table` as a trace file in our layout (gpt2trace.format.rank_order): records by rank, in their order within
    a rank."""
    table = table.take(pc.sort_indices(table, [(RANK, "ascending")]))     # stable: each rank's order kept
    with RankOrderedWriter(path, table.schema, row_group=row_group_size) as writer:
        writer.write(table)


def _metadata(cfg: SyntheticConfig, tokens: int) -> dict[bytes, bytes]:
    L, C, V, maxT = cfg.layers, 128, 512, 128
    n_params = V * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C   # GPT-2 with tied lm head
    run = {"model": {"n_layer": L, "n_head": 4, "n_embd": C, "vocab_size": V, "max_seq_len": maxT,
                     "padded_vocab_size": V, "num_parameters": n_params},
           "train": {"batch_size": 4, "seq_len": tokens // 4, "grad_accum": 1, "steps": cfg.steps},
           "parallel": {"ranks": cfg.ranks, "threads": cfg.threads}, "synthetic": True}
    peak = {"gflops_per_core": 50.0, "cores": cfg.ranks * cfg.threads}
    return {schema.META_RUN: json.dumps(run).encode(), schema.META_PEAK: json.dumps(peak).encode()}


class _Records:
    """Accumulates record blocks (broadcastable NumPy arrays) and builds the Arrow table once."""

    def __init__(self) -> None:
        self.blocks: list[dict[str, np.ndarray]] = []

    def add(self, kind, rank, thread, start, end, state=None, name=None, step=None, layer=None, nbytes=None,
            seq=None, value=None, peer=None, tag=None) -> None:
        shape = np.broadcast_shapes(np.shape(rank), np.shape(start), np.shape(end))
        flat = lambda a, dt: np.broadcast_to(np.asarray(a, dtype=dt), shape).ravel()  # noqa: E731
        block = {KIND: flat(Kind.ALL.index(kind), np.int32), RANK: flat(rank, np.int32),
                 THREAD: flat(thread, np.int32), START_NS: flat(start, np.int64), END_NS: flat(end, np.int64)}
        for col, val, dt in ((STATE, state, np.int16), (NAME, name, np.int32), (STEP, step, np.int32),
                             (LAYER, layer, np.int16), (BYTES, nbytes, np.int64), (SEQ, seq, np.int64),
                             (VALUE, value, np.float64), (PEER, peer, np.int32), (TAG, tag, np.int32)):
            if val is not None:
                block[col] = flat(val, dt)
        keep = block[END_NS] > block[START_NS] if kind != Kind.COUNTER else slice(None)
        self.blocks.append({k: v[keep] for k, v in block.items()})

    def table(self, names: list[str], meta: dict[bytes, bytes]) -> pa.Table:
        n = sum(len(b[KIND]) for b in self.blocks)
        arrays = {}
        for col, typ in schema.FIELDS.items():
            present = [col in b for b in self.blocks]
            if not any(present):
                arrays[col] = pa.nulls(n, typ)
                continue
            values = np.concatenate([b[col] if col in b else np.zeros(len(b[KIND]), _dtype(col, self.blocks))
                                     for b in self.blocks])
            valid = np.concatenate([np.full(len(b[KIND]), col in b) for b in self.blocks])
            if col == LAYER:
                valid &= values >= 0
            if col in (KIND, NAME):
                dictionary = pa.array(list(Kind.ALL) if col == KIND else names)
                arrays[col] = pa.DictionaryArray.from_arrays(pa.array(values, mask=~valid), dictionary)
            else:
                arrays[col] = pa.array(values, type=typ, mask=None if valid.all() else ~valid)
        table = pa.table(arrays, schema=schema.arrow_schema(meta))
        # Each thread's records in time order, as the trainer's per-thread buffers write them.
        rank, thread, start = (np.concatenate([b[c] for b in self.blocks]) for c in (RANK, THREAD, START_NS))
        return table.take(lane_order(rank, thread, start))


def _dtype(col: str, blocks: list[dict[str, np.ndarray]]):
    return next(b[col].dtype for b in blocks if col in b)


# Hand-made traces: one record per call, times in seconds (tests and examples write traces this way).

def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def state(rank: int, thread: int, start_s: float, end_s: float, state_id: int) -> dict:
    return {KIND: Kind.STATE, RANK: rank, THREAD: thread, START_NS: _ns(start_s), END_NS: _ns(end_s),
            STATE: int(state_id)}


def kernel(rank: int, thread: int, start_s: float, end_s: float, name: str, step: int | None = 0,
           layer: int | None = None) -> dict:
    return {KIND: Kind.KERNEL, RANK: rank, THREAD: thread, START_NS: _ns(start_s), END_NS: _ns(end_s), NAME: name,
            STEP: step, LAYER: layer}


def phase(rank: int, start_s: float, end_s: float, name: str, step: int) -> dict:
    return {KIND: Kind.PHASE, RANK: rank, THREAD: 0, START_NS: _ns(start_s), END_NS: _ns(end_s), NAME: name,
            STEP: step}


def comm(rank: int, start_s: float, end_s: float, name: str, seq: int | None = None, nbytes: int | None = None,
         peer: int | None = None, step: int | None = None, thread: int = 0, communicator: int | None = None,
         tag: int | None = None) -> dict:
    return {KIND: Kind.COMM, RANK: rank, THREAD: thread, START_NS: _ns(start_s), END_NS: _ns(end_s), NAME: name,
            SEQ: seq, BYTES: nbytes, PEER: peer, STEP: step, COMMUNICATOR: communicator, TAG: tag}


def counter(rank: int, t_s: float, name: str, value: float, step: int) -> dict:
    return {KIND: Kind.COUNTER, RANK: rank, THREAD: 0, START_NS: _ns(t_s), END_NS: _ns(t_s), NAME: name,
            STEP: step, VALUE: float(value)}


def from_records(recs: list[dict], metadata: dict[bytes, bytes] | None = None) -> pa.Table:
    """A schema table from record dicts (missing columns null), with the schema version and `metadata`."""
    columns = {c: pa.array([r.get(c) for r in recs], type=t) for c, t in schema.FIELDS.items()}
    return pa.table(columns, schema=schema.arrow_schema(metadata))
