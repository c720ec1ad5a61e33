"""What every command shares: the consoles and the one-line failure that exits with code 2."""
from __future__ import annotations

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
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=code)
