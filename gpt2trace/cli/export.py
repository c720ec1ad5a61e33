"""`gpt2trace export TRACE --format paraver|chrome -o NAME`: the trace for Paraver or Perfetto / chrome://tracing.

A thin layer over `gpt2trace.interop.paraver_export` and `chrome_export`; both stream, so any trace fits.
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail
from gpt2trace.format.errors import TraceError


class Format(str, Enum):
    paraver = "paraver"
    chrome = "chrome"


def export(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Trace file (Parquet, or .prv/.prv.gz).")],
    output: Annotated[str, typer.Option("--output", "-o", help="paraver: NAME writes NAME.prv, NAME.pcf, NAME.row "
                                        "(NAME.prv.gz: gzipped); chrome: NAME or NAME.json (NAME.json.gz: gzipped).")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="paraver (wxparaver, paramedir) or chrome (Trace "
                                        "Event JSON for Perfetto UI and chrome://tracing).")] = Format.paraver,
) -> None:
    """Write the trace in another tool's format: Paraver's .prv/.pcf/.row or Chrome's Trace Event JSON."""
    try:
        if fmt is Format.paraver:
            from gpt2trace.interop.paraver_export import export_paraver
            out = export_paraver(trace, output)
            console.print(f"{out.prv} ({out.lines:,} lines from {out.records:,} records, {out.messages:,} "
                          f"messages), {out.pcf}, {out.row}", soft_wrap=True)
            dropped = out.dropped_counters
        else:
            from gpt2trace.interop.chrome_export import export_chrome
            out = export_chrome(trace, output)
            console.print(f"{out.path} ({out.events:,} events from {out.records:,} records, {out.flows:,} flows)",
                          soft_wrap=True)
            dropped = out.dropped_counters
    except TraceError as exc:
        fail(str(exc))
    if dropped:
        console.print(f"[yellow]note:[/] {dropped:,} counter value(s) (NaN, inf or too large) left out")
