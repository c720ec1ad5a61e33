"""Assembles the Typer app; every command lives in its own module and calls the Python API.

Command modules import only Typer, rich and our light modules when the app is built; the analyses, pyarrow,
pandas and Numba load inside the command that needs them, so `gpt2trace --help` starts fast
(tests/gpt2trace/cli/test_cli_startup.py holds that).
"""
from __future__ import annotations

import atexit
import gc
import os
import sys
from pathlib import Path
from typing import Any

import typer
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

from gpt2trace.cli import analyze, diff, export, importer, info, recover, report, rerun, run, whatif
from gpt2trace.cli.common import EXIT_USAGE, err_console, plain

# What to type for an option that names no metavar of its own, by its Python type (choices keep <a|b>).
_METAVARS = {int: "N", float: "NUMBER", str: "TEXT", Path: "PATH"}


def _plain_type(param):
    """Help shows what to type: an option's metavar, nothing for a flag or an argument (its name is in the name
    column), instead of Typer's Python types (<bool>, <list[Path]>, <int range>)."""
    if param is None:
        return None
    if getattr(param, "is_flag", False):
        param.metavar = ""
    elif param.param_type_name == "argument":
        param.display_type_rich = lambda ctx: None
        param.metavar = param.metavar or param.name.upper()         # TRACE, as usage lines spell arguments
    elif param.metavar is None:
        param.metavar = _METAVARS.get(param.type_descriptor.annotation)
    return param


class _Command(TyperCommand):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            _plain_type(param)

    def get_help_option(self, ctx):
        return _plain_type(super().get_help_option(ctx))


class _App(TyperGroup):
    """The app. A usage error (an unknown option, a value of the wrong type, a missing input file) is one line on
    stderr with exit code 2, like every other error, instead of Typer's framed panel with the usage."""

    def get_help_option(self, ctx):
        return _plain_type(super().get_help_option(ctx))

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode: bool = True, **extra: Any):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.TyperException as exc:     # Typer's usage errors (its own copy of Click's)
            if type(exc).__name__ == "NoArgsIsHelpError":        # the help has been printed (Typer tests it so)
                sys.exit(exc.exit_code)
            hint = f" (see: {exc.ctx.command_path} --help)" if getattr(exc, "ctx", None) is not None else ""
            err_console.print(Text.assemble(("error:", "bold red"), " ", plain(exc.format_message() + hint)),
                              soft_wrap=True)
            sys.exit(exc.exit_code if exc.exit_code else EXIT_USAGE)
        except typer.Abort:
            err_console.print("aborted", soft_wrap=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="gpt2trace",
    cls=_App,
    help="Train an instrumented GPT-2, trace every thread of every rank, and find where the time went.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _name, _command in (("run", run.run), ("analyze", analyze.analyze), ("report", report.report),
                        ("info", info.info), ("recover", recover.recover), ("export", export.export),
                        ("import", importer.import_trace), ("whatif", whatif.whatif), ("diff", diff.diff),
                        ("rerun", rerun.rerun)):
    app.command(_name, cls=_Command)(_command)


def main() -> None:
    """The `gpt2trace` command as a process (the console script and `python -m gpt2trace`).

    The process ends in the last exit handler, once the command's output is flushed, its threads joined and MPI
    finalized, without the interpreter's teardown: Arrow's C++ thread pools can still be running when that
    teardown destroys them, which aborts the process now and then with "terminate called without an active
    exception" after all its work is written (apache/arrow#34314); under mpiexec that abort made the job's exit
    code 6. Registered first, the handler runs after every other one (mpi4py's, a profiler's, coverage's)."""
    atexit.register(_leave)
    try:
        app()
    except SystemExit as exc:
        _status[0] = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    _status[0] = 0


_status = [1]       # the exit code: 1 unless the command returned or exited (an uncaught exception is a bug)


def _leave() -> None:
    gc.collect()        # readers still referenced by garbage join their threads while Arrow is alive
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):   # a closed pipe: nothing more can be said
            pass
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized():
        if not mpi.Is_finalized():
            mpi.Finalize()
        # MPICH (4.1 on) tells its launcher that a rank ended well in a C exit handler, not in MPI_Finalize; a rank
        # gone without it counts as crashed, and Hydra kills the ranks still finalizing (exit code 9). C's exit
        # runs those handlers and still skips the interpreter's teardown. (ctypes imported here only: the start-up
        # of every command does without it.)
        import ctypes
        ctypes.CDLL(None).exit(_status[0])
    os._exit(_status[0])
