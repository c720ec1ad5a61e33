"""The records an exporter reads, batch by batch: from a Parquet trace without loading it whole (memory stays
bounded), or from a trace already in memory (a `Trace`, or any file `gpt2trace.load` reads, such as a .prv).

Each batch is a table with every schema column in the schema's types (columns the file lacks come back null),
so exporters never test for a missing column.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format import schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import BATCH_ROWS, Trace, check_file, open_parquet, streamed_tables
from gpt2trace.format.schema import FIELDS, KIND, REQUIRED, Kind


@contextlib.contextmanager
def no_progress(what: str, total: int | None = None, unit: str = "records") -> Iterator[Callable[[int], None]]:
    """The default of the long exports' and imports' `progress` parameter, which takes any function of this
    signature (the CLI passes `gpt2trace.cli.progress.progress`, a bar on a terminal): `advance(n)` does nothing."""
    yield lambda n: None


@dataclass(frozen=True)
class Source:
    name: str
    meta: dict                          # the schema's key/value metadata (bytes -> bytes)
    path: Path | None = None            # a Parquet file read in batches
    trace: Trace | None = None          # or a trace in memory

    def batches(self, columns: Sequence[str] = tuple(FIELDS), rows: int = BATCH_ROWS) -> Iterator[pa.Table]:
        """Tables of at most `rows` records with `columns` (schema types, nulls where the trace has none)."""
        if self.trace is not None:
            table = self.trace.table
            for batch in table.select(list(columns)).to_batches(max_chunksize=rows):
                yield pa.Table.from_batches([batch])
            return
        pfile = open_parquet(self.path, streamed=True)
        names = pfile.schema_arrow.names
        present = [c for c in columns if c in names]
        try:
            for table in streamed_tables(pfile, present, rows):
                yield _typed(self.name, table, columns)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(f"{self.name}: cannot read the Parquet data ({_first_line(exc)})") from None


def input_files(source) -> list[Path]:
    """The files an export of `source` reads, which it must never write: the trace file, and for a .prv its .pcf,
    .row and .gpt2trace.json (read when present), an OTF2 archive's files, a Kineto folder's traces."""
    path = source.path if isinstance(source, Trace) else Path(source)
    if path is None:
        return []
    path = Path(path)
    if path.name.endswith((".prv", ".prv.gz")):
        from gpt2trace.interop.paraver_format import file_names
        return [Path(p) for p in file_names(str(path))]
    from gpt2trace.interop.loader import is_kineto, is_otf2
    if is_otf2(path):
        from gpt2trace.interop.otf2_format import archive_files
        return list(archive_files(path))
    if is_kineto(path) and path.is_dir():
        from gpt2trace.interop.kineto_import import kineto_files
        return [path, *kineto_files(path)]
    return [path]


def open_source(source) -> Source:
    """A Parquet path (streamed), a `Trace`, or any other path `gpt2trace.load` reads (loaded whole)."""
    if isinstance(source, Trace):
        return Source(source.name, _trace_meta(source), trace=source)
    path = Path(source)
    from gpt2trace.interop.loader import is_parquet, load
    if not is_parquet(path):
        trace = load(path)
        return Source(str(path), _trace_meta(trace), trace=trace)
    check_file(path)
    try:
        arrow_schema = open_parquet(path).schema_arrow
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"{path}: not a Parquet file ({_first_line(exc)})") from None
    meta = dict(arrow_schema.metadata or {})
    raw = meta.get(schema.META_VERSION)
    if raw is not None and raw not in {str(v).encode() for v in schema.READABLE_VERSIONS}:
        raise TraceError(f"{path}: trace schema version {raw.decode(errors='replace')} is not supported (this "
                         f"gpt2trace reads versions {', '.join(map(str, schema.READABLE_VERSIONS))})")
    missing = [c for c in REQUIRED if c not in arrow_schema.names]
    if missing:
        raise TraceError(f"{path}: missing required column(s) {', '.join(missing)}")
    return Source(str(path), meta, path=path)


def _typed(where: str, table: pa.Table, columns: Sequence[str]) -> pa.Table:
    cols = {}
    for name in columns:
        typ = FIELDS[name]
        if name not in table.column_names:
            cols[name] = pa.nulls(table.num_rows, typ)
            continue
        try:
            cols[name] = table.column(name).cast(typ)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise TraceError(f"{where}: column {name!r} does not cast to {typ} ({_first_line(exc)})") from None
    out = pa.table(cols)
    if KIND in out.column_names:
        unknown = set(pc.unique(out.column(KIND)).to_pylist()) - set(Kind.ALL) - {None}
        if unknown:
            raise TraceError(f"{where}: unknown record kind(s) {', '.join(sorted(unknown))}")
    return out


def _trace_meta(trace: Trace) -> dict:
    import json
    meta = {schema.META_VERSION: str(trace.version).encode()}
    for key, value in ((schema.META_RUN, trace.run), (schema.META_MACHINE, trace.machine),
                       (schema.META_PEAK, trace.peak), (schema.META_CLOCK, trace.clock)):
        if value is not None:
            meta[key] = json.dumps(value).encode()
    return meta


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
