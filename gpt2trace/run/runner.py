"""`gpt2trace run` as a Python API: build the model, data and tracer from frozen configs, train, write files.

Import order matters: the CLI calls `prepare_process(threads)` before anything imports Numba or SciPy.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from trainer import names
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


def _load_data(cfg: RunConfig, model: ModelConfig, grid, split, traced_comm):
    """This rank's batches: its data-parallel group's shard of the token stream cut to its positions (`local`), or
    what rank 0 scatters (`scatter`)."""
    from trainer.data import TokenLoader, read_tokens, synthetic_corpus
    from trainer.dp import DataLoading, ScatterLoader
    from trainer.parallel.sequence import SequenceShard
    from trainer.parallel.split import scatter_shares

    B, T, par = cfg.train.batch_size, cfg.train.seq_len, cfg.parallel
    groups, group = grid.degree("dp"), grid.coords["dp"]

    def tokens():
        if cfg.data is not None:
            return read_tokens(cfg.data)
        return synthetic_corpus(model.vocab_size, SYNTHETIC_TOKENS, cfg.train.seed)

    if grid.world is None or par.data_loading == DataLoading.local:
        loader = TokenLoader(tokens(), B, T, rank=group, world=groups, vocab_size=model.vocab_size)
        return loader if split.S == 1 else SequenceShard(loader, split.positions(grid.coords["sp"]))
    root_loader = (TokenLoader(tokens(), B * groups, T, vocab_size=model.vocab_size) if par.rank == 0 else None)
    return ScatterLoader(traced_comm, root_loader, B, split.local_len, scatter_shares(grid, split, B))


def _mpi_info() -> dict:
    import mpi4py
    from mpi4py import MPI
    return {"library": MPI.Get_library_version().strip().splitlines()[0], "standard": "%d.%d" % MPI.Get_version(),
            "mpi4py": mpi4py.__version__}


class _InjectedFault(Exception):
    pass


class _FaultInjector:
    """GPT2TRACE_INJECT_FAULT=RANK:STEP makes that rank fail when it starts that step: the fault-tolerance tests
    use it to check that one failing rank stops the whole job, with its error shown and the trace kept."""

    def __init__(self, inner, rank: int):
        spec = os.environ.get("GPT2TRACE_INJECT_FAULT", "")
        r, _, st = spec.partition(":")
        self.inner, self.when = inner, (int(st) if spec and int(r) == rank else None)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def begin_step(self, step: int) -> None:
        if step == self.when:
            raise _InjectedFault(f"fault injected at step {step} (GPT2TRACE_INJECT_FAULT)")
        self.inner.begin_step(step)


def run(cfg: RunConfig, on_step: Callable | None = None, on_start: Callable[[dict], None] | None = None,
        comm=None) -> RunResult:
    """Train as configured; returns the per-step metrics. Raises trainer.errors.TrainerError on bad input.

    With `comm` (an mpi4py communicator of cfg.parallel.ranks processes) this process is rank comm.rank of a
    data-parallel job: it traces its own part, MPI calls included, and rank 0 merges all parts at the end.
    """
    from gpt2trace.format import schema as S
    from gpt2trace.record.clocksync import estimate_offsets
    from gpt2trace.record.machine import machine_info
    from gpt2trace.record.traced_comm import TracedComm
    from gpt2trace.format.writer import merge_parts
    from gpt2trace.record.tracer import Tracer
    from trainer.checkpoint import read_checkpoint, write_checkpoint
    from trainer.dp import make_strategy
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.parallel.grid import RankGrid
    from trainer.parallel.sequence import make_sequence
    from trainer.parallel.split import SequenceSplit
    from trainer.params import init_params
    from trainer.peak import sgemm_gflops
    from trainer.train import NullObserver, train

    threads, rank, ranks = cfg.parallel.threads, cfg.parallel.rank, cfg.parallel.ranks
    if cfg.init_from is not None:
        model_cfg, params = read_checkpoint(cfg.init_from)
    else:
        model_cfg, params = cfg.model, init_params(cfg.model, cfg.train.seed)
    cfg = replace(cfg, model=model_cfg)

    tracer, clock_start, origin0 = None, None, 0
    if cfg.trace.enabled:
        if rank == 0:
            _check_no_old_parts(cfg.trace.path)
        peak = None
        if rank == 0:  # measured once, while the other ranks wait: ranks measuring at once share the cores
            peak = {"gflops_per_core": sgemm_gflops(1), f"gflops_{threads}_threads": sgemm_gflops(threads),
                    "cores": threads, "kernel": "matmul_forward (cblas_sgemm), BT=256 x 768 -> 3072"}
        if comm is not None:
            peak = comm.bcast(peak, root=0)
        clock = {"source": "CLOCK_MONOTONIC", "ranks": ranks, "offsets_ns": [0], "error_bound_ns": [0]}
        origin = None
        if comm is not None:
            clock_start = estimate_offsets(comm)
            origin0 = comm.bcast(time.monotonic_ns() if rank == 0 else None, root=0)
            origin = origin0 + clock_start.offsets_ns[rank]  # rank 0's origin, read on this rank's clock
            clock |= {"method": "ping-pong with rank 0, shortest of 20 round trips (Cristian)",
                      "offsets_ns": clock_start.offsets_ns, "error_bound_ns": clock_start.error_ns,
                      "start": clock_start.as_json()}
        meta = {
            S.META_RUN: json.dumps(run_config_json(cfg, params.size)).encode(),
            S.META_MACHINE: json.dumps(machine_info(_mpi_info() if comm is not None else None)).encode(),
            S.META_PEAK: json.dumps(peak).encode(),
            S.META_CLOCK: json.dumps(clock).encode(),
        }
        if comm is not None:
            comm.Barrier()  # rank 0 has cleared the way before anyone writes a part
        tracer = Tracer(cfg.trace.path, rank, threads, meta, origin_ns=origin)
    traced = TracedComm(comm, tracer) if comm is not None and tracer is not None else comm
    launcher = Launcher(threads, recorder=tracer.recorder if tracer else None)
    par, B, T = cfg.parallel, cfg.train.batch_size, cfg.train.seq_len
    grid = RankGrid.build(par, traced)
    split = SequenceSplit(T, par.sp, par.sp_split)
    seq = make_sequence(split, grid, B, model_cfg.n_embd, launcher, par.sp_reduce)
    model = GPT2(model_cfg, params, B, T, launcher, seq=seq)
    loader = _load_data(cfg, model_cfg, grid, split, traced)
    dp = make_strategy(par.dp_sync, model, cfg.train, launcher, grid.grad_comm)
    if on_start is not None:
        on_start({"model": model_cfg, "num_parameters": params.size,
                  "activations_bytes": model.acts.nbytes + seq.nbytes})

    metrics_file = open(cfg.metrics_json, "w") if cfg.metrics_json and rank == 0 else None
    observer = _FaultInjector(tracer if tracer is not None else NullObserver(), rank)

    def step_done(m):
        if metrics_file:
            metrics_file.write(json.dumps(m.as_dict()) + "\n")
            metrics_file.flush()
        if on_step:
            on_step(m)

    records, finished = 0, False
    try:
        history = train(model, loader, cfg.train, dp, observer=observer, on_step=step_done)
        if cfg.save is not None and rank == 0:
            with observer.phase(names.CHECKPOINT):
                write_checkpoint(cfg.save, model_cfg, model.params)
        finished = True
    finally:
        if metrics_file:
            metrics_file.close()
        if tracer is not None:
            # Whatever happened, what was traced is kept: this rank's last window is flushed.
            tracer.close()
            if comm is None:
                records = merge_parts(cfg.trace.path)
    if tracer is not None and comm is not None and finished:
        records = _merge_ranks(cfg.trace.path, comm, clock_start, origin0)
    return RunResult(history, cfg.trace.path, records, params.size)


def _merge_ranks(path: Path, comm, clock_start, origin0: int) -> int:
    """End of a clean MPI run: estimate the clocks again, then rank 0 merges every rank's parts."""
    from gpt2trace.format import schema as S
    from gpt2trace.record.clocksync import drift_slope, estimate_offsets
    from gpt2trace.format.writer import merge_parts

    rank, ranks = comm.Get_rank(), comm.Get_size()
    clock_end = estimate_offsets(comm)
    comm.Barrier()   # every rank's parts are on disk
    if rank != 0:
        return 0
    slopes = [drift_slope(clock_start, clock_end, r) for r in range(ranks)]
    drift = {r: (slopes[r], clock_start.at_ns[r] - origin0) for r in range(ranks)}
    error = [max(a, b) for a, b in zip(clock_start.error_ns, clock_end.error_ns)]
    clock = {"source": "CLOCK_MONOTONIC", "ranks": ranks,
             "method": "ping-pong with rank 0, shortest of 20 round trips (Cristian), at start and end; "
                       "offset at start applied while tracing, drift between the two applied linearly at merge",
             "offsets_ns": clock_start.offsets_ns, "error_bound_ns": error,
             "start": clock_start.as_json(), "end": clock_end.as_json(), "drift_slope": slopes}
    return merge_parts(path, extra_metadata={S.META_CLOCK: json.dumps(clock).encode()}, drift=drift)


def _check_no_old_parts(path: Path) -> None:
    """A new run replaces an old trace, but never silently deletes what a crashed run left to recover."""
    from gpt2trace.format.writer import parts_dir
    from trainer.errors import TrainerError

    if parts_dir(path).exists():
        raise TrainerError(f"{parts_dir(path)} holds the parts of an earlier run that did not finish; run "
                           f"`gpt2trace recover {path}` to keep them, or delete that directory")
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
