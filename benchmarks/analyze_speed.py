"""How fast `gpt2trace analyze`, `whatif` and `diff` are on a 10-million-record trace (8 ranks x 4 threads), and
their peak memory.

Generates a synthetic trace (gpt2trace.testing.synthetic) to a temporary Parquet file, then runs each tool in a
fresh child process, timed from the parent (interpreter start and imports included) with the child's peak RSS from
os.wait4: analyze once through the Python API and once through the CLI; `whatif` with its default model (the ideal
network: the replay, the measured and the predicted critical paths) and `diff` of the trace against itself, both
through the CLI with --json. Small runs first fill Numba's caches, as any installation's first run does.
Targets: at most 10 s and 2 GB each on a 2-core machine.

    python benchmarks/analyze_speed.py [--records 10000000] [--ranks 8] [--threads 4] [--results PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from child import run
from rich.console import Console
from rich.table import Table

from gpt2trace.testing import synthetic

RESULTS = Path(__file__).parent / "results" / "analyze_speed.json"
TARGET_S, TARGET_MB = 10.0, 2048.0

API = """
import json, sys, time
t = time.perf_counter()
from analysis.analyze import analyze_many
from gpt2trace.format.reader import load
result = analyze_many([load(p) for p in sys.argv[1:]])
json.dumps(result)
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM")]
print(json.dumps({"in_process_s": time.perf_counter() - t, "vmhwm_mb": int(hwm[0].split()[1]) / 1024 if hwm else None}))
"""
CLI = "import sys; from gpt2trace.cli.main import app; app(prog_name='gpt2trace')"
# The other tools' rows: the CLI's arguments for a trace and a JSON output.
TOOLS = {"whatif": lambda trace, out: ["whatif", str(trace), "--json", str(out)],
         "diff": lambda trace, out: ["diff", str(trace), str(trace), "--json", str(out)]}


def measured(args: list[str]) -> dict:
    """Runs a child Python: wall seconds from the parent, its own peak RSS (MB, from wait4), exit code, output."""
    child = run(args)
    return {"wall_s": child.wall_s, "peak_rss_mb": child.peak_rss_mb, "exit_code": child.exit_code,
            "stdout": child.stdout, "stderr": child.stderr.strip().splitlines()[-1:] if child.stderr.strip() else []}


def config(opts) -> synthetic.SyntheticConfig:
    return synthetic.SyntheticConfig(ranks=opts.ranks, threads=opts.threads, layers=opts.layers, steps=1, seed=1,
                                     late_rank=(min(3, opts.ranks - 1), 1.1),
                                     slow_thread=(min(5, opts.ranks - 1), opts.threads - 1, 1.3), serial_ns=200_000)


def generate(opts) -> None:
    """Child: writes the trace to opts.generate and prints what it made as JSON."""
    cfg = config(opts)
    steps = max(1, -(-opts.records // synthetic.records_per_step(cfg)))
    t = time.perf_counter()
    table = synthetic.generate(replace(cfg, steps=steps))
    gen_s = time.perf_counter() - t
    t = time.perf_counter()
    synthetic.write(table, opts.generate)
    print(json.dumps({"records": table.num_rows, "steps": steps, "generate_s": gen_s,
                      "write_s": time.perf_counter() - t}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--results", type=Path, default=RESULTS, help="Where the JSON goes (a trial run on a "
                        "small trace: elsewhere than the measured results).")
    parser.add_argument("--generate", type=Path, help=argparse.SUPPRESS)   # child: write the trace only
    opts = parser.parse_args()
    if opts.generate:
        generate(opts)
        return
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        small, big = Path(tmp) / "small.parquet", Path(tmp) / "trace.parquet"
        # The trace is made in a child too: a child forked from a parent holding 10 M records would report
        # the parent's pages in its own peak RSS (Linux keeps the high-water mark across exec).
        gen = measured([__file__, "--generate", str(big), "--records", str(opts.records), "--ranks",
                        str(opts.ranks), "--threads", str(opts.threads), "--layers", str(opts.layers)])
        made = json.loads(gen["stdout"].strip().splitlines()[-1])
        records, steps, gen_s, write_s = made["records"], made["steps"], made["generate_s"], made["write_s"]
        synthetic.write(synthetic.generate(replace(config(opts), steps=3, late_rank=None, slow_thread=None)),
                        small)
        size_mb = big.stat().st_size / 2**20
        # First runs fill Numba's caches, as any installation's first run does; the CLI has its own cache
        # directory (the trainer's import points NUMBA_CACHE_DIR at one keyed by the trainer's kernel sources).
        warm = measured(["-c", API, str(small)])
        warm_cli = measured(["-c", CLI, "analyze", str(small), "--json", str(Path(tmp) / "small.json")])
        for command in TOOLS.values():              # their own first runs (the replay's kernels)
            measured(["-c", CLI, *command(small, Path(tmp) / "small.json")])
        api = measured(["-c", API, str(big)])
        inside = json.loads(api["stdout"].strip().splitlines()[-1]) if api["exit_code"] == 0 else {}
        in_process = inside.get("in_process_s")
        cli = measured(["-c", CLI, "analyze", str(big), "--json", str(Path(tmp) / "out.json")])
        tools = {name: measured(["-c", CLI, *command(big, Path(tmp) / f"{name}.json")])
                 for name, command in TOOLS.items()}
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "trace": {"records": records, "ranks": opts.ranks, "threads": opts.threads, "layers": opts.layers,
                  "steps": steps, "parquet_mb": size_mb, "generate_s": gen_s, "write_s": write_s},
        "warmup_small_trace": {"api": {k: warm[k] for k in ("wall_s", "peak_rss_mb", "exit_code")},
                               "cli": {k: warm_cli[k] for k in ("wall_s", "peak_rss_mb", "exit_code")}},
        "api": {"wall_s": api["wall_s"], "in_process_s": in_process, "peak_rss_mb": api["peak_rss_mb"],
                "vmhwm_mb": inside.get("vmhwm_mb"),
                "exit_code": api["exit_code"], "error": api["stderr"]},
        "cli": {"wall_s": cli["wall_s"], "peak_rss_mb": cli["peak_rss_mb"], "exit_code": cli["exit_code"],
                "error": cli["stderr"]},
        **{name: {"wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"], "exit_code": r["exit_code"],
                  "error": r["stderr"] if r["exit_code"] else []} for name, r in tools.items()},
        "targets": {"wall_s": TARGET_S, "peak_rss_mb": TARGET_MB},
    }
    for name in ("api", "cli", *TOOLS):
        r = result[name]
        r["meets_targets"] = r["exit_code"] == 0 and r["wall_s"] <= TARGET_S and r["peak_rss_mb"] <= TARGET_MB
    opts.results.parent.mkdir(parents=True, exist_ok=True)
    opts.results.write_text(json.dumps(result, indent=1) + "\n")
    show = Table(title=f"analyze, whatif, diff on {records:,} records ({opts.ranks} ranks x {opts.threads} threads, "
                       f"{steps} steps, {size_mb:.0f} MB Parquet)")
    for col in ("run", "wall s", "in-process s", "peak RSS MB", "exit", "targets (10 s, 2 GB)"):
        show.add_column(col, justify="left" if col == "run" else "right")
    rows = (("analyze, Python API", "api"), ("analyze --json", "cli"), ("whatif --json", "whatif"),
            ("diff (itself) --json", "diff"))
    for label, name in rows:
        r = result[name]
        show.add_row(label, f"{r['wall_s']:.2f}", f"{r['in_process_s']:.2f}" if r.get("in_process_s") else "",
                     f"{r['peak_rss_mb']:.0f}", str(r["exit_code"]), "met" if r["meets_targets"] else "NOT met")
    console.print(show)
    console.print(f"generated in {gen_s:.1f} s, written in {write_s:.1f} s; results in {opts.results}")
    for label, name in rows:
        if result[name]["exit_code"] != 0:
            console.print(f"[red]{label} failed:[/] {' '.join(result[name]['error'])}", soft_wrap=True)


if __name__ == "__main__":
    main()
