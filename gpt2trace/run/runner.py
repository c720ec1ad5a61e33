"""`gpt2trace run` as a Python API: check the configuration, build the model, data and trace session from frozen
configs, train, write the files.

Import order matters: the CLI calls `prepare_process(threads)` before anything imports Numba or SciPy.
"""
from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from trainer import names
from trainer.config import ModelConfig

if TYPE_CHECKING:
    pass

from gpt2trace.run.config import DEFAULT_TRACE, RunConfig, TraceConfig  # noqa: F401 - the run API's names

SYNTHETIC_TOKENS = 1 << 20  # the built-in corpus: 1M tokens of a learnable Markov chain (trainer.data)


@dataclass(frozen=True)
class RunResult:
    history: list                       # trainer.train.StepMetrics per completed step
    kept: object | None                 # gpt2trace.run.session.KeptTrace; None with tracing off (or rank != 0)
    num_parameters: int
    interrupted: int | None = None      # the signal that stopped the run at a step boundary
    saved: bool = False                 # the --save checkpoint was written after the last step
    saved_steps: int | None = None      # the steps the last checkpoint written holds (None: none written)

    @property
    def trace_path(self) -> Path | None:
        return self.kept.path if self.kept is not None else None

    @property
    def trace_records(self) -> int:
        return self.kept.records if self.kept is not None else 0


def prepare_process(threads: int, oversubscribed: bool = False) -> None:
    """Size Numba's pool before Numba loads (trainer/__init__ already chose OpenBLAS's kernel)."""
    from trainer.threads import configure_threads
    configure_threads(threads, oversubscribed)


def run_config_json(cfg: RunConfig, num_parameters: int, start_step: int = 0, stages=None) -> dict:
    from gpt2trace.format.grid import as_json as grid_json
    from trainer.parallel.grid import GridLayout  # the layout RankGrid.build splits the world by
    model = asdict(cfg.model) | {"padded_vocab_size": cfg.model.padded_vocab_size,
                                 "num_parameters": num_parameters}
    return {
        "model": model,
        "train": asdict(cfg.train) | {"start_step": start_step},
        "parallel": asdict(cfg.parallel),
        "grid": grid_json(GridLayout.from_config(cfg.parallel).dims),   # each rank's coordinates (format/grid.py)
        "trace": {"path": str(cfg.trace.path) if cfg.trace.path else None, "flush_every_s": cfg.trace.flush_every_s,
                  "memory_every_s": cfg.trace.memory_every_s},
        "data": str(cfg.data) if cfg.data else "synthetic",
        "init_from": str(cfg.init_from) if cfg.init_from else None,
        **({"pipeline": pipeline_json(cfg, stages)} if cfg.parallel.pp > 1 else {}),
        **({"network": cfg.network.as_json(cfg.parallel.ranks)} if cfg.network is not None else {}),
        "resume": str(cfg.resume) if cfg.resume else None,
        "save": str(cfg.save) if cfg.save else None,
        "save_every": cfg.save_every,
    }


def pipeline_json(cfg: RunConfig, stages=None) -> dict:
    """The stages' layers, for analyses: [first layer, layers] per stage, in stage order (`stages`: the split
    gpt2trace.run.preflight.check_run made; None: made here)."""
    if stages is None:
        from trainer.parallel.stages import plan
        stages = plan(cfg.model, cfg.train.seq_len, cfg.parallel.pp, cfg.parallel.pp_layers)
    return {"stages": [[s.first_layer, s.n_layer] for s in stages]}


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

    # a token file's length and ids were checked by check_run (gpt2trace.run.preflight.check_data), the
    # corpus's are right by construction: one pass over the tokens is enough
    name = cfg.data
    if grid.world is None or par.data_loading == DataLoading.local:
        loader = TokenLoader(tokens(), B, T, rank=group, world=groups, name=name)
        return loader if split.S == 1 else SequenceShard(loader, split.positions(grid.coords["sp"]))
    root_loader = TokenLoader(tokens(), B * groups, T, name=name) if par.rank == 0 else None
    return ScatterLoader(traced_comm, root_loader, B, split.local_len, scatter_shares(grid, split, B))


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
        comm=None, on_trace: Callable | None = None, on_save: Callable[[Path, int], None] | None = None,
        on_stop: Callable[[int, int | None], None] | None = None, checked=None) -> RunResult:
    """Train as configured; returns the per-step metrics and what was kept of the trace.

    Bad input raises trainer.errors.TrainerError or gpt2trace.format.errors.OutputError (one line) before
    anything is built. SIGINT/SIGTERM stop the run at the next step boundary (`RunResult.interrupted`); a second
    one, or an error, stops it inside a step and is raised after the trace's whole steps are kept. A first signal
    during training is told to `on_stop(signum, step)` at once, from the signal handler: `step` is the step the run
    stops after (None: before the first step). Whatever the end, `on_trace(kept)` hears what is left of the trace
    before `run` returns or raises.

    With `comm` (an mpi4py communicator of cfg.parallel.ranks processes) this process is rank comm.rank of a
    data-parallel job: it traces its own part, MPI calls included, and rank 0 merges all parts at the end.

    With `cfg.save`, rank 0 writes the checkpoint and its optimizer state after every `cfg.save_every`-th step and
    the last one, and tells `on_save(path, steps it holds)`; with `cfg.resume` the run continues the saved one from
    its next step to `cfg.train.steps` (the total).

    `checked`: what `gpt2trace.run.preflight.check_run` found for `cfg` in this process, with every process on
    this node counted (the CLI checks before it launches or trains); None: checked here.
    """
    from gpt2trace.record.traced_comm import TracedComm
    from gpt2trace.run.metrics import MetricsLog
    from gpt2trace.run.preflight import check_run
    from gpt2trace.run.session import TraceSession
    from gpt2trace.run.signals import Interrupted, StopAtStepBoundary, StopSignals
    from trainer.checkpoint import read_checkpoint
    from trainer.config import Schedule
    from trainer.dp import make_strategy
    from trainer.launcher import Launcher
    from trainer.parallel.grid import RankGrid
    from trainer.parallel.pipeline import build_stage
    from trainer.parallel.sequence import make_sequence
    from trainer.parallel.split import SequenceSplit
    from trainer.parallel.tensor import make_tensor
    from trainer.params import init_params
    from trainer.train import NullObserver, train

    threads, rank = cfg.parallel.threads, cfg.parallel.rank
    if comm is not None:   # a rank dies with its parent (mpiexec's proxy), after a whole step (gpt2trace.run.signals)
        from gpt2trace.run.mpiexec import die_with_parent
        die_with_parent(signal.SIGTERM)
    if checked is None:
        checked = check_run(cfg, processes_here=_ranks_on_this_node(comm), first_rank=rank == 0)
    resumed = None
    if cfg.resume is not None:
        model_cfg, params, resumed = _read_resume(cfg.resume)
    elif cfg.init_from is not None:
        model_cfg, params = read_checkpoint(cfg.init_from)
    else:
        model_cfg, params = cfg.model, init_params(cfg.model, cfg.train.seed)
    cfg = replace(cfg, model=model_cfg)
    start_step = resumed.next_step if resumed is not None else 0

    run_json = run_config_json(cfg, params.size, start_step, checked.stages)
    session = (TraceSession.open(cfg.trace.path, run_json, threads, cfg.trace.flush_every_s, cfg.trace.memory_every_s,
                                 comm)
               if cfg.trace.enabled else None)
    tracer = session.tracer if session is not None else None
    traced = (TracedComm(comm, tracer, network=cfg.network) if comm is not None and tracer is not None
              else comm)
    if cfg.parallel.schedule == Schedule.tasks:
        from trainer.tasks.launcher import TaskLauncher  # its log reaches the tracer through train's observer
        launcher = TaskLauncher(threads, cfg.parallel.task_block)
    else:
        launcher = Launcher(threads, recorder=tracer.recorder if tracer else None)
    par, B, T = cfg.parallel, cfg.train.batch_size, cfg.train.seq_len
    grid = RankGrid.build(par, traced)
    split = SequenceSplit(T, par.sp, par.sp_split)
    tensor = make_tensor(grid)
    seq = make_sequence(split, grid, B, model_cfg, launcher, par.sp_reduce, tensor.shard)
    model, pipeline = build_stage(model_cfg, params, par, cfg.train, grid, seq, launcher, tensor, checked.stages)
    loader = _load_data(cfg, model_cfg, grid, split, traced)
    dp = make_strategy(par.dp_sync, model, cfg.train, launcher, grid.grad_comm)
    if resumed is not None:
        from trainer.training_state import load_state
        load_state(resumed, dp, model)
    saver = _Saver(cfg, model, dp, grid, on_save, pipeline) if cfg.save is not None else None
    if on_start is not None:
        on_start({"model": model_cfg, "num_parameters": params.size,
                  "activations_bytes": model.activation_bytes + seq.nbytes, "start_step": start_step,
                  "resumed_from": resumed.saved_by if resumed is not None else None})

    history = []
    metrics = MetricsLog(cfg.metrics_json) if cfg.metrics_json is not None and rank == 0 else None

    def step_done(m) -> None:
        history.append(m)
        if metrics is not None:
            metrics.write(m.as_dict())
        if on_step is not None:
            on_step(m)

    # With MPI a second signal is only a request too: a rank that left inside a step would leave the others
    # waiting in its collectives (the launcher's second Ctrl-C, or mpiexec's, ends the whole job at once).
    try:
        with StopSignals(second_stops_at_once=comm is None) as signals:
            observer = StopAtStepBoundary(_FaultInjector(tracer if tracer is not None else NullObserver(), rank),
                                          signals, comm, on_stop=on_stop)
            trained, saved, interrupted = False, False, None
            try:
                train(model, loader, cfg.train, dp, observer=observer, on_step=step_done, start_step=start_step,
                      checkpoint=saver, pipeline=pipeline)
                trained = True
                observer.on_stop = None       # every step ran: a signal now stops nothing, the run ends anyway
                if saver is not None and start_step >= cfg.train.steps:   # no step ran: save what was loaded
                    with observer.phase(names.CHECKPOINT, nbytes=saver.nbytes):
                        saver.save(start_step)
                saved = saver is not None and saver.saved_steps == cfg.train.steps
            except Interrupted as stop:
                if not (trained or stop.at_step_boundary):
                    _end(session, metrics, False, on_trace)
                    raise
                interrupted = stop.signum
            except BaseException:
                _end(session, metrics, trained, on_trace)
                raise
            try:
                kept = _end(session, metrics, True, on_trace)
            except Interrupted as stop:   # a second signal while merging: the parts stay (on_trace heard so)
                raise Interrupted(stop.signum, at_step_boundary=True, after_training=True) from None
    finally:
        launcher.close()     # the task runtime's worker threads (forkjoin has none)
    return RunResult(history, kept if rank == 0 else None, params.size, interrupted, saved,
                     saver.saved_steps if saver is not None else None)


def _end(session, metrics, whole_run: bool, on_trace: Callable | None):
    """Keep what the run made: the metrics lines, the trace (merged, or parts); tell `on_trace` either way."""
    try:
        return session.finish(whole_run) if session is not None else None
    finally:
        try:
            if metrics is not None:
                metrics.close()
        finally:
            if on_trace is not None and session is not None and session.kept is not None:
                on_trace(session.kept)


def _read_resume(path: Path):
    """(model config, parameters, state header) of the checkpoint `path` and its state file, checked to be a pair
    written together (the preflight checked the state's fingerprint against the run)."""
    from trainer.checkpoint import read_checkpoint_crc
    from trainer.state_file import check_pair, read_state_header, state_path

    saved = read_state_header(state_path(path))
    model_cfg, params, crc = read_checkpoint_crc(path)
    check_pair(path, model_cfg, crc, saved)
    return model_cfg, params, saved


class _Saver:
    """--save/--save-every (trainer.train.Checkpoint): the whole training state gathered on rank 0
    (trainer.training_state, collective) and written there as the llm.c checkpoint and its state file."""

    def __init__(self, cfg: RunConfig, model, dp, grid, on_save: Callable[[Path, int], None] | None, pipeline=None):
        from gpt2trace.run.options import saved_by
        from gpt2trace.run.preflight import fingerprint_of
        from trainer.checkpoint import checkpoint_nbytes
        from trainer.state_file import state_nbytes

        self.path, self.every, self.on_save = cfg.save, cfg.save_every, on_save
        self.model, self.dp, self.grid, self.pipeline = model, dp, grid, pipeline
        self.fingerprint, self.saved_by = fingerprint_of(cfg, model.cfg), saved_by(cfg)
        # what this rank writes: rank 0 both files, the others nothing (their part is the gather's MPI calls)
        self.nbytes = (checkpoint_nbytes(model.cfg) + state_nbytes(self.fingerprint, self.saved_by)
                       if cfg.parallel.rank == 0 else 0)
        self.saved_steps: int | None = None

    def save(self, next_step: int) -> None:
        from trainer.training_state import gather_state

        state = gather_state(self.model, self.dp, self.grid, next_step,
                             self.pipeline.stages if self.pipeline is not None else None)
        if state is not None:
            write_pair(self.path, state, self.fingerprint, self.saved_by)
            if self.on_save is not None:
                self.on_save(self.path, next_step)
        self.saved_steps = next_step


def write_pair(path: Path, state, fingerprint, saved_by: dict) -> None:
    """The checkpoint at `path` and its state file beside it, each under a temporary name until both are
    complete, then renamed, the model first (a full disk: one line, neither file touched). A crash between the
    two renames leaves a new model beside the old state, which resuming refuses (trainer.state_file's CRC)."""
    from gpt2trace.format.outputs import atomic_outputs
    from trainer.checkpoint import write_checkpoint
    from trainer.state_file import state_path, write_state

    with atomic_outputs([path, state_path(path)]) as (model_tmp, state_tmp):
        crc = write_checkpoint(model_tmp, state.model, state.params)
        write_state(state_tmp, state.m, state.v, state.t, state.next_step, crc, fingerprint, saved_by)


def _ranks_on_this_node(comm) -> int:
    """Processes that share this node's memory: all of `comm`'s ranks on this host (MPI-3 shared-memory split)."""
    if comm is None:
        return 1
    from mpi4py import MPI
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return node.Get_size()
    finally:
        node.Free()
