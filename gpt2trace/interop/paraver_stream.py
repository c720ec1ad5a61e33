"""A .prv of any length into our Parquet trace, rank by rank: the records and notes `paraver_import` gives, in
memory that does not grow with the trace.

Three passes, because a .prv is ordered by time and our trace by rank:
  1. the body, chunk by chunk (`paraver_parse.chunks`), split by rank into raw int64 spill files
     (`paraver_spill`): the rank's state lines, event lines and their (type, value) pairs, and the `3:` lines it
     sends or receives (a message between two ranks goes to both). Rows wait in memory per rank up to
     `spill_bytes` in all; past that, the biggest buffers are appended to their files, so the open files stay few
     whatever the number of ranks.
  2. rank by rank: the rank's rows back, its states and events made exactly as `paraver_import` makes them
     (`Events` deferred: the roots of collectives and the communicator bits of seq numbers need every rank),
     written to Arrow IPC files; a rank of more than `window_lines` lines a time window at a time
     (`paraver_windows`), else whole. On the way, the few facts the deferred steps need are kept (the calls with
     a root flag, the communicators used, and per `3:` record whether it fell in a call).
  3. rank by rank: the comm records completed (`shift_seq`, `fill_roots`) and every record written.
Within a rank, records come in `paraver_import`'s order (states, comm, kernels, phases, tasks, counters), so the
trace equals the in-memory import's taken rank by rank.
"""
from __future__ import annotations

import contextlib
import ctypes
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
    message_lanes,
    root_table,
    shift_seq,
)
from gpt2trace.interop.paraver_import import format_notes, no_records, sidecars, states, trace_metadata
from gpt2trace.interop.paraver_parse import Header, chunks, global_comms
from gpt2trace.interop.paraver_records import Lanes, Notes
from gpt2trace.interop.paraver_spill import COMM_ROWS, EVENT_ROWS, PAIR_ROWS, ROW_GROUP, STATE_ROWS, Spill
from gpt2trace.interop.paraver_windows import WINDOW_LINES, KindFile, NotInTimeOrder, import_rank
from gpt2trace.interop.source import no_progress

SPILL_BYTES = 64 << 20
CHUNK_BYTES = 8 << 20          # of text parsed at once: its arrays and their copies by rank are ~10x as large


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
                      spill_bytes: int = SPILL_BYTES, progress=no_progress,
                      window_lines: int = WINDOW_LINES) -> StreamedImport:
    """Imports `prv` (with its .pcf, .row, .gpt2trace.json) into the Parquet trace `out`. TraceError for a trace it
    cannot import (as `import_paraver`), OutputError when `out` is one of the inputs or cannot be written (then
    nothing is left under its name). Spill files go to a temporary folder in `tmpdir` and are removed. `progress`:
    see `source.no_progress`."""
    if window_lines < 1:
        raise ValueError(f"window_lines must be at least 1, got {window_lines}")
    prv = Path(prv)
    if not prv.is_file():
        raise TraceError(f"{prv}: no such trace file")
    if not prv.name.endswith((".prv", ".prv.gz")):
        raise TraceError(f"{prv}: not a Paraver trace (expected a .prv or .prv.gz file)")
    out = check_output(out, inputs=[Path(p) for p in F.file_names(str(prv))])
    notes = Notes()
    with tempfile.TemporaryDirectory(prefix="gpt2trace-prv-", dir=tmpdir) as tmp:
        spill = Spill(Path(tmp), spill_bytes)
        with progress(f"reading {prv.name}", None, "lines") as advance:
            header, lanes, n_comms, skipped = _partition(prv, spill, advance)
        format_notes(header, skipped, notes)
        side = sidecars(prv, header, notes)
        comm_ids, comm_table = header_communicators(header, lanes)
        ranks = len(lanes.nthreads)
        kept = _Collectives(n_comms)
        parts = []
        with progress("importing ranks", ranks, "ranks") as advance:
            for rank in range(ranks):
                # in a function: the rank's arrays are freed before the next rank's are loaded
                parts.append(_import_rank(prv, header, lanes, comm_ids, side.pcf, spill, rank, kept, notes,
                                          window_lines))
                release_memory()
                advance(1)
        notes.add("{n} message(s) (3: records) fall in no point-to-point MPI call of their sender or receiver",
                  kept.unattached())
        total = sum(n for files in parts for _, n in files)
        if not total:
            raise no_records(prv)
        with progress(f"writing {out.name}", total) as advance:
            records = _write(out, trace_metadata(side.meta, comm_table, notes.lines()), parts, kept, advance)
    return StreamedImport(out, records, header, notes.lines())


def release_memory() -> None:
    """Gives the memory freed by a rank's arrays back to the system: glibc's malloc keeps freed heap memory for
    reuse, and after a rank's big arrays the heap is fragmented, so the process's footprint would creep up with
    the number of ranks and windows done rather than follow what is live (as Dask's workers, we trim)."""
    pa.default_memory_pool().release_unused()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None     # glibc only


_LIBC = _libc()


# --- pass 1: the body split by rank ----------------------------------------------------------------------------

def _partition(prv: Path, spill: Spill, advance) -> tuple[Header, Lanes, int, int]:
    """Spills every line to its rank; returns the header, its lanes, the number of 3: records and of the 4:
    records skipped."""
    lanes, n_comms, done, skipped = None, 0, 0, 0
    for part_no, (header, part, lines) in enumerate(chunks(prv, CHUNK_BYTES)):
        if lanes is None:
            lanes, done = Lanes(header), header.lines          # progress counts body lines
        st, st_line, ev, ev_line, pair_rec, pair_type, pair_value, cm, cm_line = part[:9]
        skipped += global_comms(part)
        if len(st):
            lane = lanes.lane(prv, st, st_line, "state record")
            spill.add(lanes.rank[lane], STATE_ROWS, np.column_stack([st, st_line]))
        if len(ev):
            ev_rank = lanes.rank[lanes.lane(prv, ev, ev_line, "event record")]
            local = spill.add(ev_rank, EVENT_ROWS, np.column_stack([ev, ev_line]))
            spill.add(ev_rank[pair_rec], PAIR_ROWS, np.column_stack([local[pair_rec], pair_type, pair_value]))
        if len(cm):
            s_rank, r_rank = (lanes.rank[lane] for lane in message_lanes(prv, header, lanes, cm, cm_line))
            rows = np.column_stack([cm, cm_line, np.arange(n_comms, n_comms + len(cm))])
            other = np.flatnonzero(r_rank != s_rank)
            # a message between two ranks goes to both; each rank's rows stay in file order (spill.add is stable)
            both = np.concatenate([np.arange(len(cm)), other])
            order = np.argsort(both, kind="stable")
            spill.add(np.concatenate([s_rank, r_rank[other]])[order], COMM_ROWS, rows[both[order]])
            n_comms += len(cm)
        advance(lines - done)
        done = lines
        if part_no % 8 == 7:
            release_memory()
    return header, lanes, n_comms, skipped


# --- pass 2: each rank's records, and what the collectives need from every rank --------------------------------

def _import_rank(prv, header, lanes, comm_ids, pcf, spill: Spill, rank: int, kept: _Collectives,
                 notes: Notes, window_lines: int) -> list[tuple[Path | KindFile, int]]:
    if spill.lines(rank) > window_lines:
        try:
            return import_rank(prv, header, lanes, comm_ids, pcf, spill, rank, kept, notes, _save, window_lines)
        except NotInTimeOrder:
            pass
    body, comm_index = spill.body(rank)
    spill.drop(rank)
    events = Events(prv, header, body, lanes, comm_ids, deferred=True, message_index=comm_index)
    tables = [states(prv, header, body, lanes, notes), *events.records(pcf, notes)]
    kept.add(events.attached_index, tables)
    return _save(spill.folder / f"rank{rank}", tables)


class _Collectives:
    """Kept from every rank: the calls with Extrae's root flag (rank, communicator, seq before `shift_seq`, whether
    computed), the communicators the collectives use, and which 3: records fell in a call."""

    def __init__(self, n_comms: int):
        self.attached = np.zeros(n_comms, bool)
        self.received = np.zeros(n_comms, bool)      # whether the message's logical receive fell in a call
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


def _tables(files: list[tuple[Path | KindFile, int]]) -> Iterator[pa.Table]:
    for path, _ in files:
        if isinstance(path, KindFile):
            yield from path.tables()
            continue
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
            release_memory()
    return writer.records
