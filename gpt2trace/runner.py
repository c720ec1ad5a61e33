"""`gpt2trace run` as a Python API: build the model, data and tracer from frozen configs, train, write files.

Import order matters: the CLI calls `prepare_process(threads)` before anything imports Numba or SciPy.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from trainer.config import ModelConfig, ParallelConfig, TrainConfig

DEFAULT_TRACE = Path("trace.parquet")
SYNTHETIC_TOKENS = 1 << 20  # the built-in corpus: 1M tokens of a learnable Markov chain (trainer.data)


@dataclass(frozen=True)
class TraceConfig:
    path: Path | None = DEFAULT_TRACE   # None: --no-trace

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
    save: Path | None = None            # write an llm.c checkpoint at the end
    metrics_json: Path | None = None    # per-step JSON lines


@dataclass(frozen=True)
class RunResult:
    history: list                       # trainer.train.StepMetrics per step
    trace_path: Path | None
    trace_records: int
    num_parameters: int


def prepare_process(threads: int, oversubscribed: bool = False) -> None:
    """Size Numba's pool before Numba loads (trainer/__init__ already chose OpenBLAS's kernel)."""
    from trainer.threads import configure_threads
    configure_threads(threads, oversubscribed)


def run_config_json(cfg: RunConfig, num_parameters: int) -> dict:
    model = asdict(cfg.model) | {"padded_vocab_size": cfg.model.padded_vocab_size,
                                 "num_parameters": num_parameters}
    return {
        "model": model,
        "train": asdict(cfg.train),
        "parallel": asdict(cfg.parallel),
        "trace": {"path": str(cfg.trace.path) if cfg.trace.path else None},
        "data": str(cfg.data) if cfg.data else "synthetic",
        "init_from": str(cfg.init_from) if cfg.init_from else None,
    }


def _load_data(cfg: RunConfig, model: ModelConfig):
    from trainer.data import TokenLoader, read_tokens, synthetic_corpus

    B, T, par = cfg.train.batch_size, cfg.train.seq_len, cfg.parallel
    if cfg.data is not None:
        tokens = read_tokens(cfg.data)
    else:
        tokens = synthetic_corpus(model.vocab_size, SYNTHETIC_TOKENS, cfg.train.seed)
    return TokenLoader(tokens, B, T, rank=par.rank, world=par.ranks, vocab_size=model.vocab_size)


def run(cfg: RunConfig, on_step: Callable | None = None, on_start: Callable[[dict], None] | None = None) -> RunResult:
    """Train as configured; returns the per-step metrics. Raises trainer.errors.TrainerError on bad input."""
    from gpt2trace import schema as S
    from gpt2trace.machine import machine_info
    from gpt2trace.tracefile import merge_parts
    from gpt2trace.tracer import Tracer
    from trainer.checkpoint import read_checkpoint, write_checkpoint
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.dp import Local
    from trainer.params import init_params
    from trainer.peak import sgemm_gflops
    from trainer.train import NullObserver, train

    threads = cfg.parallel.threads
    if cfg.init_from is not None:
        model_cfg, params = read_checkpoint(cfg.init_from)
    else:
        model_cfg, params = cfg.model, init_params(cfg.model, cfg.train.seed)
    cfg = RunConfig(model_cfg, cfg.train, cfg.parallel, cfg.trace, cfg.data, cfg.init_from, cfg.save,
                    cfg.metrics_json)
    loader = _load_data(cfg, model_cfg)

    tracer = None
    if cfg.trace.enabled:
        peak = {"gflops_per_core": sgemm_gflops(1), f"gflops_{threads}_threads": sgemm_gflops(threads),
                "cores": threads, "kernel": "matmul_forward (cblas_sgemm), BT=256 x 768 -> 3072"}
        meta = {
            S.META_RUN: json.dumps(run_config_json(cfg, params.size)).encode(),
            S.META_MACHINE: json.dumps(machine_info()).encode(),
            S.META_PEAK: json.dumps(peak).encode(),
            S.META_CLOCK: json.dumps({"source": "CLOCK_MONOTONIC", "ranks": 1, "offsets_ns": [0],
                                      "error_bound_ns": [0]}).encode(),
        }
        _clean_old_trace(cfg.trace.path)
        tracer = Tracer(cfg.trace.path, cfg.parallel.rank, threads, meta)
    launcher = Launcher(threads, recorder=tracer.recorder if tracer else None)
    model = GPT2(model_cfg, params, cfg.train.batch_size, cfg.train.seq_len, launcher)
    dp = Local(model, cfg.train, launcher)
    if on_start is not None:
        on_start({"model": model_cfg, "num_parameters": params.size, "activations_bytes": model.acts.nbytes})

    metrics_file = open(cfg.metrics_json, "w") if cfg.metrics_json else None
    observer = tracer if tracer is not None else NullObserver()

    def step_done(m):
        if metrics_file:
            metrics_file.write(json.dumps(m.as_dict()) + "\n")
            metrics_file.flush()
        if on_step:
            on_step(m)

    records = 0
    try:
        history = train(model, loader, cfg.train, dp, observer=observer,
                        on_step=step_done)
        if cfg.save is not None:
            with observer.phase("checkpoint"):
                write_checkpoint(cfg.save, model_cfg, model.params)
    finally:
        if metrics_file:
            metrics_file.close()
        if tracer is not None:
            # Whatever happened, what was traced is kept: the last window is flushed and parts merged.
            tracer.close()
            records = merge_parts(cfg.trace.path)
    return RunResult(history, cfg.trace.path, records, params.size)


def _clean_old_trace(path: Path) -> None:
    """A new run replaces an old trace and any parts an earlier, crashed run left beside it."""
    import shutil

    from gpt2trace.tracefile import parts_dir
    if parts_dir(path).exists():
        shutil.rmtree(parts_dir(path))
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
