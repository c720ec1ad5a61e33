"""`gpt2trace report TRACE -o report.html`: one self-contained HTML page with the timeline and the analysis.

A thin layer over `gpt2trace.report.write`: parses the options, builds the page, says where it went.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from analysis.window import WindowError, parse_steps
from gpt2trace.cli.common import console, fail
from gpt2trace.format.errors import TraceError
from gpt2trace.interop.loader import load


def parse_window(spec: str) -> tuple[float, float]:
    """'A:B' in seconds since the trace start, A < B."""
    try:
        a, b = (float(x) for x in spec.split(":"))
    except ValueError:
        raise WindowError(f"--window {spec!r}: expected A:B in seconds since the trace start, for example "
                          "0.5:0.75") from None
    if not b > a >= 0:
        raise WindowError(f"--window {spec!r}: needs 0 <= A < B (seconds since the trace start)")
    return a, b


def report(
    trace: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Trace file (Parquet).")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", dir_okay=False,
                                                   help="Where the page goes (default: the trace's name with "
                                                        ".html).")] = None,
    steps: Annotated[Optional[str], typer.Option("--steps", help="Steps A:B to analyze (B excluded); on a big "
                                                 "trace, also where records are drawn exactly. Default: all "
                                                 "but the first (warm-up).")] = None,
    window: Annotated[Optional[str], typer.Option("--window", help="A:B seconds since the trace start where a "
                                                  "big trace's records are drawn exactly.")] = None,
    exact_records: Annotated[Optional[int], typer.Option("--exact-records", min=1000, help="At most this many state "
                                                         "and kernel records drawn exactly (a bigger page; "
                                                         "default: 300,000).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Rows per table and findings shown.")] = 15,
) -> None:
    """An interactive HTML report: Paraver-like timeline (states, kernels, MPI), charts and the analysis."""
    out = output or trace.with_suffix(".html")
    from gpt2trace.report import write   # here, not at start-up: it loads Numba (analysis.replay)
    budget = {} if exact_records is None else {"exact_budget": exact_records}
    try:
        if steps is not None:
            parse_steps(steps)
        window_s = parse_window(window) if window else None
        made = write(load(trace), out, steps=steps, window_s=window_s, top=top, **budget)
    except (TraceError, WindowError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"--output {out}: cannot write ({exc.strerror})")
    size = out.stat().st_size / 2**20
    console.print(f"report: {out} ({size:.1f} MB, {made.records:,} records, built in {made.build_s:.1f} s); "
                  f"{made.detail_note}", soft_wrap=True, markup=False)
