"""How fast `gpt2trace analyze` is on a 10-million-record trace (8 ranks x 4 threads), and its peak memory.

Generates a synthetic trace (gpt2trace.testing.synthetic) to a temporary Parquet file, then runs the analysis in a fresh
child process, timed from the parent (interpreter start and imports included) with the child's peak RSS from
os.wait4: once through the Python API, once through the CLI. Small runs first fill Numba's caches, as any
installation's first run does. Targets (issue 5): at most 10 s and 2 GB on a 2-core machine.

    python benchmarks/analyze_speed.py [--records 10000000] [--ranks 8] [--threads 4]
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
        api = measured(["-c", API, str(big)])
        inside = json.loads(api["stdout"].strip().splitlines()[-1]) if api["exit_code"] == 0 else {}
        in_process = inside.get("in_process_s")
        cli = measured(["-c", CLI, "analyze", str(big), "--json", str(Path(tmp) / "out.json")])
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
        "targets": {"wall_s": TARGET_S, "peak_rss_mb": TARGET_MB},
    }
    result["api"]["meets_targets"] = api["exit_code"] == 0 and api["wall_s"] <= TARGET_S and \
        api["peak_rss_mb"] <= TARGET_MB
    result["cli"]["meets_targets"] = cli["exit_code"] == 0 and cli["wall_s"] <= TARGET_S and \
        cli["peak_rss_mb"] <= TARGET_MB
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    show = Table(title=f"analyze on {records:,} records ({opts.ranks} ranks x {opts.threads} threads, {steps} steps, "
                       f"{size_mb:.0f} MB Parquet)")
    for col in ("run", "wall s", "in-process s", "peak RSS MB", "exit", "targets (10 s, 2 GB)"):
        show.add_column(col, justify="left" if col == "run" else "right")
    for name, r in (("Python API", result["api"]), ("CLI --json", result["cli"])):
        show.add_row(name, f"{r['wall_s']:.2f}", f"{r['in_process_s']:.2f}" if r.get("in_process_s") else "",
                     f"{r['peak_rss_mb']:.0f}", str(r["exit_code"]), "met" if r["meets_targets"] else "NOT met")
    console.print(show)
    console.print(f"generated in {gen_s:.1f} s, written in {write_s:.1f} s; results in {RESULTS}")
    for name, r in (("api", api), ("cli", cli)):
        if r["exit_code"] != 0:
            console.print(f"[red]{name} failed:[/] {' '.join(r['stderr'])}", soft_wrap=True)


if __name__ == "__main__":
    main()
