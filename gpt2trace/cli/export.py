"""`gpt2trace export TRACE --format paraver|chrome -o NAME`: the trace for Paraver or Perfetto / chrome://tracing.

A thin layer over `gpt2trace.interop.paraver_export` and `chrome_export`; both stream, so any trace fits. Every
output is checked before the export starts (never one of the files the trace is read from).
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail, note, output, trace_files
from gpt2trace.format.errors import OutputError, TraceError


class Format(str, Enum):
    paraver = "paraver"
    chrome = "chrome"


def export(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, metavar="TRACE",
                                          help="Trace file (Parquet, or .prv/.prv.gz).")],
    name: Annotated[str, typer.Option("--output", "-o", metavar="NAME", help="paraver: NAME writes NAME.prv, "
                                      "NAME.pcf, NAME.row and NAME.gpt2trace.json (our metadata, which gpt2trace "
                                      "import reads back; NAME.prv.gz: gzipped); chrome: NAME or NAME.json "
                                      "(NAME.json.gz: gzipped).")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="paraver (wxparaver, paramedir) or chrome (Trace "
                                        "Event JSON for Perfetto UI and chrome://tracing).")] = Format.paraver,
) -> None:
    """Write the trace in another tool's format: Paraver's .prv/.pcf/.row or Chrome's Trace Event JSON."""
    inputs = trace_files([trace])
    try:
        if fmt is Format.paraver:
            from gpt2trace.interop.paraver_export import export_paraver
            from gpt2trace.interop.paraver_format import file_names
            prv, pcf, row, meta = (output(p, inputs, "--output") for p in file_names(name))
            out = export_paraver(trace, name)
            for line in (f"{prv.shown()}: {out.lines:,} lines from {out.records:,} records, {out.messages:,} messages",
                         f"{pcf.shown()}, {row.shown()}: event names and thread rows for Paraver",
                         f"{meta.shown()}: the trace's metadata (run, machine, clock) for gpt2trace import"):
                console.print(line, soft_wrap=True)
        else:
            from gpt2trace.interop.chrome_export import chrome_path, export_chrome
            path = output(chrome_path(name), inputs, "--output")
            out = export_chrome(trace, path.path)
            console.print(f"{path.shown()} ({out.events:,} events from {out.records:,} records, {out.flows:,} flows)",
                          soft_wrap=True)
    except (TraceError, OutputError) as exc:
        fail(str(exc))
    if out.dropped_counters:
        note(f"{out.dropped_counters:,} counter value(s) (NaN, inf or too large) left out")
