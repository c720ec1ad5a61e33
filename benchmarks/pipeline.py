"""Pipeline parallelism: the bubble against the number of micro-batches, GPipe against 1F1B (the BigScience GPT-2
runs' trade-off: with few micro-batches per pipeline the bubble dominates; raising GAS fixes it).

    python benchmarks/pipeline.py                      # small, B=4, T=64; P = 2 and 4; M = 1, 2, 4, 8, 16
    python benchmarks/pipeline.py --pp 2 --micro 1 8 --steps 4 --rounds 1

Every configuration is a real traced `gpt2trace run --ranks P --pp P --threads 1` (one rank per stage, one
pipeline: DP = 1), and the numbers come from its metrics and its trace: ms per step (median of the timed steps,
spread = slowest - fastest), tokens/s, the measured bubble (`analysis.pipeline`: the mean over stages of the share
of the pipeline window a stage is not computing) next to the ideal (P-1)/(M+P-1), model TFLOPS per core by the
study's formula 2*N*(3, or 4 with --recompute)*tokens/s / cores, and the peak RSS of the largest rank. P = 4 runs 4
ranks on this machine's cores: oversubscribed when there are fewer, marked, and then its times show the sharing.
Rounds alternate the configurations so that drift in the machine hits all alike. Writes
benchmarks/results/pipeline.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from child import run

from trainer.cpu import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"
CORES = len(os.sched_getaffinity(0))


def run_config(args, pp: int, schedule: str, micro: int, workdir: Path) -> dict:
    name = f"pp{pp}_{schedule}_m{micro}"
    trace, metrics = workdir / f"{name}.parquet", workdir / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "gpt2trace", "run", "--model", args.model, "-B", str(args.batch), "-T",
           str(args.seq_len), "--steps", str(args.steps + 1), "--threads", "1", "--ranks", str(pp),
           "--grad-accum", str(micro), "--trace", str(trace), "--metrics-json", str(metrics)]
    if pp > 1:
        cmd += ["--pp", str(pp), "--pp-schedule", schedule]
    if args.recompute:
        cmd += ["--recompute"]
    out = run(cmd[1:])                                       # cmd[0] is this Python
    if out.exit_code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    steps = [json.loads(line) for line in metrics.read_text().splitlines()][1:]       # step 0: warm-up
    row = {"pp": pp, "schedule": schedule if pp > 1 else None, "micro_batches": micro, "ranks": pp, "dp": 1,
           "micro_batch": args.batch, "global_batch": args.batch * micro, "oversubscribed": pp > CORES,
           "step_ms": [s["ms"] for s in steps], "tokens_per_step": steps[0]["tokens"], "peak_rss_mb": out.peak_rss_mb}
    row |= from_trace(trace, pp)
    trace.unlink()
    return row


def from_trace(path: Path, pp: int) -> dict:
    """The measured bubble (mean over the timed steps and the stages) and the model's parameter count."""
    from analysis.analyze import analyze
    from gpt2trace.format.reader import load

    trace = load(path)
    n_params = trace.run["model"]["num_parameters"]
    if pp == 1:
        return {"bubble": 0.0, "num_parameters": n_params}
    pipe = analyze(trace)["pipeline"]           # the window leaves step 0 out (warm-up)
    return {"bubble": pipe["bubble"], "num_parameters": n_params,
            "bubble_per_stage": [row["bubble"] for row in pipe["per_stage"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="small")
    ap.add_argument("--batch", type=int, default=4, help="sequences per micro-batch (-B)")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--pp", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--micro", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--schedules", nargs="+", default=["gpipe", "1f1b"])
    ap.add_argument("--steps", type=int, default=5, help="timed steps (one more runs first as warm-up)")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument("--no-baseline", action="store_true", help="skip the 1-rank rows")
    args = ap.parse_args()

    configs = [(1, "none", m) for m in args.micro if not args.no_baseline]
    configs += [(p, s, m) for p in args.pp for s in args.schedules for m in args.micro]
    rows: dict[tuple, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for p, s, m in configs:
                row = run_config(args, p, s, m, Path(tmp))
                if (p, s, m) in rows:
                    rows[(p, s, m)]["step_ms"] += row["step_ms"]
                    rows[(p, s, m)]["peak_rss_mb"] = max(rows[(p, s, m)]["peak_rss_mb"], row["peak_rss_mb"])
                else:
                    rows[(p, s, m)] = row
    passes = 4 if args.recompute else 3
    table = []
    for row in rows.values():
        ms = statistics.median(row["step_ms"])
        tok_s = row["tokens_per_step"] / (ms / 1e3)
        row |= {"ms_per_step": ms, "spread_ms": max(row["step_ms"]) - min(row["step_ms"]), "tokens_per_s": tok_s,
                "bubble_theory": (row["pp"] - 1) / (row["micro_batches"] + row["pp"] - 1),
                "tflops_per_core": 2 * row["num_parameters"] * passes * tok_s / row["ranks"] / 1e12}
        table.append(row)
    cpu = cpu_model()
    print(f"pipeline parallelism: {args.model} B={args.batch} T={args.seq_len}, 1 thread per rank, "
          f"{args.steps} timed step(s) x {args.rounds} round(s), {CORES} cores ({cpu})")
    print(f"{'ranks':>5} {'DP':>3} {'PP':>3} {'sched':>6} {'GAS':>4} {'mb':>3} {'gbatch':>6} {'ms/step':>9} "
          f"{'spread':>7} {'tok/s':>8} {'bubble':>7} {'theory':>7} {'TFLOPS/core':>11} {'RSS MB':>7}")
    for r in table:
        mark = "*" if r["oversubscribed"] else " "
        print(f"{r['ranks']:>4}{mark} {r['dp']:>3} {r['pp']:>3} {r['schedule'] or '-':>6} {r['micro_batches']:>4} "
              f"{r['micro_batch']:>3} {r['global_batch']:>6} {r['ms_per_step']:>9.1f} {r['spread_ms']:>7.1f} "
              f"{r['tokens_per_s']:>8,.0f} {r['bubble']:>7.1%} {r['bubble_theory']:>7.1%} "
              f"{r['tflops_per_core']:>11.4f} {r['peak_rss_mb']:>7.0f}")
    print("* oversubscribed: more ranks than cores")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "pipeline.json"
    out.write_text(json.dumps({"config": vars(args), "cores": CORES, "cpu": cpu, "rows": table}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
