"""Any trace file into a `Trace`: our Parquet format through the reader, Paraver's, OTF2's and the PyTorch
profiler's (Kineto's) through their importers, so that every command reads every format `import` names."""
from __future__ import annotations

from pathlib import Path

from gpt2trace.format.limits import GZIP_TEXT_PER_BYTE, PRV_STREAM_BYTES
from gpt2trace.format.reader import Trace, check_file
from gpt2trace.format.reader import load as load_parquet
from gpt2trace.interop.kineto_import import SUFFIXES as KINETO_SUFFIXES
from gpt2trace.interop.otf2_format import ANCHOR_SUFFIX, is_archive_dir

PARAVER_SUFFIXES = (".prv", ".prv.gz")


def is_otf2(path: Path) -> bool:
    """An OTF2 anchor file (NAME.otf2) or an archive's folder (one NAME.otf2 inside)."""
    return path.name.endswith(ANCHOR_SUFFIX) or is_archive_dir(path)


def is_kineto(path: Path) -> bool:
    """A PyTorch profiler trace file, or a folder of them (one per rank)."""
    if path.is_dir():
        return not is_archive_dir(path) and any(p.name.endswith(KINETO_SUFFIXES) for p in path.iterdir())
    return path.name.endswith(KINETO_SUFFIXES)


def is_parquet(path: Path) -> bool:
    """What `load` reads as our Parquet trace (neither Paraver, OTF2 nor Kineto)."""
    return not (is_otf2(path) or path.name.endswith(PARAVER_SUFFIXES) or is_kineto(path))


def load(path: str | Path) -> Trace:
    """The trace in `path`: .prv/.prv.gz (with the .pcf/.row beside it) through the Paraver importer, an OTF2
    archive (its anchor file or folder) through the OTF2 importer, a PyTorch profiler trace (.json, .json.gz, or a
    folder of them) through the Kineto importer, anything else as our Parquet trace. Every problem is a TraceError
    whose one-line message names the file."""
    path = Path(path)
    if is_otf2(path):
        from gpt2trace.interop.otf2_import import load_otf2
        return load_otf2(path)
    if is_kineto(path):
        from gpt2trace.interop.kineto_import import load_kineto
        return load_kineto(path)
    check_file(path)                 # missing, a directory, not a file: the same words for every format
    if path.name.endswith(PARAVER_SUFFIXES):
        from gpt2trace.interop.paraver_import import load_paraver
        return load_paraver(path)
    return load_parquet(path)


def is_big_paraver(path: Path, limit: int = PRV_STREAM_BYTES) -> bool:
    """A .prv (or .prv.gz) whose text is over `limit` bytes: too big to import whole for an analysis."""
    if not path.name.endswith(PARAVER_SUFFIXES) or not path.is_file():
        return False
    size = path.stat().st_size
    return (size * GZIP_TEXT_PER_BYTE if path.name.endswith(".gz") else size) > limit
