"""A report from a trace: runs the analysis (or takes its result), prepares the timeline and the charts, and
writes one HTML page. What `gpt2trace report` and `gpt2trace analyze --html` call.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from analysis import rank_groups
from analysis.analyze import combine
from analysis.window import WindowError
from gpt2trace.format.limits import GROUP_RECORDS
from gpt2trace.format.outputs import atomic_output
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.reader import rank_groups as rank_groups_of
from gpt2trace.report import colors, figures, page, tables, timeline
from gpt2trace.report.comm_matrix import heatmap as comm_heatmap
from gpt2trace.report.memory_figure import memory_per_rank
from gpt2trace.report.pack import Blobs
from gpt2trace.report.payload import page_data
from gpt2trace.report.tables import esc
from gpt2trace.report.timeline import EXACT_BUDGET, RUN_BUDGET

MAX_BYTES = 24 * 2**20        # the target is 25 MB for a 10-million-record trace


@dataclass(frozen=True)
class Report:
    html: str
    records: int
    detail_ns: tuple[int, int]      # the span of exact state and kernel records
    detail_note: str
    build_s: float


def build(trace: Trace, result: dict | None = None, steps: str | None = None,
          window_s: tuple[float, float] | None = None, top: int = 15, exact_budget: int = EXACT_BUDGET,
          run_budget: int = RUN_BUDGET, max_bytes: int = MAX_BYTES) -> Report:
    """The report of a trace. `result` is `analyze(trace, steps)` if the caller has it; `steps` ('A:B') is the
    analyzed window; `window_s` (seconds since the trace start) chooses where records are exact in a big trace
    (WindowError when it starts after the trace's end). A page over `max_bytes` loses its finest overview levels
    until it fits. Raises TraceError / WindowError as `analyze` does."""
    return build_groups([trace], result, steps, window_s, top, exact_budget, run_budget, max_bytes)


def build_groups(groups: Sequence[Trace | Callable[[], Trace]], result: dict | None = None, steps: str | None = None,
                 window_s: tuple[float, float] | None = None, top: int = 15, exact_budget: int = EXACT_BUDGET,
                 run_budget: int = RUN_BUDGET, max_bytes: int = MAX_BYTES,
                 advance: Callable[[int], None] = lambda n: None) -> Report:
    """`build` of a trace given as groups of its ranks, in rank order (analyze_groups' `groups`: a function that
    loads a group is called once per pass, so one group is in memory at a time): the same page. Two passes over
    the groups, the analysis's and the timeline's together; `advance(n)` is called with each group's records
    in each pass. Raises TraceError / WindowError as `build`, NotCombinable for groups out of rank order."""
    began = time.perf_counter()
    gathered, surveys, meta = [], [], None
    for g in groups:
        group = g() if callable(g) else g
        gathered.append(rank_groups.gather(group))
        surveys.append(timeline.survey(group))
        meta = meta or rank_groups.metadata(group)
        advance(group.num_rows)
        del group
    whole = groups[0] if len(groups) == 1 and isinstance(groups[0], Trace) else None
    ctx = rank_groups.context(gathered, meta, steps, whole=whole)
    del gathered
    analyzed = (ctx.window.t0_ns, ctx.window.t1_ns)
    detail_ns = _detail_ns(window_s, surveys)
    fold = timeline.Fold(surveys, ctx.shared, ctx.pairs, ctx.steps, analyzed, detail_ns, exact_budget, run_budget)
    parts = []
    for g in groups:
        group = g() if callable(g) else g
        if result is None:
            parts.append(rank_groups.part(group, ctx, top))
        fold.add(group)
        advance(group.num_rows)
        del group
    if result is None:
        result = combine(ctx, parts, top)
    del parts
    return _page(meta, sum(s.records for s in surveys), result, fold.timeline(), analyzed, top, max_bytes, began)


def _detail_ns(window_s: tuple[float, float] | None, surveys: list[timeline.Survey]) -> tuple[int, int] | None:
    """--window's seconds as the ns of the trace's clock; WindowError for a window that starts after the trace's
    last record ends (one reaching past the end is the part the trace holds)."""
    if not window_s:
        return None
    a, b = (int(round(s * 1e9)) for s in window_s)
    extents = [s.extent for s in surveys if s.extent]
    if not extents:
        return a, b
    t0, t1 = min(e[0] for e in extents), max(e[1] for e in extents)
    if a >= t1:
        end = f"{t1 / 1e9:.6g}"
        raise WindowError(f"--window {window_s[0]:g}:{window_s[1]:g} starts after the trace ends: the trace spans "
                          f"{t0 / 1e9:.6g} s to {end} s since its start; give A below {end}")
    return a, b


def _page(meta: Trace, records: int, result: dict, tl: timeline.Timeline, analyzed: tuple[int, int], top: int,
          max_bytes: int, began: float) -> Report:
    blobs = Blobs()
    makers = {"fig-steps": figures.step_durations, "fig-occupancy": figures.occupancy_levels,
              "fig-imbalance": figures.imbalance_heatmap, "fig-useful": figures.useful_histogram,
              "fig-pipeline": figures.pipeline_bubble, "fig-comm-matrix": comm_heatmap, "fig-memory": memory_per_rank}
    figs = {fid: _shown(None, make, result) for fid, make in makers.items()}   # a section not computed: no chart
    data = page_data(tl, blobs, analyzed, figs, [colors.rank_color(i) for i in range(len(colors.RANK_RGB))],
                     (result.get("critical_path") or {}).get("segments"), result.get("tasks"))
    name = Path(meta.name).name
    header = _header(meta, records, result, name)
    sections = _sections(result, tl, figs, top, data["criticalPath"] is not None)
    html = page.render(f"gpt2trace report: {name}", header, sections, data, blobs)
    while len(html.encode("utf-8")) > max_bytes and _drop_finest_level(data, blobs):
        html = page.render(f"gpt2trace report: {name}", header, sections, data, blobs)
    return Report(html, records, tl.detail, tl.detail_note, time.perf_counter() - began)


def write(trace: Trace, out: str | Path, **kwargs) -> Report:
    """Builds the report (`build`'s arguments) and writes it to `out` under a temporary name, renamed when complete:
    a full disk or a signal leaves no half-written page. Raises OutputError when it cannot write."""
    return _write(build(trace, **kwargs), out)


def write_file(path: str | Path, out: str | Path, group_records: int = GROUP_RECORDS,
               advance: Callable[[int], None] = lambda n: None, shown: Path | None = None, **kwargs) -> Report:
    """The report of the Parquet trace at `path` (`build`'s other arguments), built group of ranks by group of
    ranks of at most `group_records` records (reader.rank_groups), written as `write` does. `advance(n)`: records
    done, of twice the trace's. `shown`: the trace's name on the page when `path` is a temporary import of it."""
    def load_group(ranks: list[int]) -> Trace:
        group = load(path, ranks)
        return group if shown is None else replace(group, path=Path(shown))
    groups = [partial(load_group, ranks) for ranks in rank_groups_of(path, group_records)]
    if not groups:
        load(path)      # no records, so no rank: raises the reader's TraceError "the trace is empty"
    report = build_groups(groups, advance=advance, **kwargs)
    return _write(report, out)


def _write(report: Report, out: str | Path) -> Report:
    with atomic_output(out) as tmp:
        tmp.write_text(report.html, encoding="utf-8")
    return report


def _drop_finest_level(data: dict, blobs: Blobs) -> bool:
    """Drops the biggest finest level of any view that has more than one; False when none is left to drop."""
    sizes = dict(blobs.items)
    candidates = [v for v in data["timeline"]["views"] if len(v["levels"]) > 1]
    if not candidates:
        return False
    view = max(candidates, key=lambda v: len(sizes[v["levels"][-1]["blob"]]))
    gone = view["levels"].pop()["blob"]
    blobs.items = [(bid, text) for bid, text in blobs.items if bid != gone]
    return True


def _shown(failed, draw: Callable, *args):
    """What `draw(*args)` gives, or `failed` when it raises: a section of the result that was not computed (None;
    the page's warnings name it) leaves its table or chart out, not the page."""
    try:
        return draw(*args)
    except MemoryError:
        raise
    except Exception:       # the warnings already say why the section is missing
        return failed


def _missing(title: str) -> str:
    return f'<p class="empty">{esc(title)}: not computed (see the warnings)</p>'


def _header(trace: Trace, records: int, res: dict, name: str) -> str:
    s = res["summary"] or {}
    trace_items = [("file", trace.name), ("records", f"{records:,}"),
                   ("ranks x threads", f"{s.get('ranks')} x {s.get('threads_per_rank')}" if s else None),
                   ("schema version", trace.version)]
    blocks = [("Run", tables.run_config(trace.run)), ("Machine", tables.machine(trace.machine, trace.peak)),
              ("Trace", trace_items)]
    meta = "".join(f"<div><h2>{esc(title)}</h2>{tables.pairs(items)}</div>" for title, items in blocks)
    return f'<header><h1>gpt2trace report: {esc(name)}</h1><div class="meta">{meta}</div></header>'


def _figure(fid: str, heading: str, hint: str, figs: dict) -> str:
    if figs.get(fid) is None:
        return f'<div><h3>{esc(heading)}</h3><p class="empty">no data for this chart in the trace</p></div>'
    return f'<div><h3>{esc(heading)}</h3><p class="hint">{esc(hint)}</p><div class="fig" id="{esc(fid)}"></div></div>'


def _sections(res: dict, tl, figs: dict, top: int, critical: bool) -> list[tuple[str, str, str]]:
    window = res["window"]
    steps = window["steps"]
    analyzed = (f"steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else f"step {steps[0]}") if steps else "the trace"
    toolbar = ('<div class="toolbar"><button id="btn-whole">Whole trace</button>'
               f'<button id="btn-analyzed">Analyzed window ({esc(analyzed)})</button>'
               + ('<button id="btn-detail">Window with exact records</button>'
                  if tl.detail != (tl.t0_ns, tl.t1_ns) else "")
               + ('<button id="btn-critical" aria-pressed="false">Show the critical path</button>' if critical else "")
               + "</div>")
    timeline = (
        '<p class="hint">One row per thread (rank.thread), grouped by rank, each rank named by its coordinates in '
        "the run's parallel dimensions (rank 3 · dp 1 tp 1); all panels share the time axis. Drag to zoom in time, "
        "scroll to zoom, double-click for the whole trace. Overviews show the dominant category of each pixel "
        f"column, as Paraver draws; zoomed in, every record is drawn exactly. Here: {esc(tl.detail_note)}."
        "</p>" + toolbar + '<div id="legends"></div><div id="timeline"></div>')
    charts = ('<div class="grid">'
              + _figure("fig-steps", "Step durations", "Time of each step, stacked by phase (mean over ranks).", figs)
              + _figure("fig-occupancy", "Occupancy levels", "Share of the analyzed time with k threads Running, "
                        "per rank.", figs)
              + _figure("fig-imbalance", "Kernel x thread imbalance", "Each thread's time in a kernel over the "
                        "kernel's mean over its threads (analyzed window): red = slower than the mean.", figs)
              + _figure("fig-useful", "Useful duration histogram", "Where the Running time goes by burst length "
                        "(a burst: uninterrupted Running time of one thread), as in Paraver.", figs)
              + _figure("fig-memory", "Resident memory per rank", "Each rank's resident memory (RSS) sampled at "
                        "every phase end; a point is the highest sample of its slice of the analyzed window.", figs)
              + "</div>")
    def shown(title: str, draw: Callable, *args) -> str:
        return _shown(_missing(title), draw, res, *args)
    overview = ('<div class="grid"><div><h3>Summary</h3>' + shown("summary", tables.summary)
                + "</div><div><h3>Findings</h3>" + shown("findings", tables.findings, top) + tables.warnings(res)
                + "</div></div>")
    bubble = _figure("fig-pipeline", "Bubble per stage", "The share of the pipeline's window each stage does not "
                     "compute, by what it does instead, against the ideal for equal stages and free messages "
                     "(dashed).", figs)
    pipeline = ([("pipeline", "Pipeline bubble", shown("pipeline", tables.pipeline, top) + '<div class="grid">'
                  + bubble + "</div>")]
                if res.get("pipeline") else [])
    declared = tables.sections(res, top, PLACED)            # the declared sections' tables not placed above
    return [
        ("overview", "Summary and findings", overview),
        ("timeline-section", "Timeline", timeline),
        *pipeline,
        ("charts", "Steps, occupancy and balance", charts),
        ("pop", "POP efficiencies", shown("POP", tables.pop) + "<h3>Phases</h3>" + shown("phases", tables.phases)),
        ("mpi", "MPI waits and their root causes", shown("MPI waits", tables.waits, top) + _figure(
            "fig-comm-matrix", "Communication matrix", "Bytes from each source rank (row) to each destination rank "
            "(column) in the analyzed window; a collective counts as each member's contribution to the members that "
            "need it (docs/analyze.md).", figs)),
        ("imbalance", "Load imbalance", shown("load imbalance", tables.imbalance, top)),
        ("occupancy", "Thread occupancy", shown("occupancy", tables.occupancy, top)),
        *([("more", "More analyses", declared)] if declared else []),
    ]


# The declared sections (analysis.registry) whose tables `_sections` places in its own sections; the others are
# in "More analyses"
PLACED = ("comm_dimensions",)
