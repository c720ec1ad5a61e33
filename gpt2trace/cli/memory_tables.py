"""The resident-memory table of `gpt2trace analyze`: the peak per rank with the phase that reaches it first (what
`analysis.memory` computed; MiB = 2^20 bytes, as the benchmarks). The peak per phase is in the JSON: resident
memory rarely shrinks (the allocator keeps what it freed), so after the peak every phase shows it, and a table of
it would repeat one number."""
from __future__ import annotations

from rich.console import Console

from gpt2trace.cli.tables import Col, print_table


def render_memory(out: Console, mem: dict | None, top: int) -> None:
    if not mem:
        return
    print_table(out, "Resident memory per rank (sampled at phase ends)",
                [Col("rank", label=True), Col("peak MiB"), Col("reached after", label=True), Col("step"),
                 Col("micro-batch"), Col("lowest MiB")],
                [(str(r["rank"]), _mb(r["peak_bytes"]), r["phase"], _opt(r["step"]), _opt(r["microstep"]),
                  _mb(r["min_bytes"])) for r in mem["per_rank"][:top]])


def _mb(nbytes) -> str:
    return "n/a" if nbytes is None else f"{nbytes / 2**20:,.1f}"


def _opt(v) -> str:
    return "none" if v is None else str(v)
