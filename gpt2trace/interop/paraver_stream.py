"""A .prv of any length into our Parquet trace, rank by rank: the records and notes `paraver_import` gives, in
memory bounded by one rank's part of the trace rather than by the whole trace.

Three passes, because a .prv is ordered by time and our trace by rank:
  1. the body, chunk by chunk (`paraver_parse.chunks`), split by rank into raw int64 spill files: the rank's
     state lines, event lines and their (type, value) pairs, and the `3:` lines it sends or receives (a message
     between two ranks goes to both). Rows wait in memory per rank up to `spill_bytes` in all; past that, the
     biggest buffers are appended to their files, so the open files stay few whatever the number of ranks.
  2. rank by rank: the rank's rows back as a `Body`, its states and events made exactly as `paraver_import` makes
     them (`Events` deferred: the roots of collectives and the communicator bits of seq numbers need every rank),
     written to Arrow IPC files; on the way, the few facts those steps need are kept (the calls with a root flag,
     the communicators used, and a byte per `3:` record: whether it fell in a call).
  3. rank by rank: the comm records completed (`shift_seq`, `fill_roots`) and every record written.
Within a rank, records come in `paraver_import`'s order (states, comm, kernels, phases, tasks, counters), so the
trace equals the in-memory import's taken rank by rank.
"""
from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpt2trace.format.errors import TraceError
from gpt2trace.format.outputs import check_output
from gpt2trace.format.rank_order import RankOrderedWriter
from gpt2trace.format.schema import FIELDS, PEER, RANK, SEQ, arrow_schema
from gpt2trace.interop import paraver_format as F
from gpt2trace.interop.paraver_events import (
    COLLECTIVE_COLUMNS,
    Events,
    fill_roots,
    header_communicators,
    root_table,
    shift_seq,
)
from gpt2trace.interop.paraver_import import no_records, sidecars, states, trace_metadata
from gpt2trace.interop.paraver_parse import Body, Header, chunks
from gpt2trace.interop.paraver_records import Lanes, Notes
from gpt2trace.interop.source import no_progress

SPILL_BYTES = 64 << 20
CHUNK_BYTES = 8 << 20          # of text parsed at once: its arrays and their copies by rank are ~10x as large
ROW_GROUP = 1 << 17            # records per batch of a rank's IPC files and per row group of the trace
# Raw rows per rank: (name, width): the parse's fields, then the line number (and a 3: record's index in the file)
STATE_ROWS, EVENT_ROWS, PAIR_ROWS, COMM_ROWS = ("states", 8), ("events", 6), ("pairs", 3), ("comms", 16)


@contextlib.contextmanager
def streamed(prv: str | Path, tmpdir: str | Path | None = None) -> Iterator[Path]:
    """`prv` imported into a rank-ordered Parquet trace in a temporary folder (in `tmpdir`, else the system's),
    removed on leaving: a trace too big to import whole can then be read group of ranks by group of ranks."""
    with tempfile.TemporaryDirectory(prefix="gpt2trace-analyze-", dir=tmpdir) as tmp:
        out = Path(tmp) / "imported.parquet"
        import_paraver_to(prv, out, tmp)
        yield out


@dataclass(frozen=True)
class StreamedImport:
    path: Path                          # the Parquet trace written
    records: int
    header: Header
    notes: tuple[str, ...]


def import_paraver_to(prv: str | Path, out: str | Path, tmpdir: str | Path | None = None,
                      spill_bytes: int = SPILL_BYTES, progress=no_progress) -> StreamedImport:
    """Imports `prv` (with its .pcf, .row, .gpt2trace.json) into the Parquet trace `out`. TraceError for a trace it
    cannot import (as `import_paraver`), OutputError when `out` is one of the inputs or cannot be written (then
    nothing is left under its name). Spill files go to a temporary folder in `tmpdir` and are removed. `progress`:
    see `source.no_progress`."""
    prv = Path(prv)
    if not prv.is_file():
        raise TraceError(f"{prv}: no such trace file")
    if not prv.name.endswith((".prv", ".prv.gz")):
        raise TraceError(f"{prv}: not a Paraver trace (expected a .prv or .prv.gz file)")
    out = check_output(out, inputs=[Path(p) for p in F.file_names(str(prv))])
    notes = Notes()
    with tempfile.TemporaryDirectory(prefix="gpt2trace-prv-", dir=tmpdir) as tmp:
        spill = _Spill(Path(tmp), spill_bytes)
        with progress(f"reading {prv.name}", None, "lines") as advance:
            header, lanes, n_comms = _partition(prv, spill, advance)
        side = sidecars(prv, header, notes)
        comm_ids, comm_table = header_communicators(header, lanes)
        ranks = len(lanes.nthreads)
        kept = _Collectives(n_comms)
        parts = []
        with progress("importing ranks", ranks, "ranks") as advance:
            for rank in range(ranks):
                # in a function: the rank's arrays are freed before the next rank's are loaded
                parts.append(_import_rank(prv, header, lanes, comm_ids, side.pcf, spill, rank, kept, notes))
                advance(1)
        notes.add("{n} message(s) (3: records) fall in no point-to-point MPI call of their sender or receiver",
                  kept.unattached())
        total = sum(n for files in parts for _, n in files)
        if not total:
            raise no_records(prv)
        with progress(f"writing {out.name}", total) as advance:
            records = _write(out, trace_metadata(side.meta, comm_table), parts, kept, advance)
    return StreamedImport(out, records, header, notes.lines())


# --- pass 1: the body split by rank ----------------------------------------------------------------------------

def _partition(prv: Path, spill: _Spill, advance) -> tuple[Header, Lanes, int]:
    """Spills every line to its rank; returns the header, its lanes, and the number of 3: records."""
    lanes, n_comms, done = None, 0, 0
    for header, part, lines in chunks(prv, CHUNK_BYTES):
        if lanes is None:
            lanes, done = Lanes(header), header.lines          # progress counts body lines
        st, st_line, ev, ev_line, pair_rec, pair_type, pair_value, cm, cm_line = part
        if len(st):
            lane = lanes.lane(prv, st, st_line, "state record")
            spill.add(lanes.rank[lane], STATE_ROWS, np.column_stack([st, st_line]))
        if len(ev):
            ev_rank = lanes.rank[lanes.lane(prv, ev, ev_line, "event record")]
            local = spill.add(ev_rank, EVENT_ROWS, np.column_stack([ev, ev_line]))
            spill.add(ev_rank[pair_rec], PAIR_ROWS, np.column_stack([local[pair_rec], pair_type, pair_value]))
        if len(cm):
            s_rank = lanes.rank[lanes.lane(prv, cm, cm_line, "sender", 0)]
            r_rank = lanes.rank[lanes.lane(prv, cm, cm_line, "receiver", 6)]
            rows = np.column_stack([cm, cm_line, np.arange(n_comms, n_comms + len(cm))])
            other = np.flatnonzero(r_rank != s_rank)
            # a message between two ranks goes to both; each rank's rows stay in file order (spill.add is stable)
            both = np.concatenate([np.arange(len(cm)), other])
            order = np.argsort(both, kind="stable")
            spill.add(np.concatenate([s_rank, r_rank[other]])[order], COMM_ROWS, rows[both[order]])
            n_comms += len(cm)
        advance(lines - done)
        done = lines
    return header, lanes, n_comms


class _Spill:
    """Raw int64 rows per (rank, part) in files `<rank>.<part>`, appended as they come; buffered in memory up to
    `limit` bytes in all (the biggest buffers are written first when over), so a file is only open to append."""

    def __init__(self, folder: Path, limit: int):
        self.folder, self.limit = folder, limit
        self._buf: dict[tuple[int, str], list[np.ndarray]] = {}
        self._bytes: dict[tuple[int, str], int] = {}
        self._count: dict[tuple[int, str], int] = {}       # rows so far: a rank's event rows are numbered
        self._total = 0

    def add(self, rank: np.ndarray, part: tuple[str, int], rows: np.ndarray) -> np.ndarray:
        """Appends rows to their ranks' buffers (file order kept within a rank); returns each row's number among
        its rank's rows of this part."""
        name, width = part
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1, width)
        if not len(rank):
            return np.empty(0, np.int64)
        # NumPy sorts 16-bit integers by radix (stable and ~10x faster than int64), and np.take gathers rows
        # ~3x faster than fancy indexing: this is pass 1's hot loop
        order = np.argsort(rank.astype(np.int16) if rank.max() < 1 << 15 else rank, kind="stable")
        grouped = np.take(rows, order, axis=0)
        by_rank = rank[order]
        starts = np.flatnonzero(np.r_[True, by_rank[1:] != by_rank[:-1]])
        ends = np.r_[starts[1:], len(by_rank)]
        local_sorted = np.arange(len(by_rank)) - np.repeat(starts, ends - starts)      # the row's place in its run
        for r, a, b in zip(by_rank[starts].tolist(), starts.tolist(), ends.tolist()):
            key = (r, name)
            base = self._count.get(key, 0)
            local_sorted[a:b] += base
            self._count[key] = base + b - a
            # a copy unless it is the whole: a view would keep every rank's rows alive until the last is written
            chunk = grouped if b - a == len(grouped) else grouped[a:b].copy()
            self._buf.setdefault(key, []).append(chunk)
            self._bytes[key] = self._bytes.get(key, 0) + chunk.nbytes
            self._total += chunk.nbytes
        local = np.empty(len(rank), np.int64)
        local[order] = local_sorted
        while self._total > self.limit:
            self._flush(max(self._bytes, key=self._bytes.get))
        return local

    def _flush(self, key: tuple[int, str]) -> None:
        path = self.folder / f"{key[0]}.{key[1]}"
        try:
            with open(path, "ab") as fh:
                for chunk in self._buf.pop(key, []):
                    chunk.tofile(fh)
        except OSError as exc:          # a full disk: say which file
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None
        self._total -= self._bytes.pop(key, 0)

    def rows(self, rank: int, part: tuple[str, int]) -> np.ndarray:
        name, width = part
        key = (rank, name)
        path = self.folder / f"{rank}.{name}"
        stored = [np.fromfile(path, np.int64).reshape(-1, width)] if path.exists() else []
        got = stored + self._buf.get(key, [])
        return np.concatenate(got) if got else np.empty((0, width), np.int64)

    def body(self, rank: int) -> tuple[Body, np.ndarray]:
        """The rank's rows as a `Body`, and the index in the file of each of its 3: records."""
        st, ev, pairs, cm = (self.rows(rank, p) for p in (STATE_ROWS, EVENT_ROWS, PAIR_ROWS, COMM_ROWS))
        body = Body(st[:, :7], st[:, 7], ev[:, :5], ev[:, 5], pairs[:, 0], pairs[:, 1], pairs[:, 2], cm[:, :14],
                    cm[:, 14], lines=0)
        return body, cm[:, 15]

    def drop(self, rank: int) -> None:
        for name, _ in (STATE_ROWS, EVENT_ROWS, PAIR_ROWS, COMM_ROWS):
            key = (rank, name)
            self._total -= self._bytes.pop(key, 0)
            self._buf.pop(key, None)
            (self.folder / f"{rank}.{name}").unlink(missing_ok=True)


# --- pass 2: each rank's records, and what the collectives need from every rank --------------------------------

def _import_rank(prv, header, lanes, comm_ids, pcf, spill: _Spill, rank: int, kept: _Collectives,
                 notes: Notes) -> list[tuple[Path, int]]:
    body, comm_index = spill.body(rank)
    spill.drop(rank)
    events = Events(prv, header, body, lanes, comm_ids, deferred=True)
    tables = [states(prv, header, body, lanes, notes), *events.records(pcf, notes)]
    kept.add(comm_index[events.attached], tables)
    return _save(spill.folder / f"rank{rank}", tables)


class _Collectives:
    """Kept from every rank: the calls with Extrae's root flag (rank, communicator, seq before `shift_seq`, whether
    computed), the communicators the collectives use, and which 3: records fell in a call."""

    def __init__(self, n_comms: int):
        self.attached = np.zeros(n_comms, bool)
        self.flagged: list[tuple[np.ndarray, ...]] = []
        self.comms: set[int] = set()

    def add(self, attached: np.ndarray, tables: list[pa.Table]) -> None:
        """One rank's: the 3: records (indices in the file) that fell in one of its calls, its tables."""
        self.attached[attached] = True
        for t in tables:
            if COLLECTIVE_COLUMNS[0] not in t.column_names:
                continue
            cid = t.column(COLLECTIVE_COLUMNS[0]).to_numpy()
            self.comms.update(np.unique(cid[cid >= 0]).tolist())
            flag = t.column(COLLECTIVE_COLUMNS[2]).to_numpy(zero_copy_only=False)
            if flag.any():
                seq = t.column(SEQ).to_numpy(zero_copy_only=False)
                computed = t.column(COLLECTIVE_COLUMNS[1]).to_numpy(zero_copy_only=False)
                self.flagged.append((t.column(RANK).to_numpy()[flag].astype(np.int64), cid[flag],
                                     seq[flag].astype(np.int64), computed[flag]))

    def unattached(self) -> int:
        return int((~self.attached).sum())

    def roots(self) -> tuple[np.ndarray, np.ndarray]:
        if not self.flagged:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        rank, cid, seq, computed = (np.concatenate(c) for c in zip(*self.flagged))
        return root_table(rank, cid, shift_seq(seq, computed, cid, self.several))

    @property
    def several(self) -> bool:
        return len(self.comms) > 1

    def finish(self, table: pa.Table, keys: np.ndarray, roots: np.ndarray) -> pa.Table:
        """A deferred comm table completed: seq with the communicator bits, peers of rooted collectives."""
        cid = table.column(COLLECTIVE_COLUMNS[0]).to_numpy()
        coll = cid >= 0
        cid = np.maximum(cid, 0)
        seq_col, peer_col = table.column(SEQ), table.column(PEER)
        seq_ok = seq_col.is_valid().to_numpy(zero_copy_only=False)
        seq = seq_col.fill_null(0).to_numpy().astype(np.int64)
        seq = shift_seq(seq, table.column(COLLECTIVE_COLUMNS[1]).to_numpy(zero_copy_only=False), cid, self.several)
        peer = (peer_col.fill_null(0).to_numpy().astype(np.int64), peer_col.is_valid().to_numpy(zero_copy_only=False))
        pv, pok = fill_roots(keys, roots, coll, cid, (seq, seq_ok), peer)
        table = table.drop_columns(list(COLLECTIVE_COLUMNS))
        table = table.set_column(table.column_names.index(SEQ), SEQ, pa.array(seq, FIELDS[SEQ], mask=~seq_ok))
        return table.set_column(table.column_names.index(PEER), PEER, pa.array(pv, FIELDS[PEER], mask=~pok))


# --- pass 2 and 3: the records of each rank on disk, then into the trace ------------------------------------------

def _save(stem: Path, tables: list[pa.Table]) -> list[tuple[Path, int]]:
    """Each non-empty table of a rank to its own Arrow IPC file: [(path, rows)], in order."""
    files = []
    for k, table in enumerate(t for t in tables if t.num_rows):
        path = stem.with_name(f"{stem.name}.{k}.arrow")
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=ROW_GROUP)
        files.append((path, table.num_rows))
    return files


def _tables(files: list[tuple[Path, int]]) -> Iterator[pa.Table]:
    for path, _ in files:
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield pa.Table.from_batches([reader.get_batch(i)])
        path.unlink()


def _write(out: Path, metadata: dict, parts: list, kept: _Collectives, advance) -> int:
    keys, roots = kept.roots()
    # row groups of ROW_GROUP records: the writer holds one while it fills, so memory stays the same however many
    # records a rank has (the layout allows several groups per rank)
    with RankOrderedWriter(out, arrow_schema().with_metadata(metadata), row_group=ROW_GROUP) as writer:
        for files in parts:
            for table in _tables(files):
                if COLLECTIVE_COLUMNS[0] in table.column_names:
                    table = kept.finish(table, keys, roots)
                writer.write(table)
                advance(table.num_rows)
    return writer.records
