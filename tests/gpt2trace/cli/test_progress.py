"""gpt2trace.cli.progress: a bar on a terminal's stderr, nothing elsewhere."""
from __future__ import annotations

import io

from rich.console import Console

from gpt2trace.cli import progress as P


def test_quiet_when_stderr_is_not_a_terminal(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(P, "err_console", Console(file=out, force_terminal=False))
    with P.progress("reading x.parquet", total=10) as advance:
        advance(4)
    assert out.getvalue() == ""


def test_a_bar_on_a_terminal_names_the_operation_as_text(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(P, "err_console", Console(file=out, force_terminal=True, width=100))
    with P.progress("reading [bold]x[/].parquet", total=10) as advance:
        advance(4)
    shown = out.getvalue()
    assert "reading [bold]x[/].parquet" in shown and "4/10" in shown      # markup in a name is printed as it is
