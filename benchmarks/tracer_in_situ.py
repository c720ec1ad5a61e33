"""Where the tracer's time on the training loop goes, piece by piece, timed inside real training steps.

    python benchmarks/tracer_in_situ.py                 # small, 800 steps
    python benchmarks/tracer_in_situ.py --steps 1600

benchmarks/trace_overhead.py's A/B gives the tracer's whole cost, but its spread (+-0.3-0.5% between processes of
the same code on the project's 2-vCPU VMs) is larger than any one piece, and its `--hot-path` times each piece warm,
where inside a step, right after the kernels, the same Python costs several times more. This run times each piece
where it runs: one process trains `small` (B=4, T=64, 2 threads) traced as `gpt2trace run` traces it (the runner's
flush and memory intervals), with each of the tracer's methods on the loop's thread wrapped in a pair of
perf_counter_ns reads: the Observer's calls, a phase's enter and exit, the resident-memory read a sampled phase end
makes, the recorder's spill, the cut. Per piece: calls per step, median and mean time per call, time per step and
its share of the run's wall time. An empty method wrapped the same way, called where the step ends, gives the floor
the wrapping itself adds to a call (`wrapper floor`). Outer pieces include inner ones (a phase's exit its memory
read, the step end its cut).

Not measurable this way: the kernels' own timing (inside compiled code; trace_overhead.py `--hot-path` times it
warm) and what the tracer's memory traffic costs the kernels around it (in the A/B only).

Prints a table and writes benchmarks/results/tracer_in_situ.json.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from trainer.cpu import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"
MODEL, B, T, THREADS = "small", 4, 64, 2


def run(steps: int) -> dict:
    from gpt2trace.run.runner import TraceConfig, prepare_process
    prepare_process(THREADS)

    from gpt2trace.record import recorder, resident, tracer
    from trainer.config import TrainConfig, model_config
    from trainer.data import TokenLoader, synthetic_corpus
    from trainer.dp import Local
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.params import init_params
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
    wrap(Floor, "nop", "wrapper floor")
    floor, step_end = Floor(), tracer.Tracer.end_step

    def end_step(self, step: int) -> None:
        floor.nop()
        step_end(self, step)
    tracer.Tracer.end_step = end_step

    every = TraceConfig()
    cfg = model_config(MODEL)
    tcfg = TrainConfig(batch_size=B, seq_len=T, steps=steps, lr=1e-4)
    launcher = Launcher(THREADS)
    model = GPT2(cfg, init_params(cfg, tcfg.seed), B, T, launcher)
    data = TokenLoader(synthetic_corpus(cfg.vocab_size, 1 << 18, 1), B, T)
    with tempfile.TemporaryDirectory() as tmp:
        tr = tracer.Tracer(Path(tmp) / "run.parquet", 0, THREADS, {}, flush_every_s=every.flush_every_s,
                           memory_every_s=every.memory_every_s)
        launcher.recorder = tr.recorder
        dp = Local(model, tcfg, launcher)
        train(model, data, TrainConfig(batch_size=B, seq_len=T, steps=1, lr=1e-4), dp, observer=tr)   # warm-up
        times.clear()
        t0 = clock()
        train(model, data, tcfg, dp, observer=tr, start_step=1)
        wall = clock() - t0
        tr.close()
    measured = steps - 1
    pieces = {}
    for piece, ns in times.items():
        pieces[piece] = {"calls_per_step": len(ns) / measured, "median_us": statistics.median(ns) / 1e3,
                         "mean_us": statistics.fmean(ns) / 1e3, "us_per_step": sum(ns) / measured / 1e3,
                         "share": sum(ns) / wall}
    return {"model": MODEL, "B": B, "T": T, "threads": THREADS, "steps": measured,
            "ms_per_step": wall / measured / 1e6, "flush_every_s": every.flush_every_s,
            "memory_every_s": every.memory_every_s, "pieces": pieces, "cpu": cpu_model(), "cpus": os.cpu_count()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=800, help="training steps, the first one a warm-up (default 800)")
    args = ap.parse_args()
    res = run(args.steps)
    print(f"{res['model']} B={res['B']} T={res['T']}, {res['threads']} threads, {res['steps']} steps of "
          f"{res['ms_per_step']:.2f} ms; {res['cpu']} ({res['cpus']} CPUs)")
    print(f"{'piece':14s} {'calls/step':>10s} {'median us':>10s} {'mean us':>9s} {'us/step':>8s} {'share':>7s}")
    for piece, p in sorted(res["pieces"].items(), key=lambda kv: -kv[1]["us_per_step"]):
        print(f"{piece:14s} {p['calls_per_step']:10.2f} {p['median_us']:10.2f} {p['mean_us']:9.2f} "
              f"{p['us_per_step']:8.2f} {100 * p['share']:6.3f}%")
    print("(outer pieces include inner ones: a phase's exit its memory read, the step end its cut and spills "
          "only when a kernel asks; every call includes the wrapper floor)")
    (RESULTS / "tracer_in_situ.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
