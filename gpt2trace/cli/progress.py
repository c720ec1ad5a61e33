"""A progress bar for long operations (reading, analyzing, writing a big trace): on stderr, so stdout stays the
command's output (JSON may go there), and nothing at all when stderr is not a terminal (logs, pipes, CI).

    with progress("reading ranks", total=trace_records) as advance:
        for table in pieces:
            ...
            advance(table.num_rows)
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gpt2trace.cli.common import err_console, plain


@contextlib.contextmanager
def progress(what: str, total: int | None = None, unit: str = "records") -> Iterator[Callable[[int], None]]:
    """A callback `advance(n)` that moves a bar named `what` by n of `total` (None: a count without an end); the
    bar is drawn on stderr only when stderr is a terminal, and removed when the operation ends."""
    if not err_console.is_terminal:
        yield lambda n: None
        return
    bar = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
                   TimeElapsedColumn(), TimeRemainingColumn(), console=err_console, transient=True)
    task = bar.add_task(plain(what), total=total)      # `what` may hold a file name: text, never markup
    with bar:
        yield lambda n: bar.advance(task, n)
