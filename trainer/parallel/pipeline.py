"""Pipeline parallelism: one stage's part of a training step, and what the stages exchange.

Each rank of a pipeline holds one stage (trainer.parallel.stages) and runs the step's micro-batches in its
schedule's order (trainer.parallel.schedule). Between stages, on the grid's "pp" communicator:

    forward   stage k receives micro-batch m's activation (B*T*C floats) from k-1 into its input buffer, runs its
              layers, and sends its output to k+1
    backward  stage k receives the gradient of its output from k+1, runs backward, and sends the gradient of its
              input to k-1

Receives are blocking MPI_Recv: a stage has nothing else to do until its input arrives, and the wait is then one
"Waiting a message" record, the Late Sender the bubble is made of. Sends are MPI_Isend, completed by an MPI_Wait
just before the buffer is written again: under 1F1B stage k sends an activation forward while k+1 sends a
gradient back, and two blocking sends of large (rendezvous) messages would wait for each other's receive forever
(Megatron-LM pairs them in one batched isend/irecv for the same reason). The activation a forward sends is the
micro-batch's own output, kept for its backward anyway, so only its slot's reuse has to wait; the gradient a
backward sends is waited for before the next backward writes it.

After the last micro-batch the first and last stage sum the tied token embedding's gradient on the "embed"
communicator (Megatron's embedding group), then every stage runs the data-parallel strategy on its own layers
(trainer.dp, on the grid's gradient communicator). The loss, computed on the last stage, is broadcast along the
pipeline; the gradient norm is summed over the stages, counting the tied embedding once.
"""
from __future__ import annotations

import numpy as np

from trainer import names
from trainer.config import ModelConfig, ParallelConfig, TrainConfig
from trainer.dp import PlainComm, uses_grad_bucket
from trainer.launcher import Launcher
from trainer.memory import micro_batch_slots
from trainer.model import GPT2
from trainer.parallel.grid import PP, RankGrid
from trainer.parallel.norm import grad_norm
from trainer.parallel.schedule import FORWARD, schedule
from trainer.parallel.stages import Stage, plan
from trainer.parallel.tensor import WholeTensor
from trainer.params import ParamLayout

ACTIVATION, GRADIENT = 0, 1


def tag(kind: int, micro: int) -> int:
    """The MPI tag of micro-batch `micro`'s activation or gradient (MPI guarantees tags up to 32767)."""
    return 2 * micro + kind


class Pipeline:
    def __init__(self, model: GPT2, grid: RankGrid, stages: list[Stage], schedule_name: str, micro_batches: int):
        from mpi4py import MPI
        self.MPI, self.model, self.stages, self.M = MPI, model, stages, micro_batches
        self.stage = model.stage
        self.comm = grid.comm(PP)            # stage k is rank k of it
        if not hasattr(self.comm, "Wait"):   # mpi4py's own (an untraced run)
            self.comm = PlainComm(self.comm)
        self.embed = grid.embed
        self.passes = schedule(schedule_name, self.stage.index, self.stage.count, micro_batches)
        self.pending: dict[object, object] = {}   # send buffer key -> its MPI request
        self._loss = np.zeros(1, dtype=np.float64)

    # -- the step's passes -----------------------------------------------------------------------------
    def run_step(self, data, step: int, obs, loss_scale: float, after_layer,
                 every_micro_batch: bool = False) -> float:
        """Every pass of this stage's schedule into zeroed gradients; returns the mean loss over the micro-batches
        on the last stage (0 elsewhere). `after_layer` is handed the last micro-batch's backward (overlap), or
        with `every_micro_batch` every backward (zero2)."""
        model, st, M = self.model, self.stage, self.M
        loss_sum, zeroed = 0.0, False
        for i, (kind, m) in enumerate(self.passes):
            obs.microstep(m)
            slot = m % len(model.slots)
            final = i == len(self.passes) - 1
            if kind == FORWARD:
                x = y = None
                if st.is_first or st.is_last:
                    with obs.phase(names.DATALOAD):
                        x, y = data.batch(step * M + m)
                with obs.phase(names.FORWARD):
                    if not st.is_first:
                        self.comm.Recv(model.stage_input(slot), source=st.index - 1, tag=tag(ACTIVATION, m))
                    self._wait(("out", slot))          # the slot's previous output must have left
                    loss = model.forward(x, y, slot)
                    if loss is not None:
                        loss_sum += loss
                    if not st.is_last:
                        self._send(("out", slot), model.stage_output(slot), st.index + 1, tag(ACTIVATION, m))
            else:
                with obs.phase(names.BACKWARD):
                    if not zeroed:
                        model.zero_grad()
                        zeroed = True
                    self._wait("grad")                  # the gradient sent last pass has left
                    self._wait(("out", slot))           # (recompute rewrites the output with the same values)
                    if not st.is_last:
                        self.comm.Recv(model.output_grad, source=st.index + 1, tag=tag(GRADIENT, m))
                    model.backward(loss_scale, after_layer if m == M - 1 or every_micro_batch else None, slot)
                    if not st.is_first:
                        self._send("grad", model.input_grad, st.index - 1, tag(GRADIENT, m))
                    if final:
                        for key in list(self.pending):  # the step ends with no message in flight
                            self._wait(key)
        return loss_sum / M if st.is_last else 0.0

    def _send(self, key, buf: np.ndarray, dest: int, tag_: int) -> None:
        self.pending[key] = self.comm.Isend(buf, dest=dest, tag=tag_)

    def _wait(self, key) -> None:
        request = self.pending.pop(key, None)
        if request is not None:
            self.comm.Wait(request)

    # -- after the passes ------------------------------------------------------------------------------
    def sync_tied(self) -> None:
        """Sum the tied token embedding's gradient over the first and last stage (before the data-parallel sync)."""
        if self.embed is not None:
            self.embed.Allreduce(self.MPI.IN_PLACE, self.model.gp["wte"], op=self.MPI.SUM)

    def share_loss(self, loss: float) -> float:
        """The last stage's loss on every stage."""
        self._loss[0] = loss
        self.comm.Bcast(self._loss, root=self.stage.count - 1)
        return float(self._loss[0])

    def grad_norm(self, dp, model: GPT2) -> float | None:
        """The whole model's gradient norm: summed over the stages (and tensor-parallel ranks), the last stage's copy
        of the tied embedding left out (trainer.parallel.norm)."""
        return grad_norm(dp, model, self.comm)


def build_stage(cfg: ModelConfig, params: np.ndarray, par: ParallelConfig, tcfg: TrainConfig, grid: RankGrid, seq,
                run: Launcher, tp=None, stages=None) -> tuple[GPT2, Pipeline | None]:
    """This rank's model from the whole model's parameters: its pipeline stage's layers (of its tensor-parallel
    shard, `tp`: trainer.parallel.tensor), with as many micro-batch slots as its schedule holds at once; and with
    --pp > 1 the Pipeline that runs the stage. `stages`: the split (trainer.parallel.stages.plan) if made already."""
    stages = stages if stages is not None else plan(cfg, tcfg.seq_len, par.pp, par.pp_layers)
    stage = stages[grid.coords[PP]]
    tp = tp if tp is not None else WholeTensor()
    if par.pp > 1 or par.tp > 1:
        params = ParamLayout.for_stage(cfg, stage, tp.shard).take(ParamLayout.for_model(cfg), params, cfg)
    model = GPT2(cfg, params, tcfg.batch_size, tcfg.seq_len, run, seq=seq, stage=stage,
                 slots=micro_batch_slots(stage, par.pp_schedule.value, tcfg.grad_accum), recompute=par.recompute,
                 tp=tp, grad_bucket=uses_grad_bucket(par.dp_sync, grid.grad_comm))
    pipeline = Pipeline(model, grid, stages, par.pp_schedule.value, tcfg.grad_accum) if par.pp > 1 else None
    return model, pipeline
