"""`gpt2trace report TRACE -o report.html`: one self-contained HTML page with the timeline and the analysis.

A thin layer over `gpt2trace.report.write`: parses the options, builds the page, says where it went. The report
package (analyses, pandas) loads inside the command, so the CLI starts fast.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli import limits
from gpt2trace.cli.common import TRACE_FORMATS, console, fail, output, trace_files
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.limits import GROUP_RECORDS


def parse_window(spec: str) -> tuple[float, float]:
    """'A:B' in seconds since the trace start, 0 <= A < B, both finite."""
    try:
        a, b = (float(x) for x in spec.split(":"))
    except ValueError:
        fail(f"--window {spec!r}: expected A:B in seconds since the trace start, for example 0.5:0.75")
    if not (math.isfinite(a) and math.isfinite(b)):
        fail(f"--window {spec!r}: A and B must be finite numbers of seconds since the trace start")
    if not b > a >= 0:
        fail(f"--window {spec!r}: needs 0 <= A < B (seconds since the trace start)")
    with limits.refused():
        limits.seconds(b, f"--window {spec!r}: B")
    return a, b


def report(
    trace: Annotated[Path, typer.Argument(
        exists=True, metavar="TRACE", help=f"Trace file: {TRACE_FORMATS}.")],
    output_path: Annotated[Path | None, typer.Option(
        "--output", "-o", metavar="PATH", help="Where the page goes (default: the trace's name with "
        ".html).")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", metavar="A:B", help="Steps A:B to analyze (B excluded); on a big trace, also where records are "
        "drawn exactly. Default: all but the first (warm-up).")] = None,
    window: Annotated[str | None, typer.Option(
        "--window", metavar="A:B", help="Seconds A:B since the trace start where a big trace's records are drawn "
        "exactly.")] = None,
    exact_records: Annotated[int | None, typer.Option(
        "--exact-records", min=1000, metavar="N", help="At most N state and kernel records drawn exactly, more "
        "for a bigger page (default: 300,000).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, metavar="N", help="Rows per table and findings shown.")] = 15,
    group_records: Annotated[int, typer.Option(
        "--group-records", min=1, metavar="N", help="Read at most N records at once (whole ranks); a Paraver trace "
        "of more is imported rank by rank into a temporary Parquet trace first.")] = GROUP_RECORDS,
) -> None:
    """An interactive HTML report: Paraver-like timeline (states, kernels, MPI), charts and the analysis."""
    if output_path is None:
        out = output(trace.with_suffix(".html"), trace_files([trace]), "the default output (-o)")
    else:
        out = output(output_path, trace_files([trace]), "--output")
    window_s = parse_window(window) if window else None

    from analysis.window import WindowError, parse_steps
    from gpt2trace.cli.grouped import Processes, readable
    from gpt2trace.interop.loader import is_parquet, load
    from gpt2trace.report import write
    options = dict(steps=steps, window_s=window_s, top=top,
                   **({} if exact_records is None else {"exact_budget": exact_records}))
    try:
        if steps is not None:
            parse_steps(steps)
        with readable(trace, Processes(), group_records) as (source, shown):
            if not is_parquet(source):
                made = write(load(source), out.path, **options)
            else:
                made = _write_parquet(source, out.path, options, group_records, shown)
    except (TraceError, WindowError, OutputError) as exc:
        fail(str(exc))
    size = out.path.stat().st_size / 2**20
    console.print(f"report: {out.shown()}; {size:.1f} MB, {made.records:,} records, built in {made.build_s:.1f} s; "
                  f"{made.detail_note}", soft_wrap=True)


def _write_parquet(trace: Path, out: Path, options: dict, group_records: int, shown: Path | None = None):
    """A Parquet trace's report group of ranks by group of ranks (bounded memory), with a progress bar: two passes
    over the trace's records. `shown`: the trace named on the page when `trace` is a temporary import of it."""
    from gpt2trace.cli.progress import progress
    from gpt2trace.format.reader import rank_records
    from gpt2trace.report import write_file
    total = sum(rank_records(trace).values())
    with progress(f"report of {(shown or trace).name} (2 passes)", total=2 * total) as advance:
        return write_file(trace, out, group_records, advance, shown, **options)
