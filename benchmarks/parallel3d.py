"""3D parallelism: every (dp, tp, pp) layout of N ranks on the same model and the same global batch (the BigScience
study's table: ms/step, tokens/s, TFLOPS per core, communication per dimension, memory per rank).

    python benchmarks/parallel3d.py                           # small and d12, 4 ranks, every valid layout
    python benchmarks/parallel3d.py --models small --steps 3  # a quick look
    python benchmarks/parallel3d.py --models small --layouts 4,1,1 --dp-sync zero1 zero2   # the ZeRO comparison

Every layout is a real traced `gpt2trace run --ranks N --tp T --pp P --threads 1` with the global batch fixed:
GLOBAL sequences of T tokens per step, as --grad-accum M micro-batches of GLOBAL / (dp * M) sequences per replica
(M = 4 by default, so a 4-stage pipeline has 4 micro-batches: its ideal bubble is 3/7). The numbers come from the
run's metrics and its trace: ms per step (median of the timed steps; spread = slowest - fastest), tokens/s, model
TFLOPS per core by the study's formula 2 * N * 3 * tokens/s / cores used (cores used: min(ranks, this machine's
cores), since the ranks share them when oversubscribed), the seconds per step each rank spends in MPI calls on each
dimension's communicators (mean over ranks; tp; pp with the tied embedding's "embed" group; dp with "grad" and the
world), of which waiting (analysis.waits: late senders, waits at collectives), and the peak RSS of the largest rank.
With more ranks than cores the runs are oversubscribed (marked): a layout's time then includes sharing the cores,
which hits all layouts alike, but ranks that wait in MPI also yield their core only as far as MPICH's polling lets
them. Rounds alternate the layouts so that drift in the machine's speed hits all alike. Writes
benchmarks/results/parallel3d.json.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
from pathlib import Path

from child import run

from trainer.cpu import cpu_model

RESULTS = Path(__file__).resolve().parent / "results"
CORES = len(os.sched_getaffinity(0))


def layouts(ranks: int, cfg) -> list[tuple[int, int, int]]:
    """(dp, tp, pp) with product `ranks` that the model allows: tp divides the heads, pp at most the layers."""
    out = []
    for tp, pp in itertools.product(range(1, ranks + 1), repeat=2):
        if ranks % (tp * pp) or cfg.n_head % tp or cfg.padded_vocab_size % tp or pp > cfg.n_layer:
            continue
        out.append((ranks // (tp * pp), tp, pp))
    return sorted(out, reverse=True)


def run_layout(args, model: str, layout: tuple[int, int, int], sync: str, workdir: Path) -> dict:
    dp, tp, pp = layout
    ranks = dp * tp * pp
    micro = args.global_batch // (dp * args.micro_batches)
    name = f"{model}_dp{dp}_tp{tp}_pp{pp}_{sync}"
    trace, metrics = workdir / f"{name}.parquet", workdir / f"{name}.jsonl"
    cmd = ["-m", "gpt2trace", "run", "--model", model, "-B", str(micro), "-T", str(args.seq_len),
           "--steps", str(args.steps + 1), "--threads", "1", "--ranks", str(ranks), "--tp", str(tp), "--pp", str(pp),
           "--grad-accum", str(args.micro_batches), "--dp-sync", sync, "--trace", str(trace),
           "--metrics-json", str(metrics)]
    out = run(cmd)
    if out.exit_code != 0:
        raise SystemExit(f"python {' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    steps = [json.loads(line) for line in metrics.read_text().splitlines()][1:]       # step 0: warm-up
    row = {"model": model, "dp": dp, "tp": tp, "pp": pp, "dp_sync": sync, "ranks": ranks,
           "micro_batch": micro, "micro_batches": args.micro_batches, "global_batch": args.global_batch,
           "oversubscribed": ranks > CORES, "step_ms": [s["ms"] for s in steps], "tokens_per_step": steps[0]["tokens"],
           "peak_rss_mb": out.peak_rss_mb}
    row |= from_trace(trace)
    trace.unlink()
    return row


def from_trace(path: Path) -> dict:
    """MPI seconds per step per dimension (mean over ranks) and their waits, from `analyze`'s per-dimension table
    (analysis.comm_groups.per_dimension: each communicator counted in the dimensions its ranks span)."""
    from analysis.analyze import analyze
    from gpt2trace.format.reader import load

    trace = load(path)
    result = analyze(trace)
    rows = result["comm_dimensions"]
    return {"num_parameters": trace.run["model"]["num_parameters"],
            "mpi_s_per_step": {r["dimension"]: r["time_s_per_step"] for r in rows},
            "wait_s_per_step": {r["dimension"]: r["wait_s_per_step"] for r in rows},
            "bubble": (result.get("pipeline") or {}).get("bubble")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=["small", "d12"])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--global-batch", type=int, default=16, help="sequences per step, for every layout")
    ap.add_argument("--micro-batches", type=int, default=4, help="--grad-accum M of every layout")
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--layouts", nargs="+", help="dp,tp,pp triples (default: every valid one)")
    ap.add_argument("--dp-sync", nargs="+", default=["allreduce"],
                    help="strategies to run on layouts with dp > 1 (layouts with dp = 1 run the first)")
    ap.add_argument("--steps", type=int, default=4, help="timed steps (one more runs first as warm-up)")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()

    from trainer.config import model_config
    configs = []
    for model in args.models:
        cfg = model_config(model)
        chosen = ([tuple(int(x) for x in s.split(",")) for s in args.layouts] if args.layouts
                  else layouts(args.ranks, cfg))
        for layout in chosen:
            if args.global_batch % (layout[0] * args.micro_batches):
                raise SystemExit(f"--global-batch {args.global_batch} is not a multiple of dp {layout[0]} x "
                                 f"--micro-batches {args.micro_batches}")
            for sync in (args.dp_sync if layout[0] > 1 else args.dp_sync[:1]):
                configs.append((model, layout, sync))
    rows: dict[tuple, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for key in configs:
                row = run_layout(args, *key, Path(tmp))
                print(f"  {key[0]} dp={key[1][0]} tp={key[1][1]} pp={key[1][2]} {key[2]}: "
                      f"{statistics.median(row['step_ms']):.1f} ms/step", flush=True)
                if key in rows:
                    rows[key]["step_ms"] += row["step_ms"]
                    rows[key]["peak_rss_mb"] = max(rows[key]["peak_rss_mb"], row["peak_rss_mb"])
                else:
                    rows[key] = row
    table = []
    for row in rows.values():
        ms = statistics.median(row["step_ms"])
        tok_s = row["tokens_per_step"] / (ms / 1e3)
        row |= {"ms_per_step": ms, "spread_ms": max(row["step_ms"]) - min(row["step_ms"]), "tokens_per_s": tok_s,
                "tflops_per_core": 2 * row["num_parameters"] * 3 * tok_s / min(row["ranks"], CORES) / 1e12}
        table.append(row)
    cpu = cpu_model()
    print(f"3D parallelism at {args.ranks} ranks x 1 thread: global batch {args.global_batch} x T={args.seq_len}, "
          f"M={args.micro_batches} micro-batches, {args.steps} timed step(s) x {args.rounds} round(s), {CORES} cores "
          f"({cpu})")
    print(f"{'model':>6} {'DP':>3} {'TP':>3} {'PP':>3} {'sync':>9} {'mb':>3} {'ms/step':>9} {'spread':>7} "
          f"{'tok/s':>8} {'TFLOPS/core':>11} {'tp s':>7} {'pp s':>7} {'dp s':>7} {'wait s':>7} {'RSS MB':>7}")
    for r in table:
        mark = "*" if r["oversubscribed"] else " "
        mpi = r["mpi_s_per_step"]
        print(f"{r['model']:>6} {r['dp']:>3} {r['tp']:>3} {r['pp']:>3}{mark}{r['dp_sync']:>9} {r['micro_batch']:>3} "
              f"{r['ms_per_step']:>9.1f} {r['spread_ms']:>7.1f} {r['tokens_per_s']:>8,.0f} "
              f"{r['tflops_per_core']:>11.4f} {mpi.get('tp', 0):>7.3f} {mpi.get('pp', 0):>7.3f} "
              f"{mpi.get('dp', 0):>7.3f} {sum(r['wait_s_per_step'].values()):>7.3f} {r['peak_rss_mb']:>7.0f}")
    print("* oversubscribed: more ranks than cores. mb: sequences per micro-batch; tp/pp/dp s: MPI seconds per step "
          "per rank on that dimension's communicators; wait s: the part of all MPI time spent waiting")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "parallel3d.json"
    out.write_text(json.dumps({"config": vars(args), "cores": CORES, "cpu": cpu, "rows": table}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
