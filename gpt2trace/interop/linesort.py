"""Writes text lines in the order of their sort keys with bounded memory: an external merge sort.

Lines come in batches (an Arrow string array, each line ending in a newline) with keys (time, sub, sec); ties
keep the order of arrival. Up to `run_lines` lines are sorted in memory; past that, each sorted run goes to a
temporary Arrow IPC file and the runs are merged block by block: every round takes from each run the lines up to
the smallest "last key of the current block" among the runs, sorts that slice and writes it. At most `fan_in`
runs are merged at once (more are first merged, `fan_in` at a time, into longer runs), so memory is about
`run_lines` + `fan_in` x `block_lines` lines whatever the trace's size; the runs are read and written
once more per factor of `fan_in`.
"""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa

KEYS = ("time", "sub", "sec", "seq")
_RUN_SCHEMA = pa.schema([("time", pa.int64()), ("sub", pa.int8()), ("sec", pa.int64()), ("seq", pa.int64()),
                         ("line", pa.string())])


class LineSorter:
    def __init__(self, tmpdir: str | Path | None = None, run_lines: int = 1_000_000, block_lines: int = 1 << 15,
                 fan_in: int = 16):
        self.run_lines, self.block_lines, self.fan_in = run_lines, block_lines, max(fan_in, 2)
        self._tmp = tempfile.TemporaryDirectory(prefix="gpt2trace-sort-", dir=tmpdir)
        self._buffer: list[dict] = []
        self._buffered = 0
        self._runs: list[Path] = []
        self._files = 0
        self._seq = 0

    def __enter__(self) -> LineSorter:
        return self

    def __exit__(self, *exc) -> None:
        """The temporary runs go away however the export ends (`write` removes them too)."""
        self._tmp.cleanup()

    @property
    def lines(self) -> int:
        return self._seq

    @property
    def runs(self) -> int:
        return len(self._runs)

    def add(self, time: np.ndarray, sub, sec: np.ndarray, lines: pa.Array) -> None:
        n = len(lines)
        if not n:
            return
        self._buffer.append({"time": np.asarray(time, np.int64), "sub": np.broadcast_to(np.int8(sub), n),
                             "sec": np.asarray(sec, np.int64), "seq": np.arange(self._seq, self._seq + n),
                             "line": lines})
        self._seq += n
        self._buffered += n
        if self._buffered >= self.run_lines:
            self._spill()

    def write(self, out: BinaryIO, advance=lambda n: None) -> int:
        """Writes every line in key order; returns the number of lines (`advance(n)` is told as they go). The
        sorter is spent afterwards."""
        def emit(keys, lines):
            write_lines(out, lines)
            advance(len(lines))

        try:
            if not self._runs:
                keys, lines = self._sorted_buffer()
                if lines is not None:
                    emit(keys, lines)
                return self._seq
            self._spill()
            runs = self._runs
            while len(runs) > self.fan_in:
                runs = [self._merge_run(runs[i:i + self.fan_in]) for i in range(0, len(runs), self.fan_in)]
            self._merge(runs, emit)
            return self._seq
        finally:
            self._tmp.cleanup()

    def _sorted_buffer(self):
        if not self._buffer:
            return None, None
        keys = {k: np.concatenate([b[k] for b in self._buffer]) for k in KEYS}
        lines = pa.concat_arrays([b["line"] for b in self._buffer])
        self._buffer, self._buffered = [], 0
        order = np.lexsort(tuple(keys[k] for k in reversed(KEYS)))
        return {k: v[order] for k, v in keys.items()}, lines.take(pa.array(order))

    def _spill(self) -> None:
        keys, lines = self._sorted_buffer()
        if lines is None:
            return
        table = pa.table({**{k: keys[k] for k in KEYS}, "line": lines})
        with self._run_file() as (path, writer):
            for batch in table.to_batches(max_chunksize=self.block_lines):
                writer.write_batch(batch)
        self._runs.append(path)

    @contextlib.contextmanager
    def _run_file(self):
        path = Path(self._tmp.name) / f"run{self._files}.arrow"
        self._files += 1
        try:
            with open(path, "wb") as sink, pa.ipc.new_file(sink, _RUN_SCHEMA) as writer:
                yield path, writer
        except OSError as exc:          # a full disk: say which file, which a write's OSError does not
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None

    def _merge_run(self, runs: list[Path]) -> Path:
        """Runs merged into one longer run (their files removed)."""
        with self._run_file() as (path, writer):
            def emit(keys, lines):
                table = pa.table({**keys, "line": lines}, schema=_RUN_SCHEMA)
                for batch in table.to_batches(max_chunksize=self.block_lines):
                    writer.write_batch(batch)
            self._merge(runs, emit)
        for run in runs:
            run.unlink()
        return path

    def _merge(self, runs: list[Path], emit) -> None:
        """Emits (keys, lines) slices in key order, merging the sorted runs block by block."""
        readers = [pa.ipc.open_file(pa.OSFile(str(p))) for p in runs]
        nxt = [0] * len(readers)
        blocks: list[dict | None] = [None] * len(readers)

        def load(i: int) -> None:
            while nxt[i] < readers[i].num_record_batches:
                batch = readers[i].get_batch(nxt[i])
                nxt[i] += 1
                if batch.num_rows:
                    blocks[i] = {**{k: batch.column(k).to_numpy() for k in KEYS}, "line": batch.column("line")}
                    return
            blocks[i] = None

        for i in range(len(readers)):
            load(i)
        while any(b is not None for b in blocks):
            live = [i for i, b in enumerate(blocks) if b is not None]
            bound = min(tuple(int(blocks[i][k][-1]) for k in KEYS) for i in live)
            taken = []
            for i in live:
                b = blocks[i]
                count = int(_not_after(b, bound).sum())
                if not count:
                    continue
                taken.append({k: v[:count] for k, v in b.items()})
                if count == len(b["seq"]):
                    load(i)
                else:
                    blocks[i] = {k: v[count:] for k, v in b.items()}
            keys = {k: np.concatenate([t[k] for t in taken]) for k in KEYS}
            order = np.lexsort(tuple(keys[k] for k in reversed(KEYS)))
            emit({k: v[order] for k, v in keys.items()},
                 pa.concat_arrays([t["line"] for t in taken]).take(pa.array(order)))


def _not_after(block: dict, bound: tuple) -> np.ndarray:
    """Mask of the keys <= bound in lexicographic order (a prefix of a sorted block)."""
    t, s, c, q = (block[k] for k in KEYS)
    bt, bs, bc, bq = bound
    return (t < bt) | ((t == bt) & ((s < bs) | ((s == bs) & ((c < bc) | ((c == bc) & (q <= bq))))))


def write_lines(out: BinaryIO, lines: pa.Array) -> None:
    """Writes a string array whose every value ends in a newline, as one contiguous copy of its bytes."""
    if isinstance(lines, pa.ChunkedArray):
        for chunk in lines.chunks:
            write_lines(out, chunk)
        return
    if not len(lines):
        return
    if lines.null_count:
        raise ValueError("null line")
    _, offsets, data = lines.buffers()
    dtype = np.int64 if pa.types.is_large_string(lines.type) else np.int32
    off = np.frombuffer(offsets, dtype=dtype, count=len(lines) + 1, offset=lines.offset * np.dtype(dtype).itemsize)
    out.write(memoryview(data)[int(off[0]):int(off[-1])])
