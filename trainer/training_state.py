"""The state of a whole training run, whatever the rank layout: gathered for a checkpoint, handed back on resume.

Each rank holds a part of it. The parameters: its pipeline stage's layers, of its tensor-parallel shard (the whole
model without either), replicated over the data and sequence-parallel ranks. AdamW's moments: the range of the flat
buffer its optimizer updates, which is all of it on every rank under allreduce and overlap, all of it on rank 0 and
nothing elsewhere under reduce-bcast, a 1/N shard per rank under zero1 and zero2 (the same shards; gradients are not
part of the state; under sequence parallelism the same, over the dp x sp ranks that share the parameters).
`gather_state` assembles the whole model's state on rank 0 from that; `load_state` gives each rank its part of a
saved state. Under pipeline and tensor parallelism all of this holds per (stage, tensor-parallel rank), whose buffer
holds its layers' shards, and the first replica of each then sends its state to world rank 0, which puts every piece
in its place in the whole model's layout (`gather_model`); on resume each rank takes its layers' shards from the
saved whole. The state file and the fingerprint (trainer.state_file), the checkpoint phase and the resume logic are
layout-free.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.config import ModelConfig
from trainer.model import GPT2
from trainer.parallel.tensor import TensorShard
from trainer.params import ParamLayout
from trainer.state_file import StateHeader, read_moment

_GATHER_TAG = 7

_NONE = (-1, -1)     # the range of a rank without an optimizer, as sent to the others


@dataclass(frozen=True)
class TrainingState:
    """The whole model's parameters and AdamW moments, float32[P] each in the flat buffer's order (trainer.params;
    the files hold llm.c's order), `t` AdamW updates done, and `next_step`, where a resumed run starts. The arrays
    may be the training's own buffers: write them before the next step."""
    model: ModelConfig
    params: np.ndarray
    m: np.ndarray
    v: np.ndarray
    t: int
    next_step: int


def held_range(dp) -> tuple[int, int] | None:
    """[lo, hi) of the flat buffer whose moments this rank's optimizer holds (trainer.dp); None without one."""
    opt = getattr(dp, "opt", None)
    if opt is None:
        return None
    lo = getattr(dp, "lo", 0)       # a ZeRO shard starts there; the other strategies' optimizers start at 0
    return lo, lo + opt.m.size


def gather_state(model: GPT2, dp, grid, next_step: int, stages=None) -> TrainingState | None:
    """The whole model's state on rank 0, None on the other ranks.

    Collective over `grid.grad_comm` (the ranks that share the parameters): every rank calls it after the same
    step. One MPI_Allgather of each rank's moment range (16 bytes a rank) tells every rank whether rank 0 already
    holds all moments; if not (zero1, zero2), one MPI_Gatherv per moment brings the shards to rank 0. Split over
    pipeline stages (`stages`: trainer.parallel.stages.plan's) or tensor-parallel ranks, that gives each piece's state
    on its first replica, and `gather_model` brings the pieces to world rank 0."""
    stage = _gather_stage(model, dp, grid, next_step)
    if stage is None or (model.stage.count == 1 and model.tp.shard.degree == 1):
        return stage
    params, m, v = (gather_model(x, model, grid, stages or [model.stage]) for x in (stage.params, stage.m, stage.v))
    return TrainingState(model.cfg, params, m, v, stage.t, next_step) if grid.rank == 0 else None


def gather_model(flat: np.ndarray, model: GPT2, grid, stages) -> np.ndarray | None:
    """A buffer in this rank's layout (parameters, or an AdamW moment) from the first replica of every (pipeline
    stage, tensor-parallel rank), assembled in the whole model's layout on world rank 0 (None elsewhere). Called by
    those replicas only: the ranks at sp = dp = 0."""
    layout, cfg = grid.layout, model.cfg
    if grid.rank != 0:
        grid.world.Send(flat, dest=0, tag=_GATHER_TAG)
        return None
    whole = ParamLayout.for_model(cfg)
    out = np.zeros(whole.size, dtype=np.float32)
    for r in range(layout.size):
        c = layout.coords(r)
        if c["sp"] or c["dp"]:
            continue
        piece = ParamLayout.for_stage(cfg, stages[c["pp"]], TensorShard(layout.degree("tp"), c["tp"]))
        part = flat if r == 0 else np.empty(piece.size, dtype=np.float32)
        if r != 0:
            grid.world.Recv(part, source=r, tag=_GATHER_TAG)
        piece.put(whole, part, out, cfg)
    return out


def _gather_stage(model: GPT2, dp, grid, next_step: int) -> TrainingState | None:
    """This stage's state (the whole model's without pipelining) on the first rank of its gradient group."""
    comm = grid.grad_comm
    P = model.layout.size
    if comm is None or comm.Get_size() == 1:
        return TrainingState(model.cfg, model.params, dp.opt.m, dp.opt.v, dp.opt.t, next_step)
    ranges = _allgather_ranges(comm, held_range(dp))
    root = comm.Get_rank() == 0
    if ranges[0] == (0, P):                       # allreduce, overlap, reduce-bcast: nothing to move
        m, v = (dp.opt.m, dp.opt.v) if root else (None, None)
    else:
        m, v = _gather_moments(comm, dp.opt, ranges, P)
    return TrainingState(model.cfg, model.params, m, v, dp.opt.t, next_step) if root else None


def _allgather_ranges(comm, mine: tuple[int, int] | None) -> list[tuple[int, int] | None]:
    send = np.array(mine if mine is not None else _NONE, dtype=np.int64)
    recv = np.empty((comm.Get_size(), 2), dtype=np.int64)
    comm.Allgather(send, recv)
    return [None if tuple(r) == _NONE else (int(r[0]), int(r[1])) for r in recv]


def _gather_moments(comm, opt, ranges: list, P: int) -> tuple[np.ndarray | None, np.ndarray | None]:
    from mpi4py import MPI

    bounds = [r if r is not None else (0, 0) for r in ranges]
    spans = [(lo, hi) for lo, hi in bounds if hi > lo]
    if not (spans and spans[0][0] == 0 and spans[-1][1] == P and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))):
        raise ValueError(f"the optimizers' ranges {ranges} do not partition the {P} parameters in rank order")
    counts, displs = [hi - lo for lo, hi in bounds], [lo for lo, _ in bounds]
    root = comm.Get_rank() == 0
    out = []
    for mine in (opt.m, opt.v):
        whole = np.empty(P, dtype=np.float32) if root else None
        comm.Gatherv(mine, [whole, counts, displs, MPI.FLOAT] if root else None, root=0)
        out.append(whole)
    return out[0], out[1]


def load_state(saved: StateHeader, dp, model: GPT2 | None = None) -> None:
    """Give this rank's optimizer its part of the saved moments, and the saved t (of `model`'s pipeline stage).

    Every rank reads the state file itself (as every rank reads the model file): no communication, and any layout
    can resume from any other. Reading converts one moment of the whole model at a time: a rank needs 8 bytes per
    parameter more while it loads."""
    held = held_range(dp)
    if held is None:
        return
    lo, hi = held

    def mine(name: str) -> np.ndarray:
        whole = read_moment(saved, name)
        if model is not None and (model.stage.count > 1 or model.tp.shard.degree > 1):
            whole = model.layout.take(ParamLayout.for_model(model.cfg), whole, model.cfg)
        return whole[lo:hi]

    m, v = mine("m"), mine("v")
    dp.opt.load(m, v, saved.t)
