"""Assembles the Typer app; every command lives in its own module and calls the Python API."""
from __future__ import annotations

import typer

from gpt2trace.cli import run
from gpt2trace.cli import analyze
from gpt2trace.cli import report
from gpt2trace.cli import export
from gpt2trace.cli import importer
from gpt2trace.cli import info
from gpt2trace.cli import recover

app = typer.Typer(
    name="gpt2trace",
    help="Train an instrumented GPT-2, trace every thread of every rank, and find where the time went.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("run")(run.run)
app.command("analyze")(analyze.analyze)
app.command("report")(report.report)
app.command("info")(info.info)
app.command("recover")(recover.recover)
app.command("export")(export.export)
app.command("import")(importer.import_trace)
