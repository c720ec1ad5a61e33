"""What every command shares: the consoles, text from files printed as text, checked outputs, and the one-line
failure that exits with code 2.

Everything a command prints that came from a file or the command line (kernel names, hosts, paths, metadata,
error messages that quote them) goes through `plain`: the consoles never read markup or emoji codes, so
`matmul[/]backward` or `:100:` print as they are, and `plain` turns control characters (NUL, line breaks) into
visible escapes and bytes that are not UTF-8 (a file name from another locale) into U+FFFD, so printing never
fails and an error stays one line.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console, ConsoleDimensions
from rich.text import Text

from gpt2trace.cli import json_text
from gpt2trace.format.errors import OutputError
from gpt2trace.format.outputs import atomic_output, check_output

EXIT_USAGE = 2
# every command that reads a trace reads these (gpt2trace.interop.loader)
TRACE_FORMATS = ("Parquet, Paraver .prv/.prv.gz (with its .pcf and .row beside it), an OTF2 archive (its .otf2 "
                 "anchor file or folder) or a PyTorch profiler trace (.json/.json.gz, or a folder of them)")
PIPED_WIDTH = 140       # a pipe or a log file gets room for the tables; COLUMNS, when set, wins

# C0/C1 controls, DEL, Unicode line/paragraph separators, and lone surrogates (undecodable bytes of a file name).
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def plain(value: object) -> str:
    """`value` as one printable line: control characters as `\\xNN` escapes, undecodable bytes as U+FFFD."""
    return _UNPRINTABLE.sub(_escape, str(value))


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    if 0xD800 <= code <= 0xDFFF:
        return "\ufffd"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class _Console(Console):
    """A console that never reads markup, emoji codes or highlights in what it prints, and takes its width when it
    prints: COLUMNS when set, else the terminal's width, else PIPED_WIDTH."""

    def __init__(self, stderr: bool = False) -> None:
        super().__init__(stderr=stderr, markup=False, emoji=False, highlight=False)

    @property
    def size(self) -> ConsoleDimensions:
        height = super().size.height
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return ConsoleDimensions(int(columns), height)
        if self.is_terminal:
            return ConsoleDimensions(super().size.width, height)
        return ConsoleDimensions(PIPED_WIDTH, height)


console = _Console()
err_console = _Console(stderr=True)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print one line on stderr and exit: no traceback for errors the user can act on."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", plain(message)), soft_wrap=True)
    raise typer.Exit(code=code)


def note(message: str, out: Console = console) -> None:
    """A one-line note (something the command did beyond the plain job) that the user should read."""
    out.print(Text.assemble(("note:", "yellow"), " ", plain(message)), soft_wrap=True)


@dataclass(frozen=True)
class Output:
    """An output path checked before the work, and whether a file was there (it is replaced, and we say so)."""
    path: Path
    existed: bool

    def shown(self) -> str:
        return plain(self.path) + (" (replaced)" if self.existed else "")


def output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (),
           option: str | None = None) -> Output:
    """`path` checked as an output of a command that reads `inputs` (gpt2trace.format.outputs), or a one-line
    failure: never one of the inputs, not a directory, in a folder that exists and is writable."""
    try:
        checked = check_output(path, inputs, option=option)
    except OutputError as exc:
        fail(str(exc))
    return Output(checked, checked.exists())


@dataclass(frozen=True)
class JsonOutput:
    """Where a command's --json goes: a checked file, or stdout for '-' (which then replaces the tables)."""
    file: Output | None         # None: stdout

    @property
    def to_stdout(self) -> bool:
        return self.file is None

    def write(self, data, said: Console = console) -> None:
        """The JSON, written whole under a temporary name and renamed (a full disk: one line, no file), and a line
        on `said` naming the file."""
        text = json_text.dumps(data) + "\n"
        if self.file is None:
            sys.stdout.write(text)
            return
        try:
            with atomic_output(self.file.path) as tmp:
                tmp.write_text(text)
        except OutputError as exc:
            fail(str(exc))
        said.print(f"JSON: {self.file.shown()}", soft_wrap=True)


def json_output(path: str | os.PathLike | None, inputs: Iterable[str | os.PathLike | None]) -> JsonOutput | None:
    """--json PATH checked before the work (as `output`), '-' for stdout; None without --json."""
    if path is None:
        return None
    return JsonOutput(None if str(path) == "-" else output(path, inputs, "--json"))


def trace_files(traces: Iterable[str | os.PathLike]) -> list[Path]:
    """Every file that reading `traces` opens (a Paraver trace's .pcf, .row and .gpt2trace.json beside its .prv
    too), so that no output of a command lands on one of them."""
    from gpt2trace.interop.source import input_files
    return [f for trace in traces for f in input_files(Path(trace))]
