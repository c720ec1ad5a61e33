"""`gpt2trace import TRACE.prv[.gz] -o OUT.parquet`: an Extrae/Paraver trace as our Parquet trace.

A thin layer over `gpt2trace.interop.paraver_import`; the .pcf and .row are found beside the .prv. The output is
checked before the import starts (never the .prv or a file beside it that the import reads).
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail, note, output, plain, trace_files
from gpt2trace.format.errors import OutputError, TraceError


def import_trace(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, metavar="TRACE",
                                          help="Paraver trace (.prv or .prv.gz).")],
    output_path: Annotated[Path, typer.Option("--output", "-o", metavar="PATH", help="The Parquet trace to write.")],
) -> None:
    """Read a Paraver trace (with its .pcf and .row) into a gpt2trace Parquet trace."""
    out = output(output_path, trace_files([trace]), "--output")
    from gpt2trace.interop.paraver_import import import_paraver, write_parquet
    try:
        imported = import_paraver(trace)
        records = write_parquet(imported, out.path)
    except (TraceError, OutputError) as exc:
        fail(str(exc))
    for line in imported.notes:
        note(line)
    console.print(f"{out.shown()}: {records:,} records; next: gpt2trace analyze {plain(out.path)}", soft_wrap=True)
