"""`gpt2trace analyze TRACE [TRACE...]`: POP efficiencies, imbalance, waits and their root cause, occupancy.

A thin layer over `analysis.analyze`: parses the options, calls it, renders tables (gpt2trace.cli.tables) or
writes JSON. The analyses load inside the command, so the CLI starts fast.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpt2trace.cli import limits
from gpt2trace.cli.common import TRACE_FORMATS, console, err_console, fail, json_output, output, plain, trace_files
from gpt2trace.cli.tables import Col, print_table
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.limits import GROUP_RECORDS

TRACES_HELP = f"Trace file(s): {TRACE_FORMATS}; with several, a model-factors table with the first as reference."


def analyze(
    traces: Annotated[list[Path], typer.Argument(
        exists=True, metavar="TRACE", help=TRACES_HELP)],
    json_out: Annotated[Path | None, typer.Option(
        "--json", metavar="PATH", help="Write the results as JSON to PATH ('-' for stdout, which replaces the "
        "tables).")] = None,
    steps: Annotated[str | None, typer.Option(
        "--steps", metavar="A:B", help="Steps A:B to analyze (B excluded, as in Python). Default: all but the "
        "first (warm-up).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, metavar="N", help="Rows per table and findings to show.")] = 10,
    peak_gflops: Annotated[float | None, typer.Option(
        "--peak-gflops", metavar="GFLOPS", help="sgemm GFLOP/s per core for MFU (a positive number), instead of "
        "the peak stored in the trace.")] = None,
    html_out: Annotated[Path | None, typer.Option(
        "--html", metavar="PATH", help="Also write the interactive HTML report of the trace to PATH (one "
        "trace).")] = None,
    group_records: Annotated[int, typer.Option(
        "--group-records", min=1, metavar="N", help="A Parquet trace of more records is read group of ranks by "
        "group of ranks of at most N records each (about 250 bytes of memory each at the peak); under mpiexec the "
        "groups are shared among the processes.")] = GROUP_RECORDS,
) -> None:
    """Where the time went: POP efficiencies, load imbalance, MPI waits and their cause, thread occupancy."""
    if html_out is not None and len(traces) > 1:
        fail("--html takes one trace; run gpt2trace report on each trace")
    if peak_gflops is not None:
        with limits.refused():
            limits.peak_gflops(peak_gflops)
    inputs = trace_files(traces)
    json_target = json_output(json_out, inputs)
    to_stdout = json_target is not None and json_target.to_stdout
    html_file = output(html_out, inputs, "--html") if html_out is not None else None
    if json_target and json_target.file and html_file and json_target.file.path.resolve() == html_file.path.resolve():
        fail(f"--json and --html both name {html_out}; give each its own file")

    from analysis.analyze import many
    from analysis.window import WindowError, parse_steps
    from gpt2trace.cli.grouped import Processes, analyze_file, readable
    from gpt2trace.cli.progress import progress
    processes = Processes.of_job()
    with contextlib.ExitStack() as imports:         # big .prv files' temporary imports, kept for the report
        try:
            if steps is not None:
                parse_steps(steps)
            results, loaded, read = [], [], []
            for p in traces:
                source, shown = imports.enter_context(readable(p, processes, group_records))
                with progress(f"analyzing {p}", unit="records read") as advance:
                    res, trace = analyze_file(source, processes, steps, top, peak_gflops, advance, group_records,
                                              shown)
                results.append(res)
                loaded.append(trace)
                read.append((source, shown))
        except (TraceError, WindowError, OutputError) as exc:
            if not processes.first:        # process 0 says it; the others leave quietly
                raise typer.Exit(code=2) from None
            fail(str(exc))
        if not processes.first:
            return
        result = many(results)
        said = err_console if to_stdout else console            # where "written to" lines go
        try:
            if json_target is not None:
                json_target.write(result if len(traces) > 1 else result["traces"][0], said)
            if html_file is not None:
                from gpt2trace.report import write as write_report
                from gpt2trace.report import write_file
                if loaded[0] is not None:
                    write_report(loaded[0], html_file.path, result=result["traces"][0], steps=steps, top=top)
                else:                      # the trace was analyzed group by group: the report reads it so too
                    source, shown = read[0]
                    write_file(source, html_file.path, shown=shown, result=result["traces"][0], steps=steps,
                               top=top)
                said.print(f"report: {html_file.shown()}", soft_wrap=True)
        except OutputError as exc:
            fail(str(exc))
    if not to_stdout:
        for res in result["traces"]:
            render(console, res, top)
        if "scaling" in result:
            render_scaling(console, result["scaling"], result["scaling_work_unit"])


# The declared sections (analysis.registry) whose tables `render` places among the others; the rest come last
PLACED = ("memory", "comm_dimensions")


def render(out: Console, res: dict, top: int) -> None:
    """The result's tables; a section that was not computed (None, named in the warnings) is left out."""
    # the analyses behind these imports (NumPy, pandas): not at the CLI's start-up
    from gpt2trace.cli.section_tables import render_section, render_sections
    from gpt2trace.format.communicators import WORLD_NAME
    p = res["pop"]
    out.rule(Text(plain(res["trace"]), style="bold"))
    for w in res["warnings"]:
        out.print(Text.assemble(("warning:", "yellow"), " ", plain(w)), overflow="fold")
    if res["summary"] is not None:
        render_summary(out, res, top)
    if res.get("pipeline"):
        render_pipeline(out, res["pipeline"], top)
    render_section(out, res, "memory", top)
    levels = (p, p.get("mpi") or {}, p.get("threads") or {})
    pop_rows = [(label, *(_pct(lv[key]) if lv.get(key) is not None else None for lv in levels))
                for key, label in _POP_ROWS]
    shown = [r for r in pop_rows if any(r[1:])]     # serialization and transfer exist only with MPI to replay
    if shown:
        print_table(out, "POP efficiencies", [Col("", label=True), Col("all threads"), Col("MPI level"),
                                              Col("thread level")], shown)
    else:                                           # said, not an empty table
        out.print("POP efficiencies: not defined: no thread is Running in the analyzed window", overflow="fold")
    if p.get("openmp"):
        omp = p["openmp"]
        regions = (f"task graphs as {omp['regions']} regions" if res.get("tasks")
                   else f"{omp['regions']} parallel region executions")
        _pairs(out, f"POP's OpenMP model ({regions})",
               [(label, _pct(omp.get(key))) for key, label in _OPENMP_ROWS])
    # the ideal-network times need MPI to replay: said rather than left out, so their absence is not a mystery
    times = [(label, _num(p[key], " s") if p.get(key) is not None else "no MPI to replay")
             for key, label in _POP_TIMES if p.get(key) is not None or key in _REPLAYED_TIMES]
    if times:
        _pairs(out, "POP times", times)
    print_table(out, "Time per thread state (all threads)",
                [Col("state", label=True, bare=True), Col("seconds"), Col("share")],
                [(r["name"], _num(r["seconds"]), _pct(r["share"])) for r in res["states"]["totals"]])
    print_table(out, "Load imbalance (by time lost)",
                [Col("kernel", label=True, bare=True), Col("layer", label=True), Col("across", label=True),
                 Col("mean s"), Col("max s"), Col("max/mean"), Col("lost s"), Col("slowest", label=True)],
                [(r["kernel"], _layer(r["layer"], "all"), _across(r), _num(r["mean_s"]), _num(r["max_s"]),
                  _num(r["imbalance"]), _num(r["lost_s"]), _slowest(r)) for r in (res["imbalance"] or [])[:top]])
    if res["waits"]["calls"]:
        print_table(out, "MPI calls",
                    [Col("call", label=True, bare=True), Col("group", label=True), Col("wait state", label=True),
                     Col("count"), Col("bytes"), Col("total s"), Col("wait s"), Col("transfer s"), Col("GB/s"),
                     Col("hidden share")],
                    [(r["name"], r["group"], r["wait_state"], _int(r["count"]), _int(r["bytes"]), _num(r["total_s"]),
                      _num(r["wait_s"]), _num(r["transfer_s"]), _num(r["bandwidth_gb_s"]), _pct(r["hidden_fraction"]))
                     for r in res["waits"]["calls"][:top]])
        render_section(out, res, "comm_dimensions", top)
        if any(g["group"] != WORLD_NAME for g in res["waits"].get("groups") or []):    # else: the calls table again
            print_table(out, "Communication per group (all communicators of one name)",
                        [Col("group", label=True), Col("comms"), Col("ranks"), Col("calls"), Col("bytes"),
                         Col("MPI s"), Col("wait s"), Col("share")],
                        [(r["group"], _int(r["communicators"]), _int(r["ranks"]), _int(r["calls"]), _int(r["bytes"]),
                          _num(r["time_s"]), _num(r["wait_s"]), _pct(r["share"])) for r in res["waits"]["groups"]])
        render_comm_matrix(out, res["comm_matrix"], top)
        print_table(out, "Root causes of waits",
                    [Col("group", label=True), Col("rank", label=True), Col("kernel", label=True, bare=True),
                     Col("layer", label=True), Col("wait s"), Col("waits"), Col("share")],
                    [(r["group"], r["rank"], r["kernel"], _layer(r["layer"], "none"), _num(r["wait_s"]),
                      _int(r["waits"]), _pct(r["share"])) for r in (res["root_causes"] or [])[:top]])
    occ = res["occupancy"]
    print_table(out, "Thread occupancy per rank",
                [Col("rank", label=True), Col("threads"), Col("mean occupancy"), Col("serial s"),
                 Col("serial share")],
                [(r["rank"], _int(r["threads"]), _num(r["mean_occupancy"]), _num(r["serial_s"]),
                  _pct(r["serial_fraction"])) for r in occ["per_rank"][:top]])
    print_table(out, "Kernels by Synchronization time",
                [Col("kernel", label=True, bare=True), Col("layer", label=True), Col("wall s"),
                 Col("mean occupancy"), Col("sync s"), Col("fork s")],
                [(r["kernel"], _layer(r["layer"], "none"), _num(r["wall_s"]), _num(r["mean_occupancy"]),
                  _num(r["sync_s"]), _num(r["fork_s"])) for r in occ["per_kernel"][:top]])
    if any(r["layer"] is None for r in (res["root_causes"] or [])[:top] + occ["per_kernel"][:top]):
        out.print("layer none: a kernel outside the transformer blocks (encoder, loss, AdamW) or no kernel at all",
                  style="dim", overflow="fold")
    if res.get("critical_path"):
        render_critical_path(out, res["critical_path"], top)
    if res.get("tasks"):
        render_tasks(out, res["tasks"], top)
    render_sections(out, res, top, PLACED)
    _findings(out, (res["findings"] or [])[:top])


def render_summary(out: Console, res: dict, top: int) -> None:
    s = res["summary"]
    rows = [("runtime", _num(s["runtime_s"], " s")),
            ("steps", f"{s['steps']} ({s['first_step']}..{s['last_step']})" if s["steps"] else "no step info"),
            ("ranks x threads", f"{s['ranks']} x {s['threads_per_rank']}"),
            ("parallel dimensions", s.get("degrees")),
            ("step time median", _num(s["step_s_median"], " s")),
            ("step time min / max", f"{_num(s['step_s_min'])} / {_num(s['step_s_max'])} s"),
            ("tokens/s", _num(s["tokens_per_s"])),
            ("model GFLOP/s (per core)", f"{_num(s['achieved_gflops'])} ({_num(s['achieved_gflops_per_core'])})"),
            ("MFU", _pct(s["mfu"])),
            (f"TFLOPS per core, study's 2N x {s.get('study_passes', 3)} formula", _num(s.get("study_tflops_per_core"))),
            ("TFLOPS per core executed", _num(s.get("hardware_tflops_per_core")))]
    c = res.get("counters") or {}
    if c.get("ipc") is not None:
        rows += [("useful IPC", _num(c["ipc"])), ("useful frequency", _num(c["frequency_ghz"], " GHz"))]
    _pairs(out, "Summary", rows)
    if s["phases"]:
        print_table(out, "Phases", [Col("phase", label=True, bare=True), Col("count"), Col("total s"),
                                    Col("mean s"), Col("share")],
                    [(r["phase"], _int(r["count"]), _num(r["total_s"]), _num(r["mean_s"]), _pct(r["share"]))
                     for r in s["phases"][:top]])


def render_tasks(out: Console, tasks: dict, top: int) -> None:
    """A task-based run (analysis.tasks): the graph's bound and parallelism, the runtime's shares, what is on the
    critical paths, the task sizes (docs/tasks.md)."""
    t = tasks["totals"]
    _pairs(out, "Tasks (sums over the analyzed steps and ranks)", [
        ("tasks, threads per rank", f"{_int(t['tasks'])}, {_int(t['threads'])}"),
        ("task time", _num(t["task_s"], " s")),
        ("runtime (first task start to last end)", _num(t["runtime_s"], " s")),
        ("critical path of the task graph", _num(t["critical_path_s"], " s")),
        ("speed-up bound (runtime / critical path)", _num(t["speedup_bound"], "x")),
        ("average parallelism (task time / critical path)", _num(t["parallelism"])),
        ("mean tasks ready / running", f"{_num(t['mean_ready'])} / {_num(t['mean_running'])}"),
        ("runtime overhead (Scheduling share)", _pct(t["scheduling_share"])),
        ("runtime cost per task, median task", f"{_us(t['per_task_runtime_s'])}, {_us(t['median_task_s'])}"),
        ("idle share", _pct(t["idle_share"])),
        ("starved share (idle, too few ready)", _pct(t["starved_share"]))])
    if tasks["path_kernels"]:
        print_table(out, "On the task graph's critical paths",
                    [Col("kernel", label=True, bare=True), Col("layer", label=True), Col("tasks"), Col("seconds"),
                     Col("share")],
                    [(r["name"], _layer(r["layer"], "none"), _int(r["tasks"]), _num(r["seconds"]), _pct(r["share"]))
                     for r in tasks["path_kernels"][:top]])
    h = tasks["histogram"]
    every = [i for i, k in enumerate(h["kernel"]) if k == h["kernel"][0] and h["count"][i]]
    print_table(out, "Task sizes (all tasks, log bins)",
                [Col("duration", label=True), Col("tasks"), Col("seconds"), Col("share")],
                [(f"{_us(h['lo_s'][i])} - {_us(h['hi_s'][i])}", _int(h["count"][i]), _num(h["seconds"][i]),
                  _pct(h["seconds"][i] / t["task_s"] if t["task_s"] else None)) for i in every])


def render_comm_matrix(out: Console, matrix: dict, top: int) -> None:
    """The rank pairs that exchange the most bytes, per communicator (analysis.comm_matrix)."""
    if matrix and matrix["communicators"]:
        print_table(out, "Communication matrix (top rank pairs by bytes)",
                    [Col("group", label=True), Col("source -> destination", label=True), Col("bytes"),
                     Col("messages"), Col("seconds")],
                    [(r["group"], f"{r['src']} -> {r['dst']}", _int(r["bytes"]), _int(r["messages"]),
                      _num(r["time_s"])) for r in matrix["communicators"][:top]])


def render_critical_path(out: Console, cp: dict, top: int) -> None:
    """The critical path's length against the analyzed time, the threads it runs through, and what is on it."""
    lanes = ", ".join(f"{r['rank']}.{r['thread']} {_pct(r['share'])}" for r in cp["lanes"][:4])
    more = len(cp["lanes"]) - 4
    _pairs(out, "Critical path", [
        ("length (analyzed time)", f"{_num(cp['length_s'], ' s')} ({_num(cp['window_s'], ' s')})"),
        ("rank switches", _int(cp["rank_switches"])),
        ("threads (rank.thread)", lanes + (f", {more} more" if more > 0 else "")),
        *([("clock violations", _int(cp["clock_violations"]))] if cp["clock_violations"] else [])])
    print_table(out, "On the critical path",
                [Col("what", label=True, bare=True), Col("layer", label=True), Col("kind", label=True),
                 Col("seconds"), Col("share")],
                [(r["name"], _layer(r["layer"], "none" if r["category"] in ("kernel", "fork/join") else ""),
                  r["category"], _num(r["time_s"]), _pct(r["share"])) for r in cp["items"][:top]])


def render_pipeline(out: Console, pp: dict, top: int) -> None:
    """The bubble per stage against theory, the Late Sender waits between stages and what the late stage computed
    (times per step, in ms: mean over the analyzed steps and the pipelines)."""
    from analysis.pipeline import ranges
    schedule = pp["schedule"] or "schedule not recorded"
    recompute = {True: ", recompute", False: "", None: ""}[pp["recompute"]]
    _pairs(out, "Pipeline", [
        ("stages x pipelines", f"{pp['stages']} x {pp['pipelines']} ({schedule}{recompute})"),
        ("micro-batches (M)", str(pp["micro_batches"])),
        ("ideal bubble (P-1)/(M+P-1)", _pct(pp["ideal_bubble"])),
        ("bubble, mean over stages", _pct(pp["bubble"])),
        ("bubble's share of the step", _pct(pp["of_step"])),
        ("stage imbalance, busy max/mean", _num(pp["stage_imbalance"])),
        ("Late Sender waits in the window", _num(pp["late_sender_s"], " s"))])
    if not pp["per_stage"]:
        out.print("No analyzed step holds a whole pipeline (its first forward and last backward): no bubble to "
                  "measure.", overflow="fold")
    else:
        print_table(out, "Pipeline bubble per stage (ms per step; bubble = window not computing)",
                    [Col("stage", label=True), Col("ranks", label=True), Col("busy ms"), Col("p2p ms"),
                     Col("other MPI ms"), Col("idle ms"), Col("bubble"), Col("ideal"), Col("of step")],
                    [(str(r["stage"]), ", ".join(map(str, r["ranks"])), _ms(r["busy_s"]), _ms(r["neighbour_s"]),
                      _ms(r["other_mpi_s"]), _ms(r["idle_s"]), _pct(r["bubble"]), _pct(r["ideal"]),
                      _pct(r["of_step"])) for r in pp["per_stage"]])
    if pp["late_senders"]:
        print_table(out, "Late Sender waits between stages",
                    [Col("stage", label=True), Col("waits for", label=True), Col("waits"), Col("wait s"),
                     Col("ms per step"), Col("worst micro-batch", label=True)],
                    [(str(r["stage"]), f"{'activations' if r['direction'] == 'forward' else 'gradients'} of stage "
                      f"{r['sender_stage']}", _int(r["waits"]), _num(r["wait_s"]), _ms(r["per_step_s"]),
                      "none" if r["worst_microbatch"] is None else
                      f"{r['worst_microbatch']} ({_num(r['worst_microbatch_s'])} s)") for r in pp["late_senders"]])
        print_table(out, "Root causes: what the late stage computed before its send",
                    [Col("stage", label=True), Col("from", label=True), Col("kernel", label=True, bare=True),
                     Col("layer", label=True), Col("micro-batches", label=True), Col("wait s"), Col("share")],
                    [(str(r["stage"]), str(r["sender_stage"]), r["kernel"], _layer(r["layer"], "none"),
                      ranges(r["microbatches"]) or "none", _num(r["wait_s"]), _pct(r["share"]))
                     for r in pp["causes"][:top]])


# The rows of each POP table: (result key, label), indented as the factors multiply.
_POP_ROWS = (("parallel_efficiency", "Parallel efficiency"), ("load_balance", "  Load balance"),
             ("communication_efficiency", "  Communication efficiency"),
             ("serialization_efficiency", "    Serialization efficiency"),
             ("transfer_efficiency", "    Transfer efficiency"))
_OPENMP_ROWS = (("thread_efficiency", "Thread efficiency"), ("serial_region_efficiency", "  Serial region efficiency"),
                ("region_efficiency", "  Parallel region efficiency"),
                ("region_load_balance", "    Load balance in regions"),
                ("region_scheduling_efficiency", "    Scheduling efficiency in regions"))
_POP_TIMES = (("runtime_s", "runtime"), ("ideal_runtime_s", "runtime, ideal network"),
              ("useful_total_s", "useful duration, total over threads"), ("useful_avg_s", "useful duration, mean"),
              ("useful_max_s", "useful duration, max"), ("useful_ideal_max_s", "useful duration (ideal, max)"))
_REPLAYED_TIMES = ("ideal_runtime_s", "useful_ideal_max_s")
# Model factors as BSC's modelfactors prints them: one row per factor, one column per trace.
_SCALING_ROWS = (("speedup", "Speedup", "x"), ("global_efficiency", "Global efficiency", "%"),
                 ("parallel_efficiency", "  Parallel efficiency", "%"), ("load_balance", "    Load balance", "%"),
                 ("communication_efficiency", "    Communication efficiency", "%"),
                 ("serialization_efficiency", "      Serialization efficiency", "%"),
                 ("transfer_efficiency", "      Transfer efficiency", "%"),
                 ("serial_region_efficiency", "    Serial region efficiency", "%"),
                 ("region_efficiency", "    Parallel region efficiency", "%"),
                 ("computation_scalability", "  Computation scalability", "%"),
                 ("ipc_scalability", "    IPC scalability", "%"),
                 ("instruction_scalability", "    Instruction scalability", "%"),
                 ("frequency_scalability", "    Frequency scalability", "%"),
                 ("processes", "Processes", "n"), ("threads", "Threads per process", "n"),
                 ("runtime_s", "Runtime (s)", "n"), ("ideal_runtime_s", "Runtime, ideal network (s)", "n"),
                 ("useful_total_s", "Useful duration, total (s)", "n"),
                 ("useful_ideal_max_s", "Useful duration (ideal, max) (s)", "n"),
                 ("ipc", "Average IPC", "n"), ("frequency_ghz", "Average frequency (GHz)", "n"))


def render_scaling(out: Console, rows: list[dict], unit: str) -> None:
    """The model factors with traces as numbered columns, and under the table which file each number is (in
    full: two traces may differ only at the end of their paths). A factor no trace has is left out."""
    cols = [Col("", label=True)] + [Col(f"trace {i}") for i in range(1, len(rows) + 1)]
    table = [(label, *(_factor(r.get(key), kind) for r in rows)) for key, label, kind in _SCALING_ROWS
             if any(r.get(key) is not None for r in rows)]
    print_table(out, f"Model factors (trace 1 = reference, work per {unit})", cols, table)
    for i, r in enumerate(rows, 1):
        out.print(f"trace {i}: {plain(r['trace'])}", soft_wrap=True)
    if all(r.get("ipc") is None for r in rows):
        out.print("IPC, instruction and frequency scalability need hardware counters (PAPI_TOT_INS, PAPI_TOT_CYC "
                  "in an imported Extrae trace); these traces have none.", overflow="fold")


def _pairs(out: Console, title: str, rows: list[tuple[str, str]]) -> None:
    print_table(out, title, [Col("", label=True), Col("")], rows, show_header=False)


def _findings(out: Console, findings: list[dict]) -> None:
    out.print(Text("Findings", style="bold"))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")
    for i, f in enumerate(findings, 1):
        grid.add_row(f"{i}.", Text.assemble(plain(f["text"]), " ", (f"({plain(f['metric'])})", "dim")))
    out.print(grid)


def _across(row: dict) -> str:
    return "ranks" if row["scope"] == "ranks" else f"threads of rank {row['rank']}"


def _slowest(row: dict) -> str:
    """The slowest rank, or thread ('rank.thread' in the result), spelled out: 1.0 reads like a number."""
    rank, _, thread = str(row["slowest"]).partition(".")
    return f"rank {rank} thread {thread}" if thread else f"rank {rank}"


def _layer(layer, none: str) -> str:
    return none if layer is None else str(layer)


def _factor(v, kind: str) -> str | None:
    """A model-factor cell: a percentage (%), a ratio (x) or a plain number (n)."""
    if v is None:
        return None
    if kind == "%":
        return _pct(v)
    if kind == "x":
        return f"{v:.3f}"
    return _int(v) if isinstance(v, int) else _num(v)


def _us(seconds) -> str:
    """Microseconds with 3 significant digits (a task's size)."""
    return "n/a" if seconds is None else f"{1e6 * seconds:.3g} us"


def _int(v) -> str:
    return "n/a" if v is None else f"{v:,}"


def _ms(seconds) -> str:
    """Milliseconds with 4 significant digits, and whole ones with thousands separators from 10 s up."""
    if seconds is None:
        return "n/a"
    ms = 1e3 * seconds
    return f"{ms:.4g}" if abs(ms) < 1e4 else f"{ms:,.0f}"


def _num(v, unit: str = "") -> str:
    return "n/a" if v is None else f"{v:.4g}{unit}"


def _pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"
