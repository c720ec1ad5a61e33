"""`gpt2trace whatif TRACE`: the trace's run replayed on another network, balanced, or with kernels scaled.

A thin layer over `analysis.whatif`: parses the model, calls it, prints the measured and predicted step time and
POP factors side by side or writes JSON.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from gpt2trace.cli.common import TRACE_FORMATS, console, err_console, fail, json_output, plain, trace_files
from gpt2trace.cli.tables import Col, print_table
from gpt2trace.format.errors import TraceError

_POP_ROWS = (("parallel_efficiency", "parallel efficiency"), ("load_balance", "  load balance"),
             ("communication_efficiency", "  communication eff."), ("serialization_efficiency", "    serialization"),
             ("transfer_efficiency", "    transfer"))


def whatif(
    trace: Annotated[Path, typer.Argument(exists=True, metavar="TRACE",
                                          help=f"Trace file: {TRACE_FORMATS}.")],
    bandwidth: Annotated[str | None, typer.Option(
        "--bandwidth", metavar="GB/s", help="Link bandwidth: a number in GB/s, or with a unit (10Gb/s, 800MB/s). "
        "Default: infinite.")] = None,
    latency: Annotated[str | None, typer.Option(
        "--latency", metavar="us", help="Message latency: a number in microseconds, or with a unit (800ns, 1ms). "
        "Default: 0.")] = None,
    cluster: Annotated[str | None, typer.Option(
        "--cluster", metavar="SPEC", help='The cluster `gpt2trace run --emulate-network` emulates, e.g. '
        '"nodes=5,link=10Gb/s,latency=5us": ranks in blocks on the nodes, only traffic between nodes costs, rooted '
        "collectives flat through the root node's link. Instead of --bandwidth/--latency.")] = None,
    balance: Annotated[bool, typer.Option(
        "--balance", help="Give every rank the mean over ranks of each compute burst of each step.")] = False,
    scale: Annotated[list[str] | None, typer.Option(
        "--scale", metavar="KERNEL=FACTOR", help="Multiply a kernel's time by FACTOR (repeatable).")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", metavar="A:B", help="Steps A:B to replay (B excluded). Default: all but the first (warm-up).")
    ] = None,
    json_out: Annotated[Path | None, typer.Option(
        "--json", metavar="PATH", help="Write the results as JSON to PATH ('-' for stdout, which replaces the "
        "table).")] = None,
) -> None:
    """Predict the step time and POP factors of the run on another network, balanced, or with kernels scaled."""
    from gpt2trace.format.network import IDEAL, Network, NetworkError, parse_bandwidth, parse_latency
    nodes = 0
    if cluster is not None:
        from gpt2trace.record.network import parse
        from trainer.errors import ConfigError
        if bandwidth is not None or latency is not None:
            fail("--cluster describes the network itself: drop --bandwidth/--latency")
        try:
            emulated = parse(cluster)     # a key given twice too
        except ConfigError as exc:
            fail(f"--cluster {exc.value}: {exc.requirement}")
        network, nodes = emulated.network, emulated.nodes
    else:
        try:
            network = Network(parse_bandwidth(bandwidth) if bandwidth is not None else IDEAL.bandwidth_bps,
                              parse_latency(latency) if latency is not None else IDEAL.latency_ns)
        except NetworkError as exc:
            fail(str(exc))
    factors = tuple(_factor(s) for s in scale or ())
    json_target = json_output(json_out, trace_files([trace]))

    from analysis.analyze import jsonable
    from analysis.whatif import Model, WhatIfError
    from analysis.whatif import whatif as predict
    from analysis.window import WindowError, parse_steps
    from gpt2trace.interop.loader import load
    try:
        if steps is not None:
            parse_steps(steps)
        result = jsonable(predict(load(trace), Model(network, balance, factors, nodes), steps))
    except (TraceError, WindowError, WhatIfError) as exc:
        fail(str(exc))
    if json_target is not None:
        json_target.write(result)
        if json_target.to_stdout:
            return
    render(result)


def _factor(spec: str) -> tuple[str, float]:
    name, eq, value = spec.rpartition("=")
    try:
        factor = float(value)
    except ValueError:
        factor = math.nan
    if not eq or not name or not (math.isfinite(factor) and factor >= 0):
        fail(f"--scale {spec}: expected KERNEL=FACTOR with a factor >= 0, for example matmul_forward=0.5")
    return name, factor


def render(res: dict) -> None:
    m = res["model"]
    bw = "infinite" if m["bandwidth_GBps"] is None else f"{m['bandwidth_GBps']:.4g} GB/s"
    scaled = ", ".join(f"{k} x{v:g}" for k, v in m["scale"].items())
    console.rule(Text(plain(res["trace"]), style="bold"))
    model = f"network {bw}, latency {m['latency_us']:.4g} us" + (", balanced" if m["balance"] else "")
    console.print(Text(plain(model + (f", scaled: {scaled}" if scaled else "")), style="bold"), overflow="fold")
    for w in res["warnings"]:
        err_console.print(Text.assemble(("warning:", "yellow"), " ", plain(w)), overflow="fold")
    st, rt, pm, pp = res["step_time_s"], res["runtime_s"], res["pop"]["measured"], res["pop"]["predicted"]
    rows = [("step time (median)", _num(st["measured"], " s"), _num(st["predicted"], " s"),
             _change(st["measured"], st["predicted"])),
            ("runtime", _num(rt["measured"], " s"), _num(rt["predicted"], " s"),
             _change(rt["measured"], rt["predicted"]))]
    rows += [(label, _pct(pm[key]), _pct(pp[key]), None) for key, label in _POP_ROWS]
    print_table(console, "What-if replay (POP: MPI level, from the bursts)",
                [Col("", label=True), Col("measured"), Col("predicted"), Col("change")], rows)
    if res.get("critical_path"):
        render_paths(res["critical_path"]["measured"], res["critical_path"]["predicted"])


def render_paths(measured: dict, predicted: dict, top: int = 10) -> None:
    """The critical paths of the measured and the predicted run side by side: length, and what is on them (the
    predicted path's largest items first), with their share of each path."""
    def key(item: dict) -> tuple:
        return item["category"], item["name"], item["layer"]

    then = {key(i): i for i in measured["items"]}
    rows = [("length", _num(measured["length_s"], " s"), _num(predicted["length_s"], " s"), None, None)]
    for item in predicted["items"][:top]:
        was = then.get(key(item))
        layer = f" (layer {item['layer']})" if item["layer"] is not None else ""
        kind = "" if item["category"] in ("kernel", "mpi", "serial") else f" {item['category']}"
        rows.append((f"{item['name']}{layer}{kind}", _num(was["time_s"], " s") if was else "-",
                     _num(item["time_s"], " s"), _pct(was["share"]) if was else "-", _pct(item["share"])))
    print_table(console, "Critical path (the predicted run's largest items)",
                [Col("on the path", label=True, bare=True), Col("measured"), Col("predicted"),
                 Col("share before"), Col("share after")], rows)


def _num(v, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:.4g}{unit}"


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _change(a, b) -> str | None:
    return None if not a or b is None else f"{100 * (b / a - 1):+.1f}%"
