"""The rank-ordered layout of a trace file: records ordered by rank, no row group holding two ranks, and an index.

Why: a trace bigger than memory is analyzed rank by rank; a reader then needs one rank's records
without decoding the others. A rank's records sit in one or more consecutive row groups of at most
MERGED_ROW_GROUP rows (gpt2trace.format.writer), and the file's key/value metadata holds RANK_INDEX: JSON
{"row_groups": {rank: [first, last]}, "records": {rank: n}}, so a reader finds a rank's row groups and counts
from the footer alone. Files without the index (traces of earlier versions, other writers) are read through the
row groups' min/max statistics of `rank`, which every writer of ours turns on; a group whose statistics span
several ranks is read and filtered.

The index lives in the Parquet footer, not in the Arrow schema's metadata: a tool that copies a trace's schema
into a file of its own (an export, a filter) then cannot carry over an index that no longer fits its rows.
"""
from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError, TraceError

RANK_INDEX = b"gpt2trace.rank_row_groups"
MERGED_ROW_GROUP = 1 << 20     # rows; a rank with more has several groups


def write_options() -> dict:
    """Our trace files: zstd, dictionary names and kinds, delta timestamps (~5 bytes per record on trainer traces,
    benchmarks/trace_overhead.py), and column statistics (readers skip row groups with them)."""
    return {"compression": "zstd", "use_dictionary": [S.KIND, S.NAME],
            "column_encoding": {S.START_NS: "DELTA_BINARY_PACKED", S.END_NS: "DELTA_BINARY_PACKED"},
            "write_statistics": True}


class RankOrderedWriter:
    """Writes a trace file rank by rank: `write(table)` takes records in non-decreasing rank order (a table may hold
    several ranks, the last of one call may continue in the next); records keep their order within a rank.

    Buffers at most one row group, never puts two ranks in one, adds the rank index to the footer. The file is
    written as `.NAME.tmp` beside `path` and renamed on a clean exit; on an exception the temporary is removed and
    `path` is left as it was; an OSError becomes an OutputError naming `path`."""

    def __init__(self, path: str | Path, schema: pa.Schema, row_group: int = MERGED_ROW_GROUP):
        self.path = Path(path)
        self.schema = schema
        self.row_group = row_group
        self.tmp = self.path.with_name(f".{self.path.name}.tmp")
        self.records = 0
        self._rank: int | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._groups: dict[int, list[int]] = {}     # rank -> [first, last] row group
        self._counts: dict[int, int] = {}
        self._written_groups = 0
        self._sink = None
        self._writer: pq.ParquetWriter | None = None

    def __enter__(self) -> RankOrderedWriter:
        try:
            # opened by Python: pyarrow's own path handling cannot encode names that are not UTF-8
            self._sink = open(self.tmp, "wb")
            self._writer = pq.ParquetWriter(self._sink, self.schema, **write_options())
        except OSError as exc:
            self._abort()
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        return self

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if table.column(S.RANK).null_count:
            raise ValueError(f"{self.path}: records without a rank; every record of a trace needs one")
        rank = table.column(S.RANK).to_numpy()
        ranks = rank if self._rank is None else np.r_[self._rank, rank]
        down = np.diff(ranks) < 0
        if down.any():
            i = int(np.argmax(down))
            raise ValueError(f"{self.path}: records of rank {ranks[i + 1]} after records of rank {ranks[i]}; "
                             "a rank-ordered trace takes its ranks in increasing order")
        cuts = np.flatnonzero(np.diff(rank)) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(rank)]):
            self._add(int(rank[a]), table.slice(a, b - a))

    def _add(self, rank: int, table: pa.Table) -> None:
        if rank != self._rank:
            self._flush()
            self._rank = rank
        self._counts[rank] = self._counts.get(rank, 0) + table.num_rows
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= self.row_group:
            self._flush(whole_groups_only=True)

    def _flush(self, whole_groups_only: bool = False) -> None:
        """Writes the pending rows of the current rank as row groups of `row_group` rows (the rest stays pending
        when `whole_groups_only`)."""
        if not self._pending_rows:
            return
        # one dictionary per column chunk: the tables' name dictionaries may differ
        table = pa.concat_tables(self._pending).unify_dictionaries().combine_chunks()
        n = table.num_rows - table.num_rows % self.row_group if whole_groups_only else table.num_rows
        for a in range(0, n, self.row_group):
            self._write_group(table.slice(a, min(self.row_group, n - a)))
        rest = table.slice(n)
        self._pending, self._pending_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def _write_group(self, table: pa.Table) -> None:
        try:
            self._writer.write_table(table.cast(self.schema), row_group_size=self.row_group)
        except OSError as exc:
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        group = self._written_groups
        self._groups.setdefault(self._rank, [group, group])[1] = group
        self._written_groups += 1
        self.records += table.num_rows

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self._abort()
            return
        try:
            self._flush()
            self._writer.add_key_value_metadata({RANK_INDEX: json.dumps(
                {"row_groups": {str(r): g for r, g in self._groups.items()},
                 "records": {str(r): n for r, n in self._counts.items()}}).encode()})
            self._writer.close()
            self._sink.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self._abort()
            raise OutputError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        for closing in (self._writer, self._sink):
            with contextlib.suppress(Exception):
                if closing is not None:
                    closing.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink()


def rank_row_groups(meta: pq.FileMetaData, where: str | Path = "<trace>") -> dict[int, list[int]]:
    """Each rank's row groups, from the footer: the index when the file has one, else the groups whose `rank`
    statistics cover the rank (a group spanning several ranks is listed under each; its rows need filtering).
    Ranks in increasing order."""
    index = _index(meta, where)
    if index is not None:
        return {r: list(range(a, b + 1)) for r, (a, b) in index["row_groups"].items()}
    lo, hi = _rank_bounds(meta, where)
    out: dict[int, list[int]] = {}
    for g in range(meta.num_row_groups):
        for r in range(lo[g], hi[g] + 1):         # an empty group: range(0, 0)
            out.setdefault(r, []).append(g)
    return dict(sorted(out.items()))


def mixed_groups(meta: pq.FileMetaData, where: str | Path = "<trace>") -> set[int]:
    """Row groups holding more than one rank (none in a file with the index)."""
    if _index(meta, where) is not None:
        return set()
    lo, hi = _rank_bounds(meta, where)
    return {g for g in range(meta.num_row_groups) if hi[g] > lo[g]}


def rank_counts(meta: pq.FileMetaData, where: str | Path = "<trace>") -> dict[int, int] | None:
    """Records per rank from the index; None for a file without it."""
    index = _index(meta, where)
    return None if index is None else index["records"]


def records_per_rank(pfile: pq.ParquetFile, where: str | Path = "<trace>") -> dict[int, int]:
    """Records per rank, in rank order: from the index; in a file without it, from the row groups' statistics and
    sizes, reading only the `rank` column of groups that hold several ranks."""
    counts = rank_counts(pfile.metadata, where)
    if counts is not None:
        return counts
    lo, hi = _rank_bounds(pfile.metadata, where)
    out: dict[int, int] = {}
    for g in range(pfile.metadata.num_row_groups):
        if hi[g] < lo[g]:
            continue
        if lo[g] == hi[g]:
            out[lo[g]] = out.get(lo[g], 0) + pfile.metadata.row_group(g).num_rows
            continue
        seen = pc.value_counts(pfile.read_row_group(g, columns=[S.RANK]).column(S.RANK).drop_null())
        for r, n in zip(seen.field("values").to_pylist(), seen.field("counts").to_pylist()):
            out[int(r)] = out.get(int(r), 0) + n
    return dict(sorted(out.items()))


def _index(meta: pq.FileMetaData, where) -> dict | None:
    raw = (meta.metadata or {}).get(RANK_INDEX)
    if raw is None:
        return None
    try:
        index = json.loads(raw)
        groups = {int(r): (int(a), int(b)) for r, (a, b) in index["row_groups"].items()}
        counts = {int(r): int(n) for r, n in index["records"].items()}
    except (ValueError, KeyError, TypeError):
        raise TraceError(f"{where}: metadata {RANK_INDEX.decode()} is damaged (not JSON {{\"row_groups\": "
                         "{rank: [first, last]}, \"records\": {rank: n}}); rewrite the trace") from None
    if any(not 0 <= a <= b < meta.num_row_groups for a, b in groups.values()):
        raise TraceError(f"{where}: metadata {RANK_INDEX.decode()} names row groups the file does not have "
                         f"({meta.num_row_groups}); rewrite the trace")
    return {"row_groups": dict(sorted(groups.items())), "records": dict(sorted(counts.items()))}


def _rank_bounds(meta: pq.FileMetaData, where) -> tuple[list[int], list[int]]:
    """Min and max rank of each row group, from the statistics of the `rank` column ((0, -1) for an empty group)."""
    # the Parquet leaf column (a list column before it would shift the Arrow field index)
    col = next((i for i in range(meta.num_columns) if meta.schema.column(i).path == S.RANK), None)
    lo, hi = [], []
    for g in range(meta.num_row_groups):
        if meta.row_group(g).num_rows == 0:
            lo.append(0)
            hi.append(-1)
            continue
        stats = meta.row_group(g).column(col).statistics if col is not None else None
        if stats is None or not stats.has_min_max:
            raise TraceError(f"{where}: row group {g} has no statistics of column 'rank' and no rank index; "
                             "rewrite the file with statistics to read it rank by rank")
        if not isinstance(stats.min, int):
            raise TraceError(f"{where}: column 'rank' holds {stats.physical_type} values, not integers; rank ids "
                             "are 0-based integers")
        lo.append(stats.min)
        hi.append(stats.max)
    return lo, hi
