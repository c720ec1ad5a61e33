"""The report's charts beside the timeline, as plotly figure dicts: step durations by phase, the kernel x thread
imbalance heatmap, the useful-duration histogram, and the time at each occupancy level.

Each draws tables of `analysis.analyze.analyze`'s result (step_phases, kernel_threads, bursts, occupancy) and
computes nothing itself; strings from the trace are escaped (`_esc`) because plotly renders a subset of HTML in
labels. Bars have no outline: plotly's default white outline hides bars thinner than it.
"""
from __future__ import annotations

import html
import json

import numpy as np
import plotly.graph_objects as go

from gpt2trace.format.schema import RANK, STEP, THREAD, State
from gpt2trace.report import colors

TEMPLATE = "plotly_white"
FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}
MAX_KERNEL_ROWS = 25


def _layout(fig: go.Figure, height: int, top: int = 10, **kw) -> dict:
    fig.update_layout(template=TEMPLATE, height=height, font=FONT, margin={"l": 60, "r": 20, "t": top, "b": 50},
                      **kw)
    return json.loads(fig.to_json())            # plotly's encoder: NumPy arrays as lists, NaN as null


def step_durations(result: dict) -> dict | None:
    """One stacked bar per step: the mean time per rank in each phase, and the rest of the step as 'other'
    (analysis: step_phases); steps outside the analyzed window shaded, outliers (summary) labelled."""
    steps = result["step_phases"]["steps"]
    if not steps:
        return None
    step = np.array([row[STEP] for row in steps], dtype=np.int64)
    total = np.array([row["seconds"] for row in steps])
    fig = go.Figure()
    for label, rows in _groups(result["step_phases"]["phases"], "phase"):
        fig.add_bar(x=step, y=np.array([row["seconds"] for row in rows]) * 1e3, name=_esc(label),
                    marker_color=colors.phase_color(label), marker_line_width=0,
                    hovertemplate="step %{x}: %{y:.4g} ms<extra>%{fullData.name}</extra>")
    other = np.array([row["other_s"] for row in steps])
    fig.add_bar(x=step, y=other * 1e3, name="other (outside phases)", marker_color="#eadfbf", marker_line_width=0,
                hovertemplate="step %{x}: %{y:.4g} ms<extra>other</extra>")
    fig.add_scatter(x=step, y=total * 1e3, mode="markers", name="step time",
                    marker={"symbol": "line-ew-open", "size": 14, "color": "#222", "line": {"width": 2}},
                    hovertemplate="step %{x}: %{y:.4g} ms<extra>step time</extra>")
    analyzed = set(result["window"]["steps"])
    shapes = [{"type": "rect", "xref": "x", "yref": "paper", "x0": int(s) - 0.5, "x1": int(s) + 0.5, "y0": 0, "y1": 1,
               "fillcolor": "rgba(0,0,0,0.06)", "line": {"width": 0}, "layer": "below"}
              for s in step if int(s) not in analyzed]
    flagged = set(result["summary"]["outlier_steps"])
    # A warm-up step many times longer than the others would flatten them: the axis fits the analyzed steps
    # and the longer bars are cut, their time written on them.
    inside = np.isin(step, list(analyzed))
    top = float(total[inside].max() * 1e3) if inside.any() else float(total.max() * 1e3)
    cut = total * 1e3 > 2 * top
    yaxis = {"title": {"text": "ms"}}
    if cut.any() and inside.any():
        yaxis["range"] = [0, top * 1.35]
    annotations = []
    for s, secs, is_cut in zip(step, total, cut):
        label = ("outlier " if int(s) in flagged else "") + (f"{secs * 1e3:.4g} ms (off scale)" if is_cut and
                                                              "range" in yaxis else "")
        if label and len(annotations) < 10:
            annotations.append({"x": int(s), "y": min(secs * 1e3, top * 1.3) if "range" in yaxis else secs * 1e3,
                                "text": label.strip(), "showarrow": False,
                                "yanchor": "top" if is_cut and "range" in yaxis else "bottom",
                                "bgcolor": "rgba(255,255,255,0.8)", "font": {"size": 10}})
    return _layout(fig, 340, top=24, barmode="stack", bargap=0.15 if len(step) < 200 else 0,
                   xaxis={"title": {"text": "step (shaded: left out of the analysis)"}, "tickformat": "d",
                          "dtick": max(1, int(np.ceil(len(step) / 25)))},
                   yaxis=yaxis, shapes=shapes, annotations=annotations,
                   legend={"orientation": "h", "y": -0.25, "x": 0})


def imbalance_heatmap(result: dict) -> dict | None:
    """Kernels (all layers) x rank.thread: each cell the thread's block time over the kernel's mean over the
    threads that run it (analysis: kernel_threads; 1 = balanced); rows by total time, the top MAX_KERNEL_ROWS."""
    cells = result["kernel_threads"]
    if not cells:
        return None
    lanes = sorted({(row[RANK], row[THREAD]) for row in cells})
    labels = [_lane(*lane) for lane in lanes]
    column = {lane: j for j, lane in enumerate(lanes)}
    kernels = _groups(cells, "kernel")[:MAX_KERNEL_ROWS]
    t = np.zeros((len(kernels), len(lanes)))
    ratio = np.full(t.shape, np.nan)
    for i, (_, rows) in enumerate(kernels):
        for row in rows:
            j = column[(row[RANK], row[THREAD])]
            t[i, j], ratio[i, j] = row["seconds"], row["ratio"]
    runs = np.isfinite(ratio)
    rows = [_esc(name) for name, _ in kernels]
    spread = float(np.nanmax(np.abs(ratio - 1))) if runs.any() else 0.1
    spread = max(spread, 0.02)
    hover = [[f"{rows[i]} on {labels[j]}<br>{t[i, j] * 1e3:.4g} ms ({ratio[i, j]:.3f} x the mean)"
              if runs[i, j] else f"{rows[i]} on {labels[j]}: not run" for j in range(len(labels))]
             for i in range(len(rows))]
    fig = go.Figure(go.Heatmap(z=np.round(ratio, 4), x=labels, y=rows, zmid=1.0, zmin=1 - spread, zmax=1 + spread,
                               colorscale="RdBu_r", hoverinfo="text", text=hover, xgap=1, ygap=1,
                               colorbar={"title": {"text": "time / mean"}}))
    return _layout(fig, max(220, 22 * len(rows) + 90),
                   xaxis={"title": {"text": "rank.thread"}, "type": "category"},
                   yaxis={"autorange": "reversed", "type": "category", "automargin": True})


def useful_histogram(result: dict) -> dict | None:
    """Paraver's useful-duration histogram (analysis: bursts): rows rank.thread, columns log-spaced burst
    durations, color the share of the thread's Running time spent in bursts of that length."""
    edges = np.array(result["bursts"]["edges_s"]) * 1e9                  # ns
    cells = result["bursts"]["cells"]
    if not cells:
        return None
    lanes = sorted({(row[RANK], row[THREAD]) for row in cells})
    labels = [_lane(*lane) for lane in lanes]
    row_of = {lane: i for i, lane in enumerate(lanes)}
    shape = (len(lanes), len(edges) - 1)
    time, count, share = np.zeros(shape), np.zeros(shape, dtype=np.int64), np.zeros(shape)
    for cell in cells:
        i, j = row_of[(cell[RANK], cell[THREAD])], cell["bin"]
        time[i, j], count[i, j], share[i, j] = cell["seconds"], cell["count"], 100 * cell["share"]
    centers = np.sqrt(edges[:-1] * edges[1:]) / 1e3                       # microseconds
    hover = [[f"{labels[i]}: {count[i, j]} burst(s) of {_dur(edges[j])}-{_dur(edges[j + 1])}, "
              f"{time[i, j] * 1e3:.4g} ms ({share[i, j]:.3g}% of its Running time)" for j in range(len(centers))]
             for i in range(len(labels))]
    # Color on a log scale of the share: a thread's few long bursts would otherwise wash out all the others.
    z = np.where(count > 0, np.log10(np.maximum(share, 0.01)), np.nan)
    fig = go.Figure(go.Heatmap(z=np.round(z, 3), x=np.log10(centers), y=labels, zmin=-2, zmax=2,
                               colorscale=[[0, "#d9f0d3"], [0.5, "#2ca25f"], [1, "#08306b"]], hoverinfo="text",
                               text=hover, ygap=1, colorbar={"title": {"text": "% of the thread's<br>Running time"},
                                                            "tickvals": [-2, -1, 0, 1, 2],
                                                            "ticktext": ["0.01%", "0.1%", "1%", "10%", "100%"]}))
    ticks = np.arange(np.floor(np.log10(centers.min())), np.ceil(np.log10(centers.max())) + 1)
    return _layout(fig, max(260, 20 * len(labels) + 100),
                   xaxis={"title": {"text": "duration of a Running burst (log scale)"},
                          "tickvals": ticks.tolist(), "ticktext": [_dur(10 ** v * 1e3) for v in ticks]},
                   yaxis={"title": {"text": "rank.thread"}, "autorange": "reversed", "type": "category"})


def occupancy_levels(result: dict) -> dict | None:
    """Per rank, the share of the analyzed time with 0, 1, 2, ... threads Running (analysis: occupancy.levels)."""
    levels = result["occupancy"].get("levels") or []
    if not levels:
        return None
    runtime = result["summary"]["runtime_s"] or 1.0
    fig = go.Figure()
    top = max(row["level"] for row in levels)
    for k in range(top + 1):
        rows = [row for row in levels if row["level"] == k]
        shade = 0.92 - 0.75 * (k / max(top, 1))
        fig.add_bar(y=[f"rank {row['rank']}" for row in rows], x=[100 * row["seconds"] / runtime for row in rows],
                    orientation="h", name=f"{k} Running", marker_color=f"rgb({int(255 * shade)},"
                    f"{int(255 * shade)},255)", marker_line_width=0,
                    hovertemplate="%{y}: %{x:.1f}% of the time with " + str(k) + " thread(s) Running<extra></extra>")
    ranks = len({row["rank"] for row in levels})
    return _layout(fig, 110 + 28 * ranks, top=34, barmode="stack",
                   xaxis={"title": {"text": "% of the analyzed time"}, "range": [0, 100]},
                   yaxis={"autorange": "reversed"},
                   legend={"orientation": "h", "traceorder": "normal", "x": 0, "y": 1.02, "yanchor": "bottom"})


def pipeline_bubble(result: dict) -> dict | None:
    """Per stage, its bubble (the share of the pipeline's window it does not compute) split into waiting for or
    talking to a neighbour, other MPI and idle time, against the ideal (P-1)/(M+P-1) (analysis: pipeline)."""
    pp = result.get("pipeline")
    if not pp or not pp["per_stage"]:
        return None
    rows = pp["per_stage"]
    x = [f"stage {row['stage']}" for row in rows]
    fig = go.Figure()
    for key, label, state in (("neighbour_s", "p2p MPI (waiting for a neighbour)", State.WAITING_A_MESSAGE),
                              ("other_mpi_s", "other MPI", State.GROUP_COMMUNICATION), ("idle_s", "idle", State.IDLE)):
        share = [100 * row[key] / row["window_s"] if row["window_s"] else 0 for row in rows]
        fig.add_bar(x=x, y=share, name=label, marker_color=colors.state_color(state), marker_line_width=0,
                    hovertemplate="%{x}: %{y:.1f}% of the window " + label + "<extra></extra>")
    fig.add_scatter(x=x, y=[100 * row["bubble"] for row in rows], mode="markers", name="bubble",
                    marker={"symbol": "line-ew-open", "size": 18, "color": "#222", "line": {"width": 2}},
                    hovertemplate="%{x}: bubble %{y:.1f}%<extra></extra>")
    ideal = 100 * pp["ideal_bubble"]
    return _layout(fig, 320, top=24, barmode="stack",
                   yaxis={"title": {"text": "% of the pipeline's window"}},
                   shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": ideal, "y1": ideal,
                            "line": {"color": "#1a9c3c", "width": 2, "dash": "dash"}}],
                   annotations=[{"xref": "paper", "x": 1, "y": ideal, "xanchor": "right", "yanchor": "bottom",
                                 "showarrow": False, "font": {"size": 11, "color": "#1a9c3c"},
                                 "text": f"ideal (P-1)/(M+P-1) = {ideal:.1f}%"}],
                   legend={"orientation": "h", "y": -0.2, "x": 0})


def _groups(rows: list[dict], key: str) -> list[tuple[str, list[dict]]]:
    """Consecutive rows with the same `key`, in the order the analysis gives them (it sorts the groups)."""
    out: list[tuple[str, list[dict]]] = []
    for row in rows:
        if not out or out[-1][0] != row[key]:
            out.append((row[key], []))
        out[-1][1].append(row)
    return out


def _lane(rank: int, thread: int) -> str:
    return f"{rank}.{thread}"


def _esc(text: str) -> str:
    """For plotly labels: it renders a few HTML tags and decodes &amp; &lt; &gt;, so those three are escaped."""
    return html.escape(text, quote=False)


def _dur(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"
