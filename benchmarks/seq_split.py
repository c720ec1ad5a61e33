"""Sequence parallelism at T=1024 (the GPT-2 porting study's setting): 1 rank against 2 and 4 ranks per sequence,
contiguous and interleaved split.

    python benchmarks/seq_split.py                          # d12, B=1, T=1024; 1, 2 and 4 ranks (4 oversubscribed)
    python benchmarks/seq_split.py --model small --max-seq-len 1024 --steps 3 --rounds 2

Every configuration is a real `gpt2trace run --ranks S --sp S --threads 1` with tracing on (each rank one core),
and the numbers come from its trace: ms per step (median of the timed steps; spread = slowest - fastest step),
attention max/mean across ranks (each rank's time in attention_forward, attention_backward over the timed steps),
the seconds per step that ranks wait in the sequence group's collectives (Scalasca wait states, summed over ranks,
`analysis.waits`) and what rank 0 waits in the collective that follows each attention backward (the study saw
~100 ms there), activation memory per rank (the trainer's buffers for that split, against 1 rank's), and the
peak RSS of the largest rank. Rounds alternate the configurations so that drift in the machine hits all alike.
Writes benchmarks/results/seq_split.json.
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
STUDY_WAIT_MS = 100      # the porting study: rank 0 waits ~100 ms per attention backward at T=1024 (contiguous)


def run_config(args, ranks: int, split: str, workdir: Path) -> dict:
    """One traced run; the row of measurements taken from its trace."""
    name = f"sp{ranks}_{split}"
    trace, metrics = workdir / f"{name}.parquet", workdir / f"{name}.jsonl"
    cmd = [sys.executable, "-m", "gpt2trace", "run", "--model", args.model, "-B", "1", "-T", str(args.seq_len),
           "--steps", str(args.steps + 1), "--threads", "1", "--ranks", str(ranks), "--sp", str(ranks),
           "--sp-split", split, "--sp-reduce", args.sp_reduce, "--trace", str(trace), "--metrics-json", str(metrics)]
    if args.max_seq_len:
        cmd += ["--max-seq-len", str(args.max_seq_len)]
    out = run(cmd[1:])                                       # cmd[0] is this Python
    if out.exit_code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    steps = [json.loads(line) for line in metrics.read_text().splitlines()][1:]       # step 0: warm-up
    row = {"ranks": ranks, "split": split if ranks > 1 else None, "oversubscribed": ranks > CORES,
           "step_ms": [s["ms"] for s in steps], "peak_rss_mb": out.peak_rss_mb}
    row |= from_trace(trace, ranks)
    trace.unlink()
    return row


def from_trace(path: Path, ranks: int) -> dict:
    """Attention max/mean across ranks, waits in the sequence group per step, rank 0's wait after each attention
    backward; timed steps only (step 0 is warm-up)."""
    from analysis import mpi, waits
    from analysis.window import select
    from gpt2trace.format.reader import load
    from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, STEP, Kind

    trace = load(path)
    window = select(trace)                                   # step 0 left out as warm-up
    steps = len(window.steps)
    k = trace.records(Kind.KERNEL).to_pandas()
    k = k[k[STEP].isin(window.steps)]
    k["s"] = (k[END_NS] - k[START_NS]) / 1e9
    out = {}
    for kernel in ("attention_forward", "attention_backward"):
        per_rank = k[k[NAME] == kernel].groupby(RANK)["s"].sum().reindex(range(ranks), fill_value=0.0).to_numpy()
        out[kernel] = {"max_over_mean": float(per_rank.max() / per_rank.mean()),
                       "slowest_rank": int(per_rank.argmax()), "s_per_step": (per_rank / steps).tolist()}
    if ranks == 1:
        return out | {"sp_wait_s_per_step": 0.0, "rank0_wait_ms_after_attention_backward": 0.0}
    calls = mpi.calls(trace, window)
    w = waits.wait_states(calls)
    sp = w[w[mpi.GROUP].str.startswith("sp")]
    out["sp_wait_s_per_step"] = float(sp["wait_ns"].sum() / 1e9 / steps)
    # the collective after attention backward: the sequence group's dK/dV reduction (one per layer per step)
    backward = calls[(calls[mpi.GROUP].str.startswith("sp")) & (calls[NAME] != "MPI_Allgather")]
    rank0 = backward[backward[RANK] == 0]
    waited = sp[sp["row"].isin(rank0.index)]["wait_ns"].sum()
    out["rank0_wait_ms_after_attention_backward"] = float(waited / 1e6 / max(len(rank0), 1))
    out["sp_calls_per_step"] = int(len(calls[calls[mpi.GROUP].str.startswith("sp")]) / steps / ranks)
    return out


def activation_mb(model: str, max_seq_len: int | None, T: int, ranks: int, sp_reduce: str) -> float:
    """MB of one rank's activation buffers (and the dK/dV exchange buffers) for this split: trainer.memory's shape
    tables, the ones the trainer allocates from."""
    from trainer.config import model_config
    from trainer.memory import estimate

    cfg = model_config(model, max_seq_len=max_seq_len)
    return estimate(cfg, 1, T, ranks, own_rows=sp_reduce == "reduce-scatter").activations / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="d12")
    ap.add_argument("--max-seq-len", type=int, default=None, help="raise the model's context (for `small`)")
    ap.add_argument("-T", "--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=2, help="timed steps per configuration (after one warm-up)")
    ap.add_argument("--rounds", type=int, default=1, help="times each configuration runs (alternated)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="sequence-group sizes besides 1")
    ap.add_argument("--sp-reduce", default="allreduce", choices=["allreduce", "reduce", "reduce-scatter"])
    args = ap.parse_args()

    configs = [(1, "contiguous")] + [(r, s) for r in args.ranks for s in ("contiguous", "interleaved")]
    runs: dict[tuple, list[dict]] = {c: [] for c in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for rnd in range(args.rounds):
            for ranks, split in configs:
                row = run_config(args, ranks, split, Path(tmp))
                runs[(ranks, split)].append(row)
                print(f"round {rnd + 1}: {ranks} rank(s) {split if ranks > 1 else '':<11} "
                      f"{statistics.median(row['step_ms']):9.1f} ms/step", flush=True)
    rows = []
    for (ranks, _split), rs in runs.items():
        steps = [ms for r in rs for ms in r["step_ms"]]
        row = {"ranks": ranks, "split": rs[0]["split"], "oversubscribed": rs[0]["oversubscribed"],
               "ms_per_step": statistics.median(steps), "spread_ms": max(steps) - min(steps),
               "rounds": [statistics.median(r["step_ms"]) for r in rs],
               "attention_forward_max_over_mean": statistics.median(r["attention_forward"]["max_over_mean"]
                                                                    for r in rs),
               "attention_backward_max_over_mean": statistics.median(r["attention_backward"]["max_over_mean"]
                                                                     for r in rs),
               "attention_slowest_rank": rs[-1]["attention_backward"]["slowest_rank"],
               "sp_wait_s_per_step": statistics.median(r["sp_wait_s_per_step"] for r in rs),
               "rank0_wait_ms_after_attention_backward": statistics.median(
                   r["rank0_wait_ms_after_attention_backward"] for r in rs),
               "activation_mb_per_rank": activation_mb(args.model, args.max_seq_len, args.seq_len, ranks,
                                                       args.sp_reduce),
               "peak_rss_mb_largest_rank": max(r["peak_rss_mb"] for r in rs),
               "attention_s_per_step_per_rank": {k: rs[-1][k]["s_per_step"]
                                                 for k in ("attention_forward", "attention_backward")}}
        rows.append(row)
    base = rows[0]
    for r in rows:
        r["speedup"] = base["ms_per_step"] / r["ms_per_step"]
        r["activation_vs_1_rank"] = r["activation_mb_per_rank"] / base["activation_mb_per_rank"]

    print(f"\n{args.model} B=1 T={args.seq_len}, --sp-reduce {args.sp_reduce}, 1 thread per rank, {args.steps} timed "
          f"step(s) x {args.rounds} round(s), {CORES} cores ({cpu_model()})")
    print(f"{'ranks':>5} {'split':<11} {'ms/step':>9} {'spread':>7} {'speedup':>7} {'attn fwd':>8} {'attn bwd':>8} "
          f"{'sp wait s':>9} {'r0 wait ms':>10} {'act MB':>8} {'act x':>6} {'RSS MB':>7}  note")
    for r in rows:
        print(f"{r['ranks']:>5} {r['split'] or '-':<11} {r['ms_per_step']:>9.1f} {r['spread_ms']:>7.1f} "
              f"{r['speedup']:>7.2f} {r['attention_forward_max_over_mean']:>8.2f} "
              f"{r['attention_backward_max_over_mean']:>8.2f} {r['sp_wait_s_per_step']:>9.3f} "
              f"{r['rank0_wait_ms_after_attention_backward']:>10.1f} {r['activation_mb_per_rank']:>8.0f} "
              f"{r['activation_vs_1_rank']:>6.2f} {r['peak_rss_mb_largest_rank']:>7.0f}  "
              f"{'oversubscribed' if r['oversubscribed'] else ''}")
    print(f"attn fwd/bwd: max/mean across ranks of the time in the kernel; sp wait: seconds per step all ranks wait "
          f"in the sequence group's collectives; r0 wait: rank 0's wait per call in the collective after attention "
          f"backward (the study: ~{STUDY_WAIT_MS} ms at T=1024, contiguous); act: activation buffers per rank")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "seq_split.json"
    out.write_text(json.dumps({"config": vars(args), "cores": CORES, "cpu": cpu_model(), "rows": rows,
                               "study_rank0_wait_ms": STUDY_WAIT_MS, "load_avg": os.getloadavg()}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
