"""AdamW over the flat parameter buffer (llm.c's gpt2_update), plus the global gradient norm."""
from __future__ import annotations

import numpy as np

from trainer.config import TrainConfig
from trainer.kernels.adamw import adamw_update, grad_norm_squared
from trainer.launcher import Launcher
from trainer.model import NO_LAYER


class AdamW:
    """Moments m, v mirror the parameter layout; `shard` limits the update to a slice (ZeRO-1 uses it)."""

    def __init__(self, n_params: int, tcfg: TrainConfig, run: Launcher):
        self.tcfg, self.run = tcfg, run
        self.m = np.zeros(n_params, dtype=np.float32)
        self.v = np.zeros(n_params, dtype=np.float32)
        self.t = 0  # updates done; llm.c's bias correction counts from 1
        self._partials = np.zeros(max(run.nthreads, 1), dtype=np.float64)

    def grad_norm(self, grads: np.ndarray) -> float:
        return float(np.sqrt(self.grad_norm_sq(grads)))

    def grad_norm_sq(self, grads: np.ndarray) -> float:
        self.run(grad_norm_squared, NO_LAYER, self._partials, grads)
        return float(self._partials.sum())

    def step(self, params: np.ndarray, grads: np.ndarray, lr: float) -> None:
        c = self.tcfg
        self.t += 1
        self.run(adamw_update, NO_LAYER, params, grads, self.m, self.v, np.float32(lr), np.float32(c.beta1),
                 np.float32(c.beta2), np.float32(c.eps), np.float32(c.weight_decay), np.int64(self.t))

    def load(self, m: np.ndarray, v: np.ndarray, t: int) -> None:
        """Continue from saved moments (of this optimizer's parameters, its shard under ZeRO-1) after `t` updates:
        the next `step` is update t + 1, with the bias correction the saved run would have used."""
        if m.shape != self.m.shape or v.shape != self.v.shape:
            raise ValueError(f"moments of {m.shape}/{v.shape} elements for an optimizer of {self.m.shape}")
        self.m[...] = m
        self.v[...] = v
        self.t = t
