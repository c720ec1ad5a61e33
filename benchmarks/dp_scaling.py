"""Data-parallel scaling of GPT-2 d12 (B=4 per rank, T=64): ranks x threads, every --dp-sync strategy.

    python benchmarks/dp_scaling.py                    # 1x1, 1x2, 2x1, 4x1 (oversubscribed on 2 cores)
    python benchmarks/dp_scaling.py --model small --steps 6

Every configuration is a real `gpt2trace run --ranks R --threads M` (tracing on), so the gradient sync time
comes from the trace's MPI records. Parallel efficiency is weak scaling at equal work per rank:
tokens/s / (ranks x threads x tokens/s of 1x1). The sync's achieved bandwidth (bytes / time in the call,
algorithm bandwidth, and bus bandwidth = algbw x 2(N-1)/N as NCCL reports it) stands next to a bare mpi4py
Allreduce of the same buffer, timed by `mpiexec` in the same session. Writes benchmarks/results/dp_scaling.json.
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
CORES = len(os.sched_getaffinity(0))

BARE_ALLREDUCE = r"""
import sys, time, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
n, reps = int(sys.argv[1]), int(sys.argv[2])
buf = np.ones(n, dtype=np.float32)
comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)           # warm-up: pages, shared-memory segments
times = []
for _ in range(reps):
    comm.Barrier()
    t0 = time.perf_counter()
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    times.append(time.perf_counter() - t0)
worst = comm.reduce(min(times), op=MPI.MAX, root=0)
if comm.Get_rank() == 0:
    print(worst)
"""


def run_config(args, ranks: int, threads: int, strategy: str, workdir: Path) -> dict:
    trace = workdir / f"r{ranks}t{threads}_{strategy}.parquet"
    metrics = workdir / f"r{ranks}t{threads}_{strategy}.jsonl"
    cmd = [sys.executable, "-m", "gpt2trace", "run", "--model", args.model, "-B", str(args.batch_size),
           "-T", str(args.seq_len), "--steps", str(args.steps + 1), "--threads", str(threads),
           "--ranks", str(ranks), "--dp-sync", strategy, "--trace", str(trace), "--metrics-json", str(metrics)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    steps = [json.loads(line) for line in metrics.read_text().splitlines()][1:]  # step 0: warm-up
    ms = statistics.median(s["ms"] for s in steps)
    row = {"ranks": ranks, "threads": threads, "strategy": strategy, "oversubscribed": ranks * threads > CORES,
           "ms_per_step": ms, "tokens_per_s": statistics.median(s["tokens_per_s"] for s in steps)}
    if ranks > 1:
        row |= sync_time(trace, args.steps)
    trace.unlink()
    return row


def sync_time(trace: Path, steps: int) -> dict:
    """Per step, rank 0's time in the strategy's MPI calls (the exposed sync: for `overlap`, the postings and the
    Waitall; communication hidden behind backward costs nothing here) and their bytes (steps >= 1). The 8-byte
    loss allreduce is left out."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(trace, columns=["kind", "rank", "name", "start_ns", "end_ns", "bytes", "step"])
    t = t.filter(pc.and_(pc.equal(t["kind"], "comm"), pc.equal(t["rank"], 0)))
    small = pc.fill_null(pc.less_equal(t["bytes"], 1024), False)         # the loss allreduce
    t = t.filter(pc.and_(pc.invert(small), pc.greater_equal(t["step"], 1)))
    df = t.to_pandas()
    df["s"] = (df["end_ns"] - df["start_ns"]) / 1e9
    df["bytes"] = df["bytes"].fillna(0)                                    # MPI_Waitall carries no bytes
    per_call = df.groupby("name").agg(seconds=("s", "sum"), total_bytes=("bytes", "sum"))
    return {"sync_s_per_step": float(df["s"].sum()) / steps,
            "calls": {n: {"s_per_step": float(r["seconds"]) / steps, "bytes_per_step": int(r["total_bytes"]) // steps,
                          "algbw_gb_s": float(r["total_bytes"] / r["seconds"] / 1e9)
                          if r["seconds"] > 0 and r["total_bytes"] > 0 else None}
                      for n, r in per_call.iterrows()}}


def bare_allreduce(n_floats: int, ranks: int, reps: int = 5) -> float:
    """Seconds for one MPI_Allreduce of n float32 on `ranks` processes (slowest rank, best of `reps`)."""
    from gpt2trace.run.mpiexec import find_mpiexec
    out = subprocess.run([find_mpiexec(), "-n", str(ranks), sys.executable, "-c", BARE_ALLREDUCE, str(n_floats),
                          str(reps)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="d12")
    ap.add_argument("-B", "--batch-size", type=int, default=4)
    ap.add_argument("-T", "--seq-len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per configuration (after one warm-up)")
    ap.add_argument("--strategies", nargs="+", default=["allreduce", "reduce-bcast", "overlap", "zero1"])
    ap.add_argument("--layouts", nargs="+", default=["1x1", "1x2", "2x1", "4x1"], help="RANKSxTHREADS")
    args = ap.parse_args()

    from trainer.config import model_config
    from trainer.params import ParamLayout
    n_params = ParamLayout.for_model(model_config(args.model)).size

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for layout in args.layouts:
            ranks, threads = map(int, layout.split("x"))
            for strategy in (args.strategies if ranks > 1 else ["allreduce"]):
                row = run_config(args, ranks, threads, strategy, Path(tmp))
                rows.append(row)
                print(f"{ranks}x{threads} {strategy:12s} {row['ms_per_step']:9.1f} ms/step"
                      + (" (oversubscribed)" if row["oversubscribed"] else ""), flush=True)
    base = next(r for r in rows if r["ranks"] == 1 and r["threads"] == 1)["tokens_per_s"]
    for r in rows:
        r["parallel_efficiency"] = r["tokens_per_s"] / (base * r["ranks"] * r["threads"])
    bare = {}
    for ranks in sorted({r["ranks"] for r in rows if r["ranks"] > 1}):
        s = bare_allreduce(n_params, ranks)
        bare[ranks] = {"seconds": s, "algbw_gb_s": 4 * n_params / s / 1e9,
                       "busbw_gb_s": 4 * n_params / s / 1e9 * 2 * (ranks - 1) / ranks}

    print(f"\n{args.model} B={args.batch_size}/rank T={args.seq_len}, {args.steps} timed steps, {CORES} cores; "
          "parallel efficiency = tokens/s / (ranks x threads x tokens/s of 1x1)")
    print(f"{'RxT':>5} {'strategy':<13} {'ms/step':>9} {'tok/s':>7} {'PE':>5} {'sync s':>7} {'sync GB/s':>9}  note"
          "   (sync: rank 0's exposed time in the gradient/parameter MPI calls per step; GB/s = their bytes / it)")
    for r in rows:
        sync = r.get("sync_s_per_step")
        bw = None
        if sync:
            total = sum(c["bytes_per_step"] for c in r["calls"].values())
            bw = total / sync / 1e9
        print(f"{r['ranks']}x{r['threads']:<3} {r['strategy']:<13} {r['ms_per_step']:>9.1f} {r['tokens_per_s']:>7.0f} "
              f"{r['parallel_efficiency']:>5.2f} {sync if sync is not None else float('nan'):>7.3f} "
              f"{bw if bw is not None else float('nan'):>9.2f}  {'oversubscribed' if r['oversubscribed'] else ''}")
    for ranks, b in bare.items():
        print(f"bare mpi4py Allreduce of {4 * n_params / 1e6:.0f} MB on {ranks} ranks: {b['seconds']:.3f} s, "
              f"algbw {b['algbw_gb_s']:.2f} GB/s, busbw {b['busbw_gb_s']:.2f} GB/s")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "dp_scaling.json"
    out.write_text(json.dumps({"config": vars(args), "cores": CORES, "rows": rows, "bare_allreduce": bare,
                               "load_avg": os.getloadavg()}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
