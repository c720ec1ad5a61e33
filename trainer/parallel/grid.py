"""The rank grid: where each MPI rank sits among the parallel dimensions, its groups, and their communicators.

Dimensions are listed fastest-varying first, as Megatron-LM orders them: tp (a tensor-parallel group's four
all-reduces per layer are the most frequent collectives, so its ranks are neighbours, which `mpiexec` places on one
node), then sp (a sequence group's per-layer collectives), then pp (a pipeline's stages next to each other: their
point-to-point messages stay on the node as long as a pipeline fits), then dp:

    rank = ((dp_index * pp + pp_index) * sp + sp_index) * tp + tp_index
    e.g. 4 ranks, sp=2:  sp groups {0,1} {2,3},  dp groups {0,2} {1,3}
         4 ranks, pp=2:  pipelines {0,1} {2,3} (stage = pp index),  dp groups {0,2} {1,3}
         8 ranks, tp=2 pp=2:  tp groups {0,1} {2,3} {4,5} {6,7},  pipelines {0,2} {1,3} {4,6} {5,7},
                              dp groups {0,4} {1,5} {2,6} {3,7}

`GridLayout` is pure data, the same on every rank; `RankGrid` adds this rank's
communicators, split once from the world communicator at start-up. MPI_Comm_split is collective, so every rank
builds the grid at the same point, and the communicators are created in the same order everywhere.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.config import ParallelConfig, SPReduce, SPSplit

# Communicator names (traces show them; gpt2trace/format/communicators.py describes them in words, and
# tests/gpt2trace/format/test_communicators.py holds the two equal). "sp>=i": a sequence group's ranks from i on.
TP, SP, PP, DP, TAIL = "tp", "sp", "pp", "dp", ">="
# The ranks that hold the same parameters and sum their gradients: Megatron's data-parallel group "with context
# parallel", over which every --dp-sync strategy (ZeRO-1's shards included) runs; "grad" names its communicator
# when it is neither the world nor the dp group. Tensor-parallel ranks hold different shards: never in it. "embed":
# each pipeline's first and last stage, which both hold the tied token embedding (the same vocabulary shard) and sum
# its gradient (Megatron's embedding group).
GRAD_DIMS = (SP, DP)
GRAD, EMBED = "grad", "embed"


@dataclass(frozen=True)
class GridLayout:
    """The parallel dimensions as (name, degree), fastest-varying first; their product is the number of ranks."""
    dims: tuple[tuple[str, int], ...]

    @classmethod
    def from_config(cls, par: ParallelConfig) -> GridLayout:
        return cls(((TP, par.tp), (SP, par.sp), (PP, par.pp), (DP, par.ranks // (par.tp * par.sp * par.pp))))

    @property
    def size(self) -> int:
        return math.prod(d for _, d in self.dims)

    def degree(self, dim: str) -> int:
        return dict(self.dims)[dim]

    def coords(self, rank: int) -> dict[str, int]:
        """Rank -> its index along every dimension."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is outside the grid of {self.size} ranks")
        out = {}
        for name, degree in self.dims:
            out[name], rank = rank % degree, rank // degree
        return out

    def rank_of(self, coords: dict[str, int]) -> int:
        rank, stride = 0, 1
        for name, degree in self.dims:
            rank += coords[name] * stride
            stride *= degree
        return rank

    def group(self, rank: int, dims: tuple[str, ...]) -> tuple[int, ...]:
        """The ranks that differ from `rank` only along `dims`, in rank order (for one dimension: by its index)."""
        c = self.coords(rank)
        return tuple(r for r in range(self.size)
                     if all(v == c[n] for n, v in self.coords(r).items() if n not in dims))

    def groups(self, dims: tuple[str, ...]) -> list[tuple[int, ...]]:
        """Every group along `dims` (a partition of the ranks), ordered by first member."""
        seen: dict[tuple[int, ...], None] = {}
        for r in range(self.size):
            seen.setdefault(self.group(r, dims))
        return list(seen)


class RankGrid:
    """This rank's place in the grid and the communicators it uses.

    world       the world communicator (None for a single process)
    comm(dim)   the communicator of this rank's group along `dim`, for every dimension of degree > 1 that is not
                the whole world (None otherwise)
    grad_comm   the communicator over GRAD_DIMS that data-parallel strategies sum gradients on: the world itself
                while sp and dp are the only dimensions (so pure data-parallel runs trace as they always did);
                None when this rank is alone in it
    embed       with pipelining, the communicator of this pipeline's first and last stage (None elsewhere)
    sp_tails    contiguous split with rooted reduces: sp_tails[i] is the communicator of sequence ranks >= i
                (1 <= i <= S-2; None on ranks < i), over which root i reduces: earlier positions never attend
                to i's tokens, so ranks < i have nothing to add
    """

    def __init__(self, layout: GridLayout, rank: int, world=None, comms: dict | None = None,
                 sp_tails: dict | None = None):
        self.layout, self.rank, self.world = layout, rank, world
        self.coords = layout.coords(rank)
        self._comms = dict(comms or {})
        self.sp_tails = dict(sp_tails or {})

    @classmethod
    def single(cls) -> RankGrid:
        return cls(GridLayout(((TP, 1), (SP, 1), (PP, 1), (DP, 1))), 0)

    @classmethod
    def build(cls, par: ParallelConfig, world) -> RankGrid:
        """Split `world` (mpi4py's communicator or gpt2trace's traced proxy) into the groups `par` describes.

        Each new communicator is named after its dimension (MPI_Comm_set_name), which is how traces label it."""
        layout = GridLayout.from_config(par)
        if world is None or world.Get_size() == 1:
            return cls(layout, 0, world)
        if world.Get_size() != layout.size:
            raise ValueError(f"--ranks {layout.size} but the MPI job has {world.Get_size()} processes; "
                             "start as many processes as --ranks")
        rank = world.Get_rank()
        comms = {}
        for dim, degree in layout.dims:
            if 1 < degree < layout.size or (dim in (TP, SP, PP) and degree > 1):
                # tp, sp and pp get their own communicator even when it is the whole world: their calls are then
                # told apart from the gradient sync's, which runs on the world
                comms[dim] = _split(world, layout.groups((dim,)), rank, layout.coords(rank)[dim], dim)
        pp = layout.degree(PP)
        if pp > 1 or layout.degree(TP) > 1:
            grad_size = layout.degree(SP) * layout.degree(DP)
            if layout.degree(SP) > 1 and layout.degree(DP) > 1:
                comms[GRAD] = _split(world, layout.groups(GRAD_DIMS), rank, layout.rank_of(
                    {**layout.coords(rank), PP: 0, TP: 0}), GRAD)
            elif grad_size > 1:
                comms[GRAD] = comms[SP if layout.degree(SP) > 1 else DP]
        if pp > 1:
            stage = layout.coords(rank)[PP]
            ends = stage in (0, pp - 1)
            color = layout.rank_of({**layout.coords(rank), PP: 0})     # the pipeline's stage-0 rank
            embed = world.Split(color if ends else _undefined(), stage)
            if ends:
                embed.Set_name(EMBED)
                comms[EMBED] = embed
        grid = cls(layout, rank, world, comms)
        if par.sp_split == SPSplit.contiguous and par.sp_reduce == SPReduce.reduce:
            sp, index = grid.comm(SP), grid.coords[SP]
            for i in range(1, par.sp - 1):
                tail = sp.Split(0 if index >= i else _undefined(), index)
                if index >= i:
                    tail.Set_name(f"{SP}{TAIL}{i}")
                    grid.sp_tails[i] = tail
        return grid

    @property
    def size(self) -> int:
        return self.layout.size

    def degree(self, dim: str) -> int:
        return self.layout.degree(dim)

    def comm(self, dim: str):
        return self._comms.get(dim)

    @property
    def grad_comm(self):
        return self.world if self.degree(PP) == 1 and self.degree(TP) == 1 else self._comms.get(GRAD)

    @property
    def embed(self):
        return self._comms.get(EMBED)

    def communicators(self) -> dict[str, object]:
        """Every communicator this rank uses, by name (world first)."""
        out = {"world": self.world} if self.world is not None else {}
        out.update({k: c for k, c in self._comms.items()
                    if k != GRAD or not any(c is v for n, v in self._comms.items() if n != GRAD)})
        out.update({f"{SP}{TAIL}{i}": c for i, c in self.sp_tails.items()})
        return out


def _undefined() -> int:
    from mpi4py import MPI
    return MPI.UNDEFINED


def _split(world, groups: list[tuple[int, ...]], rank: int, key: int, name: str):
    color = next(i for i, g in enumerate(groups) if rank in g)
    comm = world.Split(color, key)
    comm.Set_name(name)
    return comm
