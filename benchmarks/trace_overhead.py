"""What tracing costs: blocks of training steps traced and untraced, alternating in one process, and the trace's size.

    python benchmarks/trace_overhead.py                          # small and d12, 8 blocks each (A B B A A B B A)
    python benchmarks/trace_overhead.py --configs small --blocks 4 --steps 60    # a quick check
    python benchmarks/trace_overhead.py --configs small --blocks 400 --steps 10 --one-tracer   # a drifting machine
    python benchmarks/trace_overhead.py --configs small --blocks 160 --steps 10 --one-tracer --processes 8

One process per configuration trains one model; after an untimed warm-up block, blocks of steps alternate
traced (A) and untraced (B) as A B B A A B B A, so drift in the machine's speed (a shared machine) hits both
alike. The same weights, buffers and caches serve both, so the difference is what tracing costs, not process
start-up or memory placement. Per configuration:

- ms/step, traced and untraced: a block's wall time / its steps (everything between steps included, the parts
  cut during the steps too), median over the blocks of each kind. Closing a block's tracer (writing its last
  window, once per run, like the merge after it) is timed apart: close ms, per block;
- overhead: median traced / median untraced - 1, and its spread: the lowest and highest ratio of a traced block
  to the untraced block next to it (A B, B A pairs);
- flush share: the tracer's time on the training loop's thread (the `trace_flush` phases it records at each
  step end: the bookkeeping, and every `flush_every_s` the part's write), over the traced wall time, and of it
  the parts' writes alone (cut share);
- records per step of the merged trace;
- bytes per record (compressed, merged trace) and of the parts while the run goes; the merge's time per record
  (it decodes the parts' raw buffers and builds the kernel and state records from them, after the run);
- all traced time / all untraced time - 1, over whole A B B A groups, wall and CPU, with a 95% interval from
  resampling the groups: every traced block counts, the ones holding a cut too. With `--one-tracer` a single
  tracer serves the whole run (attached in the traced blocks, detached in the others, its windows cut every
  2 x flush_every_s of wall time: about every flush_every_s of traced time), so blocks can be much shorter than a
  window and the machine's drift stays the same within a group;
- with `--processes N`, the same in N processes one after the other, pooled (`pooled`): the overheads above are
  then the mean of the processes' own, with an interval from resampling the processes, since each process's
  memory layout shifts its result by more than its own interval (measured 2026-11-27, the same code in three
  processes of 400 blocks: +1.40, +2.91 and +0.31%, each with an interval of about +-1.1%);
- CPU ms/step traced and untraced: the process's CPU time (every thread: the loop and the kernels' workers) per
  step, median over the blocks of each kind, and their ratio - 1: what tracing costs in work, which time taken by
  other load on a shared machine does not stretch as it stretches wall time.

`--hot-path` measures instead what tracing adds on the training loop's thread per kernel call (a tiny kernel on
one thread, traced and untraced: the kernel's row of the trace log, its clock and thread-id reads; and the wall
time of a small kernel's call on two threads, which waits at its join for the other thread's block times too) and
per phase (a Tracer's phase against the untraced observer's), and what a cut costs it on a window shaped as 1 s
of `small` (6,464 calls, 384 phases, 576 counters: the buffers laid out and written as a raw part with one
writev), best of several runs of the thread's CPU time (other load on a shared machine does not stretch it). The
calls, phases and cuts run back to back, their code and data in cache: in training, right after the kernels, the
same Python costs several times more (a cut of `small` measured ~3 ms of the loop thread's time inside steps,
~0.6 ms here).

Prints a table and writes benchmarks/results/trace_overhead.json (a configuration measured again replaces its
row), with the load average before and after each configuration.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from trainer.cpu import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"
# name: (model, B, T, threads, steps per block)
CONFIGS = {
    "small": ("small", 4, 64, 2, 240),     # ~15 ms steps: ~3.6 s blocks, ~7 parts each
    "d12": ("d12", 4, 64, 2, 4),           # ~1.3 s steps: ~5 s blocks, a part per step
}


def training(model: str, B: int, T: int, threads: int, steps: int):
    """The model, its data, its training config and data-parallel strategy, and the launcher of `threads` threads
    they run on (call after gpt2trace.run.runner.prepare_process)."""
    from trainer.config import TrainConfig, model_config
    from trainer.data import TokenLoader, synthetic_corpus
    from trainer.dp import Local
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.params import init_params

    cfg = model_config(model)
    tcfg = TrainConfig(batch_size=B, seq_len=T, steps=steps, lr=1e-4)
    launcher = Launcher(threads)
    m = GPT2(cfg, init_params(cfg, tcfg.seed), B, T, launcher)
    data = TokenLoader(synthetic_corpus(cfg.vocab_size, 1 << 18, 1), B, T)
    return m, data, tcfg, Local(m, tcfg, launcher), launcher


def worker(model: str, B: int, T: int, threads: int, steps: int, blocks: int, tmp: str, one_tracer: bool) -> dict:
    """One process, one model: an untimed warm-up block, then `blocks` blocks of `steps` steps, A B B A ...

    one_tracer: a single tracer for the whole run, attached in the traced blocks and detached in the others (its
    windows cut every 2 x flush_every_s of wall time: about every flush_every_s of traced time, and memory sampled
    likewise every 2 x memory_every_s); otherwise a tracer per traced block."""
    from gpt2trace.run.runner import TraceConfig, prepare_process
    prepare_process(threads)

    from gpt2trace.format.writer import merge_parts
    from gpt2trace.record.tracer import Tracer
    from trainer.train import train

    m, data, tcfg, dp, launcher = training(model, B, T, threads, steps)
    # warm-up, untimed: the kernels and the tracer's compiled pass loaded, the part writer's code paths run once
    warm = Tracer(Path(tmp) / "warm.parquet", 0, threads, {}, flush_every_s=0)
    launcher.recorder = warm.recorder
    train(m, data, replace(tcfg, steps=2), dp, observer=warm)
    warm.close()
    merge_parts(Path(tmp) / "warm.parquet").path.unlink()
    out = {"blocks": [], "records": 0, "bytes": 0, "traced_steps": 0, "flush_ns": 0, "cut_ns": 0, "parts": 0,
           "part_bytes": 0, "merge_ns": 0,
           "close_ns": 0}
    run_path = Path(tmp) / "run.parquet"
    every = TraceConfig()
    run_tracer = (Tracer(run_path, 0, threads, {}, flush_every_s=2 * every.flush_every_s,
                         memory_every_s=2 * every.memory_every_s) if one_tracer else None)
    for i in range(blocks):
        traced = (i % 4) in (0, 3)                               # A B B A: drift cancels in pairs
        path = Path(tmp) / f"block{i}.parquet"
        if one_tracer:
            tracer, block, first = run_tracer if traced else None, replace(tcfg, steps=(i + 1) * steps), i * steps
        else:
            tracer = (Tracer(path, 0, threads, {}, flush_every_s=every.flush_every_s,
                             memory_every_s=every.memory_every_s) if traced else None)
            block, first = tcfg, 0
        launcher.recorder = None if tracer is None else tracer.recorder
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        train(m, data, block, dp, observer=tracer, start_step=first)
        wall, cpu = time.perf_counter_ns() - t0, time.process_time_ns() - c0
        out["traced_steps"] += steps if traced else 0
        if tracer is not None and not one_tracer:
            _tally(tracer, path, out)
            path.unlink()
        out["blocks"].append({"traced": traced, "ms_per_step": wall / 1e6 / steps,
                              "cpu_ms_per_step": cpu / 1e6 / steps})
    if run_tracer is not None:
        _tally(run_tracer, run_path, out)
    return out


def _tally(tracer, path: Path, out: dict) -> None:
    """Add a finished run's tracer figures to `out`: the parts written during the steps, the close (its last
    window, once per run: timed apart), the merge, the merged trace's records and bytes, and the `trace_flush`
    phases it holds (the tracer's time on the loop)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from gpt2trace.format.writer import merge_parts
    from gpt2trace.record.tracer import FLUSH_PHASE
    out["cut_ns"] += tracer.cut_ns
    t1 = time.perf_counter_ns()
    tracer.close()
    out["close_ns"] += time.perf_counter_ns() - t1
    out["parts"] += tracer.writer.seq
    out["part_bytes"] += tracer.writer.bytes
    t0 = time.perf_counter_ns()
    merged = merge_parts(path)
    out["merge_ns"] += time.perf_counter_ns() - t0
    out["records"] += merged.records
    out["bytes"] += path.stat().st_size
    t = pq.read_table(path, columns=["name", "start_ns", "end_ns"])
    f = pc.filter(t, pc.equal(t["name"], FLUSH_PHASE))
    out["flush_ns"] += pc.sum(pc.subtract(f["end_ns"], f["start_ns"])).as_py() or 0


def hot_path(tmp: str) -> dict:
    """ns the training loop's thread pays per traced kernel call and per traced phase, best of several runs."""
    from gpt2trace.run.runner import prepare_process
    prepare_process(1)
    import numpy as np

    from gpt2trace.record.tracer import Tracer
    from trainer.kernels.residual import residual_forward
    from trainer.launcher import Launcher
    from trainer.train import NullObserver

    x = np.ones(64, np.float32)
    out = np.empty_like(x)
    tracer = Tracer(Path(tmp) / "hot.parquet", 0, 1, {}, flush_every_s=1e9)
    launcher = Launcher(1)
    n = 20_000

    def calls(recorder) -> float:
        return _per_call_ns(launcher, recorder, residual_forward, (out, x, x), n, time.thread_time_ns)

    # a step that samples no memory: the second within memory_every_s of the first
    unsampled = Tracer(Path(tmp) / "unsampled.parquet", 0, 1, {}, flush_every_s=1e9, memory_every_s=1e9)
    unsampled.begin_step(0)
    unsampled.begin_step(1)

    def phases(observer) -> float:
        t0 = time.thread_time_ns()
        for _ in range(n):
            with observer.phase("forward"):
                pass
        dt = (time.thread_time_ns() - t0) / n
        for t in (tracer, unsampled):
            t._phases.clear()
            t._counters.clear()
        return dt

    window = Tracer(Path(tmp) / "cut.parquet", 0, 1, {}, flush_every_s=1e9)   # cut by hand, as a run's tracer

    def cut() -> float:
        """A window of 1 s of `small` (64 steps of 101 calls, 6 phases, 9 counters), then its cut."""
        launcher.recorder = window.recorder
        for step in range(64):
            window.begin_step(step)
            for phase in ("dataload", "forward", "backward", "grad_sync", "optimizer"):
                with window.phase(phase):
                    for _ in range(101 // 5 + (phase == "optimizer")):
                        launcher(residual_forward, 0, out, x, x)
            for counter in ("loss", "lr", "grad_norm", "tokens"):
                window.counter(counter, 1.0)
            window.end_step(step)
        t0 = time.thread_time_ns()
        window._cut(time.monotonic_ns(), None)
        return time.thread_time_ns() - t0

    best = {"call_untraced": [], "call_traced": [], "phase_untraced": [], "phase_traced": [],
            "phase_traced_unsampled": [], "cut_ns": []}
    for _ in range(15):
        best["call_untraced"].append(calls(None))
        best["call_traced"].append(calls(tracer.recorder))
        best["phase_untraced"].append(phases(NullObserver()))
        best["phase_traced"].append(phases(tracer))
        best["phase_traced_unsampled"].append(phases(unsampled))
        best["cut_ns"].append(cut())
    for t in (tracer, unsampled, window):
        t.close()
    res = {k: min(v) for k, v in best.items()}
    return res | {"per_call_ns": res["call_traced"] - res["call_untraced"],
                  "per_phase_ns": res["phase_traced"] - res["phase_untraced"],
                  "per_phase_unsampled_ns": res["phase_traced_unsampled"] - res["phase_untraced"]}


def _per_call_ns(launcher, recorder, kernel, args: tuple, n: int, clock) -> float:
    """ns per call of `kernel(*args)` at layer 0 through `launcher`, traced into `recorder` (None: untraced), over
    `n` calls timed by `clock`; the recorder emptied afterwards."""
    launcher.recorder = recorder
    t0 = clock()
    for _ in range(n):
        launcher(kernel, 0, *args)
    dt = (clock() - t0) / n
    if recorder is not None:
        recorder.take()
    return dt


def call_cost(threads: int) -> dict:
    """ns of wall time per call of a small kernel on `threads` threads, traced and untraced, best of 15 runs: with
    more than one thread the other threads' block times are written too, and the call waits for them at its join
    (wall time, since the loop's thread CPU time leaves the other threads out). Run in a process of its own: the
    thread count is fixed when Numba starts."""
    from gpt2trace.run.runner import prepare_process
    prepare_process(threads)
    import numpy as np

    from gpt2trace.record.recorder import KernelRecorder
    from trainer.kernels.residual import residual_forward
    from trainer.launcher import Launcher

    x = np.ones(4096, np.float32)
    out = np.empty_like(x)
    launcher, recorder, n = Launcher(threads), KernelRecorder(threads), 2_000

    def calls(rec) -> float:
        return _per_call_ns(launcher, rec, residual_forward, (out, x, x), n, time.perf_counter_ns)

    best = {"untraced": [], "traced": []}
    for _ in range(15):
        best["untraced"].append(calls(None))
        best["traced"].append(calls(recorder))
    res = {k: min(v) for k, v in best.items()}
    return res | {"per_call_ns": res["traced"] - res["untraced"], "threads": threads}


def totals(blocks: list[dict], key: str) -> tuple[float, float, float]:
    """sum(traced) / sum(untraced) - 1 over whole A B B A groups, and its 95% interval by resampling the groups:
    every traced block's time counts (the ones holding a cut too), where a median would leave them out."""
    groups = [blocks[i:i + 4] for i in range(0, len(blocks) - 3, 4)]
    sums = [(sum(b[key] for b in g if b["traced"]), sum(b[key] for b in g if not b["traced"])) for g in groups]

    def ratio(picked):
        return sum(a for a, _ in picked) / sum(b for _, b in picked) - 1

    return (ratio(sums), *interval(sums, ratio))


def interval(items: list, stat) -> tuple[float, float]:
    """The 95% interval of stat(items) from 2,000 resamplings of the items (with replacement)."""
    rng = random.Random(0)
    boot = sorted(stat([rng.choice(items) for _ in items]) for _ in range(2000))
    return boot[49], boot[1949]


def pooled(runs: list[dict]) -> dict:
    """One row for the same configuration measured in several processes: the blocks of all of them pooled for the
    medians, and the all-traced / all-untraced overheads as the mean of the processes' own, with a 95% interval
    from resampling the processes. Each process is a draw of its own memory layout (where the model's buffers,
    the tracer's and the interpreter's land relative to each other in the caches), which shifts its result by
    more than its groups' interval says: the runs of one process cannot average that away, several processes
    can."""
    traced = [x for r in runs for x in r["blocks_ms_traced"]]
    untraced = [x for r in runs for x in r["blocks_ms_untraced"]]
    row = dict(runs[-1]) | {
        "blocks": sum(r["blocks"] for r in runs), "processes": len(runs),
        "ms_traced": statistics.median(traced), "ms_untraced": statistics.median(untraced),
        "overhead": statistics.median(traced) / statistics.median(untraced) - 1,
        "overhead_pairs": [p for r in runs for p in r["overhead_pairs"]],
        "blocks_ms_traced": traced, "blocks_ms_untraced": untraced}
    for key in ("cpu_ms_traced", "cpu_ms_untraced", "flush_share", "cut_share", "records_per_step",
                "bytes_per_record", "part_bytes_per_record", "merge_ns_per_record", "close_ms_per_block"):
        row[key] = statistics.mean(r[key] for r in runs)
    row["cpu_overhead"] = row["cpu_ms_traced"] / row["cpu_ms_untraced"] - 1
    for key in ("overhead_total", "cpu_overhead_total"):
        values = [r[key] for r in runs]
        row[key], row[key + "_95"] = statistics.mean(values), list(interval(values, statistics.mean))
        row[key + "_per_process"] = values
    return row


def measure(name: str, blocks: int, steps: int, tmp: Path, one_tracer: bool) -> dict:
    model, B, T, threads, _ = CONFIGS[name]
    cmd = [sys.executable, __file__, "--worker", model, str(B), str(T), str(threads), str(steps), str(blocks),
           str(tmp), str(int(one_tracer))]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    ms = [b["ms_per_step"] for b in res["blocks"]]
    traced = [b["ms_per_step"] for b in res["blocks"] if b["traced"]]
    untraced = [b["ms_per_step"] for b in res["blocks"] if not b["traced"]]
    # each traced block against the untraced block beside it: A B | B A | A B | B A ...
    pairs = [ms[i] / ms[i + 1] if res["blocks"][i]["traced"] else ms[i + 1] / ms[i] for i in range(0, len(ms) - 1, 2)]
    on, off = statistics.median(traced), statistics.median(untraced)
    cpu_on = statistics.median(b["cpu_ms_per_step"] for b in res["blocks"] if b["traced"])
    cpu_off = statistics.median(b["cpu_ms_per_step"] for b in res["blocks"] if not b["traced"])
    traced_wall_ns = sum(traced) * steps * 1e6
    total, total_lo, total_hi = totals(res["blocks"], "ms_per_step")
    cpu_total, cpu_lo, cpu_hi = totals(res["blocks"], "cpu_ms_per_step")
    per_step = res["records"] / res["traced_steps"]
    print(f"{name}: {len(traced)} traced / {len(untraced)} untraced blocks of {steps} steps: {on:.2f} / {off:.2f} "
          f"ms/step", flush=True)
    return {"config": name, "model": model, "B": B, "T": T, "threads": threads, "blocks": blocks,
            "steps_per_block": steps, "ms_traced": on, "ms_untraced": off, "overhead": on / off - 1,
            "overhead_pairs": [p - 1 for p in pairs],
            "cpu_ms_traced": cpu_on, "cpu_ms_untraced": cpu_off, "cpu_overhead": cpu_on / cpu_off - 1,
            "flush_share": res["flush_ns"] / traced_wall_ns, "cut_share": res["cut_ns"] / traced_wall_ns,
            "parts": res["parts"], "records_per_step": per_step, "bytes_per_record": res["bytes"] / res["records"],
            "part_bytes_per_record": res["part_bytes"] / res["records"],
            "merge_ns_per_record": res["merge_ns"] / res["records"],
            "close_ms_per_block": res["close_ns"] / 1e6 / (1 if one_tracer else len(traced)),
            "overhead_total": total, "overhead_total_95": [total_lo, total_hi], "cpu_overhead_total": cpu_total,
            "cpu_overhead_total_95": [cpu_lo, cpu_hi], "one_tracer": one_tracer,
            "blocks_ms_traced": traced, "blocks_ms_untraced": untraced}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--blocks", type=int, default=8, help="blocks per configuration (A B B A ...)")
    ap.add_argument("--steps", type=int, help="steps per block (default: small 240, d12 4)")
    ap.add_argument("--one-tracer", action="store_true",
                    help="one tracer for the run, detached in the untraced blocks (for blocks shorter than a window)")
    ap.add_argument("--processes", type=int, default=1,
                    help="measure each configuration in this many processes, one after the other, and pool them")
    ap.add_argument("--hot-path", action="store_true", help="the loop's cost per traced kernel call and phase")
    ap.add_argument("--worker", nargs=8, help=argparse.SUPPRESS)
    ap.add_argument("--call-cost", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.blocks < 1 or args.processes < 1 or (args.steps is not None and args.steps < 1):
        print("error: --blocks, --steps and --processes must be >= 1", file=sys.stderr)
        sys.exit(2)
    if args.hot_path:
        with tempfile.TemporaryDirectory() as tmp:
            res = hot_path(tmp)
        out = subprocess.run([sys.executable, __file__, "--call-cost", "2"], capture_output=True, text=True)
        if out.returncode != 0:
            raise SystemExit(f"the two-thread call cost failed:\n{out.stderr[-2000:]}")
        res["two_threads"] = two = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"per kernel call: {res['call_untraced']:.0f} ns untraced, {res['call_traced']:.0f} traced: "
              f"+{res['per_call_ns']:.0f} ns (the kernel's row of the log: its key, clock and thread-id reads; "
              "one thread)")
        print(f"per kernel call on 2 threads (4,096 elements, wall): {two['untraced']:.0f} ns untraced, "
              f"{two['traced']:.0f} traced: +{two['per_call_ns']:.0f} ns (both threads' block times, waited for "
              "at the join)")
        print(f"per phase: {res['phase_untraced']:.0f} ns untraced, {res['phase_traced']:.0f} traced: "
              f"+{res['per_phase_ns']:.0f} ns (two clock reads, the record, the resident memory); in a step that "
              f"samples no memory +{res['per_phase_unsampled_ns']:.0f} ns")
        print(f"per cut of a 1 s window of small: {res['cut_ns'] / 1e6:.2f} ms (6,464 calls, 384 phases, "
              "576 counters)")
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / "trace_overhead.json"
        previous = json.loads(out.read_text()) if out.exists() else {}
        out.write_text(json.dumps(previous | {"hot_path": res}, indent=1) + "\n")
        print(f"wrote {out}")
        return
    if args.call_cost:
        print(json.dumps(call_cost(args.call_cost)))
        return
    if args.worker:
        model, B, T, threads, steps, blocks, tmp, one = args.worker
        print(json.dumps(worker(model, int(B), int(T), int(threads), int(steps), int(blocks), tmp, one == "1")))
        return

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            before = os.getloadavg()
            runs = [measure(name, args.blocks, args.steps or CONFIGS[name][4], Path(tmp), args.one_tracer)
                    for _ in range(args.processes)]
            row = runs[0] if len(runs) == 1 else pooled(runs)
            rows.append(row | {"load_before": before, "load_after": os.getloadavg(), "cpu": cpu_model()})

    print(f"\n{cpu_model()}, {os.cpu_count()} CPUs; load average (1, 5, 15 min) per configuration, before -> after:")
    for r in rows:
        print(f"  {r['config']}: {' '.join(f'{x:.2f}' for x in r['load_before'])} -> "
              f"{' '.join(f'{x:.2f}' for x in r['load_after'])}")
    print(f"{'config':<7} {'threads':>7} {'traced ms':>10} {'untraced':>9} {'overhead':>9} {'pairs min..max':>16} "
          f"{'flush %':>8} {'cut %':>6} {'rec/step':>9} {'B/rec':>6} "
          f"{'part B/rec':>10} {'merge ns/rec':>12} {'close ms':>8} {'CPU ms/step on/off':>19} {'CPU overhead':>12}")
    for r in rows:
        lo, hi = min(r["overhead_pairs"]), max(r["overhead_pairs"])
        print(f"{r['config']:<7} {r['threads']:>7} {r['ms_traced']:>10.2f} {r['ms_untraced']:>9.2f} "
              f"{100 * r['overhead']:>8.2f}% {100 * lo:>7.2f}..{100 * hi:.2f}% {100 * r['flush_share']:>7.2f}% "
              f"{100 * r['cut_share']:>5.2f}% {r['records_per_step']:>9.0f} "
              f"{r['bytes_per_record']:>6.2f} {r.get('part_bytes_per_record', float('nan')):>10.2f} "
              f"{r.get('merge_ns_per_record', float('nan')):>12.0f} "
              f"{r.get('close_ms_per_block', float('nan')):>8.2f} "
              f"{r['cpu_ms_traced']:>9.2f}/{r['cpu_ms_untraced']:<9.2f} "
              f"{100 * r['cpu_overhead']:>11.2f}%")
    for r in rows:
        lo, hi = r["overhead_total_95"]
        clo, chi = r["cpu_overhead_total_95"]
        many = r.get("processes", 1) > 1
        how = (f"mean of {r['processes']} processes; 95% interval, processes resampled" if many else
               "whole A B B A groups; 95% interval, groups resampled")
        print(f"{r['config']}: all traced time / all untraced time - 1 ({how}): wall "
              f"{100 * r['overhead_total']:.2f}% ({100 * lo:.2f}..{100 * hi:.2f}%), CPU "
              f"{100 * r['cpu_overhead_total']:.2f}% ({100 * clo:.2f}..{100 * chi:.2f}%)"
              + ("; one tracer for the run" if r["one_tracer"] else ""))
        if many:
            print(f"  per process: wall {' '.join(f'{100 * x:+.2f}%' for x in r['overhead_total_per_process'])}; "
                  f"CPU {' '.join(f'{100 * x:+.2f}%' for x in r['cpu_overhead_total_per_process'])}")
    print("ms: block wall time / steps, median over blocks; overhead: traced/untraced - 1 (pairs: each traced block "
          "against its neighbour); flush: the tracer's time on the loop's thread, of which cut: writing the parts; "
          "both as a share of the traced wall time; close: writing the last window at a run's end, per block; "
          "CPU ms/step: the process's CPU time (all threads) / steps, "
          "median over blocks, which time stolen by other load on the machine does not stretch")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "trace_overhead.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    # rows of this layout only (earlier versions timed each tracer's close with the steps)
    merged = ({r["config"]: r for r in previous.get("rows", []) if "close_ms_per_block" in r}
              | {r["config"]: r for r in rows})
    out.write_text(json.dumps(previous | {"rows": list(merged.values()), "cpus": os.cpu_count(),
                                          "cpu": cpu_model()}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
