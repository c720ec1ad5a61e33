"""The training loop: micro-steps of forward/backward, gradient sync, AdamW; phases and counters reported.

The loop knows nothing about traces: it reports phases, counters and step boundaries to an `Observer`
(gpt2trace's tracer is one); kernels report themselves through the Launcher's recorder.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from trainer import names
from trainer.config import TrainConfig
from trainer.errors import NonFiniteError
from trainer.launcher import NonFiniteOutput
from trainer.model import GPT2
from trainer.parallel.norm import grad_norm


class Observer(Protocol):
    def begin_step(self, step: int) -> None: ...
    def microstep(self, micro: int) -> None: ...
    # nbytes: what the phase moved to or from storage (a checkpoint's files), if anything
    def phase(self, name: str, nbytes: int | None = None) -> contextlib.AbstractContextManager: ...
    def counter(self, name: str, value: float) -> None: ...
    def end_step(self, step: int) -> None: ...
    # --schedule tasks: the tasks run by a taskwait (trainer.tasks.log.TaskLog), after it
    def tasks(self, log) -> None: ...


class NullObserver:
    def begin_step(self, step: int) -> None: pass
    def microstep(self, micro: int) -> None: pass
    def phase(self, name: str, nbytes: int | None = None) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()
    def counter(self, name: str, value: float) -> None: pass
    def end_step(self, step: int) -> None: pass
    def tasks(self, log) -> None: pass


class DataParallel(Protocol):
    """What a data-parallel strategy (trainer.dp) does around backward; trainer.dp.Local is the 1-process one."""
    ranks: int
    every_micro_batch: bool     # after_layer in every micro-batch's backward (ZeRO-2), or only in the last one's
    def reduce_loss(self, loss: float) -> float: ...
    def after_layer(self, model: GPT2, layer: int) -> None: ...
    def sync(self, model: GPT2) -> None: ...
    def grad_norm(self, model: GPT2) -> float | None: ...
    def update(self, model: GPT2, lr: float) -> None: ...


class Batches(Protocol):
    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class Checkpoint(Protocol):
    """Saves the run (collective: every rank saves after the same steps). `every`: after every `every`-th step
    (0: only after the last one); `nbytes`: what one save writes from this rank."""
    every: int
    nbytes: int
    def save(self, next_step: int) -> None: ...


def save_due(step: int, every: int, steps: int) -> bool:
    """Whether a run of `steps` steps saves after `step` (counted from 0): after every `every`-th and the last."""
    return step + 1 == steps or (every > 0 and (step + 1) % every == 0)


@dataclass(frozen=True)
class StepMetrics:
    step: int
    loss: float
    grad_norm: float
    ms: float
    tokens: int            # tokens this step, all ranks
    tokens_per_s: float

    def as_dict(self) -> dict:
        return {"step": self.step, "loss": self.loss, "grad_norm": self.grad_norm, "ms": self.ms,
                "tokens": self.tokens, "tokens_per_s": self.tokens_per_s}


def _microsteps(model: GPT2, data: Batches, step: int, tcfg: TrainConfig, obs: Observer,
                dp: DataParallel) -> float:
    """Forward/backward over the step's micro-batches into zeroed grads; returns this rank's mean loss.

    Gradients are scaled by 1/(B*T*grad_accum*ranks), T this rank's positions per sequence (T/S under sequence
    parallelism): summed over all ranks they are those of the global mean loss.
    """
    scale = 1.0 / (model.B * model.T * tcfg.grad_accum * dp.ranks)
    loss_sum = 0.0
    for micro in range(tcfg.grad_accum):
        obs.microstep(micro)
        last = micro == tcfg.grad_accum - 1
        with obs.phase(names.DATALOAD):
            x, y = data.batch(step * tcfg.grad_accum + micro)
        with obs.phase(names.FORWARD):
            loss_sum += model.forward(x, y)
        with obs.phase(names.BACKWARD):
            if micro == 0:
                model.zero_grad()
            # overlap syncs a layer's accumulated gradients once they are final (the last micro-step's backward);
            # zero2 reduces every micro-step's: it keeps no full gradient buffer to accumulate in
            model.backward(scale, after_layer=dp.after_layer if last or dp.every_micro_batch else None)
    return loss_sum / tcfg.grad_accum


def _blame_non_finite(model: GPT2, data: Batches, step: int, tcfg: TrainConfig, what: str,
                      dp: DataParallel) -> NonFiniteError:
    """Re-run the step checking every kernel's arrays, to name the kernel where NaN/inf first appears."""
    if not np.isfinite(model.params).all():
        origin = (f"made by adamw_update at step {step - 1}; lower --lr" if step > 0
                  else "in the initial weights; check the --init-from checkpoint")
        return NonFiniteError(f"step {step}: {what} is not finite because the parameters already hold NaN/inf "
                              f"({origin})")
    model.run.check_finite = True
    try:
        with model.seq.local_only():   # the rank's sequence group is not re-running the step either
            _microsteps(model, data, step, tcfg, NullObserver(), _NoSync(dp.ranks))
    except NonFiniteOutput as e:
        where = f"layer {e.layer}" if e.layer >= 0 else "outside the layers"
        return NonFiniteError(f"step {step}: {what} is not finite; NaN/inf first appears in kernel {e.kernel} "
                              f"({where}); lower --lr or check the input data")
    finally:
        model.run.check_finite = False
    return NonFiniteError(f"step {step}: {what} is not finite, but a checked re-run of the step was finite "
                          f"(non-deterministic overflow?); lower --lr")


class _Recorded:
    """The batches a step read, kept so a checked re-run reads the same ones without touching the data source
    (which may be a collective, as the scatter loader is)."""
    def __init__(self, data: Batches):
        self.data, self.seen = data, {}

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        if k not in self.seen:
            self.seen[k] = self.data.batch(k)
        return self.seen[k]


class _NoSync:
    """A checked re-run of a step stays local: the other ranks are not re-running it."""
    every_micro_batch = False

    def __init__(self, ranks: int):
        self.ranks = ranks

    def after_layer(self, model: GPT2, layer: int) -> None:
        pass


def train(model: GPT2, data: Batches, tcfg: TrainConfig, dp: DataParallel, *, observer: Observer | None = None,
          on_step: Callable[[StepMetrics], None] | None = None, start_step: int = 0,
          checkpoint: Checkpoint | None = None, pipeline=None) -> list[StepMetrics]:
    """Steps `start_step` to tcfg.steps - 1 (tcfg.steps is the total: a resumed run starts where the saved one
    stopped, reading the same batches, since batch k is a pure function of k); `checkpoint` saves at the end of
    the steps `save_due` names, inside the step (its time is the step's). `pipeline`
    (trainer.parallel.pipeline.Pipeline): this rank is one stage of a pipeline, whose schedule replaces the plain
    loop over micro-batches."""
    obs = observer or NullObserver()
    if hasattr(model.run, "observe"):     # a task launcher: its log goes to the observer after each taskwait
        model.run.observe = getattr(obs, "tasks", None)
    # the `tokens` counter: the tokens this rank trained on (every stage of a pipeline sees its pipeline's tokens;
    # analyses count one stage per pipeline)
    rank_tokens = model.B * model.T * tcfg.grad_accum
    tokens = rank_tokens * dp.ranks
    history = []
    for step in range(start_step, tcfg.steps):
        t0 = time.perf_counter_ns()
        obs.begin_step(step)
        step_data = _Recorded(data)
        if pipeline is None:
            local_loss = _microsteps(model, step_data, step, tcfg, obs, dp)
        else:
            scale = 1.0 / (model.B * model.T * tcfg.grad_accum * dp.ranks)
            local_loss = pipeline.run_step(step_data, step, obs, scale, dp.after_layer, dp.every_micro_batch)
        with obs.phase(names.GRAD_SYNC):
            if pipeline is not None:
                pipeline.sync_tied()
            dp.sync(model)
            loss = dp.reduce_loss(local_loss)
            if pipeline is not None:
                loss = local_loss = pipeline.share_loss(loss)
        with obs.phase(names.OPTIMIZER):
            if pipeline is not None:
                gnorm = pipeline.grad_norm(dp, model)
            elif model.tp.comm is not None:
                gnorm = grad_norm(dp, model)
            else:
                gnorm = dp.grad_norm(model)
            if not math.isfinite(local_loss) or (gnorm is not None and not math.isfinite(gnorm)):
                what = "the loss" if not math.isfinite(local_loss) else "the gradient norm"
                if getattr(dp, "updates_in_backward", False):
                    raise NonFiniteError(f"step {step}: {what} is not finite (--schedule tasks has already updated "
                                         "the parameters); lower --lr, or rerun with --schedule forkjoin to name the "
                                         "kernel where NaN/inf appears")
                if pipeline is not None or model.tp.comm is not None:   # the checked re-run needs the whole model
                    raise NonFiniteError(f"step {step}: {what} is not finite (pipeline stage {model.stage.index}, "
                                         f"tensor-parallel rank {model.tp.shard.index}); lower --lr, or rerun with "
                                         "--pp 1 --tp 1 to name the kernel where NaN/inf appears")
                raise _blame_non_finite(model, step_data, step, tcfg, what, dp)
            dp.update(model, tcfg.lr)
        counters = ((names.LOSS, loss), (names.LR, tcfg.lr), (names.GRAD_NORM, gnorm), (names.TOKENS, rank_tokens))
        for name, value in counters:
            if value is not None:
                obs.counter(name, value)
        if checkpoint is not None and save_due(step, checkpoint.every, tcfg.steps):
            with obs.phase(names.CHECKPOINT, nbytes=checkpoint.nbytes):
                checkpoint.save(step + 1)
        obs.end_step(step)
        ms = (time.perf_counter_ns() - t0) / 1e6
        m = StepMetrics(step, loss, gnorm if gnorm is not None else math.nan, ms, tokens, tokens / (ms / 1e3))
        history.append(m)
        if on_step is not None:
            on_step(m)
    return history
