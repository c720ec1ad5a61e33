"""`gpt2trace run`: train the instrumented GPT-2 and write its trace (a thin layer over gpt2trace.run.runner).

Everything is checked before anything is built or launched (gpt2trace.run.preflight): a bad option is one line
and exit code 2, printed once even with --ranks. Numba's thread pool is sized before anything imports Numba.
Values are validated by the frozen configs (trainer.config), not by Typer, so every message is one line naming
the option. The options are declared once, in gpt2trace.run.options: `run`'s signature is made from that table.
"""
from __future__ import annotations

import inspect
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
from gpt2trace.run.options import OPTIONS, RUN_OPTIONS, RunOption, run_config
from trainer.config import Schedule

# Set in the ranks `--ranks N` starts under mpiexec: the launcher merges what they trace when the job fails.
_LAUNCHER_ENV = "GPT2TRACE_LAUNCHED_BY_RUN"
# A resumed run's settings that differ from the saved run's (trainer.state_file.Fingerprint), as the user set them:
# the options, and what the fingerprint derives from them or holds beside them.
_RESUME_LABELS = {"global_batch": "the global batch (-B x --ranks/--sp x --grad-accum sequences)",
                  "data_bytes": "the size of --data", "beta1": "AdamW beta1", "beta2": "AdamW beta2",
                  "eps": "AdamW eps", **OPTIONS}


def _parameter(option: RunOption) -> inspect.Parameter:
    """`option` as Typer reads a parameter: `name: Annotated[kind, typer.Option(*flags, help=...)] = default`."""
    kind = option.kind if option.default is not None else option.kind | None
    declared = typer.Option(*option.flags, help=option.help, **({} if option.show_default is None else
                                                                  {"show_default": option.show_default}))
    return inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default,
                             annotation=Annotated[kind, declared])


def run(ctx: typer.Context, **options) -> None:
    """Train GPT-2 on the data (default: a built-in learnable corpus) and trace every thread to Parquet.

    Ctrl-C or SIGTERM stops after the step in progress, keeps the whole steps and exits with 130 or 143; a
    second one stops at once (the step in progress is dropped)."""
    from gpt2trace.format.errors import OutputError
    from gpt2trace.run.mpiexec import launched_by_mpi, ranks_on_this_node
    from gpt2trace.run.ownership import claim
    from gpt2trace.run.preflight import check_run
    from trainer.cpu import cores_available
    from trainer.errors import TrainerError

    inside = launched_by_mpi()
    rank = inside[0] if inside is not None and inside[1] > 1 else 0
    ranks = inside[1] if inside is not None and inside[1] > 1 else options["ranks"]
    if rank != 0:
        console.quiet = True   # only rank 0 prints; errors still go to stderr with the rank named
    cores = cores_available()
    try:
        if options["no_trace"] and ctx.get_parameter_source("trace").name != "DEFAULT":  # given on the command line
            raise TrainerError(f"--no-trace and --trace {options['trace']}: --no-trace writes no trace; drop one of "
                               "them")
        cfg = run_config({**options, "ranks": ranks}, rank)
        # the trace is this run's until the command ends, before anything looks at its parts (gpt2trace.run.ownership)
        lock = claim(cfg.trace.path, inside, "wait for it to end, or give this run another --trace", "--trace")
        try:
            # the options' bounds before the memory check, which counts the processes --ranks asks for
            _check_limits(cfg, cores, launched_here=inside is None, network=options["emulate_network"])
            # every process on this node counted: the ranks the launcher starts, or those of an outer mpiexec
            # (the training checks again, with MPI, only when the process manager does not say how many)
            here = ranks if inside is None else ranks_on_this_node()
            checked = check_run(cfg, processes_here=here or 1, first_rank=rank == 0)
        except BaseException:
            lock.release()
            raise
    except (TrainerError, OutputError, limits.OutOfRange) as exc:
        if rank != 0:           # every rank finds the same; rank 0 says it once
            raise typer.Exit(code=2) from None
        fail(_message(exc))
    try:
        _start(cfg, rank, ranks, cfg.parallel.threads, cores, inside, lock, checked if here is not None else None)
    finally:
        lock.release()


run.__signature__ = inspect.Signature(   # Typer reads the options from it (gpt2trace.run.options)
    [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
     *map(_parameter, RUN_OPTIONS)])


def _start(cfg, rank: int, ranks: int, threads: int, cores: int, inside, lock, checked=None) -> None:
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
    _train(cfg, rank, checked)


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


def _message(exc: Exception) -> str:
    """One line naming the option: a ConfigError's field becomes the option that set it."""
    from trainer.errors import ConfigError
    from trainer.state_file import ResumeMismatch
    if isinstance(exc, ConfigError) and exc.field in OPTIONS:
        return f"{OPTIONS[exc.field]} {exc.value}: {exc.requirement}"
    if isinstance(exc, ResumeMismatch):
        return exc.describe(_RESUME_LABELS)
    return str(exc)


def _train(cfg, rank: int, checked=None) -> None:
    """Train `cfg` as rank `rank`, showing progress and the summary. `checked`: the preflight's result for this
    process (gpt2trace.run.runner.run checks when None)."""
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
                                  on_save=lambda path, steps: saves.append(steps), on_stop=on_stop, checked=checked)
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
    from gpt2trace.run.options import saved_by as layout_of
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
