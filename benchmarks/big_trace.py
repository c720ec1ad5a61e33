"""Traces bigger than memory: a synthetic trainer-like trace of any length, written rank by rank.

The trace has the shape of analyze_speed.py's 10 M-record trace (gpt2trace.testing.synthetic: steps, phases,
per-thread kernel records with layers, states that partition each thread's time, a late rank and a slow thread),
plus what a real MPI run adds: an MPI_Sendrecv between pairs of ranks before each step's MPI_Allreduce (Send
Receive, then Group Communication states) and the tracer's rss_bytes counters at each phase end. It is made one
rank at a time (synthetic.generate_by_rank) and written with RankOrderedWriter, so memory is that of one rank's
records whatever the length: 100 M records (64 ranks x 4 threads) fit on a 24 GB machine.

    python benchmarks/big_trace.py generate --records 100000000 --ranks 64 --threads 4 -o big.parquet

prints what it wrote as JSON: records, steps, file size, seconds, and this process's peak RSS.

    python benchmarks/big_trace.py measure big.parquet [--processes 2] [--repeat 3]

measures, each in a fresh process and alternating the variants in every round (a shared machine drifts),
`gpt2trace analyze` by one process (group of ranks by group of ranks, gpt2trace/cli/grouped.py; it loads the next
group in a thread, so it uses a second core when there is one), the same process pinned to one core (`taskset`),
`analyze` under `mpiexec -n K`, K pinned one-process `analyze` started at once (one core each), and `gpt2trace info`:
wall time (median and range), the largest process's peak RSS, and the speed-ups of K processes (one process's
median over K's): over one process on one core (the parallel analysis's scaling from one core to K, the target),
and over one process free to use every core (what a user gains by `mpiexec` on this machine). It checks that every
analysis gave the same JSON. The K pinned copies at once give the machine's ceiling for any split of the work over
K processes on K cores: K x the one-core median over the copies' (the last one's end), what K processes would reach
with no serial part and no communication, given the memory bandwidth and caches they share. Needs K cores. Prints
a table and writes benchmarks/results/big_trace.json.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from analyze_speed import config as analyze_config
from child import run as child
from child import together

from gpt2trace.format.rank_order import RankOrderedWriter
from gpt2trace.run.mpiexec import find_mpiexec
from gpt2trace.testing import synthetic
from trainer.cpu import cpu_model

LAYERS = 12


def synthetic_config(ranks: int, threads: int, records: int, seed: int) -> synthetic.SyntheticConfig:
    """analyze_speed's trace shape with point-to-point calls and memory counters, with enough steps for
    `records` (the last step completes, so a few more)."""
    shape = analyze_config(argparse.Namespace(ranks=ranks, threads=threads, layers=LAYERS))
    cfg = replace(shape, seed=seed, p2p=ranks > 1, rss=True)
    return replace(cfg, steps=max(1, -(-records // synthetic.records_per_step(cfg))))


def write_synthetic(path: str | Path, ranks: int, threads: int, records: int, seed: int = 1,
                    advance=lambda n: None) -> dict:
    """Writes the trace to `path` rank by rank (about `records` records); `advance(n)` is called with each rank's
    record count. Returns what it wrote."""
    cfg = synthetic_config(ranks, threads, records, seed)
    pieces = synthetic.generate_by_rank(cfg)
    first = next(pieces)
    with RankOrderedWriter(path, first.schema) as writer:
        writer.write(first)
        advance(first.num_rows)
        for table in pieces:
            writer.write(table)
            advance(table.num_rows)
    return {"records": writer.records, "ranks": ranks, "threads": threads, "layers": LAYERS, "steps": cfg.steps,
            "seed": seed}


RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"analyze_s": 60.0, "analyze_peak_mb": 4096.0, "speedup": 1.7}
ONE, ONE_CORE = "analyze, 1 process", "analyze, 1 process on 1 core"
MPI, AT_ONCE = "analyze, mpiexec -n {k}", "analyze, {k} at once (1 core each)"


def measure(trace: Path, processes: int, repeat: int, cores: list[int]) -> dict:
    """The variants of the module docstring, `repeat` rounds, the pinned ones on `cores` (one each, at least
    `processes`); every analyze's JSON compared with the first."""
    records = json.loads(child(["-m", "gpt2trace", "info", str(trace), "--json"]).stdout)["records"]
    analyze = ["-m", "gpt2trace", "analyze", str(trace)]
    pins = [["taskset", "-c", str(c)] for c in cores[:processes]]
    variants = {ONE: ([[]], analyze), ONE_CORE: (pins[:1], analyze),
                MPI.format(k=processes): ([[find_mpiexec(), "-n", str(processes)]], analyze),
                AT_ONCE.format(k=processes): (pins, analyze),
                "info": ([[]], ["-m", "gpt2trace", "info", str(trace), "--json"])}
    runs: dict[str, list] = {name: [] for name in variants}
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(repeat):
            for name, (launchers, args) in variants.items():
                outs = [Path(tmp) / f"out{i}.json" for i in range(len(launchers))]
                extra = [["--json", str(out)] if "analyze" in name else [] for out in outs]
                if len(launchers) > 1:
                    done = together([[*args, *e] for e in extra], launchers=launchers)
                else:
                    done = [child([*args, *extra[0]], launchers[0])]
                for c in done:
                    if c.exit_code != 0:
                        raise SystemExit(f"{name} failed ({c.exit_code}): {c.stderr[-2000:]}")
                if "analyze" in name:
                    for out in outs:
                        result = out.read_text()
                        reference = reference or result
                        if result != reference:
                            raise SystemExit(f"{name}: a different result from the first analysis")
                wall, peak = max(c.wall_s for c in done), max(c.peak_rss_mb for c in done)
                runs[name].append({"wall_s": wall, "peak_rss_mb": peak, "each_s": [c.wall_s for c in done]})
                print(f"round {round_ + 1}/{repeat} {name}: {wall:.1f} s, {peak:,.0f} MB", flush=True)
    rows = {name: {"wall_s_median": statistics.median(r["wall_s"] for r in rs),
                   "wall_s_range": [min(r["wall_s"] for r in rs), max(r["wall_s"] for r in rs)],
                   "peak_rss_mb": max(r["peak_rss_mb"] for r in rs), "runs": rs} for name, rs in runs.items()}
    one, one_core = rows[ONE]["wall_s_median"], rows[ONE_CORE]["wall_s_median"]
    many = rows[MPI.format(k=processes)]["wall_s_median"]
    ceiling = processes * one_core / rows[AT_ONCE.format(k=processes)]["wall_s_median"]
    return {"trace": str(trace), "records": records, "parquet_mb": trace.stat().st_size / 2**20,
            "processes": processes, "rows": rows, "speedup": one_core / many, "speedup_over_free": one / many,
            "ceiling": ceiling, "targets": TARGETS, "cpu": cpu_model(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg()}


def print_measured(res: dict) -> None:
    print(f"\n{res['records']:,} records ({res['parquet_mb']:,.0f} MB) on {res['cpu']}, {res['cpus']} CPUs")
    print(f"{'command':<36} {'wall s (median)':>15} {'range':>15} {'peak RSS MB':>12}")
    for name, r in res["rows"].items():
        lo, hi = r["wall_s_range"]
        print(f"{name:<36} {r['wall_s_median']:>15.1f} {f'{lo:.1f}..{hi:.1f}':>15} {r['peak_rss_mb']:>12,.0f}")
    k, share = res["processes"], res["speedup"] / res["ceiling"]
    print(f"speed-up of {k} processes over one process on one core: {res['speedup']:.2f}x (target "
          f"{TARGETS['speedup']}x); the machine's ceiling for {k} ({k} one-core runs at once): {res['ceiling']:.2f}x, "
          f"so {share:.0%} of it; over one process free to use every core: {res['speedup_over_free']:.2f}x")
    print(f"targets for one process: {TARGETS['analyze_s']:.0f} s, {TARGETS['analyze_peak_mb']:,.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="Write a synthetic trace rank by rank.")
    gen.add_argument("--records", type=int, default=100_000_000)
    gen.add_argument("--ranks", type=int, default=64)
    gen.add_argument("--threads", type=int, default=4)
    gen.add_argument("--seed", type=int, default=1)
    gen.add_argument("-o", "--output", type=Path, required=True)
    meas = commands.add_parser("measure", help="Time analyze (one process, mpiexec) and info on a trace.")
    meas.add_argument("trace", type=Path)
    meas.add_argument("--processes", type=int, default=2)
    meas.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    if opts.command == "measure":
        if opts.processes < 1 or opts.repeat < 1:
            print("error: --processes and --repeat must be >= 1", file=sys.stderr)
            sys.exit(2)
        if not opts.trace.is_file():
            print(f"error: {opts.trace}: no such trace file (make one with `big_trace.py generate`)", file=sys.stderr)
            sys.exit(2)
        cores = sorted(os.sched_getaffinity(0))
        if opts.processes > len(cores) or shutil.which("taskset") is None:
            print(f"error: --processes {opts.processes} needs as many cores ({len(cores)} here) and `taskset` "
                  "(util-linux) for the one-core runs", file=sys.stderr)
            sys.exit(2)
        res = measure(opts.trace, opts.processes, opts.repeat, cores)
        print_measured(res)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "big_trace.json").write_text(json.dumps(res, indent=1) + "\n")
        print(f"wrote {RESULTS / 'big_trace.json'}")
        return
    if opts.ranks < 1 or opts.threads < 1 or opts.records < 1:
        print("error: --records, --ranks and --threads must be >= 1", file=sys.stderr)
        sys.exit(2)
    from gpt2trace.cli.progress import progress
    t = time.perf_counter()
    with progress(f"writing {opts.output}", total=opts.records) as advance:
        made = write_synthetic(opts.output, opts.ranks, opts.threads, opts.records, opts.seed, advance)
    made.update(write_s=time.perf_counter() - t, bytes=opts.output.stat().st_size,
                bytes_per_record=opts.output.stat().st_size / made["records"],
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, path=str(opts.output))
    print(json.dumps(made, indent=1))


if __name__ == "__main__":
    main()
