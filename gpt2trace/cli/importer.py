"""`gpt2trace import TRACE.prv[.gz] -o OUT.parquet`: an Extrae/Paraver trace as our Parquet trace.

A thin layer over `gpt2trace.interop.paraver_import`; the .pcf and .row are found beside the .prv.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail
from gpt2trace.format.errors import TraceError


def import_trace(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Paraver trace (.prv or .prv.gz).")],
    output: Annotated[Path, typer.Option("--output", "-o", dir_okay=False, help="The Parquet trace to write.")],
) -> None:
    """Read a Paraver trace (with its .pcf and .row) into a gpt2trace Parquet trace."""
    from gpt2trace.interop.paraver_import import import_paraver, write_parquet
    try:
        imported = import_paraver(trace)
        records = write_parquet(imported, output)
    except TraceError as exc:
        fail(str(exc))
    for note in imported.notes:
        console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
    console.print(f"{output} ({records:,} records); next: gpt2trace analyze {output}", soft_wrap=True)
