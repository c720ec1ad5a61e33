"""What tracing costs: step time with tracing vs --no-trace, alternated in one session, and the trace's size.

    python benchmarks/trace_overhead.py                      # small and d12, 8 alternating blocks in one process
    python benchmarks/trace_overhead.py --method processes   # whole runs alternated, one process each (noisier)

Each run is its own subprocess (the runner API, as `gpt2trace run` without its progress bar), and traced and
untraced runs alternate round by round, the order flipping each round, so drift in the machine's speed (this is
a shared machine) hits both alike. Per configuration:

- ms/step traced and untraced: median over rounds of each run's median step (step 0, the warm-up, left out);
- overhead: traced / untraced - 1. Noisy on a shared machine, so also
- flush ms: the median `trace_flush` phase of the traced runs, i.e. the tracer's own cost as the trace
  records it (the one per-step cost tracing adds: kernels' clock reads are ~50 ns a call);
- records per step, ns per record (flush time / records; and the A/B difference / records), bytes per step
  (compressed trace size / steps) and bytes per record.

Prints a table and writes benchmarks/results/trace_overhead.json (a configuration measured again replaces its
row), with the load average before and after each configuration.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
# name: (model, B, T, threads, timed steps per run, rounds)
CONFIGS = {
    "small": ("small", 4, 64, 2, 30, 5),
    "d12": ("d12", 4, 64, 2, 4, 3),
}


def worker(model: str, B: int, T: int, threads: int, steps: int, trace: str | None) -> dict:
    from gpt2trace.run.runner import RunConfig, TraceConfig, prepare_process, run
    prepare_process(threads)
    from trainer.config import ParallelConfig, TrainConfig, model_config

    cfg = RunConfig(model_config(model), TrainConfig(batch_size=B, seq_len=T, steps=steps + 1, lr=1e-4),
                    ParallelConfig(threads=threads), TraceConfig(Path(trace) if trace else None))
    result = run(cfg)
    out = {"ms_steps": [m.ms for m in result.history[1:]], "steps": steps + 1}
    if trace:
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
        table = pq.read_table(trace, columns=["kind", "name", "start_ns", "end_ns"])
        flush = pc.filter(table, pc.equal(table["name"], "trace_flush"))
        flush_ms = pc.divide(pc.subtract(flush["end_ns"], flush["start_ns"]), 1e6).to_pylist()
        out |= {"records": result.trace_records, "bytes": Path(trace).stat().st_size,
                "flush_ms": flush_ms[1:]}   # the flush of step 0 (first kernels' cache loads) left out
    return out


def worker_blocks(model: str, B: int, T: int, threads: int, steps: int, blocks: int, tmp: str) -> dict:
    """One process, one model: blocks of `steps` steps alternately traced and untraced (A B B A A B ...).

    The same weights, buffers and caches serve both, so the difference is what tracing costs, not process
    start-up, memory placement or machine drift between processes (the first, untimed block warms up)."""
    from gpt2trace.run.runner import prepare_process
    prepare_process(threads)
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from gpt2trace.format.writer import merge_parts
    from gpt2trace.record.tracer import Tracer
    from trainer.config import TrainConfig, model_config
    from trainer.data import TokenLoader, synthetic_corpus
    from trainer.dp import Local
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.params import init_params
    from trainer.train import train

    cfg = model_config(model)
    tcfg = TrainConfig(batch_size=B, seq_len=T, steps=steps, lr=1e-4)
    launcher = Launcher(threads)
    m = GPT2(cfg, init_params(cfg, tcfg.seed), B, T, launcher)
    dp = Local(m, tcfg, launcher)
    data = TokenLoader(synthetic_corpus(cfg.vocab_size, 1 << 18, 1), B, T)
    train(m, data, tcfg, dp)                                     # warm-up block, untimed
    ms = {True: [], False: []}
    flush_ms, records, nbytes, traced_steps = [], 0, 0, 0
    for i in range(blocks):
        traced = (i % 4) in (0, 3)                               # A B B A: drift cancels in pairs
        if traced:
            path = Path(tmp) / f"block{i}.parquet"
            tracer = Tracer(path, 0, threads, {})
            launcher.recorder = tracer.recorder
            hist = train(m, data, tcfg, dp, observer=tracer)
            tracer.close()
            records += merge_parts(path)
            nbytes += path.stat().st_size
            traced_steps += steps
            t = pq.read_table(path, columns=["name", "start_ns", "end_ns"])
            f = pc.filter(t, pc.equal(t["name"], "trace_flush"))
            flush_ms += pc.divide(pc.subtract(f["end_ns"], f["start_ns"]), 1e6).to_pylist()
            path.unlink()
        else:
            launcher.recorder = None
            hist = train(m, data, tcfg, dp)
        ms[traced] += [h.ms for h in hist]
    return {"ms_traced": ms[True], "ms_untraced": ms[False], "flush_ms": flush_ms, "records": records,
            "bytes": nbytes, "steps": traced_steps}


def measure_blocks(name: str, blocks: int, tmp: Path) -> dict:
    model, B, T, threads, steps, _ = CONFIGS[name]
    cmd = [sys.executable, __file__, "--blocks-worker", model, str(B), str(T), str(threads), str(steps),
           str(blocks), str(tmp)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} failed:\n{out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    on, off = statistics.median(res["ms_traced"]), statistics.median(res["ms_untraced"])
    flush = statistics.median(res["flush_ms"])
    per_step = res["records"] / res["steps"]
    print(f"{name}: {len(res['ms_traced'])} traced / {len(res['ms_untraced'])} untraced steps in alternating "
          f"blocks of {steps}: {on:.2f} / {off:.2f} ms/step", flush=True)
    return {"config": name, "method": "blocks", "model": model, "B": B, "T": T, "threads": threads,
            "blocks": blocks, "steps_per_block": steps, "ms_traced": on, "ms_untraced": off,
            "overhead": on / off - 1, "flush_ms": flush, "flush_share": flush / on, "records_per_step": per_step,
            "ns_per_record_flush": flush * 1e6 / per_step, "ns_per_record_ab": (on - off) * 1e6 / per_step,
            "bytes_per_step": res["bytes"] / res["steps"], "bytes_per_record": res["bytes"] / res["records"],
            "steps_ms_traced": res["ms_traced"], "steps_ms_untraced": res["ms_untraced"]}


def _spawn(name: str, traced: bool, tmp: Path) -> dict:
    model, B, T, threads, steps, _ = CONFIGS[name]
    trace = str(tmp / f"{name}.parquet") if traced else ""
    cmd = [sys.executable, __file__, "--worker", model, str(B), str(T), str(threads), str(steps), trace]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} ({'traced' if traced else 'untraced'}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(name: str, rounds: int, tmp: Path) -> dict:
    model, B, T, threads, steps, _ = CONFIGS[name]
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for r in range(rounds):
        for traced in ((True, False) if r % 2 == 0 else (False, True)):
            res = _spawn(name, traced, tmp)
            runs[traced].append(res)
            print(f"{name} round {r + 1}/{rounds} {'traced  ' if traced else 'untraced'}: "
                  f"{statistics.median(res['ms_steps']):9.2f} ms/step", flush=True)
    on = statistics.median(statistics.median(x["ms_steps"]) for x in runs[True])
    off = statistics.median(statistics.median(x["ms_steps"]) for x in runs[False])
    flush = statistics.median(f for x in runs[True] for f in x["flush_ms"])
    t0 = runs[True][0]
    per_step = t0["records"] / t0["steps"]
    return {"config": name, "method": "processes", "model": model, "B": B, "T": T, "threads": threads,
            "rounds": rounds,
            "steps_per_run": steps, "ms_traced": on, "ms_untraced": off, "overhead": on / off - 1,
            "flush_ms": flush, "flush_share": flush / on, "records_per_step": per_step,
            "ns_per_record_flush": flush * 1e6 / per_step, "ns_per_record_ab": (on - off) * 1e6 / per_step,
            "bytes_per_step": t0["bytes"] / t0["steps"], "bytes_per_record": t0["bytes"] / t0["records"],
            "runs_ms_traced": [statistics.median(x["ms_steps"]) for x in runs[True]],
            "runs_ms_untraced": [statistics.median(x["ms_steps"]) for x in runs[False]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    ap.add_argument("--rounds", type=int, help="rounds per configuration (default: small 5, d12 3)")
    ap.add_argument("--method", choices=["blocks", "processes"], default="blocks",
                    help="blocks: alternate traced/untraced blocks of steps in one process (default, least "
                         "noise); processes: alternate whole runs, each in its own process")
    ap.add_argument("--blocks", type=int, default=8, help="blocks per configuration with --method blocks")
    ap.add_argument("--worker", nargs=6, help=argparse.SUPPRESS)
    ap.add_argument("--blocks-worker", nargs=7, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        model, B, T, threads, steps, trace = args.worker
        print(json.dumps(worker(model, int(B), int(T), int(threads), int(steps), trace or None)))
        return
    if args.blocks_worker:
        model, B, T, threads, steps, blocks, tmp = args.blocks_worker
        print(json.dumps(worker_blocks(model, int(B), int(T), int(threads), int(steps), int(blocks), tmp)))
        return

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.configs:
            before = os.getloadavg()
            if args.method == "blocks":
                row = measure_blocks(name, args.blocks, Path(tmp))
            else:
                row = measure(name, args.rounds or CONFIGS[name][5], Path(tmp))
            rows.append(row | {"load_before": before, "load_after": os.getloadavg()})

    print(f"\n{os.cpu_count()} CPUs; load average (1, 5, 15 min) per configuration, before -> after:")
    for r in rows:
        print(f"  {r['config']}: {' '.join(f'{x:.2f}' for x in r['load_before'])} -> "
              f"{' '.join(f'{x:.2f}' for x in r['load_after'])}")
    print(f"{'config':<7} {'threads':>7} {'traced ms':>10} {'untraced':>9} {'overhead':>9} {'flush ms':>9} "
          f"{'flush %':>8} {'rec/step':>9} {'ns/rec':>7} {'B/step':>8} {'B/rec':>6}")
    for r in rows:
        print(f"{r['config']:<7} {r['threads']:>7} {r['ms_traced']:>10.2f} {r['ms_untraced']:>9.2f} "
              f"{100 * r['overhead']:>8.2f}% {r['flush_ms']:>9.3f} {100 * r['flush_share']:>7.2f}% "
              f"{r['records_per_step']:>9.0f} {r['ns_per_record_flush']:>7.0f} {r['bytes_per_step']:>8.0f} "
              f"{r['bytes_per_record']:>6.2f}")
    print("overhead: traced/untraced - 1 (A/B, medians of steps or of runs); flush: the trace_flush phase the "
          "traced steps recorded; ns/rec: flush time per record")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "trace_overhead.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    merged = {r["config"]: r for r in previous.get("rows", [])} | {r["config"]: r for r in rows}
    out.write_text(json.dumps({"rows": list(merged.values()), "cpus": os.cpu_count()}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
