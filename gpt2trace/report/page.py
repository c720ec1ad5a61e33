"""The HTML page: one self-contained file with plotly.js, the style, the data and the page's script (report.js,
package data beside this module) inline, so it opens offline and can be attached to a ticket. No request leaves
the page (a Content-Security-Policy says so).
"""
from __future__ import annotations

import base64
import hashlib
from importlib.resources import files

from gpt2trace.report.pack import Blobs, script_json
from gpt2trace.report.tables import esc

SCRIPT = files("gpt2trace.report").joinpath("report.js").read_text(encoding="utf-8")
# plotly.js's cartesian bundle (npm plotly.js-cartesian-dist-min 3.7.0, MIT, its notice at the top of the file):
# every trace type the page draws (scatter, bar, heatmap) in 1.4 MB instead of the full bundle's 4.6 MB, which
# Chromium takes seconds to compile and run before the page's own script starts (half of the first view at 256 lanes).
PLOTLY_JS = files("gpt2trace.report").joinpath("plotly-cartesian.min.js").read_text(encoding="utf-8")

STYLE = """
:root { --fg: #1d1d1f; --muted: #666; --line: #ddd; --bg2: #f6f7f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); }
header { padding: 14px 22px 10px; border-bottom: 1px solid var(--line); background: var(--bg2); }
header h1 { font-size: 19px; margin: 0 0 6px; word-break: break-all; }
.meta { display: flex; flex-wrap: wrap; gap: 8px 36px; }
.meta h2 { font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); margin: 4px 0; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: 1px 12px; margin: 0; font-size: 13px; }
dl.kv dt { color: var(--muted); }
dl.kv dd { margin: 0; word-break: break-word; }
main { padding: 6px 22px 40px; }
section { margin: 18px 0 8px; }
section > h2 { font-size: 16px; margin: 0 0 6px; border-bottom: 1px solid var(--line); padding-bottom: 3px; }
p.hint, p.note { color: var(--muted); margin: 2px 0 6px; font-size: 13px; }
p.warning { color: #8a5300; margin: 2px 0; }
.toolbar { display: flex; gap: 8px; align-items: center; flex-wrap: wrap; margin: 4px 0; }
.toolbar button { font: inherit; font-size: 13px; padding: 3px 10px; border: 1px solid #bbb; border-radius: 4px;
  background: #fff; cursor: pointer; }
.toolbar button:hover { background: #eef3ff; }
#legends { margin: 4px 0 2px; }
.legend-row { display: grid; grid-template-columns: 90px 1fr; align-items: baseline; margin: 2px 0; font-size: 12.5px; }
.legend-items { display: flex; flex-wrap: wrap; gap: 3px 14px; }
.legend-title { font-weight: 600; }
.legend-item { display: inline-flex; align-items: center; gap: 5px; white-space: nowrap; }
.swatch { display: inline-block; width: 13px; height: 13px; border: 1px solid rgba(0,0,0,.25); }
.swatch.line { height: 4px; border: 0; width: 18px; }
#timeline { width: 100%; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 14px 26px; }
.grid h3 { font-size: 14px; margin: 8px 0 2px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { padding: 3px 9px; border-bottom: 1px solid #eee; vertical-align: top; }
th { text-align: left; background: var(--bg2); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.txt { text-align: left; }
table.pop td:first-child { white-space: pre; }
ol.findings { margin: 4px 0; padding-left: 24px; }
ol.findings li { margin: 3px 0; }
.metric { color: var(--muted); font-size: 12px; font-family: ui-monospace, monospace; }
p.empty { color: var(--muted); font-style: italic; }
footer { color: var(--muted); font-size: 12px; padding: 10px 22px; border-top: 1px solid var(--line); }
"""

# Scripts run only if their hash is listed: an inline handler (onerror=...) that escaped escaping still would not.
CSP = "default-src 'none'; script-src {hashes}; style-src 'unsafe-inline'; img-src data: blob:; font-src data:"


def render(title: str, header: str, sections: list[tuple[str, str, str]], data: dict, blobs: Blobs) -> str:
    """The page. `header` and each section's HTML are already escaped; `sections` are (id, heading, html)."""
    body = "".join(f'<section id="{esc(sid)}"><h2>{esc(heading)}</h2>{content}</section>'
                   for sid, heading, content in sections)
    csp = CSP.format(hashes=" ".join(_sha256(code) for code in (PLOTLY_JS, SCRIPT)))
    blob_tags = "".join(f'<script type="application/octet-stream" id="{esc(bid)}">{text}</script>'
                        for bid, text in blobs.items)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{STYLE}</style>"
        f"<script>{PLOTLY_JS}</script></head><body>"
        f"{header}<main>{body}</main>"
        '<footer>gpt2trace report: one self-contained file; drag on the timeline to zoom in time, double-click '
        "for the whole trace.</footer>"
        f'<script type="application/json" id="report-data">{script_json(data)}</script>{blob_tags}'
        f"<script>{SCRIPT}</script></body></html>\n"
    )


def _sha256(code: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(code.encode("utf-8")).digest()).decode("ascii") + "'"
