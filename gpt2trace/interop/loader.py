"""Any trace file into a `Trace`: our Parquet format through the reader, Paraver's through the importer."""
from __future__ import annotations

from pathlib import Path

from gpt2trace.format.reader import Trace, check_file
from gpt2trace.format.reader import load as load_parquet

PARAVER_SUFFIXES = (".prv", ".prv.gz")


def load(path: str | Path) -> Trace:
    """The trace in `path`: .prv/.prv.gz (with the .pcf/.row beside it) through the Paraver importer, anything
    else as our Parquet trace. Every problem is a TraceError whose one-line message names the file."""
    path = Path(path)
    check_file(path)                 # missing, a directory, not a file: the same words for every format
    if path.name.endswith(PARAVER_SUFFIXES):
        from gpt2trace.interop.paraver_import import load_paraver
        return load_paraver(path)
    return load_parquet(path)
