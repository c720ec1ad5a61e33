"""Sections of a result: how each is declared (`Section`: its key, the records it reads, how it splits over groups
of ranks and combines, its tables' columns) and how they are computed one at a time (`Sections`), so that one
analysis that fails on a trace (a construct of another tool's trace that it does not handle, say) is reported in
one line and the others are still given.

A declared section is one module: its analysis and its `Section`, listed in `analysis.registry`. `combine`
(analysis.analyze) computes it from what every section shares (`Inputs`) and, when it declares a `part`, from what
pass 2 reduced each group of ranks to (analysis.rank_groups, the same on one process, group by group and under
MPI); `gpt2trace analyze` (gpt2trace.cli.section_tables) and the report (gpt2trace.report.tables) draw its
`tables` from the column specs, and the JSON is the value under its key.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.records import Records
from analysis.segments import Segments
from analysis.state_profile import LaneStates
from analysis.window import Window
from gpt2trace.format.grid import Grid
from gpt2trace.format.reader import Reads, Trace

# How a column's values read, the same in the terminal and the report (`text`; None reads as the column's
# `missing`): a label names the unit, so a cell is a bare number
TEXT = "text"           # str(value); a list is joined with ", "
COUNT = "count"         # a whole number with thousands separators (a float is rounded)
NUMBER = "number"       # 4 significant digits
MS = "ms"               # a time in seconds, shown in milliseconds
SHARE = "share"         # a fraction in [0, 1], shown as a percentage
MIB = "MiB"             # bytes, shown in MiB (2^20 bytes) with one decimal
UNITS = (TEXT, COUNT, NUMBER, MS, SHARE, MIB)
TERMINAL, REPORT = "terminal", "report"     # the renderers, for a column only one of them shows


@dataclass(frozen=True)
class Column:
    """One column of a declared table: the rows' `key`, its header `label`, the `unit` its values read in (UNITS).
    `name`: the column names the row (a rank, a kernel, a phase): left-aligned, wrapping at spaces; else a value.
    `bare`: a name that speaks for itself when the terminal stacks a table too wide for it (a kernel's).
    `value`: the cell's value from the row, when it is not row[key] (two keys in one). `only`: the one renderer
    (TERMINAL, REPORT) that shows the column, when the other has no room for it (a sentence in 80 columns).
    """
    key: str
    label: str
    unit: str = NUMBER
    name: bool = False
    bare: bool = False
    missing: str = "n/a"
    value: Callable[[dict], object] | None = None
    only: str | None = None

    def __post_init__(self):
        if self.unit not in UNITS:
            raise ValueError(f"column {self.key!r}: unit {self.unit!r} is not one of {', '.join(UNITS)}")
        if self.only not in (None, TERMINAL, REPORT):
            raise ValueError(f"column {self.key!r}: only {self.only!r} is not {TERMINAL!r} or {REPORT!r}")

    def of(self, row: dict):
        """This column's value in `row`."""
        return self.value(row) if self.value is not None else row.get(self.key)

    def text(self, value) -> str:
        """A value of this column as the terminal and the report show it, in its unit (which the label names)."""
        return text(value, self.unit, self.missing)


def text(value, unit: str, missing: str = "n/a") -> str:
    """`value` as it reads in `unit` (UNITS); None reads as `missing`."""
    return missing if value is None else _TEXTS[unit](value)


def _ms(seconds: float) -> str:
    """Milliseconds with 4 significant digits, and whole ones with thousands separators from 10 s up."""
    ms = 1e3 * seconds
    return f"{ms:.4g}" if abs(ms) < 1e4 else f"{ms:,.0f}"


_TEXTS = {TEXT: lambda v: ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v),
          COUNT: lambda v: f"{round(v):,}", NUMBER: lambda v: f"{v:.4g}", MS: _ms,
          SHARE: lambda v: f"{100 * v:.1f}%", MIB: lambda v: f"{v / 2**20:,.1f}"}


@dataclass(frozen=True)
class Table:
    """A table of a section: its `title`, its `columns`, where its rows are in the section's value (`rows`: a key;
    None: the value is the rows). `top`: only the first --top rows are shown. `empty`: what the report says when
    there is no row (None: the table is left out, as the terminal always does)."""
    title: str
    columns: tuple[Column, ...]
    rows: str | None = None
    top: bool = True
    empty: str | None = None

    def shown(self, renderer: str) -> tuple[Column, ...]:
        """The columns `renderer` (TERMINAL, REPORT) shows."""
        return tuple(c for c in self.columns if c.only in (None, renderer))

    def of(self, value) -> list[dict]:
        """The table's rows in a section's JSON value (none when the section was not computed)."""
        if value is None:
            return []
        return list((value.get(self.rows) if self.rows is not None else value) or [])


@dataclass(frozen=True)
class GroupView:
    """What pass 2 has of one group of ranks, for a section's `part`: the group (of at least PART_READS and the
    section's `reads`), the window and steps of the whole trace, the group's kernel records in the window (name
    codes into the kernel names of every group), their segments, its state records in the window and their lanes.
    """
    group: Trace
    window: Window
    steps: pd.DataFrame
    kern: Records
    segs: Segments
    states: Records
    lanes: LaneStates
    top: int
    bins: int


@dataclass(frozen=True)
class Inputs:
    """What `combine` computed before the declared sections, from every rank: the trace's shared records (a whole
    trace, or every group's phases, MPI calls and shared counters with the trace's metadata), the window and
    steps, the (rank, thread) pairs and ranks, the rank grid, the window's MPI calls and their waits, the kernel
    segments, the parallel layout, the summary (None: not computed), and the Running time of every thread."""
    trace: Trace
    window: Window
    steps: pd.DataFrame
    pairs: pd.DataFrame
    ranks: np.ndarray
    grid: Grid
    calls: pd.DataFrame
    wait_rows: pd.DataFrame
    segs: Segments
    layout: dict
    summary: dict | None
    running_ns: int
    top: int


@dataclass(frozen=True)
class Section:
    """A section of `analyze`'s result. `key`: where its value is in the result (and the JSON); `title`: how the
    warnings name it ("title: not computed: ..."). `combine(inputs, parts)`: its JSON-ready value (plain values,
    tables as rows: analysis.plain), from the `Inputs` and its `parts`, one per group of ranks in rank order
    (empty without `part`). `part(view)`: what one group contributes (picklable: under MPI it is sent), from a
    `GroupView`; `reads`: the records `part` reads of a group besides the GroupView's. `tables`: what the terminal
    and the report draw of its value."""
    key: str
    title: str
    combine: Callable[[Inputs, list], object]
    part: Callable[[GroupView], object] | None = None
    reads: Reads = Reads(columns=(), kinds=())
    tables: tuple[Table, ...] = ()


class Sections:
    """Computes a result's sections one at a time: one that raises is reported in `warnings` in one line and
    given its `default` (None: not computed), so that a trace one analysis cannot handle still gets the others."""

    def __init__(self, warnings: list[str]):
        self.warnings = warnings

    def __call__(self, title: str, compute: Callable[[], object], default=None):
        try:
            return compute()
        except MemoryError:
            raise
        except Exception as exc:      # any analysis's failure: reported, never the whole result's
            self.warnings.append(f"{title}: not computed: {failure(exc)}")
            return default


def failure(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
