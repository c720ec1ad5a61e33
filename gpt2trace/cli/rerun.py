"""`gpt2trace rerun TRACE --set OPTION=VALUE`: the run a trace recorded, again with options changed, then what
changed from the first run to the second (`gpt2trace diff`).

A thin layer: the configuration comes from the trace (gpt2trace.run.rerun), options are named as `gpt2trace run`
spells them (gpt2trace.run.options), the run goes through `gpt2trace run`'s training and report
(cli/run.py; under mpiexec when it has more than one rank: this command started again on every rank, training
only), and the comparison through analysis.diff, printed as `gpt2trace diff` prints it. Everything is checked before
any training: the options and values, the trace (a trace without a run configuration: an imported or synthetic
one, a resumed run), the outputs (the new trace must not exist yet: a rerun costs a training run, and never
replaces one).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, err_console, fail, note, output, plain, trace_files
from gpt2trace.format.errors import OutputError, TraceError


def rerun(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, metavar="TRACE",
                                          help="A trace written by `gpt2trace run`.")],
    settings: Annotated[list[str] | None, typer.Option(
        "--set", metavar="OPTION=VALUE", help="An option of `gpt2trace run` and its new value, e.g. dp-sync=overlap, "
        "ranks=4, B=8 (repeatable). data=synthetic, init-from=none, emulate-network=none undo those options.")
    ] = None,
    out: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="NEW.parquet", help="The new trace (must not exist). Default: TRACE's name with "
        ".rerun before .parquet, beside it.")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", metavar="A:B", help="Steps A:B of both traces to compare (B excluded). Default: all but the first "
        "(warm-up).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, metavar="N", help="Rows of the changes table (as JSON: "
                                     "gpt2trace diff TRACE NEW --json -).")] = 15,
    train_only: Annotated[bool, typer.Option("--train-only", hidden=True)] = False,   # a rank under mpiexec
) -> None:
    """Run the configuration stored in TRACE again with options changed (--set), then say what changed."""
    from gpt2trace.run.mpiexec import launched_by_mpi
    from gpt2trace.run.rerun import RerunError, for_rank, rerun_config
    from trainer.errors import ConfigError, TrainerError

    inside = launched_by_mpi()
    rank = inside[0] if inside is not None and inside[1] > 1 else 0
    if rank != 0:
        console.quiet = True
    given = [_setting(s) for s in settings or ()]
    changes = {name: value for name, _, value in given}
    try:
        stored = _stored(trace)
    except (TraceError, RerunError) as exc:
        _refuse(rank, str(exc))
    new = out if out is not None else _default_output(trace)
    output(new, trace_files([trace]), "-o")
    if not train_only and new.exists():
        _refuse(rank, f"{'-o ' if out is not None else 'the new trace '}{new}: exists; rerun writes a new trace and "
                      "replaces none: give -o another path, or remove that file")
    if steps is not None:
        from analysis.window import WindowError, parse_steps
        try:
            parse_steps(steps)
        except WindowError as exc:
            fail(str(exc))
    try:
        cfg = rerun_config(stored, changes, new)
        if inside is not None and inside[1] > 1:
            cfg = for_rank(cfg, rank, inside[1])
        from gpt2trace.run.mpiexec import ranks_on_this_node
        from gpt2trace.run.preflight import check_run
        here = cfg.parallel.ranks if inside is None else ranks_on_this_node()
        checked = check_run(cfg, processes_here=here or 1, first_rank=rank == 0)
    except ConfigError as exc:
        _refuse(rank, _config_message(exc, given))
    except (TrainerError, OutputError) as exc:
        _refuse(rank, _with(given, str(exc)))
    # the comparison's inputs before the training: a trace of no step (empty, a --steps 0 run) cannot be compared
    first = None if train_only or rank != 0 else _comparable(trace, steps)
    if not train_only:
        _check_new_steps(rank, cfg.train.steps, steps, given)
    from trainer.cpu import cores_available
    par = cfg.parallel
    oversubscribed = par.ranks * par.threads > cores_available()
    if not train_only:
        what = ", ".join(f"--set {s}" for s in settings or ()) or "nothing changed"
        console.print(plain(f"rerunning {trace} ({what}) -> {new}"), soft_wrap=True)
    if inside is None and par.ranks > 1:
        _launch(trace, settings or [], new, par.ranks, oversubscribed)
    else:
        from gpt2trace.cli.run import _train
        from gpt2trace.run.runner import prepare_process
        try:
            prepare_process(par.threads, oversubscribed=oversubscribed)
        except TrainerError as exc:
            _refuse(rank, str(exc))
        _train(cfg, rank, checked if here is not None else None)
    if train_only or rank != 0:
        return
    _compare(trace, first, new, steps, top)


def _setting(text: str) -> tuple[str, str, str]:
    """--set OPTION=VALUE -> (the rerun setting, the option as `gpt2trace run` spells it, the value)."""
    from gpt2trace.run.rerun import NOT_REPEATED, SETTINGS
    name, eq, value = text.partition("=")
    name = name.strip().lstrip("-")
    if not eq or not name:
        fail(f"--set {text}: expected OPTION=VALUE, for example --set dp-sync=overlap")
    spelled = _run_options()
    if name not in spelled:
        fail(f"--set {text}: `gpt2trace run` has no option {'-' if len(name) == 1 else '--'}{name}; see "
             "gpt2trace run --help")
    setting, shown = spelled[name]
    if setting not in SETTINGS:
        why = ("a rerun writes its trace only (-o), no checkpoint, metrics or resumption" if setting in NOT_REPEATED
               else "it cannot be changed")
        fail(f"--set {text}: {shown} is not for a rerun: {why}")
    return setting, shown, value


def _run_options() -> dict[str, tuple[str, str]]:
    """Every spelling of `gpt2trace run`'s options without dashes (batch-size, B, ...) -> (its parameter, its
    spelling), from their declarations (gpt2trace.run.options)."""
    from gpt2trace.run.options import RUN_OPTIONS
    return {flag.lstrip("-"): (o.name, "/".join(o.flags)) for o in RUN_OPTIONS for flag in o.flags}


def _stored(trace: Path) -> dict:
    """The trace's run configuration: a Parquet trace's from its metadata alone, another format's from loading it
    (a Paraver export keeps it beside the .prv)."""
    from gpt2trace.interop.loader import is_parquet
    from gpt2trace.run.rerun import check_stored, stored_run
    if not is_parquet(trace):
        from gpt2trace.interop.loader import load
        return check_stored(load(trace).run, trace)
    return stored_run(trace)


def _default_output(trace: Path) -> Path:
    name = trace.name
    stem = name[: -len(".parquet")] if name.endswith(".parquet") else name.split(".")[0] or name
    return trace.with_name(f"{stem}.rerun.parquet")


def _config_message(exc, given: list[tuple[str, str, str]]) -> str:
    """A ConfigError as one line: the --set it is about, or the stored option it no longer fits with the changes."""
    from gpt2trace.run.options import BY_NAME, OPTIONS
    for setting, shown, value in given:
        if exc.field in (setting, BY_NAME[setting].field):      # the setting, or the config field it sets
            return f"--set {shown.split('/')[-1].lstrip('-')}={value}: {exc.requirement}"
    return _with(given, f"{OPTIONS.get(exc.field, exc.field)} {exc.value}: {exc.requirement}")


def _with(given: list[tuple[str, str, str]], message: str) -> str:
    changed = ", ".join(f"--set {shown.split('/')[-1].lstrip('-')}={value}" for _, shown, value in given)
    return f"with {changed}: {message}" if changed else message


def _refuse(rank: int, message: str):
    if rank != 0:                       # every rank finds the same; rank 0 says it once
        raise typer.Exit(code=2)
    fail(message)


def _launch(trace: Path, settings: list[str], new: Path, ranks: int, oversubscribed: bool) -> None:
    """This command again on `ranks` ranks under mpiexec, training only; a failed job ends this one with its code."""
    from gpt2trace.format.writer import part_files, parts_dir
    from gpt2trace.run.mpiexec import relaunch
    argv = ["rerun", os.fsdecode(trace), *[f"--set={s}" for s in settings], "-o", os.fsdecode(new), "--train-only"]
    console.print(f"starting {ranks} ranks under mpiexec")
    try:
        job = relaunch(ranks, argv, {"OMP_WAIT_POLICY": "PASSIVE"} if oversubscribed else {})
    except FileNotFoundError as exc:
        fail(str(exc))
    if job.code != 0:
        code = 128 + job.signals[0] if job.signals else job.code
        kept = (f"; its parts are in {parts_dir(new)} (gpt2trace recover {new} keeps their whole steps)"
                if part_files(parts_dir(new)) else "")
        err_console.print(plain(f"the rerun ended with code {code}{kept}"), soft_wrap=True)
        raise typer.Exit(code=code)


def _summary(path: Path, steps: str | None) -> dict:
    """`analysis.diff_summary.summarize` of the trace at `path`; TraceError or WindowError as they come, with the
    file named once."""
    from analysis.diff_summary import summarize
    from gpt2trace.interop.loader import load
    return summarize(load(path), steps=steps)


def _named(path: Path, message: str) -> str:
    """`message` about the trace at `path`, naming it once (most messages of a trace name it already)."""
    return message if str(path) in message else f"{path}: {message}"


def _comparable(trace: Path, steps: str | None) -> dict:
    """The first run's summary (`_summary`), checked before any training: a trace the comparison after the rerun
    would refuse (empty, no analyzed step with a time) is refused now, in one line."""
    from analysis.window import WindowError
    try:
        first = _summary(trace, steps)
    except (TraceError, WindowError) as exc:
        fail(_named(trace, str(exc)))
    if not first["summary"]["steps"] or not first["summary"]["step_s_median"]:
        fail(f"{trace}: has no analyzed step with a time{' in --steps ' + steps if steps else ''} (a --steps 0 run?): "
             "rerun compares the new run with it step by step; rerun a trace of at least one step")
    return first


def _check_new_steps(rank: int, trained: int, steps: str | None, given: list[tuple[str, str, str]]) -> None:
    """Refuses a rerun that would train no step to compare (before it trains): --steps 0, or none in --steps A:B."""
    from analysis.window import parse_steps
    a, b = parse_steps(steps) if steps is not None else (None, None)
    lo, hi = max(a or 0, 0), min(trained if b is None else b, trained)
    if hi <= lo:
        where = f" in --steps {steps}" if steps is not None else ""
        more = f" with N > {lo}" if lo else ""
        _refuse(rank, _with(given, f"the rerun would train {trained} step(s), none{where} to compare: give "
                                  f"--set steps=N{more}"))


def _compare(trace: Path, first: dict, new: Path, steps: str | None, top: int) -> None:
    """What changed from the first run (`first`: its `_summary`) to the rerun, as `gpt2trace diff` says it."""
    from analysis.diff import DiffError, diff
    from analysis.window import WindowError
    from gpt2trace.cli.diff import render
    try:
        second = _summary(new, steps)
    except (TraceError, WindowError) as exc:
        fail(f"{_named(new, str(exc))}; the new trace is kept")
    try:
        result = diff(first, second)
    except DiffError as exc:
        fail(f"{exc}; the new trace is kept")
    note(f"what changed from {trace} to {new}:")
    render(console, result, top)
