"""Records of one kind as NumPy columns, optionally limited to a time window, and what the whole trace spans."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, FIELDS, NAME, RANK, START_NS, THREAD

NS = 1e9                # nanoseconds per second: the analyses' times are ns, their results seconds


class Span(Protocol):
    """A time window [t0_ns, t1_ns), such as `analysis.window.Window`."""
    t0_ns: int
    t1_ns: int


@dataclass(frozen=True)
class Records:
    """NumPy columns of the records of one kind in a window; nullable ints filled with -1, `names` decodes NAME."""
    cols: dict[str, np.ndarray]
    names: tuple[str, ...]

    def __getitem__(self, col: str) -> np.ndarray:
        return self.cols[col]

    def __len__(self) -> int:
        return len(self.cols[START_NS])

    def take(self, index) -> Records:
        return Records({k: v[index] for k, v in self.cols.items()}, self.names)


def records(trace: Trace, kind: str, columns: tuple[str, ...], window: Span | None = None,
            clip: bool = True) -> Records:
    """Columns of the `kind` records overlapping the window (None: all), as NumPy arrays (times clipped to it
    when `clip`).

    A zero-length record (a counter) belongs to the window when it starts inside it. A column the trace does
    not carry for this kind comes back filled (-1, or NaN for floats).
    """
    part = trace.records(kind)
    cols = tuple(dict.fromkeys((START_NS, END_NS) + tuple(columns)))
    out = {c: _numpy(part, c) for c in cols}
    names = tuple(_dictionary(part.column(NAME))) if NAME in part.column_names else ()
    if window is not None:
        s, e = out[START_NS], out[END_NS]
        keep = e > window.t0_ns                     # (s < t1 and e > t0) or (s == e and t0 <= s < t1)
        keep |= (s == e) & (s >= window.t0_ns)
        keep &= s < window.t1_ns
        owned = not keep.all()
        if owned:
            out = _kept(out, keep)
        if clip:                            # in place in the copies made here
            out[START_NS] = np.maximum(out[START_NS], window.t0_ns, out=out[START_NS] if owned else None)
            out[END_NS] = np.minimum(out[END_NS], window.t1_ns, out=out[END_NS] if owned else None)
    return Records(out, names)


_MAX_RUNS = 4096


def _kept(cols: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The columns' rows where `keep` holds (copies). A window leaves out the first and last records of each
    thread, so the rows kept are a few runs, copied as blocks: faster than a gather."""
    edge = np.flatnonzero(np.diff(keep.view(np.int8), prepend=np.int8(0), append=np.int8(0)))
    if len(edge) > 2 * _MAX_RUNS:
        return {c: v[keep] for c, v in cols.items()}
    runs = [slice(a, b) for a, b in edge.reshape(-1, 2).tolist()] or [slice(0, 0)]
    return {c: np.concatenate([v[r] for r in runs]) for c, v in cols.items()}


def _numpy(part: pa.Table, name: str) -> np.ndarray:
    typ = FIELDS[name]
    if name not in part.column_names:
        if pa.types.is_floating(typ):
            return np.full(part.num_rows, np.nan)
        dtype = np.int32 if pa.types.is_dictionary(typ) else typ.to_pandas_dtype()
        return np.full(part.num_rows, -1, dtype=dtype)
    col = part.column(name)
    if pa.types.is_dictionary(col.type):
        chunks = [c.indices for c in col.chunks]
        col = pa.chunked_array(chunks, type=col.type.index_type)
    if col.null_count and not pa.types.is_floating(col.type):
        col = pc.fill_null(col, -1)
    return col.to_numpy()


def _dictionary(col: pa.ChunkedArray) -> list[str]:
    return col.chunks[0].dictionary.to_pylist() if col.num_chunks else []


def extent(trace: Trace) -> tuple[int, int]:
    """The earliest start and the latest end of any record (ns)."""
    lo = min(pc.min(t.column(START_NS)).as_py() for t in trace.parts.values())
    hi = max(pc.max(t.column(END_NS)).as_py() for t in trace.parts.values())
    return int(lo), int(hi)


def grouped(table: pa.Table, keys: str | list[str], aggregations: list) -> pa.Table:
    """`table.group_by(keys).aggregate(aggregations)`, computed on the calling thread. Arrow's threaded plan can
    still be dropping an input batch on one of its workers after the call returned; freeing a buffer of a table
    that came through pickle (every table another MPI process sent) takes the GIL, and a worker that waits for
    it while the interpreter exits aborts the process ("terminate called without an active exception", seen
    once in ~60 `mpiexec -n 3` runs of the distributed analysis). The tables grouped here are small."""
    return table.group_by(keys, use_threads=False).aggregate(aggregations)


def threads(trace: Trace) -> pd.DataFrame:
    """The distinct (rank, thread) pairs of the trace, sorted."""
    pairs = [grouped(t.select([RANK, THREAD]), [RANK, THREAD], []) for t in trace.parts.values()]
    df = pa.concat_tables(pairs).to_pandas().drop_duplicates()
    return df.sort_values([RANK, THREAD]).reset_index(drop=True)


def decode(codes: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """Names of dictionary codes (-1 -> None) as an object array."""
    lookup = np.array(list(names) + [None], dtype=object)
    return lookup[np.where(codes < 0, len(names), codes)]
