"""How fast the Paraver and Chrome exporters and the Paraver importer are on a few million records, and their
peak memory.

Generates a synthetic trace (gpt2trace.testing.synthetic, 4 ranks x 4 threads) to a temporary Parquet file, then in
fresh child processes, timed from the parent (interpreter start and imports included) with the child's peak RSS from
os.wait4: the Paraver export (at half and at full size: memory should not grow with the trace), the parse of the
.prv alone, the whole import (parse + records), and the Chrome export. A small run first fills Numba's caches.
Target: the parse at 1 million records per second or better.

    python benchmarks/interop_speed.py [--records 3000000] [--ranks 4] [--threads 4]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from child import run
from rich.console import Console
from rich.table import Table

from gpt2trace.testing import synthetic

RESULTS = Path(__file__).parent / "results" / "interop_speed.json"
TARGET_RECORDS_PER_S = 1e6

PARAVER = """
import json, sys, time
t = time.perf_counter()
from gpt2trace.interop.paraver_export import export_paraver
out = export_paraver(sys.argv[1], sys.argv[2])
print(json.dumps({"in_process_s": time.perf_counter() - t, "records": out.records, "lines": out.lines,
                  "mb": out.prv.stat().st_size / 2**20}))
"""
PARSE = """
import json, sys, time
from pathlib import Path
from gpt2trace.interop import paraver_parse
paraver_parse._count(__import__("numpy").frombuffer(b"1:1\\n", "uint8"))   # Numba's cache loaded before the clock
t = time.perf_counter()
header, body = paraver_parse.read(Path(sys.argv[1]))
print(json.dumps({"in_process_s": time.perf_counter() - t, "lines": body.lines,
                  "records": len(body.states) + len(body.events) + len(body.comms)}))
"""
IMPORT = """
import json, sys, time
t = time.perf_counter()
from gpt2trace.interop.paraver_import import import_paraver
out = import_paraver(sys.argv[1])
print(json.dumps({"in_process_s": time.perf_counter() - t, "records": out.table.num_rows}))
"""
CHROME = """
import json, sys, time
t = time.perf_counter()
from gpt2trace.interop.chrome_export import export_chrome
out = export_chrome(sys.argv[1], sys.argv[2])
print(json.dumps({"in_process_s": time.perf_counter() - t, "records": out.records, "events": out.events,
                  "mb": out.path.stat().st_size / 2**20}))
"""


def measured(args: list[str]) -> dict:
    """Runs a child Python: wall seconds from the parent, its peak RSS (MB, from wait4), and its JSON line."""
    child = run(args)
    result = {"wall_s": child.wall_s, "peak_rss_mb": child.peak_rss_mb, "exit_code": child.exit_code}
    if child.exit_code == 0:
        result.update(json.loads(child.stdout.strip().splitlines()[-1]))
    else:
        result["error"] = child.stderr.strip().splitlines()[-1:]
    return result


def config(opts) -> synthetic.SyntheticConfig:
    return synthetic.SyntheticConfig(ranks=opts.ranks, threads=opts.threads, layers=opts.layers, steps=1, seed=1,
                                     late_rank=(opts.ranks - 1, 1.1))


def generate(opts) -> None:
    """Child: writes the trace (opts.records records) to opts.generate."""
    cfg = config(opts)
    steps = max(1, -(-opts.records // synthetic.records_per_step(cfg)))
    table = synthetic.generate(replace(cfg, steps=steps))
    synthetic.write(table, opts.generate)
    print(json.dumps({"records": table.num_rows, "steps": steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.generate:
        generate(opts)
        return
    console = Console(width=120)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        made = {}
        for label, n in (("small", 20_000), ("half", opts.records // 2), ("full", opts.records)):
            gen = subprocess.run([sys.executable, __file__, "--generate", str(tmp / f"{label}.parquet"),
                                  "--records", str(n), "--ranks", str(opts.ranks), "--threads", str(opts.threads),
                                  "--layers", str(opts.layers)], capture_output=True, text=True, check=True)
            made[label] = json.loads(gen.stdout.strip().splitlines()[-1])
        measured(["-c", PARAVER, str(tmp / "small.parquet"), str(tmp / "small")])       # fills Numba's caches
        measured(["-c", IMPORT, str(tmp / "small.prv")])
        runs["paraver export (half size)"] = measured(["-c", PARAVER, str(tmp / "half.parquet"), str(tmp / "half")])
        runs["paraver export"] = measured(["-c", PARAVER, str(tmp / "full.parquet"), str(tmp / "full")])
        runs["parse .prv"] = measured(["-c", PARSE, str(tmp / "full.prv")])
        runs["import .prv"] = measured(["-c", IMPORT, str(tmp / "full.prv")])
        runs["chrome export"] = measured(["-c", CHROME, str(tmp / "full.parquet"), str(tmp / "full")])
        parquet_mb = (tmp / "full.parquet").stat().st_size / 2**20
    for r in runs.values():
        if r["exit_code"] == 0:
            r["records_per_s"] = r["records"] / r["in_process_s"]
            r["records_per_s_wall"] = r["records"] / r["wall_s"]
    parse = runs["parse .prv"]
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "trace": {"records": made["full"]["records"], "half_records": made["half"]["records"],
                  "ranks": opts.ranks, "threads": opts.threads, "layers": opts.layers,
                  "steps": made["full"]["steps"], "parquet_mb": parquet_mb},
        "runs": runs,
        "target": {"parse_records_per_s": TARGET_RECORDS_PER_S,
                   "met": parse.get("records_per_s", 0) >= TARGET_RECORDS_PER_S},
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    show = Table(title=f"interop on {made['full']['records']:,} records ({opts.ranks} ranks x {opts.threads} "
                       f"threads, {parquet_mb:.0f} MB Parquet)")
    for col in ("run", "records (parse: lines)", "in-process s", "wall s", "records/s", "peak RSS MB", "output MB"):
        show.add_column(col, justify="left" if col == "run" else "right")
    for name, r in runs.items():
        if r["exit_code"] != 0:
            show.add_row(name, "failed: " + " ".join(r.get("error", [])), "", "", "", "", "")
            continue
        show.add_row(name, f"{r['records']:,}", f"{r['in_process_s']:.2f}", f"{r['wall_s']:.2f}",
                     f"{r['records_per_s'] / 1e6:.2f} M", f"{r['peak_rss_mb']:.0f}",
                     f"{r['mb']:.0f}" if "mb" in r else "")
    console.print(show)
    console.print(f"parse target (1 M records/s): {'met' if result['target']['met'] else 'NOT met'}; "
                  f"results in {RESULTS}")


if __name__ == "__main__":
    main()
