"""Raw int64 rows of a .prv's body sorted out by rank on disk (the Paraver import's first pass), and read back
whole or a block at a time."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from gpt2trace.interop.paraver_parse import Body

# Raw rows per rank: (name, width): the parse's fields, then the line number (and a 3: record's index in the file)
STATE_ROWS, EVENT_ROWS, PAIR_ROWS, COMM_ROWS = ("states", 8), ("events", 6), ("pairs", 3), ("comms", 16)
PARTS = (STATE_ROWS, EVENT_ROWS, PAIR_ROWS, COMM_ROWS)
ROW_GROUP = 1 << 17     # records per batch of the import's Arrow files (a rank's, a window kind's) and per row group
                        # of the trace it writes


class Spill:
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
        st, ev, pairs, cm = (self.rows(rank, p) for p in PARTS)
        body = Body(st[:, :7], st[:, 7], ev[:, :5], ev[:, 5], pairs[:, 0], pairs[:, 1], pairs[:, 2], cm[:, :14],
                    cm[:, 14], lines=0)
        return body, cm[:, 15]

    def flush(self, rank: int) -> None:
        """The rank's buffered rows to its files: the files then hold all its rows, in order."""
        for name, _ in PARTS:
            if (rank, name) in self._buf:
                self._flush((rank, name))

    def lines(self, rank: int) -> int:
        """The rank's state and event lines."""
        return self._count.get((rank, STATE_ROWS[0]), 0) + self._count.get((rank, EVENT_ROWS[0]), 0)

    def drop(self, rank: int, parts=PARTS) -> None:
        """Forgets the rank's rows of `parts`: buffers and files."""
        for name, _ in parts:
            key = (rank, name)
            self._total -= self._bytes.pop(key, 0)
            self._buf.pop(key, None)
            (self.folder / f"{rank}.{name}").unlink(missing_ok=True)

    def count(self, rank: int, part: tuple[str, int]) -> int:
        """Rows of the rank's part in its file (all of them after `flush`)."""
        path = self.folder / f"{rank}.{part[0]}"
        return path.stat().st_size // (8 * part[1]) if path.exists() else 0

    def block(self, rank: int, part: tuple[str, int], start: int, stop: int) -> np.ndarray:
        """Rows [start, stop) of the rank's part from its file (after `flush`)."""
        name, width = part
        path = self.folder / f"{rank}.{name}"
        if stop <= start or not path.exists():
            return np.empty((0, width), np.int64)
        return np.fromfile(path, np.int64, count=(stop - start) * width,
                           offset=start * width * 8).reshape(-1, width)
