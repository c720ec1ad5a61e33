"""How big and how fast `gpt2trace report` is on synthetic traces of 10 thousand, 1 million and 10 million records:
the page's size, the time to build it, and the time until headless Chromium shows its first view.

Each trace is generated in a child process; each report is built in a fresh child (interpreter start, imports,
reading the trace and the analysis included; its peak RSS from os.wait4). The page is then opened `--loads`
times in Debian's chromium through Playwright, each time in a new page: the first view is the moment the
timeline is drawn and painted, every panel and lane of it (the page's `data-first-view`, ms since navigation start);
the charts under the timeline draw later, when scrolled to. Each load also records the page's phases (its
performance marks: its script starts after plotly.js ran, data parsed, first levels decoded).
Targets: a 10-million-record trace gives a page of at most 25 MB whose first view shows within 5 s;
the same holds for a 100-million-record trace (benchmarks/big_trace.py generate), built within 4 GB:
`--trace` measures traces already on disk (kept).

    python benchmarks/report_speed.py [--records 10000 1000000 10000000] [--loads 3]
    python benchmarks/report_speed.py --trace /tmp/big100m.parquet [--loads 3] [--results PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gpt2trace.testing import synthetic

RESULTS = Path(__file__).parent / "results" / "report_speed.json"
TARGET_MB, TARGET_FIRST_VIEW_S = 25.0, 5.0
TARGET_RSS_MB = 4096.0           # the report of a 100-million-record trace within 4 GB
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

BUILD = """
import json, sys, time
t = time.perf_counter()
from gpt2trace.report import write_file
report = write_file(sys.argv[1], sys.argv[2])          # what `gpt2trace report` does: group of ranks by group
print(json.dumps({"in_process_s": time.perf_counter() - t, "build_s": report.build_s, "detail": report.detail_note}))
"""


def config(records: int) -> synthetic.SyntheticConfig:
    """Small traces: 2 ranks x 2 threads x 2 layers; big ones: 8 ranks x 4 threads x 12 layers (as analyze_speed)."""
    if records < 100_000:
        return synthetic.SyntheticConfig(ranks=2, threads=2, layers=2, steps=1, seed=1, late_rank=(1, 1.2))
    return synthetic.SyntheticConfig(ranks=8, threads=4, layers=12, steps=1, seed=1, late_rank=(3, 1.1),
                                     slow_thread=(5, 3, 1.3), serial_ns=200_000)


def child(args: list[str]) -> dict:
    """A child Python: wall seconds from the parent, its peak RSS (MB), exit code, last stdout line, stderr tail."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()                 # the children print one line; stderr cannot fill its pipe first
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    last = out.strip().splitlines()[-1] if out.strip() else "{}"
    return {"wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024, "exit_code": os.waitstatus_to_exitcode(status),
            "out": json.loads(last), "error": err.strip().splitlines()[-1:] if err.strip() else []}


def generate(path: str, records: int) -> None:
    """Child: writes a trace of about `records` records and prints what it made."""
    cfg = config(records)
    steps = max(1, -(-records // synthetic.records_per_step(cfg)))
    table = synthetic.generate(replace(cfg, steps=steps))
    synthetic.write(table, path)
    print(json.dumps({"records": table.num_rows, "steps": steps}))


def first_views(html: Path, loads: int) -> list[dict]:
    """Opens the page `loads` times; per load the first view (ms since navigation start) and console errors."""
    from playwright.sync_api import sync_playwright
    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for _ in range(loads):
            page = browser.new_page(viewport={"width": 1500, "height": 1000})
            errors: list[str] = []
            page.on("console", lambda m, errors=errors: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            t = time.perf_counter()
            page.goto(html.as_uri())
            while not page.evaluate("document.body.dataset.firstView || document.body.dataset.error || ''"):
                if time.perf_counter() - t > 120:
                    errors.append("no first view after 120 s")
                    break
                time.sleep(0.02)
            wall = time.perf_counter() - t
            first = page.evaluate("document.body.dataset.firstView")
            marks = page.evaluate("Object.fromEntries(performance.getEntriesByType('mark')"
                                  ".map(m => [m.name, Math.round(m.startTime)]))")
            out.append({"first_view_s": float(first) / 1e3 if first else None, "wall_s": wall, "errors": errors,
                         "marks_ms": marks})
            page.close()
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 1_000_000, 10_000_000])
    parser.add_argument("--trace", type=Path, nargs="+", help="Traces on disk to measure instead of generated ones.")
    parser.add_argument("--loads", type=int, default=3, help="Page loads in Chromium (0: none).")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--generate", nargs=2, help=argparse.SUPPRESS)     # child: path records
    opts = parser.parse_args()
    if opts.generate:
        generate(opts.generate[0], int(opts.generate[1]))
        return
    console = Console()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, records in enumerate(opts.trace or opts.records):
            if opts.trace:
                trace, html = opts.trace[i], Path(tmp) / f"report_{i}.html"
                from gpt2trace.format.reader import rank_records
                made = {"records": sum(rank_records(trace).values()), "steps": None}
            else:
                trace, html = Path(tmp) / f"trace_{records}.parquet", Path(tmp) / f"report_{records}.html"
                made = child([__file__, "--generate", str(trace), str(records)])["out"]
            built = child(["-c", BUILD, str(trace), str(html)])
            size_mb = html.stat().st_size / 2**20 if html.exists() else None
            loads = first_views(html, opts.loads) if html.exists() and opts.loads > 0 else []
            views = [x["first_view_s"] for x in loads if x["first_view_s"] is not None]
            rows.append({
                "records": made.get("records"), "steps": made.get("steps"), "parquet_mb": trace.stat().st_size / 2**20,
                "report_mb": size_mb, "build_wall_s": built["wall_s"],
                "build_in_process_s": built["out"].get("build_s"),
                "build_peak_rss_mb": built["peak_rss_mb"], "exit_code": built["exit_code"], "error": built["error"],
                "exact": built["out"].get("detail"), "first_view_s": statistics.median(views) if views else None,
                "first_view_loads_s": views, "marks_ms": [x["marks_ms"] for x in loads],
                "console_errors": sorted({e for x in loads for e in x["errors"]}),
            })
            console.print(f"{made.get('records'):,} records done", style="dim")
            if not opts.trace:
                trace.unlink(missing_ok=True)
    big = max(rows, key=lambda r: r["records"] or 0)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load_average": os.getloadavg()},
        "chromium": subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True).stdout.strip(),
        "targets": {"report_mb": TARGET_MB, "first_view_s": TARGET_FIRST_VIEW_S, "records": big["records"],
                    "peak_rss_mb_at_100m": TARGET_RSS_MB},
        "meets_targets": bool(big["report_mb"] is not None and big["report_mb"] <= TARGET_MB
                              and big["first_view_s"] is not None and big["first_view_s"] <= TARGET_FIRST_VIEW_S
                              and big["build_peak_rss_mb"] <= TARGET_RSS_MB),
        "runs": rows,
    }
    opts.results.parent.mkdir(parents=True, exist_ok=True)
    opts.results.write_text(json.dumps(result, indent=1) + "\n")
    show = Table(title="gpt2trace report: size, build time, first view in headless Chromium")
    for col in ("records", "Parquet MB", "report MB", "build s (wall)", "build peak RSS MB",
                f"first view s (median of {opts.loads})", "console errors"):
        show.add_column(col, justify="right", no_wrap=col == "records")
    for r in rows:
        show.add_row(f"{r['records']:,}", f"{r['parquet_mb']:.1f}", _f(r["report_mb"], 1), _f(r["build_wall_s"], 1),
                     _f(r["build_peak_rss_mb"], 0), _f(r["first_view_s"], 2), str(len(r["console_errors"])))
    console.print(show)
    verdict = "met" if result["meets_targets"] else "NOT met"
    console.print(f"targets for {big['records']:,} records (<= {TARGET_MB:g} MB, first view <= "
                  f"{TARGET_FIRST_VIEW_S:g} s, peak RSS <= {TARGET_RSS_MB:g} MB): {verdict}; results in {opts.results}")


def _f(v, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}"


if __name__ == "__main__":
    main()
