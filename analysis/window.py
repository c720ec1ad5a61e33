"""Steps and the analysis window: step boundaries, `--steps A:B`, and columns of one kind clipped to the window.

A step's boundaries come from its `phase` records (else its `kernel` records, else any record with a step):
step s starts at the earliest record of s on any rank and ends where step s+1 starts (the last step ends at its
latest record), so the step times tile the run. By default the first step (warm-up) is left out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, FIELDS, NAME, RANK, START_NS, STEP, THREAD, Kind

NS = 1e9


class WindowError(ValueError):
    """A --steps selection that does not fit the trace; the message is one line naming the option."""


@dataclass(frozen=True)
class Window:
    """The time window [t0_ns, t1_ns) the analyses look at and the steps it holds (empty: no step info)."""
    t0_ns: int
    t1_ns: int
    steps: tuple[int, ...] = ()
    warmup_excluded: bool = False
    warmup_outlier: bool = False

    @property
    def seconds(self) -> float:
        return (self.t1_ns - self.t0_ns) / NS


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


def records(trace: Trace, kind: str, columns: tuple[str, ...], window: Window | None = None,
            clip: bool = True) -> Records:
    """Columns of the `kind` records overlapping the window, as NumPy arrays (times clipped to it when `clip`).

    A zero-length record (a counter) belongs to the window when it starts inside it. A column the trace does
    not carry for this kind comes back filled (-1, or NaN for floats).
    """
    part = trace.records(kind)
    cols = tuple(dict.fromkeys((START_NS, END_NS) + tuple(columns)))
    out = {c: _numpy(part, c) for c in cols}
    names = tuple(_dictionary(part.column(NAME))) if NAME in part.column_names else ()
    if window is not None:
        s, e = out[START_NS], out[END_NS]
        keep = ((s < window.t1_ns) & (e > window.t0_ns)) | ((s == e) & (s >= window.t0_ns) & (s < window.t1_ns))
        if not keep.all():
            out = {c: v[keep] for c, v in out.items()}
        if clip:
            out[START_NS] = np.maximum(out[START_NS], window.t0_ns)
            out[END_NS] = np.minimum(out[END_NS], window.t1_ns)
    return Records(out, names)


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


def threads(trace: Trace) -> pd.DataFrame:
    """The distinct (rank, thread) pairs of the trace, sorted."""
    pairs = [t.select([RANK, THREAD]).group_by([RANK, THREAD]).aggregate([]) for t in trace.parts.values()]
    df = pa.concat_tables(pairs).to_pandas().drop_duplicates()
    return df.sort_values([RANK, THREAD]).reset_index(drop=True)


def steps_table(trace: Trace) -> pd.DataFrame:
    """One row per step: step, start_ns, end_ns, seconds (steps tile the run; empty when no record has a step)."""
    sub = None
    for kinds in ((Kind.PHASE,), (Kind.KERNEL,), Kind.ALL):
        parts = [trace.records(k) for k in kinds]
        parts = [p.select([STEP, START_NS, END_NS]).filter(pc.is_valid(p.column(STEP)))
                 for p in parts if STEP in p.column_names]
        if parts and sum(p.num_rows for p in parts):
            sub = pa.concat_tables(parts)
            break
    if sub is None:
        return pd.DataFrame({STEP: [], START_NS: [], END_NS: [], "seconds": []})
    agg = sub.group_by(STEP).aggregate([(START_NS, "min"), (END_NS, "max")]).sort_by(STEP)
    step = agg.column(STEP).to_numpy().astype(np.int64)
    first = agg.column(f"{START_NS}_min").to_numpy()
    last = agg.column(f"{END_NS}_max").to_numpy().copy()
    # The last step also takes the step-less phases after its start (the tracer's flush, a checkpoint), as the
    # other steps take theirs before the next step starts.
    phases = trace.records(Kind.PHASE)
    if STEP in phases.column_names and phases.num_rows:
        tail = phases.filter(pc.and_(pc.is_null(phases.column(STEP)),
                                     pc.greater_equal(phases.column(START_NS), int(first[-1]))))
        if tail.num_rows:
            last[-1] = max(int(last[-1]), int(pc.max(tail.column(END_NS)).as_py()))
    end = np.maximum(np.r_[first[1:], last[-1:]], first)
    return pd.DataFrame({STEP: step, START_NS: first, END_NS: end, "seconds": (end - first) / NS})


def outliers(seconds: np.ndarray) -> np.ndarray:
    """Steps whose time is far from the median: beyond 3 robust standard deviations (1.4826 MAD) and 5 %."""
    if len(seconds) < 3:
        return np.zeros(len(seconds), dtype=bool)
    med = np.median(seconds)
    mad = 1.4826 * np.median(np.abs(seconds - med))
    return np.abs(seconds - med) > max(3 * mad, 0.05 * med)


def parse_steps(spec: str) -> tuple[int | None, int | None]:
    """'A:B' (B excluded, as in Python slices; either side may be empty) or 'A' (one step)."""
    text = spec.strip()
    try:
        if ":" not in text:
            return int(text), int(text) + 1
        a, b = text.split(":", 1)
        return (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        raise WindowError(f"--steps {spec!r}: expected A:B with integers, for example 1:10 (B excluded)") from None


def select(trace: Trace, spec: str | None = None) -> Window:
    """The window of `--steps A:B`, or by default every step but the first (warm-up) when there are two or more."""
    steps = steps_table(trace)
    if steps.empty:
        if spec:
            raise WindowError(f"--steps {spec}: {trace.name} has no step numbers; analyze it without --steps")
        return Window(*extent(trace))
    step = steps[STEP].to_numpy()
    is_outlier = outliers(steps["seconds"].to_numpy())
    if spec:
        a, b = parse_steps(spec)
        keep = (step >= (a if a is not None else step.min())) & (step < (b if b is not None else step.max() + 1))
        if not keep.any():
            raise WindowError(f"--steps {spec} selects no step; {trace.name} has steps {step.min()}..{step.max()}")
        excluded = False
    else:
        excluded = len(step) >= 2
        keep = np.arange(len(step)) >= (1 if excluded else 0)
    chosen = steps[keep]
    return Window(int(chosen[START_NS].iloc[0]), int(chosen[END_NS].iloc[-1]), tuple(int(s) for s in chosen[STEP]),
                  warmup_excluded=excluded, warmup_outlier=bool(is_outlier[0]))


def decode(codes: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    """Names of dictionary codes (-1 -> None) as an object array."""
    lookup = np.array(list(names) + [None], dtype=object)
    return lookup[np.where(codes < 0, len(names), codes)]
