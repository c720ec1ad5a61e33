"""The tables of the declared sections of a result (analysis.sections, analysis.registry) in the terminal: one
renderer for all of them, from their column specs. `gpt2trace analyze` places some among its other tables
(`render_section`) and prints the rest after them (`render_sections`)."""
from __future__ import annotations

from collections.abc import Collection

from rich.console import Console

from analysis.registry import SECTIONS
from analysis.sections import TERMINAL
from gpt2trace.cli.tables import Col, print_table


def render_sections(out: Console, res: dict, top: int, placed: Collection[str] = ()) -> None:
    """The tables of every declared section in `res` but those `placed` elsewhere, in the registry's order."""
    for section in SECTIONS:
        if section.key not in placed:
            render_section(out, res, section.key, top)


def render_section(out: Console, res: dict, key: str, top: int) -> None:
    """The tables of the section `key` that have rows (none when it was not computed or not asked for)."""
    section = next(s for s in SECTIONS if s.key == key)
    for table in section.tables:
        rows = table.of(res.get(key))
        if rows:
            cols = table.shown(TERMINAL)
            print_table(out, table.title, [Col(c.label, label=c.name, bare=c.bare) for c in cols],
                        [tuple(c.text(c.of(r)) for c in cols) for r in (rows[:top] if table.top else rows)])
