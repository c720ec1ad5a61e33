"""HTML of the report's text parts: the header (run configuration, machine), the summary, and the analysis tables
(POP, phases, imbalance, MPI waits, root causes, occupancy, findings), and those of the declared sections
(analysis.registry) from their column specs (`section`). Every value is escaped: names, metadata and file names
come from the trace, which anyone can write.
"""
from __future__ import annotations

import html
from collections.abc import Callable, Collection, Iterable

from analysis.pipeline import FORWARD, ranges
from analysis.registry import SECTIONS
from analysis.sections import REPORT
from gpt2trace.format.communicators import WORLD_NAME

Cell = Callable[[object], str]


def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def num(v, unit: str = "") -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.4g}{unit}"
    return f"{v}{unit}"


def pct(v) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def seconds(v) -> str:
    """A duration in the unit that reads best."""
    if v is None:
        return "n/a"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(v) >= scale:
            return f"{v / scale:.4g} {unit}"
    return f"{v * 1e9:.4g} ns" if v else "0"


def table(rows: Iterable[dict], columns: list[tuple[str, str, Cell]], caption: str | None = None,
          empty: str = "none", css: str = "") -> str:
    """An HTML table: `columns` are (key, header, formatter); text cells left, numbers right."""
    rows = list(rows)
    if not rows:
        return f'<p class="empty">{esc(caption) + ": " if caption else ""}{esc(empty)}</p>'
    head = "".join(f"<th>{esc(label)}</th>" for _, label, _ in columns)
    body = []
    for row in rows:
        cells = []
        for key, _, fmt in columns:
            value = row.get(key)
            cls = "num" if isinstance(value, (int, float)) and not isinstance(value, bool) else "txt"
            cells.append(f'<td class="{cls}">{esc(fmt(value))}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="{esc(css)}">{cap}<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def pairs(items: Iterable[tuple[str, object]], css: str = "kv") -> str:
    """A definition list of label/value pairs (values None are left out)."""
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items if v is not None and v != "")
    return f'<dl class="{esc(css)}">{rows}</dl>'


def run_config(run: dict | None) -> list[tuple[str, object]]:
    """The run configuration in a few readable lines (the raw JSON is in the trace's metadata)."""
    if not run:
        return [("run", "no run metadata in the trace")]
    model, train, par = run.get("model") or {}, run.get("train") or {}, run.get("parallel") or {}
    out = []
    if model:
        params = model.get("num_parameters")
        out.append(("model", f"GPT-2 L={model.get('n_layer')} NH={model.get('n_head')} C={model.get('n_embd')} "
                             f"V={model.get('vocab_size')} maxT={model.get('max_seq_len')}"
                             + (f" ({params:,} parameters)" if isinstance(params, int) else "")))
    if train:
        out.append(("training", f"B={train.get('batch_size')} T={train.get('seq_len')} steps={train.get('steps')} "
                                f"grad_accum={train.get('grad_accum', 1)}"
                                + (f" lr={train['lr']:g}" if isinstance(train.get("lr"), (int, float)) else "")))
    if par:
        out.append(("parallel", ", ".join(f"{k}={v}" for k, v in par.items() if k != "rank")))
    for key in ("data", "init_from"):
        if run.get(key):
            out.append((key.replace("_", " "), run[key]))
    if run.get("synthetic"):
        out.append(("source", "synthetic trace (gpt2trace.testing.synthetic)"))
    return out


def machine(info: dict | None, peak: dict | None) -> list[tuple[str, object]]:
    if not info:
        out = [("machine", "no machine metadata in the trace")]
    else:
        blas = info.get("blas") or {}
        mpi = info.get("mpi")
        packages = info.get("packages") or {}
        out = [("CPU", f"{info.get('cpu')} ({info.get('cores')} cores, {info.get('machine')})"),
               ("host", info.get("hostname")), ("OS", info.get("os")),
               ("threading layer", info.get("threading_layer")),
               ("BLAS", f"{blas.get('library')} {blas.get('version')}, kernel {blas.get('kernel')}" if blas else None),
               ("MPI", (mpi.get("library") or mpi.get("version") or str(mpi)) if isinstance(mpi, dict) else mpi
                or "none"),
               ("Python", info.get("python")),
               ("packages", ", ".join(f"{k} {v}" for k, v in packages.items()))]
    if peak and peak.get("gflops_per_core"):
        out.append(("sgemm peak", f"{peak['gflops_per_core']:.1f} GFLOP/s per core"))
    return out


def summary(res: dict) -> str:
    s = res["summary"]
    steps = f"{s['steps']} ({s['first_step']}..{s['last_step']})" if s.get("steps") else "no step info"
    items = [("analyzed", f"{seconds(res['window']['t0_s'])} to {seconds(res['window']['t1_s'])}"),
             ("runtime", seconds(s["runtime_s"])), ("steps", steps),
             ("ranks x threads", f"{s['ranks']} x {s['threads_per_rank']}"),
             ("parallel dimensions", s.get("degrees")),
             ("step time median (min / max)", f"{seconds(s['step_s_median'])} ({seconds(s['step_s_min'])} / "
                                              f"{seconds(s['step_s_max'])})"),
             ("tokens/s", num(s.get("tokens_per_s"))),
             ("model GFLOP/s (per core)",
              f"{num(s.get('achieved_gflops'))} ({num(s.get('achieved_gflops_per_core'))})"),
             ("MFU", pct(s.get("mfu"))),
             (f"TFLOPS per core, the study's 2N x {s.get('study_passes', 3)} formula",
              num(s.get("study_tflops_per_core"))),
             ("TFLOPS per core executed", num(s.get("hardware_tflops_per_core"))),
             ("parallel efficiency", pct(res["pop"].get("parallel_efficiency")))]
    return pairs(items, "kv summary")


def pop(res: dict) -> str:
    p = res["pop"]
    mpi, threads = p.get("mpi") or {}, p.get("threads") or {}
    rows = [{"metric": label, "all": p.get(key), "mpi": mpi.get(key), "threads": threads.get(key)}
            for key, label in (("parallel_efficiency", "Parallel efficiency"), ("load_balance", "  Load balance"),
                               ("communication_efficiency", "  Communication efficiency"),
                               ("serialization_efficiency", "    Serialization efficiency"),
                               ("transfer_efficiency", "    Transfer efficiency"))]
    blank = lambda v: "" if v is None else pct(v)  # noqa: E731  (a factor a level does not have)
    cols = [("metric", "", str), ("all", "all threads", blank), ("mpi", "MPI level", blank),
            ("threads", "thread level", blank)]
    defined = any(v is not None for r in rows for k, v in r.items() if k != "metric")
    out = (table(rows, cols, css="pop") if defined else
           '<p class="empty">not defined: no thread is Running in the analyzed window</p>')
    omp = p.get("openmp")
    if omp:
        out += table([{"metric": label, "value": omp.get(key)}
                      for key, label in (("thread_efficiency", "Thread efficiency"),
                                         ("serial_region_efficiency", "  Serial region efficiency"),
                                         ("region_efficiency", "  Parallel region efficiency"),
                                         ("region_load_balance", "    Load balance in regions"),
                                         ("region_scheduling_efficiency", "    Scheduling efficiency in regions"))],
                     [("metric", "", str), ("value", f"threads ({omp['regions']} region executions)", pct)],
                     caption="POP's OpenMP model", css="pop")
    times = [("runtime", seconds(p.get("runtime_s"))), ("runtime, ideal network", _sec(p.get("ideal_runtime_s"))),
             ("useful duration, total over threads", seconds(p.get("useful_total_s"))),
             ("useful duration, max", seconds(p.get("useful_max_s"))),
             ("useful duration (ideal, max)", _sec(p.get("useful_ideal_max_s")))]
    return out + pairs(times)


def _sec(v) -> str:
    return "no MPI to replay" if v is None else seconds(v)


def phases(res: dict) -> str:
    return table(res["summary"].get("phases") or [], [("phase", "phase", str), ("count", "count", num),
                                                      ("total_s", "total", seconds), ("mean_s", "mean", seconds),
                                                      ("share", "share of rank time", pct)], empty="no phase records")


def imbalance(res: dict, top: int) -> str:
    return table(res["imbalance"][:top], [("scope", "across", str), ("kernel", "kernel", str),
                                          ("layer", "layer", _opt), ("rank", "rank", _opt),
                                          ("mean_s", "mean", seconds), ("max_s", "max", seconds),
                                          ("imbalance", "max/mean", lambda v: num(v)),
                                          ("lost_s", "time lost", seconds), ("slowest", "slowest", str)],
                 empty="no kernel imbalance")


def waits(res: dict, top: int) -> str:
    w = res["waits"]
    calls = table(w["calls"][:top], [("name", "MPI call", str), ("group", "communicator", str),
                                     ("wait_state", "wait state", _opt),
                                     ("count", "calls", num), ("bytes", "bytes", _opt),
                                     ("total_s", "time", seconds), ("wait_s", "waiting", seconds),
                                     ("transfer_s", "transfer", seconds), ("bandwidth_gb_s", "GB/s", _opt),
                                     ("hidden_fraction", "hidden", lambda v: "" if v is None else pct(v))],
                  caption="MPI calls", empty="no MPI calls in the analyzed window")
    states = table(w["states"], [("wait_state", "wait state", str), ("count", "waits", num),
                                 ("wait_s", "time", seconds), ("share", "share", pct)],
                   caption=f"Wait states (total {seconds(w['total_wait_s'])})", empty="no waits")
    named = any(g["group"] != WORLD_NAME for g in w.get("groups") or [])      # else: the calls table again
    groups = table(w["groups"] if named else [], [("group", "communicator name", str),
                                          ("communicators", "communicators", num), ("ranks", "ranks", num),
                                          ("calls", "calls", num), ("bytes", "bytes", num),
                                          ("time_s", "time in MPI", seconds), ("wait_s", "waiting", seconds),
                                          ("share", "share of MPI time", pct)],
                   caption="Communication per group (every communicator of one name)",
                   empty="every call ran on the world communicator")
    dims = section(res, "comm_dimensions", top)
    causes = table(res["root_causes"][:top], [("group", "communicator", str), ("rank", "rank", num),
                                              ("kernel", "kernel", str),
                                              ("layer", "layer", _opt), ("wait_s", "waits caused", seconds),
                                              ("waits", "waits", num), ("share", "share", pct),
                                              ("text", "meaning", str)],
                   caption="Root causes of the waits", empty="no waits to explain")
    return calls + dims + groups + states + causes


def sections(res: dict, top: int, placed: Collection[str] = ()) -> str:
    """The tables of every declared section in `res` but those `placed` elsewhere, in the registry's order."""
    return "".join(section(res, s.key, top) for s in SECTIONS if s.key not in placed)


def section(res: dict, key: str, top: int) -> str:
    """The tables of the declared section `key`, from their column specs (analysis.sections.Table); one without
    rows says its `empty`, or is left out."""
    out = []
    for spec in next(s for s in SECTIONS if s.key == key).tables:
        rows = spec.of(res.get(key))
        rows = rows[:top] if spec.top else rows
        if rows or spec.empty is not None:
            cols = spec.shown(REPORT)
            values = [{i: c.of(r) for i, c in enumerate(cols)} for r in rows]
            out.append(table(values, [(i, c.label, c.text) for i, c in enumerate(cols)], caption=spec.title,
                             empty=spec.empty or "none"))
    return "".join(out)


def pipeline(res: dict, top: int) -> str:
    """The pipeline's layout and bubble against theory, per stage; the Late Sender waits between stages and what
    the late stage computed (analysis: pipeline; times per step: mean over the analyzed steps and pipelines)."""
    pp = res["pipeline"]
    head = pairs([("stages x pipelines", f"{pp['stages']} x {pp['pipelines']}"),
                  ("schedule", pp["schedule"] or "not recorded"), ("micro-batches (M)", pp["micro_batches"]),
                  ("recompute", {True: "yes", False: "no"}.get(pp["recompute"])),
                  ("ideal bubble (P-1)/(M+P-1)", pct(pp["ideal_bubble"])),
                  ("bubble, mean over stages", pct(pp["bubble"])),
                  ("bubble's share of the step", pct(pp["of_step"])),
                  ("stage imbalance (busy max/mean)", num(pp["stage_imbalance"])),
                  ("Late Sender waits", seconds(pp["late_sender_s"]))])
    stages = table(pp["per_stage"], [("stage", "stage", num), ("ranks", "ranks", _ranks),
                                     ("window_s", "window", seconds), ("busy_s", "busy", seconds),
                                     ("neighbour_s", "p2p MPI", seconds), ("other_mpi_s", "other MPI", seconds),
                                     ("idle_s", "idle", seconds), ("bubble", "bubble", pct),
                                     ("ideal", "ideal", pct), ("of_step", "share of the step", pct),
                                     ("busy_ratio", "busy / mean", num)],
                   caption="Bubble per stage (per step)", empty="no whole step of the pipeline in the window")
    late = table(pp["late_senders"], [("stage", "stage", num), ("direction", "waits for", _direction),
                                      ("sender_stage", "of stage", num), ("waits", "waits", num),
                                      ("wait_s", "waiting", seconds), ("per_step_s", "per step and rank", seconds),
                                      ("worst_microbatch", "worst micro-batch", num),
                                      ("worst_microbatch_s", "its wait", seconds)],
                 caption="Late Sender waits between stages", empty="no stage waited for a late neighbour")
    causes = table(pp["causes"][:top], [("stage", "stage", num), ("sender_stage", "late stage", num),
                                        ("kernel", "kernel", str), ("layer", "layer", _opt),
                                        ("microbatches", "late micro-batches", _ranges),
                                        ("wait_s", "waits caused", seconds), ("share", "share", pct),
                                        ("text", "meaning", str)],
                   caption="What the late stage computed before its send (root causes)", empty="no waits to explain")
    return head + stages + late + causes


def _ranks(v) -> str:
    return ", ".join(map(str, v or []))


def _ranges(v) -> str:
    return ranges(v or [])


def _direction(v) -> str:
    return "activations" if v == FORWARD else "gradients"


def occupancy(res: dict, top: int) -> str:
    occ = res["occupancy"]
    per_rank = table(occ.get("per_rank") or [], [("rank", "rank", num), ("threads", "threads", num),
                                                  ("mean_occupancy", "mean threads Running", num),
                                                  ("serial_s", "serial time", seconds),
                                                  ("serial_fraction", "serial share", pct)],
                     caption="Occupancy per rank")
    kernels = table((occ.get("per_kernel") or [])[:top],
                    [("kernel", "kernel", str), ("layer", "layer", _opt), ("wall_s", "wall time", seconds),
                     ("mean_occupancy", "mean threads Running", num), ("sync_s", "Synchronization", seconds),
                     ("fork_s", "Fork/Join", seconds)], caption="Kernels by time threads wait at their end")
    return per_rank + kernels


def findings(res: dict, top: int) -> str:
    items = res.get("findings") or []
    if not items:
        return '<p class="empty">no findings</p>'
    lis = "".join(f'<li><span class="ftext">{esc(f["text"])}</span> <span class="metric">{esc(f["metric"])}'
                  f"</span></li>" for f in items[:top])
    return f'<ol class="findings">{lis}</ol>'


def warnings(res: dict) -> str:
    return "".join(f'<p class="warning">warning: {esc(w)}</p>' for w in res.get("warnings") or [])


def _opt(v) -> str:
    return "" if v is None else num(v)
