"""Where the tracer's time on the training loop goes, piece by piece, timed inside real training steps.

    python benchmarks/tracer_in_situ.py                         # small: the pieces, then the kernels' timing
    python benchmarks/tracer_in_situ.py --steps 1600 --kernel-processes 0      # the pieces only

benchmarks/trace_overhead.py's A/B gives the tracer's whole cost, but its spread (+-0.3-0.5% between processes of
the same code on the project's 2-vCPU VMs) is larger than any one piece, and its `--hot-path` times each piece
warm, where inside a step, right after the kernels, the same Python costs several times more. This run times each
piece where it runs: one process trains `small` (B=4, T=64, 2 threads) traced as `gpt2trace run` traces it (the
runner's flush and memory intervals), with each of the tracer's methods on the loop's thread wrapped in a pair of
perf_counter_ns reads: the Observer's calls, a phase's enter and exit, the resident-memory read a sampled phase end
makes, the recorder's spill, the cut and its steps (the window closed, which takes the log out; its buffers laid
out; the part's file written: open, writev, close, rename). Per piece: calls per step, median and mean time per
call, time per step and its share of the run's wall time. An empty method wrapped the same way, called where the
step ends, gives the floor the wrapping itself adds to a call (`wrapper floor`). Outer pieces include inner ones (a
phase's exit its memory read, the step end its cut).

The kernels' own timing runs in compiled code, where no wrapper reaches: it is measured as an A/B of its own
(`--kernel-processes`, 4 by default, one after the other): in each process, blocks of 10 steps alternate untraced
and with the kernels' log alone (the recorder attached, as a traced run has it, spills included; no observer, no
cuts), U K K U ..., and the log's cost is all K time over all U time - 1, with a 95% interval from resampling the
groups of four blocks; the processes' mean, with an interval from resampling the processes (each process's memory
layout shifts its result, as in trace_overhead.py). What the tracer's Python costs the kernels around it (their
data evicted) is in neither measure, only in trace_overhead.py's whole A/B.

Prints a table and writes benchmarks/results/tracer_in_situ.json.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from trace_overhead import interval, training

from trainer.cpu import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"
MODEL, B, T, THREADS = "small", 4, 64, 2
KERNEL_STEPS = 10          # steps per block of the kernels' A/B


def run(steps: int) -> dict:
    from gpt2trace.run.runner import TraceConfig, prepare_process
    prepare_process(THREADS)

    from gpt2trace.format import raw_part, writer
    from gpt2trace.record import recorder, resident, tracer
    from trainer.train import train

    times: dict[str, list[int]] = collections.defaultdict(list)
    clock = time.perf_counter_ns

    def wrap(cls, method: str, piece: str) -> None:
        inner = getattr(cls, method)

        def timed(*args, **kwargs):
            t0 = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                times[piece].append(clock() - t0)
        setattr(cls, method, timed)

    class Floor:
        def nop(self) -> None:
            pass

    for method in ("begin_step", "microstep", "phase", "counter", "end_step", "_cut"):
        wrap(tracer.Tracer, method, method.strip("_"))
    wrap(tracer._Phase, "__enter__", "phase enter")
    wrap(tracer._Phase, "__exit__", "phase exit")
    wrap(resident.ResidentMemory, "bytes", "memory read")
    wrap(recorder.KernelRecorder, "spill", "spill")
    # a cut's steps: the window closed (the log taken out, the rows made buffers), laid out, written
    wrap(recorder.KernelRecorder, "take", "cut: take log")
    wrap(tracer.Tracer, "_close_window", "cut: close")
    wrap(raw_part, "buffers", "cut: layout")
    wrap(writer.PartWriter, "write_raw", "cut: write")
    wrap(Floor, "nop", "wrapper floor")
    floor, step_end = Floor(), tracer.Tracer.end_step

    def end_step(self, step: int) -> None:
        floor.nop()
        step_end(self, step)
    tracer.Tracer.end_step = end_step

    every = TraceConfig()
    model, data, tcfg, dp, launcher = training(MODEL, B, T, THREADS, 1)
    with tempfile.TemporaryDirectory() as tmp:
        tr = tracer.Tracer(Path(tmp) / "run.parquet", 0, THREADS, {}, flush_every_s=every.flush_every_s,
                           memory_every_s=every.memory_every_s)
        launcher.recorder = tr.recorder
        train(model, data, tcfg, dp, observer=tr)     # warm-up: one step
        times.clear()
        t0 = clock()
        train(model, data, replace(tcfg, steps=steps), dp, observer=tr, start_step=1)
        wall = clock() - t0
        timed = {piece: list(ns) for piece, ns in times.items()}     # the close's last cut is after the steps
        tr.close()
    measured = steps - 1
    pieces = {}
    for piece, ns in timed.items():
        pieces[piece] = {"calls_per_step": len(ns) / measured, "median_us": statistics.median(ns) / 1e3,
                         "mean_us": statistics.fmean(ns) / 1e3, "us_per_step": sum(ns) / measured / 1e3,
                         "share": sum(ns) / wall}
    return {"model": MODEL, "B": B, "T": T, "threads": THREADS, "steps": measured,
            "ms_per_step": wall / measured / 1e6, "flush_every_s": every.flush_every_s,
            "memory_every_s": every.memory_every_s, "pieces": pieces, "cpu": cpu_model(), "cpus": os.cpu_count()}


def kernels(blocks: int) -> dict:
    """One process of the kernels' A/B: `blocks` blocks of KERNEL_STEPS steps, U K K U ..., after a warm-up."""
    from gpt2trace.run.runner import prepare_process
    prepare_process(THREADS)

    from gpt2trace.record.recorder import KernelRecorder
    from trainer.train import train

    model, data, tcfg, dp, launcher = training(MODEL, B, T, THREADS, 1)
    log = KernelRecorder(THREADS)
    launcher.recorder = log
    train(model, data, replace(tcfg, steps=2), dp)
    groups, step = [], 2
    for i in range(blocks):
        logged = i % 4 in (1, 2)
        launcher.recorder = log if logged else None
        t0 = time.perf_counter_ns()
        train(model, data, replace(tcfg, steps=step + KERNEL_STEPS), dp, start_step=step)
        elapsed = time.perf_counter_ns() - t0
        step += KERNEL_STEPS
        if i % 4 == 0:
            groups.append([0, 0])
        groups[-1][0 if logged else 1] += elapsed
        if log.n > 50_000:             # the window's buffer kept bounded, between blocks
            log.take()
    groups = [g for g in groups if g[0] and g[1]]

    def ratio(picked):
        return sum(k for k, _ in picked) / sum(u for _, u in picked) - 1

    return {"overhead": ratio(groups), "overhead_95": list(interval(groups, ratio)), "groups": len(groups),
            "ms_per_step_untraced": sum(u for _, u in groups) / len(groups) / 2 / KERNEL_STEPS / 1e6}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--kernels-worker":
        print(json.dumps(kernels(int(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=800, help="training steps, the first one a warm-up (default 800)")
    ap.add_argument("--kernel-processes", type=int, default=4,
                    help="processes of the kernels' A/B, one after the other (default 4; 0: none)")
    ap.add_argument("--kernel-blocks", type=int, default=320,
                    help=f"blocks of {KERNEL_STEPS} steps per process of the kernels' A/B (default 320)")
    args = ap.parse_args()
    if args.steps < 2 or args.kernel_processes < 0 or args.kernel_blocks < 4:
        print("error: --steps must be >= 2 (the first is a warm-up), --kernel-processes >= 0 and --kernel-blocks >= 4 "
              "(one group of U K K U)", file=sys.stderr)
        raise SystemExit(2)
    res = run(args.steps)
    print(f"{res['model']} B={res['B']} T={res['T']}, {res['threads']} threads, {res['steps']} steps of "
          f"{res['ms_per_step']:.2f} ms; {res['cpu']} ({res['cpus']} CPUs)")
    print(f"{'piece':14s} {'calls/step':>10s} {'median us':>10s} {'mean us':>9s} {'us/step':>8s} {'share':>7s}")
    for piece, p in sorted(res["pieces"].items(), key=lambda kv: -kv[1]["us_per_step"]):
        print(f"{piece:14s} {p['calls_per_step']:10.2f} {p['median_us']:10.2f} {p['mean_us']:9.2f} "
              f"{p['us_per_step']:8.2f} {100 * p['share']:6.3f}%")
    print("(outer pieces include inner ones: a phase's exit its memory read, the step end its cut, the cut its "
          "steps, the close the log's take; spills come when a kernel asks; every call includes the wrapper floor)")
    if args.kernel_processes:
        runs = []
        for _ in range(args.kernel_processes):
            out = subprocess.run([sys.executable, __file__, "--kernels-worker", str(args.kernel_blocks)],
                                 capture_output=True, text=True, timeout=3600)
            if out.returncode != 0:
                sys.exit(f"tracer_in_situ: a kernels' A/B process failed:\n{out.stderr[-3000:]}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = runs[-1]
            print(f"kernels' log, process {len(runs)}: {100 * r['overhead']:+.2f}% "
                  f"({100 * r['overhead_95'][0]:+.2f}..{100 * r['overhead_95'][1]:+.2f}), {r['groups']} groups, "
                  f"untraced {r['ms_per_step_untraced']:.2f} ms a step", flush=True)
        values = [r["overhead"] for r in runs]
        lo, hi = interval(values, statistics.mean)
        res["kernels"] = {"processes": runs, "overhead": statistics.mean(values), "overhead_95": [lo, hi],
                          "blocks": args.kernel_blocks, "steps_per_block": KERNEL_STEPS}
        print(f"kernels' log (timing and spills; all K time / all U time - 1, mean of {len(runs)} processes, 95% "
              f"interval from resampling them): {100 * statistics.mean(values):+.2f}% "
              f"({100 * lo:+.2f}..{100 * hi:+.2f})")
    (RESULTS / "tracer_in_situ.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
