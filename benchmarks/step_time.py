"""Step time of our GPT-2 against plain PyTorch eager, same model and batch, alternated in one session.

    python benchmarks/step_time.py                 # d12, B=4, T=64, 1 and 2 threads, 3 rounds
    python benchmarks/step_time.py --model small --rounds 2

Each measurement runs in its own subprocess (fresh process: honest peak RSS, no cross-talk), and the
configurations alternate round by round (ours 1t, torch 1t, ours 2t, torch 2t, ...) so that drift in the
machine's speed hits all of them alike; the table reports medians over rounds. MFU divides the model FLOPs by
the sgemm peak measured in the same worker (our matmul kernel at the same thread count). Our per-kernel
breakdown comes from the same region timestamps the tracer records. Writes benchmarks/results/step_time.json.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from analysis.summary import flops_per_token

RESULTS = Path(__file__).resolve().parent / "results"


# ----------------------------------------------------------------------------------------------- workers

def _rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def worker_ours(model: str, B: int, T: int, threads: int, steps: int) -> dict:
    from gpt2trace.run.runner import prepare_process
    prepare_process(threads)
    import numpy as np

    from gpt2trace.record.recorder import KernelRecorder, call_meta
    from trainer.blas import blas_info
    from trainer.config import TrainConfig, model_config
    from trainer.dp import Local
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.params import init_params
    from trainer.peak import sgemm_gflops
    from trainer.train import train

    cfg = model_config(model)
    tcfg = TrainConfig(batch_size=B, seq_len=T, steps=steps + 1, lr=1e-4)
    recorder = KernelRecorder(threads)       # the tracer's kernel log alone: each kernel's region times
    run = Launcher(threads, recorder=recorder)
    total: dict[str, int] = {}

    def add_regions():
        times, calls = recorder.take()
        kernel = call_meta(calls)[:, 0]
        took = times[:, 0, 1] - times[:, 0, 0]
        for k in np.unique(kernel):
            name = recorder.kernel_names[k]
            total[name] = total.get(name, 0) + int(took[kernel == k].sum())
    params = init_params(cfg, tcfg.seed)
    m = GPT2(cfg, params, B, T, run)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, cfg.vocab_size, (B, T + 1), dtype=np.int32)

    class Batch:
        def batch(self, k):
            return tokens[:, :-1], tokens[:, 1:]

    # the first step compiles or loads kernels: left out of the timing and of the breakdown
    per_step = []
    def on_step(s):
        per_step.append(s.ms)
        if s.step == 0:
            recorder.take()
    train(m, Batch(), tcfg, Local(m, tcfg, run), on_step=on_step)
    add_regions()
    timed = per_step[1:]
    return {"impl": "ours", "ms_steps": timed, "rss_mb": _rss_mb(), "n_params": int(params.size),
            "n_layer": cfg.n_layer, "n_embd": cfg.n_embd, "sgemm_gflops": sgemm_gflops(threads),
            "kernels_ms": {k: v / 1e6 / len(timed) for k, v in total.items()}, "blas": blas_info()}


def worker_torch(model: str, B: int, T: int, threads: int, steps: int) -> dict:
    import torch

    from trainer.config import model_config
    from trainer.params import init_params
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "trainer" / "reference"))
    from torch_reference import GPT, load_flat  # a test tool: it imports torch, which we do not depend on

    torch.set_num_threads(threads)
    cfg = model_config(model)
    net = GPT(cfg)
    load_flat(net, init_params(cfg, 1337))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (B, T + 1), generator=g)
    x, y = tokens[:, :-1], tokens[:, 1:]
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = net(x, y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return {"impl": "torch", "ms_steps": times[1:], "rss_mb": _rss_mb(), "torch": torch.__version__}


# ------------------------------------------------------------------------------------------- orchestration

def _spawn(impl: str, args, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--worker", impl, "--model", args.model, "-B", str(args.batch_size),
           "-T", str(args.seq_len), "--threads", str(threads), "--steps", str(args.steps)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{impl} worker at {threads} threads failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _have_torch() -> bool:
    try:
        import torch  # noqa: F401
        return True
    except ImportError:
        return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="d12")
    ap.add_argument("-B", "--batch-size", type=int, default=4)
    ap.add_argument("-T", "--seq-len", type=int, default=64)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--steps", type=int, default=3, help="timed steps per worker (after one warm-up step)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worker", choices=["ours", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        fn = worker_ours if args.worker == "ours" else worker_torch
        print(json.dumps(fn(args.model, args.batch_size, args.seq_len, args.threads[0], args.steps)))
        return

    impls = ["ours"] + (["torch"] if _have_torch() else [])
    if "torch" not in impls:
        print("torch is not installed: PyTorch eager columns are left out (pip install torch==2.13.0)")
    runs: dict[tuple[str, int], list[dict]] = {}
    for r in range(args.rounds):
        for threads in args.threads:
            for impl in impls:
                res = _spawn(impl, args, threads)
                runs.setdefault((impl, threads), []).append(res)
                print(f"round {r + 1}/{args.rounds} {impl:5s} {threads}t: "
                      f"{statistics.median(res['ms_steps']):8.1f} ms/step", flush=True)

    rows = []
    for threads in args.threads:
        ours = runs[("ours", threads)]
        ms = statistics.median(statistics.median(o["ms_steps"]) for o in ours)
        o0 = ours[0]
        tokens = args.batch_size * args.seq_len
        # the same model-FLOPs formula `gpt2trace analyze` uses (6N + 6LTC, llm.c's MFU estimate)
        fpt = flops_per_token({"model": {"num_parameters": o0["n_params"], "n_layer": o0["n_layer"],
                                         "n_embd": o0["n_embd"]}, "train": {"seq_len": args.seq_len}})
        gflops = fpt * tokens / (ms / 1e3) / 1e9
        peak = statistics.median(o["sgemm_gflops"] for o in ours)
        row = {"threads": threads, "ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3),
               "model_gflops": gflops, "sgemm_peak_gflops": peak, "mfu": gflops / peak,
               "peak_rss_mb": max(o["rss_mb"] for o in ours),
               "kernels_ms": {k: statistics.median(o["kernels_ms"][k] for o in ours) for k in o0["kernels_ms"]}}
        if ("torch", threads) in runs:
            tms = statistics.median(statistics.median(t["ms_steps"]) for t in runs[("torch", threads)])
            row |= {"torch_ms_per_step": tms, "ratio_vs_torch": ms / tms,
                    "torch_peak_rss_mb": max(t["rss_mb"] for t in runs[("torch", threads)])}
        rows.append(row)

    print(f"\n{args.model} B={args.batch_size} T={args.seq_len}, median of {args.rounds} rounds x {args.steps} "
          f"steps; BLAS {runs[('ours', args.threads[0])][0]['blas']['kernel']}")
    head = f"{'threads':>7} {'ms/step':>9} {'tok/s':>7} {'GFLOP/s':>8} {'peak':>6} {'MFU':>5} {'RSS MB':>7}"
    if len(impls) > 1:
        head += f" {'torch ms':>9} {'ours/torch':>10} {'torch RSS':>9}"
    print(head)
    for r in rows:
        line = (f"{r['threads']:>7} {r['ms_per_step']:>9.1f} {r['tokens_per_s']:>7.0f} {r['model_gflops']:>8.1f} "
                f"{r['sgemm_peak_gflops']:>6.1f} {r['mfu']:>5.2f} {r['peak_rss_mb']:>7.0f}")
        if "torch_ms_per_step" in r:
            line += f" {r['torch_ms_per_step']:>9.1f} {r['ratio_vs_torch']:>10.3f} {r['torch_peak_rss_mb']:>9.0f}"
        print(line)
    print("\nwhere our time goes (ms per step, region time of each kernel summed over its calls):")
    names = sorted(rows[0]["kernels_ms"], key=lambda k: -rows[0]["kernels_ms"][k])
    print(f"{'kernel':<24}" + "".join(f"{str(r['threads']) + 't':>10}" for r in rows))
    for k in names:
        print(f"{k:<24}" + "".join(f"{r['kernels_ms'][k]:>10.1f}" for r in rows))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "step_time.json"
    out.write_text(json.dumps({"config": vars(args) | {"impls": impls}, "rows": rows,
                               "blas": runs[("ours", args.threads[0])][0]["blas"],
                               "uptime_load": os.getloadavg()}, indent=1))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
