"""Peak memory of the Paraver export and import on long traces: it must not grow with the trace.

Writes synthetic traces of the given lengths (benchmarks/big_trace.py: 64 ranks x 4 threads, MPI calls, written
rank by rank) to a folder, then in fresh child processes, for each length: `export_paraver` (Parquet -> .prv) and
`import_paraver_to` (.prv -> Parquet, rank by rank, a rank in time windows of `--window-lines` event lines when it
has more), each with its peak RSS (ru_maxrss of the child, from wait4) and records per second (in-process time: a
memory benchmark, run on a shared machine; the timing is not the point), `--repeat` times each (medians and
ranges: the allocator's retained memory varies by tens of MB from run to run). A small run first fills Numba's
caches. Results in results/paraver_stream.json.

    nice -n 10 python benchmarks/paraver_stream.py [--records 10000000 30000000] [--ranks 64] [--threads 4]
                                                   [--window-lines 131072] [--repeat 3]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

from child import run
from interop_speed import PARAVER as EXPORT  # the same export child as the 3 M benchmark's
from rich.console import Console
from rich.table import Table

from gpt2trace.interop.paraver_windows import WINDOW_LINES
from trainer.cpu import cpu_model

RESULTS = Path(__file__).parent / "results" / "paraver_stream.json"

GENERATE = """
import json, sys
sys.path.insert(0, sys.argv[1])
from big_trace import write_synthetic
print(json.dumps(write_synthetic(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))))
"""
IMPORT = """
import json, sys, time
t = time.perf_counter()
from gpt2trace.interop.paraver_stream import import_paraver_to
out = import_paraver_to(sys.argv[1], sys.argv[2], window_lines=int(sys.argv[3]))
print(json.dumps({"in_process_s": time.perf_counter() - t, "records": out.records}))
"""


def measured(args: list[str]) -> dict:
    child = run(args)
    result = {"wall_s": child.wall_s, "peak_rss_mb": child.peak_rss_mb, "exit_code": child.exit_code}
    if child.exit_code == 0:
        result.update(json.loads(child.stdout.strip().splitlines()[-1]))
        result["records_per_s"] = result["records"] / result["in_process_s"]
    else:
        result["error"] = child.stderr.strip().splitlines()[-3:]
    return result


def summary(runs: list[dict]) -> dict:
    """The first run's fields, with peak RSS and times as the medians of the runs (their ranges beside)."""
    out = dict(runs[0])
    if all(r["exit_code"] == 0 for r in runs):
        for key in ("peak_rss_mb", "in_process_s", "wall_s", "records_per_s"):
            values = [r[key] for r in runs]
            out[key], out[key + "_range"] = statistics.median(values), [min(values), max(values)]
    out["runs"] = runs
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000_000, 30_000_000])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--window-lines", type=_positive, default=WINDOW_LINES,
                        help="event lines per time window of a rank in the import")
    parser.add_argument("--repeat", type=_positive, default=3, help="runs of each export and import (medians shown)")
    parser.add_argument("--tmp", type=Path, default=None, help="folder for the traces (several GB at 30 M)")
    opts = parser.parse_args()
    if opts.tmp is not None and not opts.tmp.is_dir():
        parser.error(f"--tmp {opts.tmp}: no such folder; give an existing folder with several GB free")
    here = str(Path(__file__).parent)
    console = Console(width=120)
    runs = {}
    with tempfile.TemporaryDirectory(dir=opts.tmp) as tmp:
        tmp = Path(tmp)
        for n in [20_000, *opts.records]:
            parquet, name = tmp / f"t{n}.parquet", tmp / f"t{n}"
            made = run(["-c", GENERATE, here, str(parquet), str(opts.ranks), str(opts.threads), str(n)])
            if made.exit_code:
                sys.exit(f"generating {n:,} records failed: {made.stderr.strip().splitlines()[-1:]}")
            repeat = 1 if n == 20_000 else opts.repeat
            exports = [measured(["-c", EXPORT, str(parquet), str(name)])]
            for k in range(1, repeat):                      # again, to other names, removed at once
                exports.append(measured(["-c", EXPORT, str(parquet), str(tmp / f"again{k}")]))
                for p in tmp.glob(f"again{k}.*"):
                    p.unlink()
            export = summary(exports)
            parquet.unlink()
            imports = []
            for _ in range(repeat):
                back = tmp / f"back{n}.parquet"
                imports.append(measured(["-c", IMPORT, str(name) + ".prv", str(back), str(opts.window_lines)]))
                back.unlink(missing_ok=True)
            imported = summary(imports)
            if "lines" in export:
                imported["lines_per_rank"] = round(export["lines"] / opts.ranks)
            for p in tmp.glob(f"*{n}*"):
                p.unlink()
            if n == 20_000:
                continue                                    # Numba's caches filled
            runs[n] = {"generated": json.loads(made.stdout.strip().splitlines()[-1]), "export": export,
                       "import": imported}
            console.print(f"{n:,} records: export {_peak(export)}, import {_peak(imported)} peak RSS")
    result = {"machine": {"cpu": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform(), "load_average": os.getloadavg()},
              "ranks": opts.ranks, "threads": opts.threads, "window_lines": opts.window_lines,
              "runs": {str(n): r for n, r in runs.items()}}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    show = Table(title=f"Paraver export and import, {opts.ranks} ranks x {opts.threads} threads")
    for col in ("records", "step", "peak RSS (range)", "records/s", "in-process s", ".prv MB"):
        show.add_column(col, justify="right")
    for n, r in runs.items():
        for step in ("export", "import"):
            m = r[step]
            if m["exit_code"]:
                show.add_row(f"{n:,}", step, "failed: " + " ".join(m["error"]), "", "", "")
                continue
            show.add_row(f"{m['records']:,}", step, _peak(m), f"{m['records_per_s'] / 1e6:.2f} M",
                         f"{m['in_process_s']:.1f}", f"{m['mb']:.0f}" if "mb" in m else "")
    console.print(show)
    console.print(f"results in {RESULTS}")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _peak(m: dict) -> str:
    if "peak_rss_mb_range" not in m:
        return f"{m['peak_rss_mb']:.0f} MB"
    lo, hi = m["peak_rss_mb_range"]
    return f"{m['peak_rss_mb']:.0f} MB ({lo:.0f}-{hi:.0f})"


if __name__ == "__main__":
    main()
