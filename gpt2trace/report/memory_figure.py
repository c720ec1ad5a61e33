"""The report's resident-memory chart: one line per rank over the analyzed window, from `analysis.memory`'s
timeline (each point the highest sample of its slice of the window, so no peak is thinned away)."""
from __future__ import annotations

import json

import plotly.graph_objects as go

from gpt2trace.report import colors
from gpt2trace.report.figures import FONT, TEMPLATE


def memory_per_rank(result: dict) -> dict | None:
    """Resident MiB (2^20 bytes, as the benchmarks) per rank against seconds since the trace start; None without
    samples."""
    mem = result.get("memory")
    if not mem or not mem["timeline"]:
        return None
    fig = go.Figure()
    for line in mem["timeline"]:
        rank = int(line["rank"])
        fig.add_scatter(x=line["t_s"], y=[b / 2**20 for b in line["bytes"]], mode="lines+markers",
                        name=f"rank {rank}", line={"color": colors.rank_color(rank)},
                        marker={"size": 4}, hovertemplate="%{x:.4g} s: %{y:,.1f} MiB<extra>%{fullData.name}</extra>")
    fig.update_layout(template=TEMPLATE, height=300, font=FONT, margin={"l": 60, "r": 20, "t": 10, "b": 50},
                      xaxis={"title": {"text": "s since the trace start (analyzed window)"}},
                      yaxis={"title": {"text": "resident MiB"}, "rangemode": "tozero"},
                      legend={"orientation": "h", "y": -0.25, "x": 0})
    return json.loads(fig.to_json())            # plotly's encoder, as the other charts
