"""The configuration of a run (`gpt2trace.run.runner.run`'s input): the trainer's configs and what the run writes.
Its own module, so that the options table (gpt2trace.run.options) and the runner both build on it."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from trainer.config import ModelConfig, ParallelConfig, TrainConfig
from trainer.errors import ConfigError

if TYPE_CHECKING:
    from gpt2trace.record.network import Cluster

DEFAULT_TRACE = Path("trace.parquet")


@dataclass(frozen=True)
class TraceConfig:
    path: Path | None = DEFAULT_TRACE   # None: --no-trace
    # A part is written at the first step end this long after the previous one (0: after every step, before
    # the next starts); a SIGKILL loses at most about this much of the run plus a step (gpt2trace.record.tracer).
    flush_every_s: float = 1.0
    # The resident memory is sampled at every phase end of a step that begins this long after the last sampled
    # one (0: every step); each sample costs a system call (gpt2trace.record.tracer): ~20 us in a step of `small`,
    # whose 6 phase ends every 0.2 s are ~0.06% of the run, and the demo's 60 steps keep ~8 sampled.
    memory_every_s: float = 0.2

    def __post_init__(self) -> None:
        for name in ("flush_every_s", "memory_every_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ConfigError(name, value, "must be a finite number of seconds >= 0")

    @property
    def enabled(self) -> bool:
        return self.path is not None


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig
    train: TrainConfig
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    trace: TraceConfig = field(default_factory=TraceConfig)
    data: Path | None = None            # llm.c token file; None: the built-in synthetic corpus
    init_from: Path | None = None       # llm.c checkpoint (its header decides the model config)
    save: Path | None = None            # write an llm.c checkpoint and its optimizer state (trainer.state_file)
    metrics_json: Path | None = None    # per-step JSON lines
    save_every: int = 0                 # also save after every save_every-th step (0: only after the last)
    resume: Path | None = None          # continue the run saved there (model + state) up to train.steps in all
    network: Cluster | None = None      # --emulate-network: every traced MPI call held for that network's cost

    def __post_init__(self) -> None:
        if isinstance(self.save_every, bool) or not isinstance(self.save_every, int) or self.save_every < 0:
            raise ConfigError("save_every", self.save_every, "must be an integer >= 0 (0: save only at the end)")
