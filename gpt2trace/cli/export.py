"""`gpt2trace export TRACE --format paraver|chrome|otf2 -o NAME`: the trace for Paraver, Perfetto /
chrome://tracing, or the Score-P tools (Vampir, Scalasca, pipit).

A thin layer over `gpt2trace.interop.paraver_export`, `chrome_export` and `otf2_export`. Every output is checked
before the export starts (never one of the files the trace is read from).
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail, note, output, plain, trace_files
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.outputs import check_name


class Format(str, Enum):
    paraver = "paraver"
    chrome = "chrome"
    otf2 = "otf2"


def export(
    trace: Annotated[Path, typer.Argument(exists=True, metavar="TRACE",
                                          help="Trace file (Parquet, .prv/.prv.gz, or an OTF2 archive: its .otf2 "
                                          "anchor file or folder).")],
    name: Annotated[str, typer.Option("--output", "-o", metavar="NAME", help="paraver: NAME writes NAME.prv, "
                                      "NAME.pcf, NAME.row and NAME.gpt2trace.json (our metadata, which gpt2trace "
                                      "import reads back; NAME.prv.gz: gzipped); chrome: NAME or NAME.json "
                                      "(NAME.json.gz: gzipped); otf2: the archive's folder NAME (NAME/traces.otf2 "
                                      "is its anchor file).")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="paraver (wxparaver, paramedir), chrome (Trace "
                                        "Event JSON for Perfetto UI and chrome://tracing) or otf2 (an OTF2 archive "
                                        "for Vampir, Scalasca, pipit).")] = Format.paraver,
) -> None:
    """Write the trace in another tool's format: Paraver's .prv/.pcf/.row, Chrome's Trace Event JSON or OTF2."""
    _check_name(name, fmt)
    try:
        inputs = trace_files([trace])
        if fmt is Format.paraver:
            from gpt2trace.interop.paraver_export import export_paraver
            from gpt2trace.interop.paraver_format import file_names
            prv, pcf, row, meta = (output(p, inputs, "--output") for p in file_names(name))
            from gpt2trace.cli.progress import progress
            out = export_paraver(trace, name, progress=progress)
            for line in (f"{prv.shown()}: {out.lines:,} lines from {out.records:,} records, {out.messages:,} messages",
                         f"{pcf.shown()}, {row.shown()}: event names and thread rows for Paraver",
                         f"{meta.shown()}: the trace's metadata (run, machine, clock) for gpt2trace import"):
                console.print(line, soft_wrap=True)
        elif fmt is Format.otf2:
            from gpt2trace.interop.otf2_export import check_archive_output, export_otf2
            replaced = " (replaced)" if check_archive_output(Path(name), inputs) else ""
            out = export_otf2(trace, name)
            console.print(f"{plain(out.anchor)}{replaced}: {out.events:,} events from {out.records:,} records on "
                          f"{out.locations} locations (Vampir, Scalasca, pipit, otf2-print)", soft_wrap=True)
            return
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


def _check_name(name: str, fmt: Format) -> None:
    """A one-line failure for a NAME that names no file (gpt2trace.format.outputs.check_name, which the export
    functions apply too), before any output is looked at. An OTF2 archive is a folder, so a trailing '/' is its
    name and an existing folder is checked as an archive."""
    from gpt2trace.interop import paraver_format
    from gpt2trace.interop.chrome_export import SUFFIXES as JSON_SUFFIXES
    suffixes = {Format.paraver: paraver_format.SUFFIXES, Format.chrome: JSON_SUFFIXES, Format.otf2: ()}
    try:
        check_name(name, suffixes[fmt], folder=fmt is Format.otf2)
    except OutputError as exc:
        fail(str(exc))
