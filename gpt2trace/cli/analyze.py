"""`gpt2trace analyze TRACE [TRACE...]`: POP efficiencies, imbalance, waits and their root cause, occupancy.

A thin layer over `analysis.analyze`: parses the options, calls it, renders rich tables or writes JSON.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from analysis.window import WindowError, parse_steps
from gpt2trace.cli.common import console, err_console, fail
from gpt2trace.format.errors import TraceError
from gpt2trace.interop.loader import load
from gpt2trace.format.schema import BYTES, LAYER, NAME, RANK


def analyze(
    traces: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, help="Trace file(s) (Parquet); "
                                                 "with several, a model-factors table with the first as reference.")],
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the results as JSON to PATH ('-' for "
                                                     "stdout, which replaces the tables).", dir_okay=False)] = None,
    steps: Annotated[Optional[str], typer.Option("--steps", help="Steps A:B to analyze (B excluded, as in Python). "
                                                 "Default: all but the first (warm-up).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Rows per table and findings to show.")] = 10,
    peak_gflops: Annotated[Optional[float], typer.Option("--peak-gflops", min=0.0, help="sgemm GFLOP/s per core "
                                                         "for MFU, instead of the peak stored in the trace.")] = None,
    html_out: Annotated[Optional[Path], typer.Option("--html", dir_okay=False, help="Also write the interactive "
                                                     "HTML report of the trace to PATH (one trace).")] = None,
) -> None:
    """Where the time went: POP efficiencies, load imbalance, MPI waits and their cause, thread occupancy."""
    if html_out is not None and len(traces) > 1:
        fail("--html takes one trace; run gpt2trace report on each trace")
    from analysis.analyze import analyze_many   # here, not at start-up: it loads Numba (analysis.replay)
    try:
        if steps is not None:
            parse_steps(steps)
        loaded = [load(p) for p in traces]
        result = analyze_many(loaded, steps=steps, top=top, peak_gflops=peak_gflops)
    except (TraceError, WindowError) as exc:
        fail(str(exc))
    to_stdout = json_out is not None and str(json_out) == "-"
    if json_out is not None:
        text = json.dumps(result if len(traces) > 1 else result["traces"][0], indent=1)
        if to_stdout:
            sys.stdout.write(text + "\n")
        else:
            try:
                json_out.write_text(text + "\n")
            except OSError as exc:
                fail(f"--json {json_out}: cannot write ({exc.strerror})")
    if html_out is not None:
        from gpt2trace.report import write as write_report
        try:
            write_report(loaded[0], html_out, result=result["traces"][0], steps=steps, top=top)
        except OSError as exc:
            fail(f"--html {html_out}: cannot write ({exc.strerror})")
        (err_console if to_stdout else console).print(f"report: {html_out}", markup=False, soft_wrap=True)
    if not to_stdout:
        out = console
        for res in result["traces"]:
            render(out, res, top)
        if "scaling" in result:
            out.print(_table("Model factors (first trace = reference, work per " + result["scaling_work_unit"] + ")",
                             result["scaling"], ["trace", "processes", "threads", "runtime_s", "speedup",
                                                 "parallel_efficiency", "load_balance", "communication_efficiency",
                                                 "computation_scalability", "global_efficiency"], top=None))


def render(out: Console, res: dict, top: int) -> None:
    s, p = res["summary"], res["pop"]
    out.rule(f"[bold]{res['trace']}")
    for w in res["warnings"]:
        out.print(f"[yellow]warning:[/] {w}", soft_wrap=True)
    rows = [("runtime", f"{s['runtime_s']:.4g} s"),
            ("steps", f"{s['steps']} ({s['first_step']}..{s['last_step']})" if s["steps"] else "no step info"),
            ("ranks x threads", f"{s['ranks']} x {s['threads_per_rank']}"),
            ("step time median", _num(s["step_s_median"], " s")), ("step time min / max",
                                                                 f"{_num(s['step_s_min'])} / {_num(s['step_s_max'])} s"),
            ("tokens/s", _num(s["tokens_per_s"])), ("model GFLOP/s (per core)",
                                                    f"{_num(s['achieved_gflops'])} ({_num(s['achieved_gflops_per_core'])})"),
            ("MFU", _pct(s["mfu"]))]
    c = res.get("counters") or {}
    if c.get("ipc") is not None:
        rows += [("useful IPC", _num(c["ipc"])), ("useful frequency", f"{_num(c['frequency_ghz'])} GHz")]
    out.print(_pairs("Summary", rows))
    if s["phases"]:
        out.print(_table("Phases", s["phases"], ["phase", "count", "total_s", "mean_s", "share"], top))
    pop = Table(title="POP efficiencies", title_justify="left")
    for col in ("", "all threads", "MPI level", "thread level"):
        pop.add_column(col, justify="right" if col else "left")
    for key, label in (("parallel_efficiency", "Parallel efficiency"), ("load_balance", "  Load balance"),
                       ("communication_efficiency", "  Communication efficiency")):
        pop.add_row(label, _pct(p[key]), _pct(p["mpi"][key]), _pct(p["threads"][key]))
    pop.add_row("    Serialization efficiency", _pct(p["serialization_efficiency"]), "", "")
    pop.add_row("    Transfer efficiency", _pct(p["transfer_efficiency"]), "", "")
    out.print(pop)
    out.print(_table("Time per thread state (all threads)", res["states"]["totals"], ["name", "seconds", "share"],
                     None))
    out.print(_table("Load imbalance (by time lost)", res["imbalance"],
                     ["scope", "kernel", LAYER, RANK, "mean_s", "max_s", "imbalance", "lost_s", "slowest"], top))
    if res["waits"]["calls"]:
        out.print(_table("MPI calls", res["waits"]["calls"], [NAME, "wait_state", "count", BYTES, "total_s",
                                                              "wait_s", "transfer_s", "bandwidth_gb_s",
                                                              "hidden_fraction"], top))
        out.print(_table("Root causes of waits", res["root_causes"], [RANK, "kernel", LAYER, "wait_s", "waits",
                                                                      "share"], top))
    occ = res["occupancy"]
    out.print(_table("Thread occupancy per rank", occ["per_rank"],
                     [RANK, "threads", "mean_occupancy", "serial_s", "serial_fraction"], top))
    out.print(_table("Kernels by Synchronization time", occ["per_kernel"],
                     ["kernel", LAYER, "wall_s", "mean_occupancy", "sync_s", "fork_s"], top))
    out.print("[bold]Findings[/]")
    for i, f in enumerate(res["findings"][:top], 1):
        out.print(f"{i:2d}. {f['text']} [dim]({f['metric']})[/]", soft_wrap=True)


def _pairs(title: str, rows: list[tuple[str, str]]) -> Table:
    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column()
    t.add_column(justify="right")
    for k, v in rows:
        t.add_row(k, v)
    return t


def _table(title: str, rows: list[dict], cols: list[str], top: int | None) -> Table:
    t = Table(title=title, title_justify="left")
    for c in cols:
        text = c in ("scope", "kernel", NAME, "wait_state", "trace", "phase")
        t.add_column(c, justify="left" if text else "right", min_width=12 if text else None)
    for r in rows[:top] if top else rows:
        t.add_row(*(_cell(c, r.get(c)) for c in cols))
    return t


def _cell(col: str, v) -> str:
    if v is None:
        return ""
    if col in ("share", "serial_fraction", "hidden_fraction") or col.endswith("_efficiency") \
            or col in ("load_balance", "computation_scalability"):
        return _pct(v)
    return _num(v) if isinstance(v, float) else str(v)


def _num(v, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:.4g}{unit}"


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"
