"""Tensor parallelism (Megatron-LM): the T ranks of a tensor-parallel group split every block's matmuls.

Per transformer block (Shoeybi et al., 2019):

    qkv, fc        column-parallel: rank i holds the rows of qkvw (and qkvb) of heads [i*NH/T, (i+1)*NH/T), and the
                   rows [i*4C/T, (i+1)*4C/T) of fcw, fcb; attention and GELU run on the local heads / columns only
    attproj,       row-parallel: rank i holds the matching columns of attprojw and fcprojw; each rank's product is
    fcproj         a partial sum, made whole by an MPI_Allreduce of the (B*T, C) output (Megatron's g operator) before
                   the residual add; the bias is added by rank 0 of the group only, so the sum holds it once
    backward       the input gradient of each column-parallel matmul (dln1, dln2) is a partial sum over the local
                   heads / columns: an MPI_Allreduce makes it whole before the LayerNorm backward (the f operator)

LayerNorms, the row-parallel biases and the position embedding are replicated: every rank computes the same
gradient for them (their upstream gradients are whole), so replicas stay identical with no extra communication.
The token embedding, shared with the lm head, is vocabulary-parallel: rank i holds rows [i*Vp/T, (i+1)*Vp/T) of wte.
The embedding looks up only its tokens (zero for the others) and an MPI_Allreduce sums the (B*T, C) rows; the head
computes its (B*T, Vp/T) slice of the logits, and the cross-entropy is vocabulary-parallel: an MPI_Allreduce (MAX) of
each row's maximum, then one (SUM) of each row's sum of exponentials and target logit, so no rank ever holds a whole
row of logits; the head's input gradient is a partial sum, reduced like dln1. Why not replicate the head: it is the
largest matmul of the small GPT-2s (for d12 the head's 2*C*Vp flops per token are ~30% of the forward's), and a
replicated head would cap the speed-up of T ranks at ~1/(0.3 + 0.7/T), and hold a whole wte and logits per rank.

`TensorShard` is the pure data (degree, index: what a rank holds), used by the parameter layout and the shape
tables; `TensorParallel` adds the group's communicator; `WholeTensor` is the T = 1 case, which communicates nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.config import ModelConfig
from trainer.errors import ConfigError


@dataclass(frozen=True)
class TensorShard:
    """Rank `index` of a tensor-parallel group of `degree` ranks: which heads, MLP columns and vocabulary rows."""
    degree: int = 1
    index: int = 0

    def check(self, cfg: ModelConfig) -> None:
        """A ConfigError naming --tp when the model cannot be split `degree` ways."""
        T = self.degree
        if cfg.n_head % T:
            raise ConfigError("tp", T, f"must divide the model's {cfg.n_head} attention heads (heads are split "
                                       "among the tensor-parallel ranks)")
        if cfg.padded_vocab_size % T:
            raise ConfigError("tp", T, f"must divide the padded vocabulary ({cfg.padded_vocab_size} rows of wte are "
                                       "split among the tensor-parallel ranks)")

    def heads(self, cfg: ModelConfig) -> int:
        return cfg.n_head // self.degree

    def attn(self, cfg: ModelConfig) -> int:
        """Channels of this rank's heads (C/T): the width of its q, k, v and attention output."""
        return cfg.n_embd // self.degree

    def ffn(self, cfg: ModelConfig) -> int:
        """This rank's MLP columns (4C/T)."""
        return 4 * cfg.n_embd // self.degree

    def vocab(self, cfg: ModelConfig) -> int:
        """This rank's rows of the (padded) vocabulary."""
        return cfg.padded_vocab_size // self.degree

    def vocab_start(self, cfg: ModelConfig) -> int:
        return self.index * self.vocab(cfg)

    @property
    def adds_bias(self) -> bool:
        """Whether this rank adds the row-parallel matmuls' biases (and the position embedding): rank 0 only."""
        return self.index == 0

    def index_of(self, name: str, cfg: ModelConfig) -> tuple:
        """This rank's part of the whole tensor `name` (llm.c's shape without the layer axis) as an index: () for a
        replicated tensor."""
        if self.degree == 1:
            return ()
        C, a, f = cfg.n_embd, self.attn(cfg), self.ffn(cfg)
        heads = np.arange(self.index * a, (self.index + 1) * a)
        cols = slice(self.index * f, (self.index + 1) * f)
        if name in ("qkvw", "qkvb"):       # q, k and v of this rank's heads: three runs of rows
            return (np.concatenate([heads + k * C for k in range(3)]),)
        if name in ("fcw", "fcb"):
            return (cols,)
        if name == "attprojw":
            return (slice(None), slice(self.index * a, (self.index + 1) * a))
        if name == "fcprojw":
            return (slice(None), cols)
        if name == "wte":
            return (slice(self.vocab_start(cfg), self.vocab_start(cfg) + self.vocab(cfg)),)
        return ()

    def sharded(self, name: str) -> bool:
        return name in SHARDED


SHARDED = ("wte", "qkvw", "qkvb", "attprojw", "fcw", "fcb", "fcprojw")
WHOLE = TensorShard()


class WholeTensor:
    """T = 1: every rank holds whole blocks; nothing to reduce."""
    shard = WHOLE
    comm = None

    def allreduce(self, x: np.ndarray) -> None:
        pass

    def allreduce_max(self, x: np.ndarray) -> None:
        pass


class TensorParallel:
    """The reductions of a tensor-parallel group on its communicator (the grid's "tp"). Blocking, in place: the
    next kernel needs the whole sum, as in Megatron without sequence-parallel overlap."""

    def __init__(self, shard: TensorShard, comm):
        from mpi4py import MPI
        self.MPI, self.shard, self.comm = MPI, shard, comm

    def allreduce(self, x: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, x, op=self.MPI.SUM)

    def allreduce_max(self, x: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, x, op=self.MPI.MAX)


def make_tensor(grid):
    """This rank's tensor-parallel context: WholeTensor without tensor parallelism."""
    degree = grid.degree("tp")
    if degree == 1:
        return WholeTensor()
    return TensorParallel(TensorShard(degree, grid.coords["tp"]), grid.comm("tp"))   # GPT2 checks it fits cfg
