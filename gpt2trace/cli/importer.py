"""`gpt2trace import TRACE -o OUT.parquet [--from paraver|otf2|kineto]`: another tool's trace as our Parquet trace.

A thin layer over `gpt2trace.interop.paraver_stream` (rank by rank, in bounded memory; the .pcf and .row are found
beside the .prv), `otf2_import` (an OTF2 archive: its anchor file or folder) and `kineto_import` (PyTorch profiler
traces: one JSON file per rank, or their folder). The output is checked before the import starts (never a file the
import reads).
"""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail, note, output, plain
from gpt2trace.format.errors import OutputError, TraceError


class Source(str, Enum):
    auto = "auto"
    paraver = "paraver"
    otf2 = "otf2"
    kineto = "kineto"


def import_trace(
    trace: Annotated[Path, typer.Argument(exists=True, metavar="TRACE",
                                          help="Paraver trace (.prv or .prv.gz), OTF2 archive (its .otf2 anchor file "
                                          "or folder), or PyTorch profiler trace (.json, .json.gz, or a folder of "
                                          "them, one per rank).")],
    output_path: Annotated[Path, typer.Option("--output", "-o", metavar="PATH", help="The Parquet trace to write.")],
    source: Annotated[Source, typer.Option("--from", help="The trace's format; auto: from its name (.prv, .otf2, "
                                           ".json) or the files in its folder.")] = Source.auto,
) -> None:
    """Read a Paraver, OTF2 or PyTorch profiler (Kineto) trace into a gpt2trace Parquet trace."""
    from gpt2trace.interop.paraver_import import write_parquet
    try:
        kind = _detect(trace) if source is Source.auto else source
        out = output(output_path, _inputs(kind, trace), "--output")
        if kind is Source.paraver:
            from gpt2trace.cli.progress import progress
            from gpt2trace.format.reader import check_file
            from gpt2trace.interop.paraver_stream import import_paraver_to
            check_file(trace)
            imported = import_paraver_to(trace, out.path, progress=progress)
            records = imported.records
        else:
            imported = _importer(kind)(trace)
            records = write_parquet(imported, out.path)
    except (TraceError, OutputError) as exc:
        fail(str(exc))
    for line in imported.notes:
        note(line)
    console.print(f"{out.shown()}: {records:,} records; next: gpt2trace analyze {plain(out.path)}", soft_wrap=True)


def _detect(path: Path) -> Source:
    from gpt2trace.interop.kineto_import import is_kineto_path
    from gpt2trace.interop.loader import PARAVER_SUFFIXES, is_otf2
    if path.name.endswith(PARAVER_SUFFIXES):
        return Source.paraver
    if is_otf2(path):
        return Source.otf2
    if is_kineto_path(path):
        return Source.kineto
    raise TraceError(f"{path}: cannot tell the trace's format from its name; say it with --from paraver, otf2 or "
                     "kineto")


def _importer(kind: Source):
    if kind is Source.otf2:
        from gpt2trace.interop.otf2_import import import_otf2
        return import_otf2
    from gpt2trace.interop.kineto_import import import_kineto
    return import_kineto


def _inputs(kind: Source, path: Path) -> list[Path]:
    """Every file the import reads, which the output may not be."""
    if kind is Source.kineto:
        from gpt2trace.interop.kineto_import import kineto_files
        return kineto_files(path)
    if kind is Source.otf2:
        from gpt2trace.interop.otf2_format import archive_files
        return list(archive_files(path))
    from gpt2trace.interop.source import input_files
    return input_files(path)
