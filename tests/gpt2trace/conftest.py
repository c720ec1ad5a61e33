"""Real traces from the trainer (tiny model, a few steps), made once per session through the runner API."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

TINY_B, TINY_T, TINY_LAYERS, LR = 2, 16, 2, 1e-3


@dataclass(frozen=True)
class RealTrace:
    path: Path
    threads: int
    steps: int
    grad_accum: int

    @property
    def tokens(self) -> int:
        return TINY_B * TINY_T * self.grad_accum


def run_tiny(path: Path, threads: int, steps: int, grad_accum: int = 1) -> RealTrace:
    from gpt2trace.run.runner import RunConfig, TraceConfig, prepare_process, run
    prepare_process(threads)
    from trainer.config import ParallelConfig, TrainConfig, model_config

    cfg = RunConfig(model_config("tiny"), TrainConfig(batch_size=TINY_B, seq_len=TINY_T, steps=steps, lr=LR,
                                                      grad_accum=grad_accum),
                    ParallelConfig(threads=threads), TraceConfig(path))
    run(cfg)
    return RealTrace(path, threads, steps, grad_accum)


@pytest.fixture(scope="session")
def real_trace(tmp_path_factory):
    """real_trace(threads, steps, grad_accum) -> RealTrace, each configuration run once per session."""
    made: dict[tuple, RealTrace] = {}

    def make(threads: int = 2, steps: int = 3, grad_accum: int = 1) -> RealTrace:
        key = (threads, steps, grad_accum)
        if key not in made:
            path = tmp_path_factory.mktemp(f"trace_t{threads}_s{steps}_a{grad_accum}") / "trace.parquet"
            made[key] = run_tiny(path, threads, steps, grad_accum)
        return made[key]
    return make
