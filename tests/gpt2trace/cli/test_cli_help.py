"""--help in an 80-column terminal: what to type for each option (a metavar, not Typer's Python types such as
<bool>, <list[Path]>, <int range>), help text for every option, nothing wider than the terminal."""
from __future__ import annotations

import re

import pytest
import typer.main
from typer.testing import CliRunner

ALL = ["run", "analyze", "report", "info", "recover", "export", "import"]
# The analysis-side commands; run and recover have their own owner (their help texts are checked there).
ANALYSIS_SIDE = ["analyze", "report", "info", "export", "import"]
# Typer's type labels, e.g. <bool>, <list[Path]>, <int range>, <float>, <file>; a choice's <a|b> is what to type.
PYTHON_TYPE = re.compile(r"<(?:bool|int|float|str|text|path|file|list)\b[^>]*>", re.IGNORECASE)


def _help(app, *args: str) -> str:
    r = CliRunner(env={"COLUMNS": "80"}).invoke(app, [*args, "--help"])
    assert r.exit_code == 0, r.output
    return r.stdout


@pytest.mark.parametrize("command", ["", *ALL])
def test_help_names_what_to_type_and_fits(app, command):
    text = _help(app, *command.split())
    assert PYTHON_TYPE.findall(text) == []
    assert max(len(line) for line in text.splitlines()) <= 80


@pytest.mark.parametrize("command", ANALYSIS_SIDE)
def test_every_option_and_argument_has_help(app, command):
    params = typer.main.get_command(app).commands[command].params
    assert [p.name for p in params if not (p.help or "").strip()] == []


def test_metavars(app):
    # analyze: --json PATH, --steps A:B, --top N, --peak-gflops GFLOPS; a flag shows none (info --json).
    text = _help(app, "analyze")
    for option, metavar in (("--json", "PATH"), ("--steps", "A:B"), ("--top", "N"), ("--peak-gflops", "GFLOPS")):
        assert re.search(rf"{option}\s+{metavar}\b", text), (option, text)
    assert re.search(r"--json\s+Print the information", _help(app, "info"))
    # run has no metavars of its own: they come from the types (int N, float NUMBER, Path PATH).
    text = _help(app, "run")
    for option, metavar in (("--steps", "N"), ("--lr", "NUMBER"), ("--data", "PATH")):
        assert re.search(rf"{option}\s+{metavar}\b", text), (option, text)
