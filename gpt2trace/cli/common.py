"""What every command shares: the consoles and the one-line failure that exits with code 2."""
from __future__ import annotations

import re
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

# Piped or captured output gets room for the analysis tables (rich would squeeze them into 80 columns).
_WIDTH = None if sys.stdout.isatty() else 140
console = Console(highlight=False, width=_WIDTH)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 140)

EXIT_USAGE = 2


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print one line on stderr and exit: no traceback for errors the user can act on."""
    err_console.print(f"[bold red]error:[/] {escape(plain(message))}", soft_wrap=True)
    raise typer.Exit(code=code)


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
