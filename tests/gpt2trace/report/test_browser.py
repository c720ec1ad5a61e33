"""The report in a real browser (headless Debian chromium through Playwright): it loads with no console error,
shows the rank.thread rows and every view, swaps in exact records when zoomed, and runs no script from a trace.

Screenshots go to the folder the run prints at its end ("report screenshots: ..."). Waits poll with
page.evaluate: the page's Content-Security-Policy forbids eval, which Playwright's wait_for_function uses.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from report_traces import FILE_EVIL, KERNEL_EVIL, META_EVIL, MPI_EVIL, PHASE_EVIL

from analysis.steps import steps_table
from gpt2trace.format.reader import load
from gpt2trace.format.schema import END_NS, START_NS, Kind
from gpt2trace.report import write
from gpt2trace.testing import grid_trace
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp

pytestmark = pytest.mark.browser
VIEWPORT = {"width": 1500, "height": 1000}


class Report:
    """An open report page and what it reported: console errors, page errors, dialogs."""

    def __init__(self, browser, html: Path, timeout_s: float = 60):
        self.page = browser.new_page(viewport=VIEWPORT)
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)
        self.page.goto(html.as_uri())
        self.wait("document.body.dataset.ready === '1' || !!document.body.dataset.error", timeout_s)
        assert not self.js("document.body.dataset.error"), self.js("document.body.dataset.error")
        self.first_view_ms = float(self.js("document.body.dataset.firstView"))

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def js(self, expr: str):
        return self.page.evaluate(expr)

    def wait(self, expr: str, timeout_s: float = 30) -> None:
        end = time.monotonic() + timeout_s
        while not self.page.evaluate(expr):
            if time.monotonic() > end:
                raise AssertionError(f"timed out after {timeout_s} s waiting for {expr}")
            time.sleep(0.05)

    def zoom(self, t0_s: float, t1_s: float) -> None:
        """A relayout as a drag-zoom makes, then the page's re-render with the level of detail of that range."""
        self.js(f"Plotly.relayout(document.getElementById('timeline'), {{'xaxis.range': [{t0_s!r}, {t1_s!r}]}})")
        # done when this very range is drawn (not an earlier render finishing late) and nothing is loading
        tol = 1e-6 * (t1_s - t0_s) * 1e9
        self.wait(f"(() => {{ const d = window.gpt2traceReport.drawn; return d !== null && "
                  f"Math.abs(d[0] - {t0_s * 1e9!r}) <= {tol!r} && Math.abs(d[1] - {t1_s * 1e9!r}) <= {tol!r} && "
                  f"document.body.dataset.idle === '1'; }})()")

    def draw_figures(self) -> int:
        """Scrolls to each chart under the timeline (they draw when they come near the viewport) until all are
        drawn; how many there are."""
        ids = self.js("Array.from(document.querySelectorAll('div.fig')).map(e => e.id)")
        for fid in ids:
            self.page.locator(f"#{fid}").scroll_into_view_if_needed()
        self.wait(f"document.body.dataset.figures === '{len(ids)}' || !!document.body.dataset.error")
        return len(ids)

    @property
    def range_s(self) -> list[float]:
        return self.js("document.getElementById('timeline').layout.xaxis.range")

    @property
    def state(self) -> dict:
        return self.js("({modes: window.gpt2traceReport.modes, bars: window.gpt2traceReport.bars})")

    def row_labels(self) -> list[str]:
        return self.js("Array.from(document.querySelectorAll('#timeline .yaxislayer-above text'))"
                       ".map(t => t.textContent)")

    def titles(self) -> str:
        return " | ".join(self.js("Array.from(document.querySelectorAll('#timeline .annotation-text'))"
                                  ".map(t => t.textContent)"))

    def trace_of(self, name: str) -> dict | None:
        """The plotly trace the page drew for a view's exact records (bars named after the view)."""
        return self.js(f"(() => {{ const t = document.getElementById('timeline').data.find(d => d.name === '{name}'"
                       " && d.type === 'bar'); return t ? {n: t.x.length, hover: t.hovertext.slice(0, 50)} : null })()")

    def data(self) -> dict:
        return self.js("JSON.parse(document.getElementById('report-data').textContent).timeline")

    def shot(self, folder: Path, name: str) -> Path:
        path = folder / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        self.page.locator("#timeline-section").screenshot(path=str(folder / f"{name}_timeline.png"))
        return path

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_report(browser):
    pages = []

    def make(trace: Path, out: Path, **kwargs) -> Report:
        write(load(trace), out, **kwargs)
        pages.append(Report(browser, out))
        return pages[-1]
    yield make
    for p in pages:
        p.close()


def test_sample_trace(open_report, sample_trace, screenshots, tmp_path):
    rep = open_report(sample_trace, tmp_path / "sample.html")
    assert rep.errors == [] and rep.dialogs == []
    assert {"0.0", "0.1"} <= set(rep.row_labels())
    titles = rep.titles()
    for view in ("Steps", "Phases per rank", "Thread states", "Kernels", "Occupancy"):
        assert view in titles
    # Every record of a small trace is in the page: exact where a view holds at most a few thousand records
    # (here the steps, the phases, the occupancy), the dominant category per pixel column elsewhere.
    trace = load(sample_trace)
    steps = steps_table(trace)
    in_trace = {"steps": len(steps), **{kind + "s": trace.records(kind).num_rows
                                        for kind in (Kind.PHASE, Kind.STATE, Kind.KERNEL)}}
    assert dict(rep.js("JSON.parse(document.getElementById('report-data').textContent).timeline.views"
                       ".map(v => [v.key, v.exact.n])")) == in_trace
    assert rep.state["modes"]["phases"] == "exact"
    rep.shot(screenshots, "sample_first_view")
    first = rep.range_s
    # zoom on the first 15 % of the second analyzed step
    k = min(2, len(steps) - 1)
    a, b = float(steps[START_NS].iloc[k]) / 1e9, float(steps[END_NS].iloc[k]) / 1e9
    rep.zoom(a, a + 0.15 * (b - a))
    assert rep.range_s == pytest.approx([a, a + 0.15 * (b - a)]) and rep.range_s != first
    assert rep.state["modes"]["states"] == "exact" and rep.state["modes"]["kernels"] == "exact"
    kernels = rep.trace_of("kernels")
    assert kernels and kernels["n"] > 0
    assert any("_forward" in h or "_backward" in h for h in kernels["hover"])
    assert "layer" in kernels["hover"][0] and "thread" in kernels["hover"][0]
    rep.shot(screenshots, "sample_zoomed")
    assert rep.errors == []


def test_two_rank_report_real(open_report, screenshots, tmp_path):
    """The real 2-rank trace of the trainer (mpiexec, overlap strategy, scatter data loading)."""
    trace = Path(__file__).resolve().parents[3] / "sample_traces" / "tiny_2ranks_overlap.parquet"
    rep = open_report(trace, tmp_path / "two_rank_real.html")
    assert rep.errors == [] and rep.dialogs == []
    # each rank's rows headed by its coordinates (a pure data-parallel run: dp), and one phases row per rank
    assert {"rank 0 · dp 0 · 0.0", "rank 1 · dp 1 · 1.0", "rank 0 · dp 0", "rank 1 · dp 1"} <= set(rep.row_labels())
    assert "MPI calls" in rep.titles() and rep.state["modes"]["mpi"] == "exact"
    hover = rep.trace_of("mpi")["hover"]
    for call in ("MPI_Iallreduce", "MPI_Waitall", "MPI_Scatter", "MPI_Allreduce"):
        assert any(call in h for h in hover), call
    rep.shot(screenshots, "two_rank_real")


def test_two_rank_report_synthetic(open_report, two_rank_trace, screenshots, tmp_path):
    """A synthetic 2-rank, 2-thread trace with MPI_Allreduce and a known late rank."""
    rep = open_report(two_rank_trace, tmp_path / "two_rank.html")
    assert rep.errors == []
    assert {"rank 0 · dp 0 · 0.0", "0.1", "rank 1 · dp 1 · 1.0", "1.1", "rank 0 · dp 0", "rank 1 · dp 1"} <= set(
        rep.row_labels())
    assert "MPI calls" in rep.titles() and rep.state["modes"]["mpi"] == "exact"
    # Each collective is drawn across both ranks: the line trace visits both MPI rows.
    lines = rep.js("document.getElementById('timeline').data.filter(d => d.type === 'scatter' && d.mode === "
                   "'lines+markers').map(d => d.y.filter(v => v !== null))")
    assert lines and len(set(lines[0])) == 2
    hover = rep.trace_of("mpi")["hover"]
    assert any("MPI_Allreduce" in h and "entered last: 1.0" in h for h in hover)
    rep.shot(screenshots, "two_rank")


def test_pipeline_schedule_at_a_glance(open_report, pipeline_trace, screenshots, tmp_path):
    """A 1F1B pipeline: rows name rank and stage, phases show their micro-batch (hover, and a label where it fits) in
    the schedule's order, and the pipeline section draws the bubble per stage."""
    rep = open_report(pipeline_trace, tmp_path / "pipeline.html")
    assert rep.errors == [] and rep.dialogs == []
    assert {f"rank {k} · pp {k}" for k in range(4)} <= set(rep.row_labels())           # pp: the stage
    steps = steps_table(load(pipeline_trace))
    # steps 1 and 2: a step starts with its earliest record, and the middle stages start the next step before
    # stage 0 ends its last backward
    a, b = float(steps[START_NS].iloc[1]) / 1e9, float(steps[END_NS].iloc[2]) / 1e9
    rep.zoom(a, b)
    assert rep.state["modes"]["phases"] == "exact"
    bars = rep.js("(() => { const t = document.getElementById('timeline').data.find(d => d.name === 'phases' && "
                  "d.type === 'bar'); return {base: t.base, y: t.y, text: t.text, hover: t.hovertext}; })()")
    # stage 0's forwards and backwards of step 1, by start, read from their hover: the 1F1B order
    top = min(bars["y"])
    mine = sorted((base, hover) for base, y, hover in zip(bars["base"], bars["y"], bars["hover"])
                  if y == top and "micro-batch" in hover and "step 1<" in hover)
    seen = [("F" if h.startswith("<b>forward") else "B", int(h.split("micro-batch ")[1].split(" ")[0]))
            for _, h in mine if not h.startswith("<b>dataload")]
    assert seen == sp.schedule(0, 4, 4, sp.ONE_F_ONE_B)          # F0 F1 F2 F3 B0 B1 B2 B3
    # labels inside the bars: "forward 2", or "F2" / "2" where the bar is narrower
    labels = [t for t in bars["text"] if t]
    assert any(t.startswith(("forward ", "backward ")) for t in labels), labels
    assert all(t.split(" ")[-1].lstrip("FBDfbd").isdigit() or t in ("grad_sync", "optimizer", "trace_flush")
               for t in labels), labels
    rep.shot(screenshots, "pipeline_1f1b")
    section = rep.page.locator("#pipeline")
    assert "ideal bubble (P-1)/(M+P-1)" in section.inner_text()
    assert rep.draw_figures() >= 6
    assert rep.js("document.querySelectorAll('#fig-pipeline .main-svg').length") > 0
    section.screenshot(path=str(screenshots / "pipeline_section.png"))
    assert rep.errors == []


def test_rank_groups_show_their_coordinates(open_report, screenshots, tmp_path):
    """A tensor x data-parallel run (gpt2trace/testing/grid_trace.py, rank = dp x 2 + tp): each rank's rows are
    headed by its coordinates, whole inside the page, and the MPI section has the table per parallel dimension."""
    trace = tmp_path / "tp_dp.parquet"
    syn.write(grid_trace.tp_dp_trace(), trace)
    rep = open_report(trace, tmp_path / "tp_dp.html")
    assert rep.errors == [] and rep.dialogs == []
    labels = rep.row_labels()
    # the states, kernels and MPI views head rank 3's row with its coordinates; the phases have one row per rank
    assert labels.count("rank 3 · dp 1 tp 1 · 3.0") == 3
    assert {"rank 0 · dp 0 tp 0", "rank 1 · dp 0 tp 1", "rank 2 · dp 1 tp 0", "rank 3 · dp 1 tp 1"} <= set(labels)
    # the left margin holds the longest label: none starts left of the page
    left = rep.js("Math.min(...Array.from(document.querySelectorAll('#timeline .yaxislayer-above text'))"
                  ".map(t => t.getBoundingClientRect().left))")
    assert left >= 0
    text = rep.page.locator("#mpi").inner_text()
    assert "Communication per parallel dimension" in text and "dp x tp" in text
    assert "MPI_Allreduce on tp: 4 per step of 1,000,000 bytes, 20.0% of the step" in text
    rep.shot(screenshots, "tp_dp_coordinates")
    rep.page.locator("#mpi").screenshot(path=str(screenshots / "tp_dp_dimensions.png"))


def test_large_trace_overview_then_exact(open_report, large_trace, screenshots, tmp_path):
    rep = open_report(large_trace, tmp_path / "large.html")
    assert rep.errors == []
    labels = rep.row_labels()
    assert {f"rank {r} · dp {r} · {r}.0" if t == 0 else f"{r}.{t}" for r in range(8) for t in range(4)} <= set(labels)
    # about a million records: the first view is the overview, no kernel drawn one by one
    assert rep.state["modes"]["kernels"] == "overview" and rep.state["bars"]["kernels"] == 0
    assert rep.first_view_ms < 10_000, f"first view after {rep.first_view_ms:.0f} ms"
    rep.shot(screenshots, "large_overview")
    # the overview's hover: a thread's row names its dominant state; the gap between two ranks shows no label
    assert rep.state["modes"]["states"] == "overview"
    x, y_lane, y_gap = rep.js(
        "(() => { const t = Array.from(document.querySelectorAll('#timeline .yaxislayer-above text'));"
        " const last = t.find(e => e.textContent === '0.3'), next = t.find(e => e.textContent.endsWith(' 1.0'));"
        " next.scrollIntoView({block: 'center'});"
        " const a = last.getBoundingClientRect(), b = next.getBoundingClientRect();"
        " const box = document.getElementById('timeline').getBoundingClientRect();"
        " return [box.x + box.width / 2, b.y + b.height / 2, (a.y + a.height + b.y) / 2]; })()")
    hovers = []
    for y in (y_lane, y_gap):
        rep.page.mouse.move(x, y)
        time.sleep(0.5)
        hovers.append(rep.js("Array.from(document.querySelectorAll('#timeline .hoverlayer .hovertext'))"
                             ".map(e => e.textContent)"))
    assert len(hovers[0]) == 1 and hovers[0][0].startswith("1.0 · ") and "dominant in this time bin" in hovers[0][0]
    assert hovers[1] == []
    tl = rep.data()
    d0, d1 = tl["detail"]
    assert (d0, d1) != (tl["t0Ns"], tl["t1Ns"])              # exact records for a window only
    a = (d0 + 0.3 * (d1 - d0)) / 1e9
    rep.zoom(a, a + 2e-4)
    assert rep.range_s == pytest.approx([a, a + 2e-4])
    assert rep.state["modes"]["kernels"] == "exact" and rep.state["modes"]["states"] == "exact"
    kernels = rep.trace_of("kernels")
    assert kernels["n"] > 0 and any("_forward" in h or "_backward" in h for h in kernels["hover"])
    rep.shot(screenshots, "large_zoomed_exact")
    # outside the exact window, zoomed as deep: the overview at its finest stored level, said in the title
    late = (tl["t1Ns"] - 0.05 * (tl["t1Ns"] - tl["t0Ns"])) / 1e9
    rep.zoom(late, late + 2e-4)
    assert rep.state["modes"]["kernels"] == "overview"
    assert "finest level stored" in rep.titles()
    rep.shot(screenshots, "large_zoomed_outside_exact")
    assert rep.errors == []


def test_malicious_names_run_no_script(open_report, malicious_trace, screenshots, tmp_path):
    rep = open_report(malicious_trace, tmp_path / "evil.html")
    # hover a kernel record: its name goes through plotly's label renderer too
    rep.js("(() => { const gd = document.getElementById('timeline');"
           " const i = gd.data.findIndex(d => d.name === 'kernels' && d.type === 'bar');"
           " Plotly.Fx.hover(gd, [{curveNumber: i, pointNumber: 0}], 'x' + gd.data[i].yaxis); })()")
    time.sleep(0.5)                                          # time for an injected handler to fire
    hover = rep.js("document.querySelector('#timeline .hoverlayer').textContent")
    rep.draw_figures()                                       # the charts below show the names too
    rep.shot(screenshots, "malicious_names")
    assert rep.dialogs == []
    assert rep.js("window.__pwned") is None
    assert rep.js("document.querySelectorAll('img, iframe, [onerror], [onload]').length") == 0
    assert rep.errors == []
    text = rep.js("document.body.innerText")
    for evil in (KERNEL_EVIL, PHASE_EVIL, MPI_EVIL, META_EVIL, FILE_EVIL):
        assert evil in text, f"{evil!r} is not shown as text"
    assert KERNEL_EVIL in hover


def test_a_resize_right_after_a_zoom_keeps_the_zoom(open_report, two_rank_trace, tmp_path):
    """A resize (a full-page screenshot makes one) that comes before a zoom is drawn redraws the zoomed range, not
    the one on screen."""
    rep = open_report(two_rank_trace, tmp_path / "resize.html")
    tl, renders = rep.data(), rep.js("window.gpt2traceReport.renders")
    a, b = (tl["t0Ns"] + 0.4 * (tl["t1Ns"] - tl["t0Ns"])) / 1e9, (tl["t0Ns"] + 0.5 * (tl["t1Ns"] - tl["t0Ns"])) / 1e9
    rep.js(f"(() => {{ const gd = document.getElementById('timeline');"
           f" Plotly.relayout(gd, {{'xaxis.range': [{a!r}, {b!r}]}}); Plotly.relayout(gd, {{autosize: true}}); }})()")
    rep.wait(f"window.gpt2traceReport.renders > {renders} && document.body.dataset.idle === '1'")
    assert rep.js("window.gpt2traceReport.drawn") == pytest.approx([a * 1e9, b * 1e9])
    assert rep.range_s == pytest.approx([a, b])
    assert rep.errors == []


def test_every_bar_has_no_outline(open_report, two_rank_trace, tmp_path):
    """Plotly's default white bar outline hides thin bars: every bar trace on the page has none."""
    rep = open_report(two_rank_trace, tmp_path / "outline.html")
    rep.draw_figures()
    widths = rep.js("Array.from(document.querySelectorAll('.js-plotly-plot')).flatMap(gd => gd._fullData"
                    ".filter(d => d.type === 'bar').map(d => d.marker.line.width))")
    assert widths and set(json.loads(json.dumps(widths))) == {0}


def test_critical_path_overlay_toggles(open_report, screenshots, tmp_path):
    """The real 1F1B pipeline sample: the critical path is hidden at first; its button draws one line over the
    kernel rows of both stages, and hides it again."""
    trace = Path(__file__).resolve().parents[3] / "sample_traces" / "small_2ranks_pp2_1f1b.parquet"
    rep = open_report(trace, tmp_path / "critical.html")
    line = ("(() => { const t = document.getElementById('timeline').data.find(d => d.name === 'critical path'); "
            "return t ? {x: t.x, y: t.y, hover: t.hovertext.slice(0, 5)} : null; })()")
    assert rep.js(line) is None and "Critical path" in rep.page.locator("#legends").inner_text()
    button = rep.page.locator("#btn-critical")
    renders = int(rep.js("document.body.dataset.renders"))
    button.click()
    rep.wait(f"Number(document.body.dataset.renders) > {renders} && document.body.dataset.idle === '1'")
    drawn = rep.js(line)
    assert drawn is not None and button.get_attribute("aria-pressed") == "true"
    # the kernel rows of rank 0 and rank 1 (one thread each): the line visits both, and moves between them
    kernel_rows = rep.js("(() => { const v = JSON.parse(document.getElementById('report-data').textContent)"
                         ".timeline.views.find(v => v.key === 'kernels'); return v.lanes; })()")
    assert kernel_rows == ["0.0", "1.0"]
    ys = drawn["y"]
    assert len(set(ys)) == 2 and sum(a != b for a, b in zip(ys, ys[1:])) >= 2
    assert all(h.startswith("critical path · thread ") for h in drawn["hover"])
    xs = drawn["x"]
    assert xs == sorted(xs)                                   # one line forward in time, no going back
    rep.shot(screenshots, "critical_path_1f1b")
    renders = int(rep.js("document.body.dataset.renders"))
    button.click()
    rep.wait(f"Number(document.body.dataset.renders) > {renders} && document.body.dataset.idle === '1'")
    assert rep.js(line) is None and button.get_attribute("aria-pressed") == "false"
    assert rep.errors == [] and rep.dialogs == []


def test_task_trace_profile_and_hover(open_report, task_trace, screenshots, tmp_path):
    """A task run: the parallelism profile is drawn under the timeline, one chart per rank on the same time axis,
    and a kernel bar's hover names its task, block and predecessors."""
    rep = open_report(task_trace, tmp_path / "tasks.html")
    assert rep.errors == [] and rep.dialogs == []
    assert "Task parallelism" in rep.titles() and "Task parallelism" in rep.page.locator("#legends").inner_text()
    drawn = rep.js("document.getElementById('timeline').data.filter(d => (d.hovertemplate || '').includes('tasks'))"
                   ".map(d => [d.yaxis, d.hovertemplate, d.x.filter(v => v !== null).length])")
    # two lines (running, ready) per rank, each rank on its own axis below the views and the occupancy
    assert len(drawn) == 4 and len({axis for axis, _, _ in drawn}) == 2 and all(n > 0 for _, _, n in drawn)
    assert {t.split(":")[0] for _, t, _ in drawn} == {"rank 0", "rank 1"}
    assert rep.js("window.gpt2traceReport.profilePoints") > 0
    # zoom into the second step of rank 0: exact kernel bars whose hover names the task
    steps = steps_table(load(task_trace))
    a, b = float(steps[START_NS].iloc[1]) / 1e9, float(steps[END_NS].iloc[1]) / 1e9
    rep.zoom(a, b)
    kernels = rep.trace_of("kernels")
    assert kernels and kernels["n"] > 0 and rep.state["modes"]["kernels"] == "exact"
    assert all("task " in h and " · block " in h and "predecessor" in h for h in kernels["hover"])
    # the profile shares the zoom: drawn only inside the range
    xs = rep.js("document.getElementById('timeline').data.filter(d => (d.hovertemplate || '').includes('tasks'))"
                ".flatMap(d => d.x.filter(v => v !== null))")
    assert xs and min(xs) >= a and max(xs) <= b         # clipped to the view, as the bars are
    rep.shot(screenshots, "task_profile")
    assert rep.errors == []
