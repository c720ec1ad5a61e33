"""The training loop: micro-steps of forward/backward, gradient sync, AdamW; phases and counters reported.

The loop knows nothing about traces: it reports phases, counters and step boundaries to an `Observer`
(gpt2trace's tracer is one); kernels report themselves through the Launcher's recorder.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from trainer.config import TrainConfig
from trainer.errors import NonFiniteError
from trainer.launcher import NonFiniteOutput
from trainer.model import GPT2
from trainer.optim import AdamW


class Observer(Protocol):
    def begin_step(self, step: int) -> None: ...
    def microstep(self, micro: int) -> None: ...
    def phase(self, name: str) -> contextlib.AbstractContextManager: ...
    def counter(self, name: str, value: float) -> None: ...
    def end_step(self, step: int) -> None: ...


class NullObserver:
    def begin_step(self, step: int) -> None: pass
    def microstep(self, micro: int) -> None: pass
    def phase(self, name: str) -> contextlib.AbstractContextManager: return contextlib.nullcontext()
    def counter(self, name: str, value: float) -> None: pass
    def end_step(self, step: int) -> None: pass


class GradSync(Protocol):
    """Data-parallel strategy: what happens between backward and the parameter update."""
    def sync(self, model: GPT2) -> None: ...
    def update(self, model: GPT2, opt: AdamW, lr: float) -> None: ...


class LocalUpdate:
    """One process: no sync; AdamW on the whole buffer."""
    def sync(self, model: GPT2) -> None: pass
    def update(self, model: GPT2, opt: AdamW, lr: float) -> None: opt.step(model.params, model.grads, lr)


class Batches(Protocol):
    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]: ...


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


def _microsteps(model: GPT2, data: Batches, step: int, tcfg: TrainConfig, obs: Observer) -> float:
    """Forward/backward over the step's micro-batches into zeroed grads; returns the mean loss."""
    scale = 1.0 / (model.B * model.T * tcfg.grad_accum)
    loss_sum = 0.0
    for micro in range(tcfg.grad_accum):
        obs.microstep(micro)
        with obs.phase("dataload"):
            x, y = data.batch(step * tcfg.grad_accum + micro)
        with obs.phase("forward"):
            loss_sum += model.forward(x, y)
        with obs.phase("backward"):
            if micro == 0:
                model.zero_grad()
            model.backward(scale)
    return loss_sum / tcfg.grad_accum


def _blame_non_finite(model: GPT2, data: Batches, step: int, tcfg: TrainConfig, what: str) -> NonFiniteError:
    """Re-run the step checking every kernel's arrays, to name the kernel where NaN/inf first appears."""
    if not np.isfinite(model.params).all():
        return NonFiniteError(f"step {step}: {what} is not finite because the parameters already hold NaN/inf "
                              f"(made by adamw_update at step {step - 1}); lower --lr")
    model.run.check_finite = True
    try:
        _microsteps(model, data, step, tcfg, NullObserver())
    except NonFiniteOutput as e:
        where = f"layer {e.layer}" if e.layer >= 0 else "outside the layers"
        return NonFiniteError(f"step {step}: {what} is not finite; NaN/inf first appears in kernel {e.kernel} "
                              f"({where}); lower --lr or check the input data")
    finally:
        model.run.check_finite = False
    return NonFiniteError(f"step {step}: {what} is not finite, but a checked re-run of the step was finite "
                          f"(non-deterministic overflow?); lower --lr")


def train(model: GPT2, opt: AdamW, data: Batches, tcfg: TrainConfig, *, sync: GradSync | None = None,
          observer: Observer | None = None, world: int = 1,
          on_step: Callable[[StepMetrics], None] | None = None) -> list[StepMetrics]:
    sync = sync or LocalUpdate()
    obs = observer or NullObserver()
    tokens = model.B * model.T * tcfg.grad_accum * world
    history = []
    for step in range(tcfg.steps):
        t0 = time.perf_counter_ns()
        obs.begin_step(step)
        loss = _microsteps(model, data, step, tcfg, obs)
        with obs.phase("grad_sync"):
            sync.sync(model)
        with obs.phase("optimizer"):
            gnorm = opt.grad_norm(model.grads)
            if not (math.isfinite(loss) and math.isfinite(gnorm)):
                raise _blame_non_finite(model, data, step, tcfg, "the loss" if not math.isfinite(loss)
                                        else "the gradient norm")
            sync.update(model, opt, tcfg.lr)
        for name, value in (("loss", loss), ("lr", tcfg.lr), ("grad_norm", gnorm), ("tokens", tokens)):
            obs.counter(name, value)
        obs.end_step(step)
        ms = (time.perf_counter_ns() - t0) / 1e6
        m = StepMetrics(step, loss, gnorm, ms, tokens, tokens / (ms / 1e3))
        history.append(m)
        if on_step is not None:
            on_step(m)
    return history
