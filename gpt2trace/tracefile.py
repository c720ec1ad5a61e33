"""Writing traces: one small Parquet part per flush while the run goes, merged into one file at the end.

Why parts: a Parquet file is only readable once its footer is written. Closing a part per step means a run
killed at step k leaves parts for every step before k; `pyarrow.parquet.read_table(<trace>.parts)` reads them
as they are, and `gpt2trace recover` merges them into the final file. Each part is written under a temporary
name and renamed, so a kill during a write leaves no half-written part.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpt2trace import schema as S
from gpt2trace.errors import TraceError

# zstd + delta-encoded timestamps: ~5 bytes per record on trainer traces (benchmarks/trace_overhead.py).
_DICT_COLUMNS = [S.KIND, S.NAME]
_ENCODINGS = {S.START_NS: "DELTA_BINARY_PACKED", S.END_NS: "DELTA_BINARY_PACKED"}
MERGED_ROW_GROUP = 1 << 20


def parts_dir(trace_path: Path) -> Path:
    return Path(str(trace_path) + ".parts")


def write_options() -> dict:
    return dict(compression="zstd", use_dictionary=_DICT_COLUMNS, column_encoding=_ENCODINGS)


def records_table(columns: dict[str, np.ndarray], schema: pa.Schema, nulls: dict[str, int] | None = None,
                  value_mask: np.ndarray | None = None) -> pa.Table:
    """A table in schema order from NumPy columns. Missing columns become nulls; in a column named in
    `nulls` the given sentinel becomes null; `value_mask` marks the rows whose `value` is null."""
    n = len(next(iter(columns.values())))
    nulls = nulls or {}
    arrays = []
    for field in schema:
        col = columns.get(field.name)
        if col is None:
            arrays.append(pa.nulls(n, type=field.type))
        elif pa.types.is_dictionary(field.type):
            arrays.append(pa.array(col, type=pa.string()).dictionary_encode())
        else:
            mask = col == nulls[field.name] if field.name in nulls else None
            if field.name == S.VALUE and value_mask is not None:
                mask = value_mask
            arrays.append(pa.array(col, type=field.type, mask=mask))
    return pa.Table.from_arrays(arrays, schema=schema)


class PartWriter:
    """One rank's parts: <trace>.parts/rank00000/00000012.parquet, in flush order."""

    def __init__(self, trace_path: Path, rank: int, schema: pa.Schema):
        self.dir = parts_dir(trace_path) / f"rank{rank:05d}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.schema = schema
        self.seq = 0
        self.bytes = 0

    def write(self, table: pa.Table) -> None:
        final = self.dir / f"{self.seq:08d}.parquet"
        tmp = final.with_suffix(".tmp")
        pq.write_table(table, tmp, **write_options())
        os.replace(tmp, final)
        self.bytes += final.stat().st_size
        self.seq += 1


def part_files(parts: Path) -> list[Path]:
    return sorted(parts.glob("rank*/*.parquet"))


def merge_parts(trace_path: Path, extra_metadata: dict[bytes, bytes] | None = None,
                keep_parts: bool = False) -> int:
    """Merge every rank's parts into `trace_path` (rank by rank, in flush order); returns the record count."""
    parts = parts_dir(trace_path)
    files = part_files(parts)
    if not files:
        raise TraceError(f"{parts}: no trace parts to merge; was the run started with tracing on?")
    first = pq.read_schema(files[0])
    meta = dict(first.metadata or {})
    meta.update(extra_metadata or {})
    schema = S.arrow_schema(meta)
    tmp = Path(str(trace_path) + ".tmp")
    rows = 0
    with pq.ParquetWriter(tmp, schema, **write_options()) as writer:
        pending: list[pa.Table] = []
        pending_rows = 0
        for f in files:
            t = pq.read_table(f).cast(schema)
            pending.append(t)
            pending_rows += t.num_rows
            if pending_rows >= MERGED_ROW_GROUP:
                writer.write_table(pa.concat_tables(pending), row_group_size=MERGED_ROW_GROUP)
                rows += pending_rows
                pending, pending_rows = [], 0
        if pending:
            writer.write_table(pa.concat_tables(pending), row_group_size=MERGED_ROW_GROUP)
            rows += pending_rows
    os.replace(tmp, trace_path)
    if not keep_parts:
        shutil.rmtree(parts)
    return rows
