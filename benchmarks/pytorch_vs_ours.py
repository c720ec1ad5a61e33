"""PyTorch's GPT-2 and ours through the same analyses: the PyTorch reference model (tests/trainer/reference) profiled
by torch.profiler, its Kineto trace imported (gpt2trace.interop.kineto_import), and our trainer's trace of the same
model, shape and thread count, both analyzed by `analysis.analyze`.

PyTorch's steps are labelled with record_function("forward" / "backward" / "optimizer"), our phase names, so the
per-phase times compare directly. What differs in kind: the profiler records ops on the threads that call them,
so PyTorch's intra-op worker threads (its OpenMP pool inside each ATen op) are not in its trace: its POP factors
are the calling thread's, while ours cover every thread of every kernel.

    python benchmarks/pytorch_vs_ours.py                       # d12, B=4, T=64, 2 threads, 4 steps (+1 warm-up)
    python benchmarks/pytorch_vs_ours.py --model small --steps 10
Writes benchmarks/results/pytorch_vs_ours.json, and keeps both traces with --keep DIR (then: gpt2trace report).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "pytorch_vs_ours.json"


def profile_torch(opts, out: Path) -> None:
    """Runs in its own process: the PyTorch GPT-2, one warm-up step then opts.steps recorded ones."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    from trainer.config import model_config
    from trainer.params import init_params
    sys.path.insert(0, str(ROOT / "tests" / "trainer" / "reference"))
    from torch_reference import GPT, load_flat  # a test tool: it imports torch, which we do not depend on

    torch.set_num_threads(opts.threads)
    cfg = model_config(opts.model)
    net = GPT(cfg)
    load_flat(net, init_params(cfg, 1337))
    opt = torch.optim.AdamW(net.parameters(), lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    g = torch.Generator().manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=opts.steps),
                 on_trace_ready=lambda p: p.export_chrome_trace(str(out))) as prof:
        for _ in range(opts.steps + 1):
            with record_function("dataload"):
                tokens = torch.randint(0, cfg.vocab_size, (opts.batch, opts.seq + 1), generator=g)
            with record_function("forward"):
                _, loss = net(tokens[:, :-1], tokens[:, 1:])
            with record_function("backward"):
                loss.backward()
            with record_function("optimizer"):
                opt.step()
                opt.zero_grad(set_to_none=True)
            prof.step()


def run_ours(opts, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--model", opts.model, "--threads", str(opts.threads),
                    "--steps", str(opts.steps + 1), "-B", str(opts.batch), "-T", str(opts.seq), "--trace", str(out)],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def summary(result: dict) -> dict:
    """What the table compares, from `analyze`'s result (docs/analyze.md): over the same window of steps."""
    pop, summ = result["pop"], result["summary"]
    return {"step_s_median": summ["step_s_median"], "steps": summ["steps"], "threads": summ["threads_per_rank"],
            "parallel_efficiency": pop["parallel_efficiency"], "load_balance": pop["load_balance"],
            "communication_efficiency": pop["communication_efficiency"],
            "phases_s": {row["phase"]: row["mean_s"] for row in summ["phases"]}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="d12")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("-B", "--batch", type=int, default=4)
    ap.add_argument("-T", "--seq", type=int, default=64)
    ap.add_argument("--keep", type=Path, help="folder to keep ours.parquet, torch.json and torch.parquet in")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.worker:
        profile_torch(opts, opts.worker)
        return

    from analysis.analyze import analyze
    from gpt2trace import load
    from gpt2trace.interop.kineto_import import import_kineto
    from gpt2trace.interop.paraver_import import write_parquet

    with tempfile.TemporaryDirectory() as tmp:
        folder = opts.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        run_ours(opts, folder / "ours.parquet")
        subprocess.run([sys.executable, __file__, "--worker", str(folder / "torch.json"), "--model", opts.model,
                        "--threads", str(opts.threads), "--steps", str(opts.steps), "-B", str(opts.batch),
                        "-T", str(opts.seq)], check=True, cwd=ROOT, stderr=subprocess.DEVNULL)
        write_parquet(import_kineto(folder / "torch.json"), folder / "torch.parquet")
        results = {"ours": analyze(load(folder / "ours.parquet")), "pytorch": analyze(load(folder / "torch.parquet"))}
    rows = {name: summary(r) for name, r in results.items()}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"config": {k: v for k, v in vars(opts).items() if k not in ("worker", "keep")},
                                   "runs": rows, "pop": {n: r["pop"] for n, r in results.items()}},
                                  indent=1, default=str) + "\n")
    table = Table(title=f"{opts.model}, B={opts.batch}, T={opts.seq}, {opts.threads} threads, {opts.steps} steps")
    table.add_column("")
    for name in rows:
        table.add_column(name, justify="right")
    for key in ("step_s_median", "steps", "threads", "parallel_efficiency", "load_balance",
                "communication_efficiency"):
        table.add_row(key, *(_cell(rows[n][key]) for n in rows))
    for phase in ("dataload", "forward", "backward", "optimizer"):
        table.add_row(f"{phase} s per step", *(_cell(rows[n]["phases_s"].get(phase)) for n in rows))
    Console(width=120).print(table)
    print(f"results in {RESULTS}")


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


if __name__ == "__main__":
    main()
