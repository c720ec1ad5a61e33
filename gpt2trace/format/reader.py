"""Reading a Parquet trace into a `Trace`: checks the file, the schema version and the columns, casts to the schema.

A `Trace` keeps the records of each kind in their own Arrow table, without the columns that are null for every
record of that kind (a state record has no name, step, bytes, ...): a 10-million-record trace then takes about a
third of the memory of the full table, and an analysis reads its kind without filtering. `Trace.table` rebuilds
the full table in the schema's layout on demand. Analyses take a `Trace` and never modify it; `check_states` is
the cheap partition check that `analyze` runs.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from gpt2trace.format import communicators as comms
from gpt2trace.format import rank_order, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.lanes import key_width, lane_key, lane_order
from gpt2trace.format.schema import END_NS, FIELDS, KIND, RANK, REQUIRED, START_NS, STATE, THREAD, Kind

BATCH_ROWS = 1 << 20
PIECE_ROWS = 1 << 15    # rows streamed_tables decodes at a time
READ_BUFFER = 1 << 16   # bytes of a column chunk streamed_tables reads at a time
BASE = (RANK, THREAD, START_NS, END_NS)          # read for every record, whatever else is asked


@dataclass(frozen=True)
class Reads:
    """What a reader of a trace needs of it: the records of `kinds` (None: every kind) with the `columns` of the
    schema besides `kind` and BASE (None: all of them). Parquet reads columns for every record, so the columns are
    one set for all kinds. A `Trace` loaded with less answers only the analyses that read no more."""
    columns: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None

    def __or__(self, other: Reads) -> Reads:
        """What both need."""
        def both(a, b):
            return None if a is None or b is None else tuple(dict.fromkeys(a + b))
        return Reads(both(self.columns, other.columns), both(self.kinds, other.kinds))


@dataclass(frozen=True)
class Trace:
    """A trace: per-kind Arrow tables (schema types) and the parsed metadata (None where absent)."""
    parts: Mapping[str, pa.Table]
    path: Path | None = None
    version: int = schema.SCHEMA_VERSION
    run: dict | None = None
    machine: dict | None = None
    peak: dict | None = None
    clock: dict | None = None
    extra_columns: tuple[str, ...] = field(default=())
    comm_table: Mapping[int, comms.Communicator] | None = None   # META_COMMUNICATORS; None: world only
    notes: tuple[str, ...] = ()        # META_IMPORT_NOTES: what the import of another tool's trace did

    @classmethod
    def from_parquet(cls, path: str | Path) -> Trace:
        return load(path)

    @classmethod
    def from_table(cls, table: pa.Table, path: str | Path | None = None) -> Trace:
        """A trace from an in-memory table (tests, generators): the same checks and casts as `load`."""
        where = Path(path) if path else None
        meta = table.schema.metadata or {}
        version = _check_version(where or "<table>", meta)
        _check_required(where or "<table>", table.schema.names)
        return _build(table.to_batches(max_chunksize=BATCH_ROWS), table.schema.names, meta, where, version)

    def records(self, kind: str) -> pa.Table:
        """The records of one kind (no `kind` column; columns null for the whole kind left out)."""
        part = self.parts.get(kind)
        return part if part is not None else _empty_part()

    @property
    def communicators(self) -> dict[int, comms.Communicator]:
        """The communicators of the trace's MPI calls by id; a trace that names none ran on the world of its
        ranks."""
        if self.comm_table:
            return dict(self.comm_table)
        ranks = set()
        for part in self.parts.values():
            ranks.update(pc.unique(part.column(RANK)).to_pylist())
        return {comms.WORLD_ID: comms.world(sorted(ranks))}

    @property
    def num_rows(self) -> int:
        return sum(t.num_rows for t in self.parts.values())

    @property
    def table(self) -> pa.Table:
        """The full table in the schema's column order and types, records grouped by kind (built on each call)."""
        tables = []
        for kind, part in self.parts.items():
            n = part.num_rows
            cols = {}
            for name, typ in FIELDS.items():
                if name == KIND:
                    cols[name] = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([kind]))
                else:
                    cols[name] = part.column(name) if name in part.column_names else pa.nulls(n, typ)
            tables.append(pa.table(cols, schema=schema.arrow_schema()))
        return pa.concat_tables(tables).unify_dictionaries() if tables else schema.arrow_schema().empty_table()

    def to_pandas(self):
        return self.table.to_pandas()

    @property
    def name(self) -> str:
        """The path for messages and reports: bytes of the file name that are not UTF-8 become U+FFFD."""
        return _text(str(self.path)) if self.path else "<table>"


def load(path: str | Path, ranks: Iterable[int] | None = None, reads: Reads | None = None) -> Trace:
    """Reads and checks a Parquet trace file (`gpt2trace.load` reads the other formats too); every problem is a
    TraceError whose one-line message names the file.

    With `ranks`, only those ranks' records are read (their row groups: gpt2trace.format.rank_order), with the
    whole metadata; a trace without a communicator table keeps the world of all its ranks. With `reads`, only
    those columns are read and those kinds kept (the checks of the columns not read are left out)."""
    path = Path(path)
    with _parquet(path) as (pfile, arrow_schema):
        meta = arrow_schema.metadata or {}
        version = _check_version(path, meta)
        _check_required(path, arrow_schema.names)
        reads = reads or Reads()
        asked = FIELDS if reads.columns is None else (KIND, *BASE, *reads.columns)
        wanted = [n for n in FIELDS if n in arrow_schema.names and n in asked]   # unknown extra columns: not read
        try:
            if ranks is None:
                every = range(pfile.metadata.num_row_groups)
                batches = row_group_batches(pfile, _with_values(pfile.metadata, wanted, every), every)
                return _build(batches, arrow_schema.names, meta, path, version, reads=reads)
            batches, world = _rank_batches(path, pfile, wanted, ranks)
            return _build(batches, arrow_schema.names, meta, path, version, world=world, reads=reads)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(f"{path}: cannot read the Parquet data ({_first_line(exc)})") from None


def trace_ranks(path: str | Path) -> list[int]:
    """The ranks a trace holds, in order, from its footer (gpt2trace.format.rank_order)."""
    return list(rank_records(path))


def rank_records(path: str | Path) -> dict[int, int]:
    """Records per rank, in rank order, from the footer: the rank index, or the row groups' statistics (a file of
    another writer whose row groups mix ranks: their `rank` column is read, nothing else)."""
    path = Path(path)
    with _parquet(path) as (pfile, arrow_schema):
        _check_version(path, arrow_schema.metadata or {})
        _check_required(path, arrow_schema.names)
        try:
            return rank_order.records_per_rank(pfile, path)
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(f"{path}: cannot read the Parquet data ({_first_line(exc)})") from None


def rank_groups(path: str | Path, max_records: int) -> list[list[int]]:
    """The trace's ranks in consecutive groups of at most `max_records` records each (a rank with more is a group
    of its own): what to load at once to stay within a memory budget."""
    return group_counts(rank_records(path), max_records)


def group_counts(counts: Mapping[int, int], max_records: int) -> list[list[int]]:
    """`rank_groups` of ranks with these record counts (in rank order)."""
    if max_records < 1:
        raise ValueError(f"max_records must be >= 1, got {max_records}")
    groups: list[list[int]] = []
    size = 0
    for rank, n in counts.items():
        if not groups or size + n > max_records:
            groups.append([])
            size = 0
        groups[-1].append(rank)
        size += n
    return groups


def _rank_batches(path: Path, pfile: pq.ParquetFile, columns: list[str], ranks: Iterable[int]):
    """The batches of the row groups holding `ranks` (rows of other ranks filtered out of groups that mix ranks),
    and every rank of the trace."""
    wanted = sorted({int(r) for r in ranks})
    by_rank = rank_order.rank_row_groups(pfile.metadata, path)
    missing = [r for r in wanted if r not in by_rank]
    if missing:
        raise TraceError(f"{path}: no records of rank(s) {', '.join(map(str, missing))}; the trace holds ranks "
                         f"{_ranges(list(by_rank))}")
    groups = sorted({g for r in wanted for g in by_rank[r]})
    columns = _with_values(pfile.metadata, columns, groups)
    batches = row_group_batches(pfile, columns, groups)
    if rank_order.mixed_groups(pfile.metadata, path).isdisjoint(groups):
        return batches, list(by_rank)
    return (_only(path, b, wanted) for b in batches), list(rank_order.records_per_rank(pfile, path))


def row_group_batches(pfile: pq.ParquetFile, columns: list[str], groups: Iterable[int],
                      rows: int | None = None) -> Iterator[pa.RecordBatch]:
    """The records of the row `groups`, in batches of at most `rows` (None: as decoded). A row group of at most
    2 x BATCH_ROWS rows (as our writers make them) is decoded whole: its columns decode on Arrow's threads, ~30%
    less than the same rows in batches; larger row groups (other writers) in batches of `rows` or BATCH_ROWS, so
    memory stays bounded."""
    for g in groups:
        if pfile.metadata.row_group(g).num_rows <= 2 * BATCH_ROWS:
            yield from pfile.read_row_group(g, columns=columns).to_batches(max_chunksize=rows)
        else:
            yield from pfile.iter_batches(batch_size=rows or BATCH_ROWS, columns=columns, row_groups=[g])


def streamed_tables(pfile: pq.ParquetFile, columns: list[str], rows: int) -> Iterator[pa.Table]:
    """Every record of the file in tables of `rows` (the last one shorter), decoded PIECE_ROWS at a time and not
    copied (a table's columns are chunked by piece), so memory depends on `rows` and not on the file's row groups
    (the exports' reading; `open_parquet(path, streamed=True)` gives the file). Arrow's batch reader holds more
    than its batch once the batch passes ~32 K rows, the more the larger the row group (measured: 31 -> 43 MB
    from 158 K- to 470 K-record row groups with 131 K-row batches, flat with 32 K)."""
    if not columns:     # no data to hold; and a batch of no columns loses its row count in slicing
        for batch in row_group_batches(pfile, columns, range(pfile.metadata.num_row_groups), rows):
            yield pa.Table.from_batches([batch])
        return
    pieces: list[pa.RecordBatch] = []
    held = 0
    for piece in pfile.iter_batches(batch_size=min(rows, PIECE_ROWS), columns=columns):
        while held + piece.num_rows >= rows:
            cut = rows - held
            yield pa.Table.from_batches(pieces + [piece.slice(0, cut)])
            pieces, held, piece = [], 0, piece.slice(cut)
        if piece.num_rows:
            pieces.append(piece)
            held += piece.num_rows
    if held:
        yield pa.Table.from_batches(pieces)


def _with_values(meta: pq.FileMetaData, columns: list[str], groups: Iterable[int]) -> list[str]:
    """The `columns` without those the statistics show null in every row of `groups` (a kind's all-null columns
    are left out of its table: decoding them is wasted; most of a trace's columns belong to few of its records)."""
    leaf = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    groups = list(groups)

    def all_null(name: str) -> bool:
        if name in BASE or name == KIND or name not in leaf:        # list columns: their leaf is another path
            return False
        for g in groups:
            stats = meta.row_group(g).column(leaf[name]).statistics
            if stats is None or not stats.has_null_count or stats.null_count != meta.row_group(g).num_rows:
                return False
        return bool(groups)
    return [c for c in columns if not all_null(c)]


def _only(path: Path, batch: pa.RecordBatch, ranks: list[int]) -> pa.RecordBatch:
    rank = batch.column(RANK)
    if rank.null_count:
        raise TraceError(f"{path}: column {RANK!r} has null values; every record needs one")
    return batch.filter(pc.is_in(rank, pa.array(ranks, type=rank.type)))


def _ranges(ranks: list[int]) -> str:
    """0-3, 5, 7-8: sorted ranks as runs."""
    runs, start = [], 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            a, b = ranks[start], ranks[i - 1]
            runs.append(str(a) if a == b else f"{a}-{b}")
            start = i
    return ", ".join(runs)


@contextlib.contextmanager
def _parquet(path: Path) -> Iterator[tuple[pq.ParquetFile, pa.Schema]]:
    """The Parquet file at `path`, opened whatever bytes its name holds, and its Arrow schema; a TraceError when it
    is not one."""
    check_file(path)
    try:
        source = pa.OSFile(os.fsencode(path))       # bytes: any file name, UTF-8 or not
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"{path}: cannot open ({_first_line(exc)})") from None
    with source:
        try:
            pfile = pq.ParquetFile(source)
            arrow_schema = pfile.schema_arrow
        except (pa.ArrowException, OSError) as exc:
            raise TraceError(f"{path}: not a Parquet file ({_first_line(exc)})") from None
        yield pfile, arrow_schema


def check_file(path: Path) -> None:
    """A TraceError unless `path` is a regular file: says whether it is missing, a directory or something else."""
    if path.is_file():
        return
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file; give the trace's file (for example "
                         "trace.parquet)")
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    raise TraceError(f"{path}: not a regular file; give a trace file")


def open_parquet(path: str | Path, streamed: bool = False) -> pq.ParquetFile:
    """The Parquet file at `path`, whatever bytes its name holds (pyarrow's own path handling wants UTF-8);
    closed when the object is. `streamed`: column chunks are read READ_BUFFER bytes at a time, not whole."""
    options = {"buffer_size": READ_BUFFER, "pre_buffer": False} if streamed else {}
    return pq.ParquetFile(pa.OSFile(os.fsencode(path)), **options)


def _build(batches: Iterable[pa.RecordBatch], names: list[str], meta: dict, path: Path | None,
           version: int, world: list[int] | None = None, reads: Reads = Reads()) -> Trace:
    """Checks and casts batch by batch, splitting each into kinds, so only one batch is held twice. `world`: the
    ranks of the whole trace, when the batches hold only some of them; `reads`: the kinds kept and the columns
    asked for (the batches hold no others)."""
    where = path or "<table>"
    chunks: dict[str, list[pa.Table]] = {}
    rows = 0
    for batch in batches:
        rows += batch.num_rows
        for kind, part in _split(where, pa.Table.from_batches([batch]), reads).items():
            chunks.setdefault(kind, []).append(part)
    if not rows:
        raise TraceError(f"{where}: the trace is empty (no records); was it written by a run with tracing on?")
    parts = {}
    for kind in Kind.ALL:
        if kind in chunks:
            table = pa.concat_tables(chunks.pop(kind), promote_options="default").unify_dictionaries()
            parts[kind] = table.combine_chunks() if table.num_rows < BATCH_ROWS else table
    extra = tuple(n for n in names if n not in FIELDS)
    pa.default_memory_pool().release_unused()       # the batches' buffers, back to the system
    comm_table = _communicators(where, meta)
    if comm_table is None and world is not None:
        comm_table = {comms.WORLD_ID: comms.world(world)}
    return Trace(parts=parts, path=path, version=version, run=_json(where, meta, schema.META_RUN),
                 machine=_json(where, meta, schema.META_MACHINE), peak=_json(where, meta, schema.META_PEAK),
                 clock=_json(where, meta, schema.META_CLOCK), extra_columns=extra,
                 comm_table=comm_table, notes=_notes(where, meta))


def _split(where, table: pa.Table, reads: Reads = Reads()) -> dict[str, pa.Table]:
    """One batch, cast to the schema and checked, as per-kind tables (of `reads.kinds`) without their all-null
    columns."""
    cols = {}
    for name, typ in FIELDS.items():
        if name in table.column_names:
            try:
                cols[name] = table.column(name).cast(typ)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TraceError(f"{where}: column {name!r} has type {table.schema.field(name).type}, "
                                 f"which does not cast to {typ} ({_first_line(exc)})") from None
    table = pa.table(cols)
    _check_values(where, table)
    kind_col = table.column(KIND).combine_chunks()
    codes = kind_col.indices.to_numpy()
    kinds = kind_col.dictionary.to_pylist()
    counts = np.bincount(codes, minlength=len(kinds))
    _check_kinds(where, kinds, counts)
    base = list(BASE)
    rest = table.drop_columns([KIND])
    present = [(k, kind, int(n)) for k, (kind, n) in enumerate(zip(kinds, counts)) if n]
    asked = FIELDS if reads.columns is None else reads.columns      # (columns all null in the file are not read)
    indices = kind_col.indices
    out = {}
    for k, kind, n in present:
        if reads.kinds is not None and kind not in reads.kinds:
            continue
        # a mask per kind, not a sort by kind: a filter copies only the kind's non-null columns, in their order
        mask = pc.equal(indices, pa.scalar(k, indices.type)) if len(present) > 1 else None
        rows = rest.select(base + [c for c in rest.column_names if c not in base and _has_values(rest[c], mask, n)])
        if mask is not None:
            rows = rows.filter(mask)
        if kind == Kind.STATE and STATE in asked and (
                STATE not in rows.column_names or rows.column(STATE).null_count):
            raise TraceError(f"{where}: state records with a null 'state' id; each needs its Paraver state id")
        if kind == Kind.TASK and schema.TASK in asked and (
                schema.TASK not in rows.column_names or rows.column(schema.TASK).null_count):
            missing = rows.column(schema.TASK).null_count if schema.TASK in rows.column_names else n
            raise TraceError(f"{where}: {missing} task record(s) without a 'task' id; each task needs its id "
                             "(unique on its rank), which its successors' 'preds' name")
        out[kind] = rows
    return out


def _has_values(col: pa.ChunkedArray, mask: pa.BooleanArray | None, n: int) -> bool:
    """Whether the column has a value in a row of the mask (None: any row); columns null for every record of a
    kind are left out of its table. Bitmaps only: an AND and a count of set bits, no pass over integers."""
    if col.null_count == 0 or col.null_count == len(col):
        return col.null_count == 0 and n > 0
    if mask is None:
        return True
    return pc.sum(pc.and_(pc.is_valid(col), mask)).as_py() > 0


def _empty_part() -> pa.Table:
    return pa.table({n: pa.array([], FIELDS[n]) for n in REQUIRED if n != KIND})


def _check_version(where, meta: dict) -> int:
    raw = meta.get(schema.META_VERSION)
    if raw is None:
        return schema.SCHEMA_VERSION   # a hand-made trace without metadata: read as the current version
    try:
        version = int(raw)
    except ValueError:
        version = None
    if version not in schema.READABLE_VERSIONS:
        shown = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        raise TraceError(f"{where}: trace schema version {shown} is not supported (this gpt2trace reads versions "
                         f"{', '.join(map(str, schema.READABLE_VERSIONS))}); analyze it with the gpt2trace release "
                         "that wrote it")
    return version


def _check_required(where, names) -> None:
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise TraceError(f"{where}: missing required column(s) {', '.join(missing)} "
                         f"(a trace needs {', '.join(REQUIRED)})")


def _check_values(where, table: pa.Table) -> None:
    for name in (KIND, RANK, THREAD, START_NS, END_NS):
        if table.column(name).null_count:
            raise TraceError(f"{where}: column {name!r} has null values; every record needs one")
    for name in (RANK, THREAD):
        lowest = pc.min(table.column(name)).as_py()
        if lowest is not None and lowest < 0:
            raise TraceError(f"{where}: column {name!r} has negative values (down to {lowest}); {name} ids are "
                             "0-based")
    bad = pc.sum(pc.less(table.column(END_NS), table.column(START_NS))).as_py() or 0
    if bad:
        raise TraceError(f"{where}: {bad} record(s) end before they start (end_ns < start_ns)")


def _check_kinds(where, kinds: list[str], counts: np.ndarray) -> None:
    """Every kind of the batch known, from its kind dictionary and per-kind counts (comparing the strings of
    every record took a tenth of the read)."""
    unknown = {k for k, n in zip(kinds, counts) if n} - set(Kind.ALL)
    if unknown:
        raise TraceError(f"{where}: unknown record kind(s) {', '.join(sorted(unknown))} "
                         f"(kinds are {', '.join(Kind.ALL)})")


def _communicators(where, meta: dict) -> dict | None:
    try:
        table = comms.from_metadata(meta)
    except (ValueError, KeyError, TypeError):
        raise TraceError(f"{where}: metadata {schema.META_COMMUNICATORS.decode()} is not a communicator table "
                         "(JSON {\"communicators\": [{\"id\", \"name\", \"ranks\"}, ...]})") from None
    return {i: comms.Communicator(c.id, _text(c.name), c.ranks) for i, c in table.items()} if table else None


def _notes(where, meta: dict) -> tuple[str, ...]:
    """The import's notes (a JSON list of lines), as lines without line breaks: they are printed as data."""
    raw = meta.get(schema.META_IMPORT_NOTES)
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except ValueError:
        raise TraceError(f"{where}: metadata {schema.META_IMPORT_NOTES.decode()} is not valid JSON") from None
    return tuple(" ".join(str(v).split()) for v in value) if isinstance(value, list) else ()


def _json(where, meta: dict, key: bytes) -> dict | None:
    raw = meta.get(key)
    if not raw:
        return None
    try:
        value = _clean(json.loads(raw))
    except ValueError:
        raise TraceError(f"{where}: metadata {key.decode()} is not valid JSON") from None
    return value if isinstance(value, dict) else None


def _clean(value):
    """JSON may escape lone surrogates (a file name that was not UTF-8 when the run recorded it): U+FFFD, so the
    metadata prints and writes as any text."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_text(k): _clean(v) for k, v in value.items()}
    return value


_SURROGATE = re.compile("[\ud800-\udfff]")


def _text(s: str) -> str:
    return _SURROGATE.sub("\ufffd", s)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def check_states(trace: Trace) -> list[str]:
    """Checks that each thread's state records do not overlap; returns warnings for gaps.

    Overlap is an error (TraceError naming rank.thread and the time); a gap is a warning, since analyses
    treat uncovered time as not Running.
    """
    states = trace.records(Kind.STATE)
    if states.num_rows == 0:
        return [f"{trace.name}: no state records; POP efficiencies and occupancy are not available"]
    rank, thread = states.column(RANK).to_numpy(), states.column(THREAD).to_numpy()
    start, end = states.column(START_NS).to_numpy(), states.column(END_NS).to_numpy()
    lane = lane_key(rank, thread, key_width(thread))
    same = lane[1:] == lane[:-1]
    if (lane[1:] < lane[:-1]).any() or (same & (start[1:] < start[:-1])).any():
        # sorted only when not in lane order already (per-thread buffers write them so: then no sort, no copies)
        order = lane_order(rank, thread, start)
        rank, thread, start, end, lane = rank[order], thread[order], start[order], end[order], lane[order]
        same = lane[1:] == lane[:-1]
    overlap = same & (start[1:] < end[:-1])
    if overlap.any():
        i = int(np.argmax(overlap))
        raise TraceError(f"{trace.name}: state records overlap on rank.thread {rank[i]}.{thread[i]} "
                         f"at {start[i + 1] / 1e9:.9f} s (a record starts before the previous one ends at "
                         f"{end[i] / 1e9:.9f} s); each thread's states must partition the time span")
    gaps = same & (start[1:] > end[:-1])
    if not gaps.any():
        return []
    i = int(np.argmax(gaps))
    return [f"{trace.name}: {int(gaps.sum())} gap(s) between state records, first on rank.thread "
            f"{rank[i]}.{thread[i]} at {end[i] / 1e9:.9f} s; gaps count as not Running"]
