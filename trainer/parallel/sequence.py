"""Sequence parallelism: the S ranks of a sequence group each hold T/S positions of every sequence of the batch.

Every kernel but attention is token-local and runs on the rank's B*T/S tokens, so activations shrink by S; the
encoder adds each token's true position. Attention needs the keys and values of every earlier token:

    forward   an MPI_Allgather of the layer's qkv rows, in place: the layer's qkv buffer holds the whole group's
              rows, B*T/S per rank in rank order, and the qkv matmul writes this rank's block of it
    backward  attention leaves each rank a contribution to the dk, dv of every token of the group (its queries
              attend to them); `--sp-reduce` sums them:
                allreduce       one MPI_Allreduce of the group's dk, dv (the porting study's choice)
                reduce          S rooted MPI_Reduces, root i receiving the sum for its own tokens; with a contiguous
                                split only ranks >= i attend to i's tokens, so root i reduces over them alone
                                (grid.sp_tails), as the study suggests
                reduce-scatter  one MPI_Reduce_scatter_block: each rank receives just its own rows
              and each rank adds its rows to its dqkv (kernel kvgrad_add). Only dk and dv travel (2C floats per
              token, not 3C): dq never leaves its rank.

Positions (`--sp-split`): contiguous gives rank r the positions [r*T/S, (r+1)*T/S); causal attention work grows
with position, so the last rank computes the most (about 2S-1 times the first) and the others wait in the next
collective. Interleaved gives rank r the positions t with t mod S == r: every rank attends over the same mix of
short and long prefixes, so the work is balanced.

Parameter gradients are partial sums over each rank's tokens; the data-parallel strategy (trainer.dp) sums them
over the sp x dp group, and the training loop's 1/(B*T_local*grad_accum*ranks) scale makes that sum the gradient
of the global mean loss. `WholeSequence` is the S = 1 case: plain attention, nothing exchanged.
"""
from __future__ import annotations

import contextlib

import numpy as np

from trainer.config import ModelConfig, SPReduce, SPSplit
from trainer.kernels.kvgrad import kvgrad_add
from trainer.kernels.zero import zero_fill
from trainer.launcher import Launcher
from trainer.memory import exchange_shapes
from trainer.parallel.split import SequenceSplit
from trainer.parallel.tensor import WHOLE, TensorShard


class WholeSequence:
    """S = 1: this rank holds every position; attention reads and writes the layer's own qkv/dqkv."""
    size, index = 1, 0

    def __init__(self, T: int):
        self.seq_len = self.local_len = T
        self.split = SequenceSplit(T, 1)
        self.qpos = self.split.positions(0)
        self.kpos = self.split.table()
        self.nbytes = 0

    def local_rows(self, qkv_all: np.ndarray) -> np.ndarray:
        return qkv_all

    def gather_qkv(self, qkv_all: np.ndarray) -> None:
        pass

    def kv_grads(self, layer: int, dqkv: np.ndarray) -> tuple[np.ndarray, int]:
        """Where attention_backward accumulates dk, dv, and their first column there: the dqkv itself."""
        return dqkv, dqkv.shape[1] // 3

    def finish_kv_grads(self, layer: int, dqkv: np.ndarray) -> None:
        pass

    def local_only(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


class SequenceParallel(WholeSequence):
    """This rank's share of every sequence and the attention exchange with the rest of its sequence group.

    `comm` is the group's communicator (grid.comm("sp")), `tails` the grid's sp_tails; `run` launches the two
    kernels of the exchange (zeroing and adding the dk, dv buffer), so they are traced like every other kernel.
    """

    def __init__(self, split: SequenceSplit, index: int, B: int, cfg: ModelConfig, run: Launcher, comm,
                 reduce: SPReduce = SPReduce.allreduce, tails: dict | None = None, tp: TensorShard = WHOLE):
        from mpi4py import MPI
        if comm.Get_size() != split.S:
            raise ValueError(f"the sequence group's communicator has {comm.Get_size()} ranks, --sp is {split.S}")
        self.MPI, self.comm, self.run, self.reduce = MPI, comm, run, SPReduce(reduce)
        self.split, self.size, self.index = split, split.S, index
        self.seq_len, self.local_len = split.T, split.local_len
        self.qpos = split.positions(index)
        self.kpos = split.table()
        self.tails = dict(tails or {})
        self.rows = B * split.local_len                                     # this rank's tokens: B*T/S
        own = self.reduce == SPReduce.reduce_scatter
        # [dk | dv] of the group's tokens, and with reduce-scatter the received sum of this rank's
        shapes = exchange_shapes(cfg, B, split.T, split.S, own, tp)
        buffers = {name: np.zeros(shape, dtype=np.float32) for name, shape in shapes.items()}
        self.dkv = buffers["dkv"]
        self.dkv_own = buffers["dkv_own"] if own else self.block(self.dkv, index)
        self.nbytes = sum(b.nbytes for b in buffers.values())
        self._exchange = True

    def block(self, rows_all: np.ndarray, index: int) -> np.ndarray:
        """Rank `index`'s rows of a group-wide (S*B*T/S, ...) buffer."""
        return rows_all[index * self.rows:(index + 1) * self.rows]

    def local_rows(self, qkv_all: np.ndarray) -> np.ndarray:
        return self.block(qkv_all, self.index)

    def gather_qkv(self, qkv_all: np.ndarray) -> None:
        """Every rank's qkv rows into every rank's (S*B*T/S, 3C) buffer; this rank's block is already there."""
        if self._exchange:
            self.comm.Allgather(self.MPI.IN_PLACE, qkv_all)

    def kv_grads(self, layer: int, dqkv: np.ndarray) -> tuple[np.ndarray, int]:
        self.run(zero_fill, layer, self.dkv)
        return self.dkv, 0

    def finish_kv_grads(self, layer: int, dqkv: np.ndarray) -> None:
        """Sum the group's dk, dv contributions for this rank's tokens, and add them to its dqkv."""
        if self._exchange:
            self._sum_own_rows()
        self.run(kvgrad_add, layer, dqkv, self.dkv_own if self._exchange else self.block(self.dkv, self.index))

    def _sum_own_rows(self) -> None:
        MPI, comm = self.MPI, self.comm
        if self.reduce == SPReduce.allreduce:
            comm.Allreduce(MPI.IN_PLACE, self.dkv, op=MPI.SUM)
        elif self.reduce == SPReduce.reduce_scatter:
            comm.Reduce_scatter_block(self.dkv, self.dkv_own, op=MPI.SUM)
        else:
            for root in range(self.size):
                self._reduce_to(root)

    def _reduce_to(self, root: int) -> None:
        """Rooted reduce of root's rows: over the ranks >= root (contiguous split) or the whole group."""
        if self.split.split == SPSplit.contiguous and root > 0:
            if self.index < root:
                return       # its queries come before root's tokens: nothing to add
            if root == self.size - 1:
                return       # only the root itself attends to the last rank's tokens: already summed
            comm, local_root = self.tails[root], 0
        else:
            comm, local_root = self.comm, root
        buf = self.block(self.dkv, root)
        if self.index == root:
            comm.Reduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM, root=local_root)
        else:
            comm.Reduce(buf, None, op=self.MPI.SUM, root=local_root)

    @contextlib.contextmanager
    def local_only(self):
        """A checked re-run of a step on this rank alone (the others are not re-running it): no exchange. Attention
        reads the other ranks' keys and values still in the gathered buffers (those of the step's last micro-step)
        and backward adds only this rank's own dk, dv contributions."""
        self._exchange = False
        try:
            yield
        finally:
            self._exchange = True


def make_sequence(split: SequenceSplit, grid, B: int, cfg: ModelConfig, run: Launcher, reduce: SPReduce,
                  tp: TensorShard = WHOLE):
    """The sequence context of this rank (of tensor-parallel shard `tp`: its heads' keys and values travel):
    WholeSequence without sequence parallelism."""
    if split.S == 1:
        return WholeSequence(split.T)
    return SequenceParallel(split, grid.coords["sp"], B, cfg, run, grid.comm("sp"), reduce, grid.sp_tails, tp)


class SequenceShard:
    """A sequence-group rank's batches: its data-parallel group's B whole sequences, cut to this rank's positions."""

    def __init__(self, data, positions: np.ndarray):
        self.data, self.positions = data, positions

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = self.data.batch(k)                         # (B, T) each
        return x[:, self.positions].copy(), y[:, self.positions].copy()   # (B, T/S) each
