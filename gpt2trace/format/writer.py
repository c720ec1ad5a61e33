"""Writing traces: small raw parts while the run goes, merged into one Parquet file at the end.

Why parts: a Parquet file is only readable once its footer is written. The tracer closes a part every so often
(gpt2trace.record.tracer decides when, always at a step boundary), so a run killed at any moment leaves parts
holding whole steps, and `gpt2trace recover` (`recover`) merges them into the final file. A part holds the raw
events of its window (gpt2trace.format.parts: kernel blocks, regions, phases, counters, MPI calls); the merge
builds the thread states from them, part by part, rank by rank: the merged file is in the rank-ordered layout
(gpt2trace.format.rank_order), so a rank's records can be read without the others. Each part, and the merged
file, is written under a hidden temporary name (a leading dot: pyarrow's dataset discovery skips it) and renamed,
so a kill or a full disk during a write leaves no half-written file where a reader looks.

The parts: a part is written during the run, on the training loop's thread, and lives only until the merge. The
tracer writes a window's raw buffers as they are, uncompressed, with one system call (a .raw file,
gpt2trace.format.raw_part); the merge decodes them into records and pays the full encoding (zstd, dictionaries,
delta timestamps, statistics) once. Uncompressed because the loop waits for the write: on the `small` model's 1 s
windows (~0.5 MB) LZ4 took ~1.2 ms to save ~0.13 ms of writing; the parts, living only until the merge, are
twice the size (~0.6 MB/s of parts on the demo, against ~0.3 MB/s of merged trace). Parts of earlier versions
(Parquet with the states in them; Arrow IPC files of raw buffers, or of raw events in the part layout of
gpt2trace.format.parts, which `PartWriter.write` still writes for tests and tools; LZ4-compressed; or without the
columns added since) are still read by the merge and `recover`.

Files are opened by Python and handed to pyarrow as file objects: pyarrow's own path handling cannot encode
file names that are not UTF-8 (which Linux allows).
"""
from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from gpt2trace.format import communicators as comms
from gpt2trace.format import parts as P
from gpt2trace.format import raw_part, raw_window
from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.rank_order import MERGED_ROW_GROUP, RankOrderedWriter, write_options  # noqa: F401

PARTS_SUFFIX = ".parts"
PART_SUFFIX = ".arrow"
_LEGACY_PART_SUFFIX = ".parquet"   # the parts of earlier versions
_PART_SUFFIXES = (raw_part.SUFFIX, PART_SUFFIX, _LEGACY_PART_SUFFIX)
# On the writing thread itself (no pool threads competing with the kernels' threads); no compression (above).
_PART_OPTIONS = ipc.IpcWriteOptions(use_threads=False)


def parts_dir(trace_path: Path) -> Path:
    return Path(str(trace_path) + PARTS_SUFFIX)


class PartWriter:
    """One rank's parts, <trace>.parts/rank00000/00000012.raw (gpt2trace.format.raw_part: what the tracer writes) or
    .arrow (Arrow IPC files: records in the part layout), in flush order. The folders are made with the first
    part, so a run that stops before writing anything leaves nothing behind."""

    def __init__(self, trace_path: Path, rank: int):
        self.dir = parts_dir(trace_path) / f"rank{rank:05d}"
        self.seq = 0
        self.bytes = 0
        self._buffer = pa.allocate_buffer(0)    # the last table's encoding: reused, grown when a part needs more

    def write_raw(self, buffers: list) -> Path:
        """Write a raw window's file (`raw_part.buffers`) as the next part, with one system call for all of it."""
        return self._put(f"{self.seq:08d}{raw_part.SUFFIX}", buffers)

    def write(self, table: pa.Table) -> Path:
        """Write `table` (in a part's layout, gpt2trace.format.parts, with its schema's metadata) as the next part.
        Encoded in memory first, into memory kept from part to part (a new buffer per part cost page faults)."""
        try:
            data = self._buffer.slice(0, _encoded(pa.FixedSizeBufferWriter(self._buffer), table).tell())
        except OSError:                   # out of the buffer's bounds: the only I/O error of a write to memory
            size = _encoded(pa.MockOutputStream(), table).size()
            self._buffer = pa.allocate_buffer(size + size // 2)
            data = self._buffer.slice(0, _encoded(pa.FixedSizeBufferWriter(self._buffer), table).tell())
        return self._put(f"{self.seq:08d}{PART_SUFFIX}", [data])

    def _put(self, name: str, buffers: list) -> Path:
        """The next part, written under a temporary name and renamed; an OSError (a full disk) becomes an
        OutputError and leaves nothing."""
        final = self.dir / name
        tmp = self.dir / f".{name}.tmp"
        try:
            if self.seq == 0:
                self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                size = _write_all(fd, buffers)
            finally:
                os.close(fd)
            os.replace(tmp, final)
        except OSError as exc:
            _remove(tmp)
            raise OutputError(f"cannot write the trace part {final}: {exc.strerror or exc}") from None
        self.bytes += size
        self.seq += 1
        return final


def _write_all(fd: int, buffers: list) -> int:
    """Write `buffers` one after the other; the bytes written. One os.writev, and more calls only after a short
    write (a signal, a nearly full disk)."""
    views = [memoryview(b).cast("B") for b in buffers]
    total = sum(v.nbytes for v in views)
    done = os.writev(fd, views)
    if done < total:
        rest = memoryview(b"".join(views))[done:]
        while rest:
            rest = rest[os.write(fd, rest):]
    return total


def _encoded(sink, table: pa.Table):
    """`sink` with `table` written to it as a part (an Arrow IPC file)."""
    with ipc.new_file(sink, table.schema, options=_PART_OPTIONS) as writer:
        writer.write_table(table)
    return sink


def part_files(parts: Path) -> list[Path]:
    """Every rank's finished parts, rank by rank in flush order (temporaries of a killed write excluded)."""
    return sorted(p for suffix in _PART_SUFFIXES for p in parts.glob(f"rank*/[0-9]*{suffix}"))


def clear_unfinished(trace_path: Path) -> bool:
    """Remove <trace>.parts when it holds no finished part (a run that stopped before its first part: empty
    rank folders, a temporary cut off by a kill), so it cannot block the next run. True when it was removed."""
    parts = parts_dir(trace_path)
    if not parts.is_dir() or part_files(parts):
        return False
    shutil.rmtree(parts)
    return True


@dataclass(frozen=True)
class Merged:
    """What a merge wrote: the trace, its record count and the steps it holds (from the counter records)."""
    path: Path
    records: int
    steps: tuple[int, int] | None       # first and last step, None when no step is complete
    ranks: int


def merge_parts(trace_path: Path, extra_metadata: dict[bytes, bytes] | None = None,
                keep_parts: bool = False, drift: dict[int, tuple[float, int]] | None = None) -> Merged:
    """Merge every rank's parts into `trace_path` (rank by rank, in flush order).

    Written under a temporary name and renamed: on any failure (a full disk, a signal) `trace_path` is left as it
    was, the temporary is removed and the parts stay; an OSError becomes an OutputError naming the file.
    `drift[rank] = (slope, t_ref)` corrects that rank's times linearly for clock drift against rank 0
    (t -> t - slope * (t - t_ref), see gpt2trace.record.clocksync); the same monotonic map for every record of a rank
    keeps its states a partition."""
    trace_path = Path(trace_path)
    parts = parts_dir(trace_path)
    files = part_files(parts)
    if not files:
        raise TraceError(f"{parts}: no trace parts to merge; was the run started with tracing on?")
    meta = P.trace_metadata(_read_metadata(files[0]))
    meta.pop(S.META_VERSION, None)     # the merged file has the current columns, whatever version wrote the parts
    meta.pop(raw_window.META_RAW, None)
    meta.update(_communicators(files))
    meta.update(extra_metadata or {})
    schema = S.arrow_schema(meta)
    steps, ranks = _StepRange(), set()
    try:
        with RankOrderedWriter(trace_path, schema) as writer:
            pending: list[pa.Table] = []
            pending_rows = 0
            decoders: dict[Path, raw_window.RankDecoder] = {}     # a rank's raw parts are decoded in order
            for f in files:
                if pending and f.parent.name not in ranks:           # a new rank: the last one's records first
                    _write_group(writer, pending)
                    pending, pending_rows = [], 0
                # the states are built on the times as recorded, then corrected with every other record
                decoder = decoders.setdefault(f.parent, raw_window.RankDecoder())
                t = _corrected(_current_columns(_read_records(f, decoder), schema), drift)
                steps.add(t)
                ranks.add(f.parent.name)
                pending.append(t)
                pending_rows += t.num_rows
                if pending_rows >= MERGED_ROW_GROUP:
                    _write_group(writer, pending)
                    pending, pending_rows = [], 0
            if pending:
                _write_group(writer, pending)
    except OutputError as exc:
        raise OutputError(f"{exc}; its parts are kept in {parts}") from None
    if not keep_parts:
        shutil.rmtree(parts)
    return Merged(trace_path, writer.records, steps.range(), len(ranks))


def steps_phrase(steps: tuple[int, int] | None) -> str:
    """`steps 0-6`, `step 0` or `no complete step`: the steps a trace holds, as messages say it."""
    if steps is None:
        return "no complete step"
    a, b = steps
    return f"step {a}" if a == b else f"steps {a}-{b}"


class _StepRange:
    """The steps a trace holds: those with counter records (written once per step, at its end)."""

    def __init__(self):
        self.lo, self.hi = None, None

    def add(self, table: pa.Table) -> None:
        step = pc.filter(table.column(S.STEP), pc.equal(table.column(S.KIND), S.Kind.COUNTER))
        if len(step) == 0 or step.null_count == len(step):
            return
        lo, hi = pc.min_max(step).values()
        self.lo = lo.as_py() if self.lo is None else min(self.lo, lo.as_py())
        self.hi = hi.as_py() if self.hi is None else max(self.hi, hi.as_py())

    def range(self) -> tuple[int, int] | None:
        return None if self.lo is None else (self.lo, self.hi)


def _read_metadata(path: Path) -> dict[bytes, bytes]:
    """A part's metadata (its schema's, for an Arrow or Parquet part)."""
    with _unreadable_part(path):
        if path.suffix == raw_part.SUFFIX:
            return raw_part.read_metadata(path)
        with open(path, "rb") as f:
            schema = pq.read_schema(f) if path.suffix == _LEGACY_PART_SUFFIX else ipc.open_file(f).schema
        return schema.metadata or {}


def _read_records(path: Path, decoder: raw_window.RankDecoder) -> pa.Table:
    """A part's trace records (decoded when raw, its states built: gpt2trace.format.parts.complete)."""
    with _unreadable_part(path):
        if path.suffix == raw_part.SUFFIX:
            return P.complete(raw_part.decoded(path, decoder))
        with open(path, "rb") as f:
            table = pq.read_table(f) if path.suffix == _LEGACY_PART_SUFFIX else ipc.open_file(f).read_all()
        if raw_window.is_raw(table.schema):
            table = decoder.part(table)
        return P.complete(table)


@contextlib.contextmanager
def _unreadable_part(path: Path):
    """A part we did not write (parts are renamed into place whole): a TraceError naming it, not a traceback."""
    try:
        yield
    except (pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TraceError(f"{path}: not a readable trace part ({reason}); move it out of the folder to merge "
                         "the others") from None


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _communicators(files: list[Path]) -> dict[bytes, bytes]:
    """Every rank's communicators (each rank lists those it belongs to; its last part lists them all)."""
    last = {f.parent: f for f in files}
    try:
        table = comms.merged(comms.from_metadata(_read_metadata(f)) for f in last.values())
    except (ValueError, KeyError, TypeError) as exc:
        raise TraceError(f"{files[0].parent.parent}: the parts disagree about their communicators ({exc})") from None
    return comms.to_metadata(table.values()) if table else {}


def _current_columns(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """A part in `schema`'s layout: a part an earlier version wrote lacks the columns added since (`communicator`
    before version 2, `tag` before 3), which are null in it."""
    if table.schema.names != schema.names:
        table = pa.table({f.name: table.column(f.name) if f.name in table.column_names
                          else pa.nulls(table.num_rows, f.type) for f in schema})
    return table.cast(schema)


def _corrected(table: pa.Table, drift: dict[int, tuple[float, int]] | None) -> pa.Table:
    if not drift or table.num_rows == 0:
        return table
    rank = table.column(S.RANK)[0].as_py()
    slope, t_ref = drift.get(rank, (0.0, 0))
    if slope == 0.0:
        return table
    for col in (S.START_NS, S.END_NS):
        t = table.column(col).to_numpy()
        # t_ref (the start estimate) precedes the origin, so a rank whose clock runs fast would get its first
        # nanoseconds before 0, which the trace (and Paraver) cannot hold: they stay at 0, far inside the clock's
        # error bound. Clamping is monotonic, so the states still partition the span.
        fixed = np.maximum(t - np.rint(slope * (t - t_ref)).astype(np.int64), 0)
        table = table.set_column(table.schema.get_field_index(col), col, pa.array(fixed, type=pa.int64()))
    return table


def _write_group(writer: RankOrderedWriter, tables: list[pa.Table]) -> None:
    """Parts of one rank, in (start) order. Parts are grouped by kind (cheapest to build during the run); in time
    order the timestamp deltas are small and the file ~15% smaller (4.7 instead of 5.5 bytes per record on the
    `small` model)."""
    table = pa.concat_tables(tables).unify_dictionaries().combine_chunks()
    writer.write(table.take(pc.sort_indices(table, sort_keys=[(S.RANK, "ascending"), (S.START_NS, "ascending")])))


def recover(trace: Path) -> Merged:
    """Merge the parts a killed run left in <trace>.parts into `trace`. `trace` may also name the .parts
    directory itself. Every part holds whole steps, so the result does too. A TraceError says why there is
    nothing to recover: no parts folder (and whether `trace` is a complete trace), or a folder without a
    finished part (the run stopped before writing its first one)."""
    trace = Path(trace)
    if trace.name.endswith(PARTS_SUFFIX) and trace.is_dir():
        trace = trace.with_name(trace.name[: -len(PARTS_SUFFIX)])
    parts = parts_dir(trace)
    if not parts.is_dir():
        raise TraceError(f"{parts}: no parts directory to recover {trace} from; {_what_is(trace)}")
    if not part_files(parts):
        raise TraceError(f"{parts} holds no finished part: the run stopped before it wrote its first one, so there "
                         "is nothing to recover (the next run with this --trace replaces the folder)")
    return merge_parts(trace)


def _what_is(trace: Path) -> str:
    """What `trace` is, for a recover that has no parts: a complete trace, something else, or nothing."""
    if not trace.exists():
        return "check the path (the run's --trace)"
    if not trace.is_file():
        return f"{trace} is not a file"
    try:
        with open(trace, "rb") as f:
            meta = pq.ParquetFile(f).metadata
            version = (meta.schema.to_arrow_schema().metadata or {}).get(S.META_VERSION)
    except (OSError, pa.ArrowException) as exc:
        return f"{trace} is not a complete trace either ({str(exc).splitlines()[0] if str(exc) else exc})"
    if version is None:
        return f"{trace} is a Parquet file but not a gpt2trace trace (no {S.META_VERSION.decode()} metadata)"
    return f"{trace} is already a complete trace ({meta.num_rows:,} records)"
