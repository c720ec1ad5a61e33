"""Tables that read well in an 80-column terminal and never cut a number or a name.

Each column gets a fixed width: a value column is as wide as its widest cell (its header wraps at spaces above
it); a label column as wide as its longest cell or, when that is too wide for the console, LABEL_WRAP (wrapping
at spaces, never inside a word). When the columns still do not fit, the table is stacked: each row is a line of
its labels, then its values as `header value` pairs packed into lines. Every cell goes through `plain`: text from
a trace is never markup.
"""
from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpt2trace.cli.common import plain

LABEL_WRAP = 14             # label columns whose cells have spaces wrap at this width when needed
PAIR_GAP = "   "


@dataclass(frozen=True)
class Col:
    header: str
    label: bool = False     # a label (name, rank, layer): left-aligned, wraps at spaces; else a value
    bare: bool = False      # stacked, a label shows without its header (a kernel's name speaks for itself)


def print_table(out: Console, title: str, cols: Sequence[Col], rows: Sequence[Sequence[object]],
                show_header: bool = True) -> None:
    """Prints rows (cells already formatted; None for empty) as a table if it fits, stacked if not."""
    cells = [[plain(c) if c is not None else "" for c in row] for row in rows]
    columns = [[row[i] for row in cells] for i in range(len(cols))]
    for narrow in (False, True):
        widths = [_width(col, column, show_header, narrow) for col, column in zip(cols, columns)]
        if sum(widths) + 3 * len(cols) + 1 <= out.width:       # rich's box: "| " + cell + " " per column, "|"
            out.print(_table(title, cols, cells, widths, show_header))
            return
    _stacked(out, title, cols, cells)


def _width(col: Col, cells: list[str], show_header: bool, narrow: bool) -> int:
    header = col.header if show_header else ""
    if not col.label:
        return max([1] + [len(w) for w in _words(header)] + [len(c) for c in cells])
    natural = max([1, len(header)] + [len(c) for c in cells])
    if not narrow:
        return natural
    return min(natural, max([LABEL_WRAP] + [len(w) for text in [header, *cells] for w in _words(text)]))


def _words(text: str) -> list[str]:
    """What wrapping cannot split: the words, the first with its indentation."""
    return re.findall(r"^\s*\S+|\S+", text)


def _table(title: str, cols: Sequence[Col], cells: list[list[str]], widths: list[int], show_header: bool) -> Table:
    table = Table(title=Text(title, style="bold"), title_justify="left", show_header=show_header)
    for col, width in zip(cols, widths):
        header = col.header if col.label else "\n".join(textwrap.wrap(col.header, width)) or col.header
        table.add_column(Text(header, justify="left" if col.label else "right"), width=width,
                         justify="left" if col.label else "right", no_wrap=not col.label, overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def _stacked(out: Console, title: str, cols: Sequence[Col], cells: list[list[str]]) -> None:
    grid = Table.grid()
    grid.add_column(width=2)
    grid.add_column(overflow="fold")            # labels wrap at spaces under their indentation
    for row in cells:
        labels = [c if col.bare else f"{col.header} {c}" for c, col in zip(row, cols) if col.label and c]
        pairs = [f"{col.header} {c}" for c, col in zip(row, cols) if not col.label and c]
        if labels:
            grid.add_row("", Text("\n".join(pack(labels, out.width - 2, ", ")), style="bold"))
        if pairs:
            grid.add_row("", "\n".join("  " + line for line in pack(pairs, out.width - 4)))
    out.print(Text(title, style="bold"))
    out.print(grid)


def pack(items: list[str], width: int, gap: str = PAIR_GAP) -> list[str]:
    """`items` joined by `gap` into lines of at most `width` characters, never splitting an item (a longer item
    gets a line of its own, folded by the console)."""
    lines: list[str] = []
    for item in items:
        if lines and len(lines[-1]) + len(gap) + len(item) <= width:
            lines[-1] += gap + item
        else:
            lines.append(item)
    return lines
