"""`gpt2trace run`: train the instrumented GPT-2 and write its trace (a thin layer over gpt2trace.run.runner).

Everything is checked before anything is built or launched (gpt2trace.run.preflight): a bad option is one line
and exit code 2, printed once even with --ranks. Numba's thread pool is sized before anything imports Numba.
Values are validated by the frozen configs (trainer.config), not by Typer, so every message is one line naming
the option.
"""
from __future__ import annotations

import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.text import Text

from gpt2trace.cli import limits
from gpt2trace.cli.common import console, err_console, fail, plain
from gpt2trace.run.runner import DEFAULT_TRACE, TraceConfig
from trainer.config import DEFAULT_TASK_BLOCK, DataLoading, DPSync, PPSchedule, Schedule, SPReduce, SPSplit

_MODEL_HELP = "GPT-2 config by name: d12 (124M), d24, d36, d48, small (the default, the demo), tiny (tests)."
DEFAULT_MODEL = "small"
DEFAULT_T = 64

# Config fields -> the options that set them, for messages (trainer.errors.ConfigError names the field).
OPTIONS = {
    "batch_size": "-B/--batch-size", "seq_len": "-T/--seq-len", "steps": "--steps", "lr": "--lr",
    "weight_decay": "--weight-decay", "grad_accum": "--grad-accum", "seed": "--seed", "threads": "--threads",
    "ranks": "--ranks", "n_layer": "--n-layer", "n_head": "--n-head", "n_embd": "--n-embd",
    "vocab_size": "--vocab-size", "max_seq_len": "--max-seq-len", "flush_every_s": "--flush-every",
    "memory_every_s": "--memory-every", "sp": "--sp",
    "tp": "--tp", "pp": "--pp", "pp_layers": "--pp-layers", "data_loading": "--data-loading",
    "emulate_network": "--emulate-network", "save_every": "--save-every", "schedule": "--schedule",
    "task_block": "--task-block",
}
# A resumed run's settings that differ from the saved run's (trainer.state_file.Fingerprint), as the user set them.
_RESUME_LABELS = {**OPTIONS, "global_batch": "the global batch (-B x --ranks/--sp x --grad-accum sequences)",
                  "data": "--data", "data_bytes": "the size of --data", "beta1": "AdamW beta1",
                  "beta2": "AdamW beta2", "eps": "AdamW eps"}
_SIZE_OPTIONS = ("--n-layer", "--n-head", "--n-embd", "--vocab-size", "--max-seq-len")
# Set in the ranks `--ranks N` starts under mpiexec: the launcher merges what they trace when the job fails.
_LAUNCHER_ENV = "GPT2TRACE_LAUNCHED_BY_RUN"


def run(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help=_MODEL_HELP, show_default=False)] = None,
    init_from: Annotated[Path | None, typer.Option(
        "--init-from", help="llm.c checkpoint to start from; it sets the model (so --model and the size options "
                            "are refused).")] = None,
    data: Annotated[Path | None, typer.Option(
        help="llm.c token file (.bin); default: the built-in synthetic corpus.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", "-B", help="Sequences per micro-step, per rank (>= 1).")
                          ] = 4,
    seq_len: Annotated[int | None, typer.Option(
        "--seq-len", "-T", show_default=False,
        help=f"Tokens per sequence (default: {DEFAULT_T}, or the model's context if shorter).")] = None,
    steps: Annotated[int, typer.Option(help="Optimizer steps in all (>= 0), a resumed run's saved steps included.")
                     ] = 60,
    lr: Annotated[float, typer.Option(help="AdamW learning rate (constant, finite, >= 0).")] = 1e-3,
    weight_decay: Annotated[float, typer.Option("--weight-decay", help="AdamW weight decay (>= 0).")] = 0.0,
    grad_accum: Annotated[int, typer.Option("--grad-accum", help="Micro-steps per optimizer step (>= 1).")] = 1,
    threads: Annotated[int | None, typer.Option(
        show_default=False, help="Numba threads per rank (default: the cores available, shared among the ranks; "
                                 "more than the cores works, with a warning).")] = None,
    ranks: Annotated[int, typer.Option(help="MPI ranks (data parallel); starts mpiexec itself unless already "
                                            "inside MPI.")] = 1,
    dp_sync: Annotated[DPSync, typer.Option(
        "--dp-sync", help="How ranks combine gradients: allreduce; reduce-bcast (AdamW on rank 0); overlap (one "
                          "nonblocking allreduce per layer); zero1 (ZeRO-1: reduce-scatter, AdamW moments sharded); "
                          "zero2 (ZeRO-2: also the gradients sharded, reduce-scattered layer by layer during "
                          "backward).")] = DPSync.allreduce,
    data_loading: Annotated[DataLoading, typer.Option(
        "--data-loading", help="local: each rank reads its shard; scatter: rank 0 reads and scatters.")
    ] = DataLoading.local,
    tp: Annotated[int, typer.Option(
        "--tp", help="Tensor parallelism (Megatron-LM): ranks per tensor-parallel group, each holding 1/tp of "
                     "every layer's heads and MLP columns and of the vocabulary; adjacent ranks (tp must divide "
                     "--ranks, the heads and the padded vocabulary).")] = 1,
    sp: Annotated[int, typer.Option(
        "--sp", help="Sequence parallelism: ranks per sequence group, each holding T/sp positions of every "
                     "sequence; --ranks/sp data-parallel groups (sp must divide --ranks and -T).")] = 1,
    sp_split: Annotated[SPSplit, typer.Option(
        "--sp-split", help="Positions per rank: contiguous blocks, or interleaved (t mod sp).")] = SPSplit.contiguous,
    sp_reduce: Annotated[SPReduce, typer.Option(
        "--sp-reduce", help="How a sequence group sums key/value gradients after attention backward.")
    ] = SPReduce.allreduce,
    pp: Annotated[int, typer.Option(
        "--pp", help="Pipeline parallelism: stages per pipeline, each holding a contiguous range of layers; "
                     "--ranks/(sp*pp) data-parallel pipelines. --grad-accum sets the micro-batches per step.")] = 1,
    pp_schedule: Annotated[PPSchedule, typer.Option(
        "--pp-schedule", help="gpipe: all forwards, then all backwards; 1f1b: one forward, one backward "
                              "(activations of at most pp micro-batches held).")] = PPSchedule.onef1b,
    pp_layers: Annotated[str | None, typer.Option(
        "--pp-layers", show_default=False,
        help="Layers per stage, e.g. 3,3,3,1 (default: balanced by compute, the lm head counted on the last "
             "stage).")] = None,
    emulate_network: Annotated[str | None, typer.Option(
        "--emulate-network", show_default=False,
        help='Emulate a cluster: "nodes=5,link=10Gb/s,latency=5us": ranks in blocks on the nodes, every MPI call '
             "held for what that network adds (docs/parallel.md).")] = None,
    recompute: Annotated[bool, typer.Option(
        "--recompute", help="Activation checkpointing: keep each layer's input in forward, recompute the layer "
                            "in backward.")] = False,
    schedule: Annotated[Schedule, typer.Option(
        "--schedule", help="How kernels run on a rank's threads: forkjoin (a parallel loop per kernel, a barrier "
                           "after each); tasks (OmpSs-2 style: kernels cut into block tasks with data dependencies, "
                           "no barrier; gradient reductions are MPI_Iallreduce tasks; data parallelism only).")
    ] = Schedule.forkjoin,
    task_block: Annotated[int, typer.Option(
        "--task-block", help="--schedule tasks: rows (tokens) per task of the row-split kernels; weight-gradient "
                             "kernels get as many feature blocks.")] = DEFAULT_TASK_BLOCK,
    seed: Annotated[int, typer.Option(help="Seed for initialization and the synthetic corpus (>= 0).")] = 1337,
    save: Annotated[Path | None, typer.Option(
        help="Write an llm.c checkpoint at the end, and the AdamW state beside it (PATH.state) for --resume.")
    ] = None,
    save_every: Annotated[int, typer.Option(
        "--save-every", help="Also save after every K-th step (needs --save; each save replaces the last). "
                             "0: only at the end.")] = 0,
    resume: Annotated[Path | None, typer.Option(
        "--resume", help="Continue the run saved in this checkpoint (and its .state) bit for bit, from its next "
                         "step to --steps (the total); same settings as the saved run.")] = None,
    metrics_json: Annotated[Path | None, typer.Option(
        "--metrics-json", help="Per-step JSON lines: step, loss, ms, tokens_per_s.")] = None,
    trace: Annotated[Path, typer.Option(help="Where the trace goes (an existing trace there is replaced when "
                                             "the run ends).")] = DEFAULT_TRACE,
    no_trace: Annotated[bool, typer.Option("--no-trace", help="Switch tracing off entirely.")] = False,
    flush_every: Annotated[float, typer.Option(
        "--flush-every", help="Seconds between the trace parts written during the run: a kill loses at most "
                              "about this much plus a step. 0: write every step before the next starts.")
    ] = TraceConfig.flush_every_s,
    memory_every: Annotated[float, typer.Option(
        "--memory-every", help="Seconds between the steps whose phase ends sample the resident memory (each "
                               "sample is a system call). 0: every step.")
    ] = TraceConfig.memory_every_s,
    n_layer: Annotated[int | None, typer.Option("--n-layer", show_default=False)] = None,
    n_head: Annotated[int | None, typer.Option("--n-head", show_default=False)] = None,
    n_embd: Annotated[int | None, typer.Option("--n-embd", show_default=False)] = None,
    vocab_size: Annotated[int | None, typer.Option("--vocab-size", show_default=False)] = None,
    max_seq_len: Annotated[int | None, typer.Option("--max-seq-len", show_default=False)] = None,
) -> None:
    """Train GPT-2 on the data (default: a built-in learnable corpus) and trace every thread to Parquet.

    Ctrl-C or SIGTERM stops after the step in progress, keeps the whole steps and exits with 130 or 143; a
    second one stops at once (the step in progress is dropped)."""
    from gpt2trace.format.errors import OutputError
    from gpt2trace.run.mpiexec import launched_by_mpi
    from gpt2trace.run.ownership import claim
    from gpt2trace.run.preflight import check_run
    from trainer.cpu import cores_available
    from trainer.errors import TrainerError

    inside = launched_by_mpi()
    rank = inside[0] if inside is not None and inside[1] > 1 else 0
    if inside is not None and inside[1] > 1:
        ranks = inside[1]
    if rank != 0:
        console.quiet = True   # only rank 0 prints; errors still go to stderr with the rank named
    sizes = {"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, "vocab_size": vocab_size,
             "max_seq_len": max_seq_len}
    cores = cores_available()
    try:
        if no_trace and ctx.get_parameter_source("trace").name != "DEFAULT":     # given on the command line
            raise TrainerError(f"--no-trace and --trace {trace}: --no-trace writes no trace; drop one of them")
        threads = threads if threads is not None else max(1, cores // max(ranks, 1))
        cfg = _config(model, init_from, data, batch_size, seq_len, steps, lr, weight_decay, grad_accum, threads,
                      ranks, rank, dp_sync, data_loading, (sp, sp_split, sp_reduce),
                      (pp, pp_schedule, pp_layers, recompute), seed, (save, save_every, resume),
                      metrics_json, None if no_trace else trace, (flush_every, memory_every), sizes,
                      emulate_network, tp, (schedule, task_block))
        # the trace is this run's until the command ends, before anything looks at its parts (gpt2trace.run.ownership)
        lock = claim(cfg.trace.path, inside, "wait for it to end, or give this run another --trace", "--trace")
        try:
            # the options' bounds before the memory check, which counts the processes --ranks asks for
            _check_limits(cfg, cores, launched_here=inside is None, network=emulate_network)
            check_run(cfg, processes_here=ranks if inside is None else 1, first_rank=rank == 0)
        except BaseException:
            lock.release()
            raise
    except (TrainerError, OutputError, limits.OutOfRange) as exc:
        if rank != 0:           # every rank finds the same; rank 0 says it once
            raise typer.Exit(code=2) from None
        fail(_message(exc))
    try:
        _start(cfg, rank, ranks, threads, cores, inside, lock)
    finally:
        lock.release()


def _start(cfg, rank: int, ranks: int, threads: int, cores: int, inside, lock) -> None:
    from gpt2trace.run.runner import prepare_process
    from trainer.errors import TrainerError

    oversubscribed = ranks * threads > cores
    if oversubscribed:
        console.print(Text.assemble(("warning:", "yellow"), f" {ranks} rank(s) x {threads} thread(s) > {cores} "
                                    "cores: oversubscribed, timings will show it"), soft_wrap=True)
    if inside is None and ranks > 1:
        _launch_ranks(ranks, threads, oversubscribed, cfg.trace.path, lock)
        return
    try:
        prepare_process(threads, oversubscribed=oversubscribed)
    except TrainerError as exc:
        fail(_message(exc))
    _train(cfg, rank)


def _config(model, init_from, data, batch_size, seq_len, steps, lr, weight_decay, grad_accum, threads, ranks, rank,
            dp_sync, data_loading, sequence, pipeline, seed, saving, metrics_json, trace, tracing, sizes,
            network=None, tp=1, tasks=(Schedule.forkjoin, DEFAULT_TASK_BLOCK)):
    """The RunConfig the options describe (trainer.errors.ConfigError for a value out of range). `sequence` is
    (--sp, --sp-split, --sp-reduce), `pipeline` (--pp, --pp-schedule, --pp-layers, --recompute), `saving` (--save,
    --save-every, --resume), `tracing` (--flush-every, --memory-every), `tasks` (--schedule, --task-block)."""
    from gpt2trace.run.runner import RunConfig
    from trainer.config import ModelConfig, ParallelConfig, TrainConfig, model_config
    from trainer.errors import TrainerError
    from trainer.parallel.split import SequenceSplit

    save, save_every, resume = saving
    given = [name for name, value in zip(_SIZE_OPTIONS, sizes.values()) if value is not None]
    if resume is not None and model is None and init_from is None:
        # the saved run's model, the size options given applied to it: the fingerprint compares them with the saved
        # run's and names the one that differs (not the default model's sizes, nor a -T fitted to them)
        from dataclasses import replace

        from trainer.checkpoint import read_checkpoint_config
        mcfg = replace(read_checkpoint_config(resume), **{k: v for k, v in sizes.items() if v is not None})
    elif init_from is not None and resume is None:
        from trainer.checkpoint import read_checkpoint_config
        mcfg = read_checkpoint_config(init_from)
        if model is not None or given:
            dropped = "/".join(["--model"] * (model is not None) + given)
            raise TrainerError(
                f"--init-from {init_from} sets the model (L={mcfg.n_layer} NH={mcfg.n_head} C={mcfg.n_embd} "
                f"V={mcfg.vocab_size}, context {mcfg.max_seq_len}); drop {dropped}")
    else:
        try:
            mcfg = model_config(model or DEFAULT_MODEL, **sizes)
        except KeyError as exc:
            raise TrainerError(str(exc).strip("'\"")) from None
    assert isinstance(mcfg, ModelConfig)
    T = seq_len if seq_len is not None else min(DEFAULT_T, mcfg.max_seq_len)
    tcfg = TrainConfig(batch_size=batch_size, seq_len=T, steps=steps, lr=lr, weight_decay=weight_decay,
                       grad_accum=grad_accum, seed=seed)
    sp, sp_split, sp_reduce = sequence
    pp, pp_schedule, pp_layers, recompute = pipeline
    par = ParallelConfig(threads=threads, ranks=ranks, rank=rank, dp_sync=dp_sync, data_loading=data_loading,
                         sp=sp, sp_split=sp_split, sp_reduce=sp_reduce, pp=pp, pp_schedule=pp_schedule,
                         pp_layers=_layers(pp_layers), recompute=recompute, tp=tp, schedule=tasks[0],
                         task_block=tasks[1])
    SequenceSplit(T, par.sp, par.sp_split)        # -T must be a multiple of --sp
    from gpt2trace.record.network import parse
    return RunConfig(mcfg, tcfg, par, TraceConfig(trace, *tracing), data, init_from, save, metrics_json,
                     save_every, resume, parse(network) if network is not None else None)


def _check_limits(cfg, cores: int, launched_here: bool, network: str | None = None) -> None:
    """The numbers of `cfg` within what the run does with them (gpt2trace.cli.limits); OutOfRange otherwise."""
    from gpt2trace.format import limits as bounds
    t, par, mc = cfg.train, cfg.parallel, cfg.model
    limits.at_most(t.steps, "--steps", bounds.MAX_STEP, "the trace's step column is int32")
    limits.at_most(cfg.save_every, "--save-every", bounds.MAX_STEP, "a step number, int32 in the trace")
    limits.at_most(t.grad_accum, "--grad-accum", bounds.MAX_MICROSTEPS, "the trace's microstep column is int16")
    limits.at_most(mc.n_layer, "--n-layer", bounds.MAX_LAYERS, "the trace's layer column is int16")
    limits.threads(par.threads, cores)
    if launched_here:       # every rank a process on this machine
        limits.at_most(par.ranks, "--ranks", bounds.MAX_THREADS_PER_CORE * max(cores, 1),
                       f"processes on this machine: {bounds.MAX_THREADS_PER_CORE} per core of the {cores} available")
    for value, option in ((t.lr, "--lr"), (t.weight_decay, "--weight-decay")):
        limits.float32(value, option)
    if t.lr * t.weight_decay > bounds.FLOAT32_MAX:
        raise limits.OutOfRange(f"--weight-decay {t.weight_decay:g}: times --lr {t.lr:g} it exceeds float32 (the "
                                "decay step lr x weight decay x parameter); lower one of them")
    limits.seconds(cfg.trace.flush_every_s, "--flush-every")
    limits.seconds(cfg.trace.memory_every_s, "--memory-every")
    if cfg.network is not None:
        _check_cluster(cfg, cfg.network, f"--emulate-network {network}")


def _check_cluster(cfg, cluster, spec: str) -> None:
    """--emulate-network: no more nodes than ranks, and the run's largest call (the gradient allreduce of every
    float32 parameter) held for at most MAX_SECONDS (time.sleep and the int64 nanosecond clock)."""
    from gpt2trace.format import limits as bounds
    from gpt2trace.format.network import placement
    from trainer.params import param_shapes
    ranks = cfg.parallel.ranks
    if cluster.nodes > ranks > 1:        # one rank: the preflight says an emulated network needs --ranks 2 or more
        raise limits.OutOfRange(f"{spec}: nodes={cluster.nodes} for {ranks} rank(s): every node needs a rank; give "
                                f"nodes=1..{ranks}")
    nbytes = 4 * sum(math.prod(s) for s in param_shapes(cfg.model).values())
    held_s = cluster.network.on_nodes("MPI_Allreduce", nbytes, placement(ranks, cluster.nodes)) / 1e9
    if not held_s <= bounds.MAX_SECONDS:
        raise limits.OutOfRange(f"{spec}: an allreduce of the {nbytes:,} bytes of gradients would be held "
                                f"{held_s:.3g} s, beyond the {bounds.MAX_SECONDS:.3g} s a sleep and the int64 "
                                "nanosecond clock hold; give a faster link or a shorter latency")


def _layers(text: str | None) -> tuple[int, ...] | None:
    """--pp-layers "3,3,3,1" -> (3, 3, 3, 1)."""
    from trainer.errors import ConfigError
    if text is None:
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError("pp_layers", text, "must be layer counts separated by commas, e.g. 3,3,3,1") from None


def _message(exc: Exception) -> str:
    """One line naming the option: a ConfigError's field becomes the option that set it."""
    from trainer.errors import ConfigError
    from trainer.state_file import ResumeMismatch
    if isinstance(exc, ConfigError) and exc.field in OPTIONS:
        return f"{OPTIONS[exc.field]} {exc.value}: {exc.requirement}"
    if isinstance(exc, ResumeMismatch):
        return exc.describe(_RESUME_LABELS)
    return str(exc)


def _train(cfg, rank: int) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from gpt2trace.format.errors import OutputError
    from gpt2trace.run.runner import run as run_training
    from gpt2trace.run.signals import Interrupted
    from trainer.errors import TrainerError

    t, par = cfg.train, cfg.parallel
    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("{task.description}"), console=console, transient=False)
    task = progress.add_task("compiling kernels (cached after the first run)...", total=t.steps)

    def on_start(info: dict) -> None:
        mc = info["model"]
        console.print(f"model L={mc.n_layer} NH={mc.n_head} C={mc.n_embd} V={mc.vocab_size} (padded "
                      f"{mc.padded_vocab_size}) T={t.seq_len}: {info['num_parameters']:,} parameters; "
                      f"B={t.batch_size} grad_accum={t.grad_accum} threads={par.threads}"
                      + (f" ranks={par.ranks} dp-sync={par.dp_sync.value} data-loading={par.data_loading.value}"
                         if par.ranks > 1 else "")
                      + (f" sp={par.sp} ({par.sp_split.value}, {par.sp_reduce.value}): {t.seq_len // par.sp} "
                         "positions per rank" if par.sp > 1 else "")
                      + (f" pp={par.pp} ({par.pp_schedule.value}, {t.grad_accum} micro-batches)" if par.pp > 1
                         else "")
                      + (" recompute" if par.recompute else "")
                      + (f" schedule=tasks (block {par.task_block})" if par.schedule == Schedule.tasks else ""),
                      markup=False)
        if info["resumed_from"] is not None:
            console.print(plain(_resumed_line(cfg, info["start_step"], info["resumed_from"])), markup=False,
                          highlight=False, soft_wrap=True)
            progress.update(task, completed=info["start_step"])   # the bar counts the total steps

    def on_step(metrics) -> None:
        progress.update(task, advance=1, description=f"loss {metrics.loss:.4f} | {metrics.ms:8.1f} ms/step | "
                                                     f"{metrics.tokens_per_s:,.0f} tok/s")

    def on_stop(signum: int, step: int | None) -> None:     # a first SIGINT/SIGTERM: rank 0 says it, once
        where = f"after step {step}" if step is not None else "before the first step"
        console.print(f"stopping {where}; send again to stop now", markup=False, highlight=False, soft_wrap=True)

    saves = []
    kept = []
    comm = None
    if par.ranks > 1:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    try:
        with progress:
            result = run_training(cfg, on_step=on_step, on_start=on_start, comm=comm, on_trace=kept.append,
                                  on_save=lambda path, steps: saves.append(steps), on_stop=on_stop)
    except Interrupted as stop:   # a second signal: inside a step (which the trace dropped), or while merging
        if stop.after_training:
            what = f"interrupted by {stop.name} while writing the trace"
        else:
            what = f"interrupted by {stop.name} inside step {int(progress.tasks[0].completed)}"   # steps done so far
        _stopped(what, kept, cfg, saves[-1] if saves else None, code=stop.exit_code)
    except KeyboardInterrupt:     # before training started: nothing was written
        err_console.print("interrupted before training started; nothing was written", markup=False)
        raise typer.Exit(code=130) from None
    except (TrainerError, OutputError) as exc:
        _fail_rank(comm, rank, _with_kept(_message(exc), kept, comm))
    except Exception as exc:  # a bug or an injected fault: on one rank of many it must stop the whole job
        if comm is None:
            if kept:
                err_console.print(plain(_trace_keeps(kept[0])), markup=False, soft_wrap=True)
            raise
        import traceback
        traceback.print_exc()
        _fail_rank(comm, rank, _with_kept(f"{type(exc).__name__}: {exc}", kept, comm))
    if result.interrupted is not None:
        from gpt2trace.run.signals import Interrupted as Stop
        stop = Stop(result.interrupted, at_step_boundary=True)
        last = len(result.history) - 1
        where = f"after step {last}" if last >= 0 else "before step 0 ended"
        _stopped(f"interrupted by {stop.name} {where}", kept, cfg, result.saved_steps, code=stop.exit_code)
    if rank == 0:
        _summary(result)
        if result.saved_steps is not None:
            console.print(plain(_checkpoint_line(cfg.save, result.saved_steps)), markup=False, highlight=False,
                          soft_wrap=True)


def _with_kept(message: str, kept: list, comm=None) -> str:
    """The error and what the trace keeps; a rank of a job `_launch_ranks` started leaves out parts it did not
    merge: the launcher merges them and says what is kept."""
    if not kept or (comm is not None and not kept[0].merged and os.environ.get(_LAUNCHER_ENV)):
        return message
    return f"{message}; {_kept(kept[0])}"


def _kept(kept) -> str:
    """'kept steps 0-6 in trace.parquet', or 'no complete step was traced' (nothing kept)."""
    return kept.describe() if kept.steps is None else f"kept {kept.describe()}"


def _trace_keeps(kept) -> str:
    """'the trace keeps steps 0-6 in trace.parquet (...)', or 'the trace keeps nothing: no complete step was
    traced'."""
    return f"the trace keeps {'' if kept.steps is not None else 'nothing: '}{kept.describe()}"


def _resumed_line(cfg, start_step: int, saved_by: dict) -> str:
    """Where a resumed run starts, and whether it can continue bit for bit: on the saved run's layout only."""
    from gpt2trace.run.runner import saved_by as layout_of
    now = layout_of(cfg)
    same_tokens = ("data_loading",) + (("dp_sync",) if now["ranks"] == 1 else ())   # no effect on the numbers
    changed = [f"{k} {saved_by.get(k)} -> {v}" for k, v in now.items() if k not in same_tokens and saved_by.get(k) != v]
    line = f"resuming {cfg.resume} at step {start_step} (AdamW state of {start_step} steps)"
    if changed:
        return (line + f"; another layout than the saved run's ({', '.join(changed)}): losses equal the "
                "uninterrupted run's within float32 rounding, not bit for bit")
    return line + "; the saved run's layout: losses continue bit for bit"


def _checkpoint_line(path: Path, steps: int) -> str:
    from trainer.state_file import state_path
    return (f"checkpoint: {path} and {state_path(path).name} hold {steps} step(s); continue with --resume {path} "
            "--steps N (N: the total)")


def _stopped(what: str, kept: list, cfg, saved_steps: int | None, code: int):
    """The one line an interrupted run ends with: what stopped it, what is kept; then exit 128 + signal."""
    parts = [what]
    if kept:
        parts.append(_kept(kept[0]))
    if cfg.metrics_json is not None:
        parts.append(f"metrics of the whole steps in {cfg.metrics_json}")
    if cfg.save is not None and saved_steps is not None:
        parts.append(f"the checkpoint {cfg.save} holds {saved_steps} step(s) (continue with --resume {cfg.save})")
    elif cfg.save is not None:
        parts.append(f"no checkpoint written to {cfg.save}")
    console.print(plain("; ".join(parts)), markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code=code)


def _fail_rank(comm, rank: int, message: str) -> NoReturn:
    """One line naming the rank; with MPI, abort the whole job so the other ranks cannot hang in a collective."""
    if comm is None:
        fail(message)
    err_console.print(plain(f"error: rank {rank}: {message}"), markup=False, soft_wrap=True)
    sys.stderr.flush()
    # MPI_Abort kills the ranks at once and mpiexec's proxies may drop what they have not forwarded yet: give
    # them a moment, the job is ending anyway
    time.sleep(0.5)
    # MPICH's own "Abort(2) on node ..." line would only repeat ours; and MPI_Abort may return before the process
    # manager kills this process, which must not then go on (into code after the failed training)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    comm.Abort(2)
    os._exit(2)


def _launch_ranks(ranks: int, threads: int, oversubscribed: bool, trace: Path | None, lock=None) -> None:
    """`--ranks N` outside MPI: rerun this command under mpiexec; merge what the ranks traced if the job failed.

    A Ctrl-C or SIGTERM reaches this process only (mpiexec runs in its own session), which sends it to every rank
    (gpt2trace.run.mpiexec.relaunch); the ranks agree on the step to stop after and rank 0 merges
    (gpt2trace.run.signals). A second one kills the job at once; the ranks' parts are merged here then, as after
    a failure."""
    from gpt2trace.format.errors import OutputError, TraceError
    from gpt2trace.format.writer import part_files, parts_dir, recover, steps_phrase
    from gpt2trace.run.mpiexec import relaunch

    argv = _without_option(sys.argv[1:], "--ranks")
    if "--threads" not in argv:
        argv += ["--threads", str(threads)]
    env = {_LAUNCHER_ENV: "1", **({"OMP_WAIT_POLICY": "PASSIVE"} if oversubscribed else {})}
    console.print(f"starting {ranks} ranks x {threads} threads under mpiexec"
                  + (" (oversubscribed: passive OpenMP waiting)" if oversubscribed else ""))
    try:
        job = relaunch(ranks, argv, env, lock)     # the ranks inherit the trace's lock (gpt2trace.run.ownership)
    except FileNotFoundError as exc:
        fail(str(exc))
    if job.code == 0:
        return
    # A signal ends the job with the shell's code for it, whatever mpiexec returned after aborting.
    code = 128 + job.signals[0] if job.signals else job.code
    if trace is not None and part_files(parts_dir(trace)):    # the ranks did not merge: the job was aborted
        if job.signals:
            name = signal.Signals(job.signals[0]).name
            what = f"interrupted by {name} twice: the job was stopped at once" if len(job.signals) > 1 else \
                f"interrupted by {name}: mpiexec aborted the job"
        else:
            what = f"the job ended with mpiexec exit code {job.code}"
        try:
            merged = recover(trace)
        except (TraceError, OutputError) as exc:
            fail(f"{what} and its trace could not be merged: {exc}", code)
        err_console.print(plain(f"{what}; each rank's whole steps are kept in {merged.path} "
                                f"({steps_phrase(merged.steps)} on the ranks that got furthest, "
                                f"{merged.records:,} records)"), markup=False, soft_wrap=True)
    elif len(job.signals) > 1:      # the second signal came after the ranks' merge, which removes the parts
        name = signal.Signals(job.signals[0]).name
        kept = f"the ranks had merged {trace}" if trace is not None and Path(trace).exists() else "no trace was kept"
        err_console.print(plain(f"interrupted by {name} twice: the job was stopped at once; {kept}"), markup=False,
                          soft_wrap=True)
    raise typer.Exit(code=code)


def _without_option(argv: list[str], name: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def _summary(result) -> None:
    h = result.history
    if h:
        timed = [m.ms for m in h[1:]] or [h[0].ms]  # the first step includes JIT warm-up
        which = f" (steps {h[0].step}-{h[-1].step})" if h[0].step else ""    # a resumed run's
        console.print(f"loss {h[0].loss:.4f} -> {h[-1].loss:.4f} in {len(h)} steps{which}; median "
                      f"{statistics.median(timed):.1f} ms/step, {h[-1].tokens / statistics.median(timed) * 1e3:,.0f} "
                      f"tokens/s (step {h[0].step} left out: warm-up)")
    if result.kept is not None:
        path = result.kept.path
        size = path.stat().st_size
        console.print(plain(f"trace: {path} ({result.kept.records:,} records, {size / 1e6:.2f} MB); "
                            f"next: gpt2trace analyze {path}"), markup=False, highlight=False, soft_wrap=True)
