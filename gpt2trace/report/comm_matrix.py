"""The communication matrix as a heatmap: bytes from each source rank (rows) to each destination rank (columns),
summed over communicators (analysis: comm_matrix); the hover gives the messages, seconds and the point-to-point
and collective shares. Draws the analysis' pairs and computes nothing itself."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from gpt2trace.report.figures import _layout

MAX_RANKS = 256       # beyond this a cell is under a pixel: the table is in the JSON


def heatmap(result: dict) -> dict | None:
    pairs = (result.get("comm_matrix") or {}).get("pairs") or []
    if not pairs:
        return None
    ranks = sorted({r["src"] for r in pairs} | {r["dst"] for r in pairs})[:MAX_RANKS]
    at = {rank: i for i, rank in enumerate(ranks)}
    n = len(ranks)
    nbytes = np.full((n, n), np.nan)
    hover = [[f"rank {s} -> rank {d}: nothing" for d in ranks] for s in ranks]
    for r in pairs:
        if r["src"] not in at or r["dst"] not in at:
            continue
        i, j = at[r["src"]], at[r["dst"]]
        nbytes[i, j] = r["bytes"]
        hover[i][j] = (f"rank {r['src']} -> rank {r['dst']}: {r['bytes']:,} bytes in {r['messages']:,} messages, "
                       f"{r['time_s'] * 1e3:.4g} ms in the calls<br>point-to-point {r['p2p_bytes']:,} bytes, "
                       f"collectives {r['collective_bytes']:,} bytes")
    labels = [str(rank) for rank in ranks]
    z = [[None if np.isnan(v) else v for v in row] for row in nbytes / 1e6]      # MB; None: no message
    top = float(np.nanmax(nbytes)) / 1e6 or 1.0           # from 0: a 1% difference must not look like 100%
    fig = go.Figure(go.Heatmap(z=z, x=labels, y=labels, colorscale="Blues", hoverinfo="text", text=hover,
                               xgap=1, ygap=1, zmin=0, zmax=top, colorbar={"title": {"text": "MB"}}))
    return _layout(fig, max(260, min(700, 26 * n + 120)),
                   xaxis={"title": {"text": "destination rank"}, "type": "category"},
                   yaxis={"title": {"text": "source rank"}, "type": "category", "autorange": "reversed"})
