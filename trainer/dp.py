"""Data-parallel strategies: what happens between backward and the next step (`--dp-sync`).

Every rank holds a full model replica and computes gradients of its share of the global batch, scaled by
1/(B*T*grad_accum*ranks) so that a SUM over ranks is the gradient of the global mean loss (under sequence
parallelism a rank's share is T/S positions of its group's B sequences, and T is that T/S). They run on the rank
grid's gradient communicator: every rank that holds the same parameters (trainer.parallel.grid). The strategies
differ in how that sum reaches the optimizer:

    local         one process: nothing to sync
    allreduce     MPI_Allreduce of the flat gradient buffer; every rank runs AdamW on everything
    reduce-bcast  MPI_Reduce of gradients to rank 0, AdamW on rank 0 only, MPI_Bcast of the parameters
    overlap       one nonblocking MPI_Iallreduce per layer, posted as soon as backward finished that layer
                  (the buffer is grouped by layer: a bucket is a contiguous range, no copy), waited for
                  before AdamW (PyTorch DDP)
    zero1         MPI_Reduce_scatter of gradients, AdamW on this rank's 1/N shard of parameters and moments,
                  MPI_Allgatherv of the parameters (DeepSpeed ZeRO stage 1)
    zero2         zero1's shards, but the gradients are reduce-scattered layer by layer during backward, out of
                  one layer-sized bucket: a rank holds 1/N of the gradients plus that bucket (ZeRO stage 2)

The communicator is passed in (mpi4py's, or gpt2trace's traced proxy of it): computation lives in the kernels,
communication here.
"""
from __future__ import annotations

import numpy as np

from trainer.config import DataLoading, DPSync, TrainConfig  # noqa: F401  (re-exported)
from trainer.kernels.zero import zero_fill
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.optim import AdamW

Ranges = tuple[tuple[int, int], ...]   # disjoint [lo, hi) ranges of the flat buffer


def shard_bounds(n: int, ranks: int, rank: int) -> tuple[int, int]:
    """Rank r's contiguous share of n elements (the same split as the kernels' chunk())."""
    return n * rank // ranks, n * (rank + 1) // ranks


class Local:
    """One process: AdamW on the whole buffer."""
    ranks = 1
    grad_bucket = False        # whether the model's gradients are one layer's bucket (GPT2(grad_bucket=...))
    # whether the training loop calls after_layer in every micro-batch's backward, or only in the last one's
    # (where the accumulated gradients are final)
    every_micro_batch = False

    def __init__(self, model: GPT2, tcfg: TrainConfig, run: Launcher):
        self.opt = AdamW(model.layout.size, tcfg, run)

    def reduce_loss(self, loss: float) -> float:
        return loss

    def after_layer(self, model: GPT2, layer: int) -> None:
        pass

    def sync(self, model: GPT2) -> None:
        pass

    def grad_norm(self, model: GPT2) -> float | None:
        return self.opt.grad_norm(model.grads)

    def grad_norm_sq(self, model: GPT2, skip: Ranges = ()) -> float | None:
        """The squared norm of the summed gradients outside the buffer ranges `skip` (a pipeline's last stage skips
        its copy of the tied embedding, which stage 0 counts; a tensor-parallel rank other than 0 its replicated
        tensors); None on a rank that does not hold the sum."""
        return _norm_sq_outside(self.opt, model.grads, 0, skip)

    def update(self, model: GPT2, lr: float) -> None:
        self.opt.step(model.params, model.grads, lr)


def _norm_sq_outside(opt, grads: np.ndarray, offset: int, skip: Ranges) -> float:
    """Squared norm of `grads` (which start at buffer element `offset`) outside the buffer ranges `skip`."""
    if not skip:
        return opt.grad_norm_sq(grads)
    total, pos = 0.0, 0
    for lo, hi in sorted(skip):
        lo, hi = (min(max(x - offset, 0), len(grads)) for x in (lo, hi))
        if lo > pos:
            total += opt.grad_norm_sq(grads[pos:lo])
        pos = max(pos, hi)
    if pos < len(grads):
        total += opt.grad_norm_sq(grads[pos:])
    return total


class _MPIBase(Local):
    def __init__(self, model: GPT2, tcfg: TrainConfig, run: Launcher, comm):
        from mpi4py import MPI
        self.MPI, self.comm = MPI, comm
        self.rank, self.ranks = comm.Get_rank(), comm.Get_size()
        self.run = run
        self._init_optimizer(model, tcfg, run)
        self._loss = np.zeros(1, dtype=np.float64)

    def _init_optimizer(self, model: GPT2, tcfg: TrainConfig, run: Launcher) -> None:
        self.opt = AdamW(model.layout.size, tcfg, run)

    def reduce_loss(self, loss: float) -> float:
        self._loss[0] = loss
        self.comm.Allreduce(self.MPI.IN_PLACE, self._loss, op=self.MPI.SUM)
        return float(self._loss[0]) / self.ranks


class Allreduce(_MPIBase):
    def sync(self, model: GPT2) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, model.grads, op=self.MPI.SUM)


class ReduceBcast(_MPIBase):
    ROOT = 0

    def _init_optimizer(self, model: GPT2, tcfg: TrainConfig, run: Launcher) -> None:
        self.opt = AdamW(model.layout.size, tcfg, run) if self.rank == self.ROOT else None

    def sync(self, model: GPT2) -> None:
        if self.rank == self.ROOT:
            self.comm.Reduce(self.MPI.IN_PLACE, model.grads, op=self.MPI.SUM, root=self.ROOT)
        else:
            self.comm.Reduce(model.grads, None, op=self.MPI.SUM, root=self.ROOT)

    def grad_norm(self, model: GPT2) -> float | None:
        return self.opt.grad_norm(model.grads) if self.opt is not None else None  # only the root has the sum

    def grad_norm_sq(self, model: GPT2, skip: Ranges = ()) -> float | None:
        return _norm_sq_outside(self.opt, model.grads, 0, skip) if self.opt is not None else None

    def update(self, model: GPT2, lr: float) -> None:
        if self.opt is not None:
            self.opt.step(model.params, model.grads, lr)
        self.comm.Bcast(model.params, root=self.ROOT)


class Overlap(_MPIBase):
    """Per-layer buckets: layer l's 12 gradient tensors are one contiguous range of the layer-major buffer."""

    def __init__(self, model: GPT2, tcfg: TrainConfig, run: Launcher, comm):
        super().__init__(model, tcfg, run, comm)
        self.requests = []

    def after_layer(self, model: GPT2, layer: int) -> None:
        lo, hi = model.layout.layer_range(layer)
        self.requests.append(self.comm.Iallreduce(self.MPI.IN_PLACE, model.grads[lo:hi], op=self.MPI.SUM))

    def sync(self, model: GPT2) -> None:
        # wte/wpe/lnf gradients are complete only when backward is: their bucket goes last
        rest = model.grads[:model.layout.layer_start]
        self.requests.append(self.comm.Iallreduce(self.MPI.IN_PLACE, rest, op=self.MPI.SUM))
        self.comm.Waitall(self.requests)
        self.requests = []


class Zero1(_MPIBase):
    """Rank r owns the contiguous range shard_bounds(P, N, r) of the flat buffer: its gradients' sum
    (shard_grads), its AdamW moments and its update of the parameters."""

    def _init_optimizer(self, model: GPT2, tcfg: TrainConfig, run: Launcher) -> None:
        P = model.layout.size
        self.bounds = [shard_bounds(P, self.ranks, r) for r in range(self.ranks)]
        self.counts = [hi - lo for lo, hi in self.bounds]
        self.displs = [lo for lo, _ in self.bounds]
        self.lo, self.hi = self.bounds[self.rank]
        self.shard_grads = np.zeros(self.hi - self.lo, dtype=np.float32)
        self.opt = AdamW(self.hi - self.lo, tcfg, run)   # moments for this shard only: 1/N of the memory
        self._norm = np.zeros(1, dtype=np.float64)

    def sync(self, model: GPT2) -> None:
        self.comm.Reduce_scatter(model.grads, self.shard_grads, recvcounts=self.counts, op=self.MPI.SUM)

    def grad_norm(self, model: GPT2) -> float | None:
        self._norm[0] = self.opt.grad_norm(self.shard_grads) ** 2
        self.comm.Allreduce(self.MPI.IN_PLACE, self._norm, op=self.MPI.SUM)
        return float(np.sqrt(self._norm[0]))

    def grad_norm_sq(self, model: GPT2, skip: Ranges = ()) -> float | None:
        self._norm[0] = _norm_sq_outside(self.opt, self.shard_grads, self.lo, skip)
        self.comm.Allreduce(self.MPI.IN_PLACE, self._norm, op=self.MPI.SUM)
        return float(self._norm[0])

    def update(self, model: GPT2, lr: float) -> None:
        self.opt.step(model.params[self.lo:self.hi], self.shard_grads, lr)
        self.comm.Allgatherv(self.MPI.IN_PLACE, [model.params, self.counts, self.displs, self.MPI.FLOAT])


class Zero2(Zero1):
    """ZeRO-1's shards, AdamW and parameter all-gather, but no full gradient buffer: the model's gradients are one
    layer-sized bucket (GPT2(grad_bucket=True)), taken out after every layer of every micro-batch's backward.

    As soon as backward finished layer l (after_layer), one MPI_Reduce_scatter of the bucket's layer block
    delivers each rank the sum over ranks of the part of layer l inside its shard (counts: the intersection of
    layer l's buffer range with each rank's shard, zeros allowed), straight into its place in shard_grads; then the
    block is zeroed for layer l-1. Gradient accumulation: every micro-batch reduces (DeepSpeed stage 2 does too);
    before each reduce a rank adds its shard's sum so far into its own part of the bucket, so the reduced sum
    includes the earlier micro-batches' without a receive buffer. The non-layer tensors (wte, wpe, lnf) are final
    only at the end of backward (the tied head's gradient comes first, the encoder's last): `sync` reduces them
    the same way, once per step. Memory per rank: the bucket (non-layer tensors + one layer) + a 1/N shard of
    gradients, instead of zero1's whole gradient buffer + shard.

    The per-layer reduce-scatter is blocking: backward waits for it. DeepSpeed overlaps it with the next layer's
    backward on a side CUDA stream; here that would need two alternating buckets (layer l-1 computing into one
    while the nonblocking MPI_Ireduce_scatter of layer l reads the other) and an MPI that progresses in the
    background (MPICH progresses nonblocking collectives only inside MPI calls, so `overlap` hides nothing on this
    machine either).
    """
    grad_bucket = True
    every_micro_batch = True

    def __init__(self, model: GPT2, tcfg: TrainConfig, run: Launcher, comm):
        if model.grads.size != model.layout.bucket_size:
            raise ValueError("zero2 needs the model's one-layer gradient bucket: build it with "
                             "GPT2(..., grad_bucket=True) (trainer.dp.uses_grad_bucket says when)")
        super().__init__(model, tcfg, run, comm)

    def after_layer(self, model: GPT2, layer: int) -> None:
        layout = model.layout
        block = model.grads[layout.layer_start:]
        self._reduce_scatter(block, *layout.layer_range(layer))
        model.run(zero_fill, layout.first_layer + layer, block)

    def sync(self, model: GPT2) -> None:
        start = model.layout.layer_start
        if start:             # a middle pipeline stage holds no non-layer tensor
            self._reduce_scatter(model.grads[:start], 0, start)

    def _reduce_scatter(self, part: np.ndarray, lo: int, hi: int) -> None:
        """Sum `part`, the gradients of buffer elements [lo, hi), over the ranks into this rank's shard of them,
        on top of what earlier micro-batches of the step left there."""
        counts = [max(0, min(hi, b) - max(lo, a)) for a, b in self.bounds]
        a, b = max(lo, self.lo), min(hi, self.hi)
        mine = self.shard_grads[a - self.lo:b - self.lo] if b > a else self.shard_grads[:0]
        if b > a:
            part[a - lo:b - lo] += mine
        self.comm.Reduce_scatter(part, mine, recvcounts=counts, op=self.MPI.SUM)

    def update(self, model: GPT2, lr: float) -> None:
        super().update(model, lr)
        self.shard_grads[...] = 0.0     # the next step accumulates from zero


class PlainComm:
    """An mpi4py communicator plus `Waitall`, `Wait` and `Test`: the interface strategies and pipeline stages call
    (gpt2trace's traced one matches)."""

    def __init__(self, comm):
        self.comm = comm

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def Waitall(self, requests) -> None:
        from mpi4py import MPI
        MPI.Request.Waitall(requests)

    def Wait(self, request, status=None) -> None:
        request.Wait(status)

    def Test(self, request) -> bool:
        return request.Test()


STRATEGIES = {DPSync.allreduce: Allreduce, DPSync.reduce_bcast: ReduceBcast, DPSync.overlap: Overlap,
              DPSync.zero1: Zero1, DPSync.zero2: Zero2}


def _strategy_class(name: DPSync | str | None, comm) -> type:
    return Local if comm is None or comm.Get_size() == 1 else STRATEGIES[DPSync(name)]


def uses_grad_bucket(name: DPSync | str | None, comm=None) -> bool:
    """Whether make_strategy(name, ..., comm) needs the model built with GPT2(grad_bucket=True)."""
    return _strategy_class(name, comm).grad_bucket


def make_strategy(name: DPSync | str | None, model: GPT2, tcfg: TrainConfig, run: Launcher, comm=None):
    """The strategy for a run: Local without a communicator (or with one rank), else the named one."""
    from trainer.tasks.launcher import TaskLauncher
    several = comm is not None and comm.Get_size() > 1
    if several and not hasattr(comm, "Waitall"):
        comm = PlainComm(comm)
    if isinstance(run, TaskLauncher):     # --schedule tasks: reductions and AdamW are tasks (allreduce's sum)
        from trainer.tasks.sync import TaskSync
        if several and DPSync(name) != DPSync.allreduce:
            raise ValueError(f"--schedule tasks reduces gradients as --dp-sync allreduce does, not "
                             f"{DPSync(name).value}")
        return TaskSync(model, tcfg, run, comm if several else None)
    cls = _strategy_class(name, comm)
    if cls is Local:
        return Local(model, tcfg, run)
    return cls(model, tcfg, run, comm)


class ScatterLoader:
    """`--data-loading scatter`: rank 0 reads the global batch and MPI_Scatters each rank its piece.

    `global_loader` (rank 0 only) is a world=1 TokenLoader of G*B sequences (G data-parallel groups), whose rows
    g*B..(g+1)*B-1 are exactly what group g would read itself with `--data-loading local`: the two modes train on
    the same tokens. `shares[r]` = (first row, positions) of rank r's (B, T) piece; by default rank r takes rows
    r*B.. and all T positions (pure data parallelism; trainer.parallel.sequence.scatter_shares cuts sequences).
    Inputs and targets travel together as one (N, 2, B, T) int32 buffer, so each batch is one collective.
    """

    def __init__(self, comm, global_loader, B: int, T: int, shares: list | None = None):
        self.comm, self.loader, self.B, self.T = comm, global_loader, B, T
        self.rank, self.ranks = comm.Get_rank(), comm.Get_size()
        self.shares = shares or [(r * B, np.arange(T)) for r in range(self.ranks)]
        self._recv = np.empty((2, B, T), dtype=np.int32)
        self._send = np.empty((self.ranks, 2, B, T), dtype=np.int32) if self.rank == 0 else None

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.rank == 0:
            x, y = self.loader.batch(k)                                  # (G*B, T_all) each
            for r, (row, pos) in enumerate(self.shares):
                self._send[r, 0] = x[row:row + self.B, pos]
                self._send[r, 1] = y[row:row + self.B, pos]
        self.comm.Scatter(self._send, self._recv, root=0)
        return self._recv[0].copy(), self._recv[1].copy()
