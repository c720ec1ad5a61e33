"""Data parallelism under `--schedule tasks`: gradient reduction, gradient norm and AdamW as tasks, per layer.

As soon as backward has submitted layer l's last kernel (`after_layer`, in the last micro-batch), the layer's
gradient range gets, in this order:
    an MPI_Iallreduce communication task (with --ranks > 1): INOUT on the range, so it starts when every task that
        accumulates into it is done, and its successors wait until MPI_Test finds the reduction complete
    gradient-norm tasks (one float64 partial sum per block of ELEMENTS) reading the reduced range
    AdamW tasks on the range's parameters and moments, reading the reduced gradients
The non-layer tensors (wte, wpe, lnf) get the same at `sync`, after the encoder's backward: their gradients are
final only then (the tied head's comes first, the encoder's last). So layer l's update runs while layers below
are still in backward, and its reduction overlaps their backward.

The gradient norm is reported, not used: this trainer does not clip (neither does the forkjoin schedule). A
clipping run would have to scale every gradient by a factor of the whole norm, so no update could start before
the last reduction: the update would become one more wave after a taskwait, and only the reductions would overlap
backward.

The update's arithmetic is forkjoin's (the same kernel on the same elements), so parameters and moments differ
from forkjoin only as much as the gradients do. The training loop reads the loss only after `reduce_loss`, which
waits for every task of the step (a blocking collective must not start between two ranks' Iallreduces).
"""
from __future__ import annotations

import numpy as np

from trainer.config import TrainConfig
from trainer.kernels.adamw import adamw_update, grad_norm_squared
from trainer.model import GPT2, NO_LAYER
from trainer.optim import AdamW
from trainer.tasks.launcher import TaskLauncher
from trainer.tasks.regions import INOUT, Region
from trainer.tasks.tiling import norm_blocks


class TaskSync:
    grad_bucket = False
    every_micro_batch = False
    updates_in_backward = True     # the update has run when the loss and norm are known (train.py's NaN check)

    def __init__(self, model: GPT2, tcfg: TrainConfig, run: TaskLauncher, comm=None):
        if not isinstance(run, TaskLauncher):
            raise TypeError("TaskSync needs the model's kernels run by a TaskLauncher")
        self.tcfg, self.run, self.comm = tcfg, run, comm
        self.ranks = comm.Get_size() if comm is not None else 1
        self.opt = AdamW(model.layout.size, tcfg, run)
        self._partials: list[tuple[int, np.ndarray]] = []    # this step's norm partials, by buffer offset
        self._loss = np.zeros(1, dtype=np.float64)
        if comm is not None:
            from mpi4py import MPI
            self.MPI = MPI

    def _range(self, model: GPT2, lo: int, hi: int, layer: int) -> None:
        if hi <= lo:
            return
        grads = model.grads[lo:hi]
        if self.comm is not None:
            comm, MPI = self.comm, self.MPI
            self.run.runtime.submit_comm(lambda: comm.Iallreduce(MPI.IN_PLACE, grads, op=MPI.SUM), comm.Test,
                                         [Region(grads).whole(INOUT)], "MPI_Iallreduce", layer)
        partials = np.zeros(norm_blocks(hi - lo), dtype=np.float64)
        self._partials.append((lo, partials))
        self.run(grad_norm_squared, layer, partials, grads)
        c, o = self.tcfg, self.opt
        self.run(adamw_update, layer, model.params[lo:hi], grads, o.m[lo:hi], o.v[lo:hi], np.float32(c.lr),
                 np.float32(c.beta1), np.float32(c.beta2), np.float32(c.eps), np.float32(c.weight_decay),
                 np.int64(o.t + 1))

    def after_layer(self, model: GPT2, layer: int) -> None:
        self._range(model, *model.layout.layer_range(layer), model.layout.first_layer + layer)

    def sync(self, model: GPT2) -> None:
        self._range(model, 0, model.layout.layer_start, NO_LAYER)

    def reduce_loss(self, loss: float) -> float:
        self.run.taskwait()
        if self.comm is None:
            return loss
        self._loss[0] = loss
        self.comm.Allreduce(self.MPI.IN_PLACE, self._loss, op=self.MPI.SUM)
        return float(self._loss[0]) / self.ranks

    def grad_norm(self, model: GPT2) -> float:
        # the partial sums in buffer order: a fixed order, whatever ran first
        total = sum(float(p.sum()) for _, p in sorted(self._partials, key=lambda x: x[0]))
        self._partials = []
        return float(np.sqrt(total))

    def update(self, model: GPT2, lr: float) -> None:
        if lr != self.tcfg.lr:
            raise ValueError("tasks: the update's tasks were submitted with the configured lr")
        self.opt.t += 1      # the tasks ran it with t + 1 (at reduce_loss's taskwait)
