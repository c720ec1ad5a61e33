"""The report's charts beside the timeline, as plotly figure dicts: step durations by phase, the kernel x thread
imbalance heatmap, the useful-duration histogram, and the time at each occupancy level.

Each takes tables the analysis computes (or the trace's records for the same window) and only arranges them;
strings from the trace are escaped (`_esc`) because plotly renders a subset of HTML in labels. Bars have no
outline: plotly's default white outline hides bars thinner than it.
"""
from __future__ import annotations

import html
import json

import numpy as np
import plotly.graph_objects as go

from analysis.window import Window, outliers, records, steps_table
from gpt2trace.format.reader import Trace, thread_order
from gpt2trace.report import colors
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, STATE, STEP, THREAD, Kind, State

TEMPLATE = "plotly_white"
FONT = {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12}
MAX_KERNEL_ROWS = 25


def _layout(fig: go.Figure, height: int, top: int = 10, **kw) -> dict:
    fig.update_layout(template=TEMPLATE, height=height, font=FONT, margin={"l": 60, "r": 20, "t": top, "b": 50},
                      **kw)
    return json.loads(fig.to_json())            # plotly's encoder: NumPy arrays as lists, NaN as null


def step_durations(trace: Trace, analyzed_steps: list[int]) -> dict | None:
    """One stacked bar per step: the mean time per rank in each phase, and the rest of the step as 'other'."""
    steps = steps_table(trace)
    if steps.empty:
        return None
    step = steps[STEP].to_numpy().astype(np.int64)
    total = steps["seconds"].to_numpy()
    ph = records(trace, Kind.PHASE, (RANK, NAME))
    fig = go.Figure()
    stacked = np.zeros(len(step))
    if len(ph):
        # A phase counts in the step whose time holds its start: step-less phases (the tracer's flush) too.
        ranks = max(len(np.unique(ph[RANK])), 1)
        idx = np.searchsorted(steps[START_NS].to_numpy(), ph[START_NS], side="right") - 1
        valid = (idx >= 0) & (ph[START_NS] < steps[END_NS].to_numpy()[np.maximum(idx, 0)])
        name, idx = ph[NAME][valid], idx[valid]
        dur = (ph[END_NS] - ph[START_NS])[valid] / 1e9 / ranks
        for code in sorted(np.unique(name), key=lambda c: -dur[name == c].sum()):
            secs = np.bincount(idx[name == code], weights=dur[name == code], minlength=len(step))
            label = ph.names[code]
            fig.add_bar(x=step, y=secs * 1e3, name=_esc(label), marker_color=colors.phase_color(label),
                        marker_line_width=0, hovertemplate="step %{x}: %{y:.4g} ms<extra>%{fullData.name}</extra>")
            stacked += secs
    other = np.maximum(total - stacked, 0)
    fig.add_bar(x=step, y=other * 1e3, name="other (outside phases)", marker_color="#eadfbf", marker_line_width=0,
                hovertemplate="step %{x}: %{y:.4g} ms<extra>other</extra>")
    fig.add_scatter(x=step, y=total * 1e3, mode="markers", name="step time",
                    marker={"symbol": "line-ew-open", "size": 14, "color": "#222", "line": {"width": 2}},
                    hovertemplate="step %{x}: %{y:.4g} ms<extra>step time</extra>")
    analyzed = set(analyzed_steps)
    shapes = [{"type": "rect", "xref": "x", "yref": "paper", "x0": int(s) - 0.5, "x1": int(s) + 0.5, "y0": 0, "y1": 1,
               "fillcolor": "rgba(0,0,0,0.06)", "line": {"width": 0}, "layer": "below"}
              for s in step if int(s) not in analyzed]
    flagged = set(step[outliers(total)].tolist())
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


def imbalance_heatmap(trace: Trace, window: Window) -> dict | None:
    """Kernels (all layers) x rank.thread: each cell the thread's block time over the kernel's mean over the
    threads that run it (1 = balanced); rows by total time, the top MAX_KERNEL_ROWS."""
    kern = records(trace, Kind.KERNEL, (RANK, THREAD, NAME), window)
    if not len(kern):
        return None
    lane_key = kern[RANK].astype(np.int64) * (int(kern[THREAD].max()) + 1) + kern[THREAD]
    lanes, lane = np.unique(lane_key, return_inverse=True)
    width = int(kern[THREAD].max()) + 1
    labels = [f"{k // width}.{k % width}" for k in lanes]
    names, name = np.unique(kern[NAME], return_inverse=True)
    t = np.bincount(name * len(lanes) + lane, weights=kern[END_NS] - kern[START_NS],
                    minlength=len(names) * len(lanes)).reshape(len(names), len(lanes)) / 1e9
    runs = np.bincount(name * len(lanes) + lane, minlength=t.size).reshape(t.shape) > 0
    top = np.argsort(-t.sum(axis=1), kind="stable")[:MAX_KERNEL_ROWS]
    t, runs = t[top], runs[top]
    mean = t.sum(axis=1) / np.maximum(runs.sum(axis=1), 1)
    ratio = np.where(runs, t / np.maximum(mean, 1e-300)[:, None], np.nan)
    rows = [_esc(kern.names[c]) for c in names[top]]
    spread = float(np.nanmax(np.abs(ratio - 1))) if np.isfinite(ratio).any() else 0.1
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


def useful_histogram(trace: Trace, window: Window, bins_per_decade: int = 10) -> dict | None:
    """Paraver's useful-duration histogram: rows rank.thread, columns log-spaced burst durations, color the
    time spent in bursts of that length. A burst is a run of Running time (touching Running records join)."""
    st = records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    run = st[STATE] == State.RUNNING
    r, th, s, e = st[RANK][run], st[THREAD][run], st[START_NS][run], st[END_NS][run]
    if not len(s):
        return None
    order = thread_order(r, th, s)
    r, th, s, e = r[order], th[order], s[order], e[order]
    joins = np.r_[False, (r[1:] == r[:-1]) & (th[1:] == th[:-1]) & (s[1:] <= e[:-1])]
    head = np.flatnonzero(~joins)
    b_end = np.maximum.reduceat(e, head)
    dur = (b_end - s[head]).astype(np.float64)
    br, bt = r[head].astype(np.int64), th[head].astype(np.int64)
    keep = dur > 0
    dur, br, bt = dur[keep], br[keep], bt[keep]
    lo = np.floor(np.log10(dur.min()) * bins_per_decade) / bins_per_decade
    hi = np.ceil(np.log10(dur.max()) * bins_per_decade + 1e-9) / bins_per_decade
    edges = 10 ** np.arange(lo, hi + 0.5 / bins_per_decade, 1 / bins_per_decade)
    col = np.clip(np.searchsorted(edges, dur, side="right") - 1, 0, len(edges) - 2)
    width = int(bt.max()) + 1
    lanes, lane = np.unique(br * width + bt, return_inverse=True)
    labels = [f"{k // width}.{k % width}" for k in lanes]
    size = len(lanes) * (len(edges) - 1)
    time = np.bincount(lane * (len(edges) - 1) + col, weights=dur, minlength=size).reshape(len(lanes), -1) / 1e9
    count = np.bincount(lane * (len(edges) - 1) + col, minlength=size).reshape(time.shape)
    centers = np.sqrt(edges[:-1] * edges[1:]) / 1e3                       # microseconds
    share = 100 * time / np.maximum(time.sum(axis=1, keepdims=True), 1e-300)
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


def _esc(text: str) -> str:
    """For plotly labels: it renders a few HTML tags and decodes &amp; &lt; &gt;, so those three are escaped."""
    return html.escape(text, quote=False)


def _dur(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"
