"""`gpt2trace diff A B`: what changed from run A to run B per step, and why B is faster or slower.

A thin layer over `analysis.diff.diff` of the two traces' `analysis.diff_summary.summarize` (the parts of
`analyze` that diff compares, one trace in memory at a time): prints the sentences and the tables, or writes JSON.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from gpt2trace.cli.common import console, err_console, fail, json_output, plain, trace_files
from gpt2trace.cli.tables import Col, print_table
from gpt2trace.format.errors import TraceError

# How the changes table names each category.
CATEGORY_LABELS = {"kernel": "kernel", "kernel_layer": "kernel", "phase": "phase", "mpi": "MPI call",
                   "mpi_wait": "MPI wait", "state": "state"}


def diff(
    a: Annotated[Path, typer.Argument(exists=True, metavar="A", help="The reference trace.")],
    b: Annotated[Path, typer.Argument(exists=True, metavar="B", help="The trace compared with A.")],
    json_out: Annotated[Path | None, typer.Option(
        "--json", metavar="PATH", help="Write the comparison as JSON to PATH ('-' for stdout, which replaces the "
        "tables).")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", metavar="A:B", help="Steps A:B of both traces to compare (B excluded). Default: all but the "
        "first (warm-up).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, metavar="N", help="Rows of the changes table.")] = 15,
) -> None:
    """What changed from run A to run B per step (kernels, phases, MPI calls, thread states, POP factors) and
    what made B faster or slower."""
    json_target = json_output(json_out, trace_files([a, b]))

    from analysis.diff import DiffError
    from analysis.diff import diff as compare
    from analysis.diff_summary import summarize
    from analysis.window import WindowError, parse_steps
    from gpt2trace.interop.loader import load
    if steps is not None:
        try:
            parse_steps(steps)
        except WindowError as exc:
            fail(str(exc))
    results = []
    for path in (a, b):
        try:
            results.append(summarize(load(path), steps=steps))
        except TraceError as exc:
            fail(str(exc))
        except WindowError as exc:                     # the steps fit one trace and not the other: say which
            fail(f"{path}: {exc}")
    try:
        result = compare(*results)
    except DiffError as exc:
        fail(str(exc))
    if json_target is not None:
        json_target.write(result, err_console)
        if json_target.to_stdout:
            return
    render(console, result, top)


def render(out: Console, res: dict, top: int) -> None:
    for label in ("a", "b"):
        out.print(Text.assemble(f"{label.upper()}: ", (plain(res[label]), "bold")), soft_wrap=True)
    for w in res.get("warnings") or []:
        out.print(Text.assemble(("warning:", "yellow"), " ", plain(w)), overflow="fold")
    for line in res["sentences"]:
        out.print(Text(plain(line)), overflow="fold")
    print_table(out, "Time per step and rank, by impact (ms)",
                [Col("what", label=True), Col("name", label=True, bare=True), Col("where", label=True),
                 Col("A"), Col("B"), Col("change")],
                [(CATEGORY_LABELS[r["category"]], r["name"], _where(r), _ms(r["a_s"]), _ms(r["b_s"]),
                  _ms(r["change_s"], signed=True)) for r in res["changes"][:top]])
    print_table(out, "POP factors", [Col("level", label=True), Col("factor", label=True), Col("A"), Col("B"),
                                     Col("change, points")],
                [(p["level"], p["label"], _pct(p["a"]), _pct(p["b"]),
                  None if p["change"] is None else f"{100 * p['change']:+.1f}") for p in res["pop"]])


def _where(row: dict) -> str | None:
    """The communicator of an MPI row, the layer of a kernel x layer row ('all layers' for a kernel's total)."""
    if row["group"] is not None:
        return row["group"]
    if row["category"] == "kernel":
        return "all layers"
    if row["category"] == "kernel_layer":
        return "no layer" if row["layer"] is None else f"layer {row['layer']}"
    return None


def _ms(seconds: float, signed: bool = False) -> str:
    return f"{1e3 * seconds:+.4g}" if signed else f"{1e3 * seconds:.4g}"


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"
