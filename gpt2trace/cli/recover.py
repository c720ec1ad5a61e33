"""`gpt2trace recover TRACE`: merge the parts a killed run left beside TRACE into TRACE (gpt2trace.format.writer)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail
from gpt2trace.format.errors import TraceError


def recover(
    trace: Annotated[Path, typer.Argument(help="The killed run's --trace path (or its .parts directory).")],
) -> None:
    """Write TRACE from the per-step parts in TRACE.parts/ that a killed or crashed run left behind."""
    from gpt2trace.format.info import trace_info         # pyarrow and pandas load here, not at CLI start-up
    from gpt2trace.format.writer import parts_dir
    from gpt2trace.format.writer import recover as recover_trace
    from gpt2trace.interop.loader import load
    try:
        target, records = recover_trace(trace)
        info = trace_info(load(target))
    except TraceError as exc:
        fail(str(exc))
    steps = f"steps {info['first_step']}..{info['last_step']}" if info["steps"] else "no complete step"
    console.print(f"recovered {target}: {records:,} records, {steps}; parts {parts_dir(target)} removed")
