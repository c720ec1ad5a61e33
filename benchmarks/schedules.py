"""Fork-join vs task-based dataflow (`--schedule forkjoin|tasks`) on GPT-2 d12 (B=4, T=64) and small, 2 threads per
rank, 1 and 2 ranks (data parallel, allreduce).

    python benchmarks/schedules.py                                   # the measurement (a quiet machine, ~15 min)
    python benchmarks/schedules.py --models tiny --steps 2 --reps 1  # a check that it works (seconds)

Each configuration is one process per rank (`mpiexec -n 2` for 2 ranks) holding one model and both launchers; the
schedules alternate within the run (reps x steps steps each, the first schedule alternating too), so drifts of the
machine hit both alike. Both continue training the same parameters (each with its own AdamW moments): the
numbers are timings, not a convergence comparison (tests/trainer/tasks hold the results equal).

Per configuration: ms/step of each schedule (median over the measured steps, and the spread: min..max), and from
the tasks steps' task logs (trainer.tasks.log.TaskLog), per step then the median:
    overhead share  (sum over tasks of pick..start and end..done, plus the main thread's submission time) divided
                    by thread time (threads x step time); comm tasks' end..done is their flight, not overhead
    occupancy       time inside task bodies / thread time
    critical path   the longest chain of the task graph weighted by task durations (a comm task: posting to
                    completion), summed over the step's taskwaits (after the forward, at the step's end): the
                    step time with infinite threads and a free runtime; step / critical path
    per-task cost   overhead per task, ns
    hidden comm     (ranks > 1) seconds per step of the Iallreduces' flight (posting .. successful MPI_Test) during
                    which some thread was running a task
Prints a table; writes benchmarks/results/schedules.json (or --out).
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

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parent.parent
CORES = len(os.sched_getaffinity(0))


# -- statistics of one step's task logs -----------------------------------------------------------------------------

def _merge(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _overlap(a0: int, a1: int, merged) -> int:
    return sum(max(0, min(a1, e) - max(a0, s)) for s, e in merged)


def critical_path_ns(log, names) -> int:
    """The longest chain of one taskwait's tasks, weighted by their bodies (a comm task: posting to completion).
    Ids increase in submission order and every predecessor was submitted earlier; predecessors in an earlier log
    were done before this log's first task was submitted (a taskwait)."""
    comm = [names[k].startswith("MPI_") for k in log.kernel.tolist()]
    weight = [int(d - s) if c else int(e - s)
              for c, s, e, d in zip(comm, log.start_ns.tolist(), log.end_ns.tolist(), log.done_ns.tolist())]
    finish: dict[int, int] = {}
    for i in sorted(range(len(log)), key=lambda i: int(log.task[i])):
        before = max((finish[p] for p in log.predecessors(i).tolist() if p in finish), default=0)
        finish[int(log.task[i])] = before + weight[i]
    return max(finish.values(), default=0)


def step_stats(logs, step_ns: int, nthreads: int) -> dict:
    """Overhead, occupancy, critical path and hidden communication of the tasks of one step (its TaskLogs)."""
    import numpy as np

    names = logs[-1].names
    cat = {f: np.concatenate([getattr(g, f) for g in logs]) for f in
           ("task", "kernel", "start_ns", "end_ns", "pick_ns", "done_ns")}
    comm = np.array([names[k].startswith("MPI_") for k in cat["kernel"]], dtype=bool)
    body = cat["end_ns"] - cat["start_ns"]
    submit = sum(g.submit_cost_ns for g in logs)
    overhead = int((cat["start_ns"] - cat["pick_ns"]).sum() + (cat["done_ns"] - cat["end_ns"])[~comm].sum()) + submit
    thread_ns = step_ns * nthreads
    critical = sum(critical_path_ns(g, names) for g in logs)   # a taskwait between logs: chains add up
    running = _merge(zip(cat["start_ns"][~comm].tolist(), cat["end_ns"][~comm].tolist()))
    hidden = sum(_overlap(s, e, running) for s, e in zip(cat["end_ns"][comm].tolist(), cat["done_ns"][comm].tolist()))
    flight = int((cat["done_ns"] - cat["end_ns"])[comm].sum())
    return {"tasks": int(len(cat["task"])), "overhead_share": overhead / thread_ns,
            "overhead_ns_per_task": overhead / max(1, len(cat["task"])), "submit_ms": submit / 1e6,
            "occupancy": float(body[~comm].sum()) / thread_ns, "critical_path_ms": critical / 1e6,
            "comm_flight_s": flight / 1e9, "comm_hidden_s": hidden / 1e9,
            "polls": int(sum(g.polls for g in logs))}


# -- one rank's measurement (run under mpiexec for 2 ranks) -----------------------------------------------------------

class _StepLogs:
    """The training loop's observer here: each step's wall time and the task logs of its taskwaits."""

    def __init__(self):
        self.steps: list[tuple[int, list]] = []
        self._logs: list = []
        self._t0 = 0

    def begin_step(self, step): self._logs, self._t0 = [], time.monotonic_ns()
    def microstep(self, micro): pass
    def phase(self, name, nbytes=None):
        import contextlib
        return contextlib.nullcontext()
    def counter(self, name, value): pass
    def tasks(self, log): self._logs.append(log)
    def end_step(self, step): self.steps.append((time.monotonic_ns() - self._t0, self._logs))


def worker(args) -> dict:
    from trainer.threads import configure_threads
    configure_threads(args.threads, oversubscribed=args.ranks * args.threads > CORES)
    import numpy as np

    from trainer.config import TrainConfig, model_config
    from trainer.cpu import cpu_model
    from trainer.dp import make_strategy
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.params import init_params
    from trainer.tasks.launcher import TaskLauncher
    from trainer.train import train

    comm = None
    if args.ranks > 1:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    cfg = model_config(args.model)
    B, T = args.batch_size, min(args.seq_len, cfg.max_seq_len)
    tcfg = TrainConfig(batch_size=B, seq_len=T, steps=args.steps, lr=1e-4)
    rank = comm.Get_rank() if comm is not None else 0

    class Data:
        def batch(self, k):
            x = np.random.default_rng(1000 * rank + k).integers(0, cfg.vocab_size, (B, T + 1), dtype=np.int32)
            return x[:, :-1], x[:, 1:]

    launchers = {"forkjoin": Launcher(args.threads), "tasks": TaskLauncher(args.threads, args.task_block)}
    model = GPT2(cfg, init_params(cfg, 1), B, T, launchers["forkjoin"])
    dps = {name: make_strategy("allreduce", model, tcfg, run, comm) for name, run in launchers.items()}
    ms = {name: [] for name in launchers}
    stats = []
    for rep in range(args.reps + 1):                    # rep 0: compile and warm up, not measured
        order = list(launchers) if rep % 2 == 0 else list(reversed(launchers))
        for name in order:
            model.run = launchers[name]
            obs = _StepLogs()
            train(model, Data(), tcfg if rep else TrainConfig(batch_size=B, seq_len=T, steps=1, lr=1e-4),
                  dps[name], observer=obs)
            if rep:
                ms[name] += [ns / 1e6 for ns, _ in obs.steps]
                if name == "tasks":
                    stats += [step_stats(logs, ns, args.threads) for ns, logs in obs.steps]
    for run in launchers.values():
        run.close()
    row = {"model": args.model, "B": B, "T": T, "ranks": args.ranks, "threads": args.threads,
           "task_block": args.task_block, "oversubscribed": args.ranks * args.threads > CORES, "cpu": cpu_model(),
           "rank": rank}
    for name, values in ms.items():
        row[name] = {"ms_median": statistics.median(values), "ms_min": min(values), "ms_max": max(values),
                     "steps": len(values)}
    row["speedup"] = row["forkjoin"]["ms_median"] / row["tasks"]["ms_median"]
    row["tasks_stats"] = {k: statistics.median(s[k] for s in stats) for k in stats[0]}
    row["tasks_stats"]["step_over_critical_path"] = row["tasks"]["ms_median"] / row["tasks_stats"]["critical_path_ms"]
    return row


# -- the driver ----------------------------------------------------------------------------------------------------

def measure(args, model: str, ranks: int) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--model", model, "--ranks", str(ranks), "--threads",
           str(args.threads), "--steps", str(args.steps), "--reps", str(args.reps), "-B", str(args.batch_size),
           "-T", str(args.seq_len), "--task-block", str(args.task_block)]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks)] + cmd
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if ranks * args.threads > CORES:
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows) -> str:
    head = (f"{'model':6} {'ranks':>5} {'forkjoin ms':>18} {'tasks ms':>18} {'speedup':>7} {'overhead':>8} "
            f"{'ns/task':>8} {'occup.':>6} {'crit. ms':>8} {'step/crit':>9} {'hidden s':>8}")
    lines = [head]
    for r in rows:
        f, t, s = r["forkjoin"], r["tasks"], r["tasks_stats"]
        spread = lambda x: f"{x['ms_median']:.1f} ({x['ms_min']:.0f}-{x['ms_max']:.0f})"  # noqa: E731
        lines.append(f"{r['model']:6} {r['ranks']:>5} {spread(f):>18} {spread(t):>18} {r['speedup']:>7.2f} "
                     f"{s['overhead_share']:>8.1%} {s['overhead_ns_per_task']:>8.0f} {s['occupancy']:>6.1%} "
                     f"{s['critical_path_ms']:>8.1f} {s['step_over_critical_path']:>9.2f} "
                     + (f"{s['comm_hidden_s']:>8.4f}" if r["ranks"] > 1 else f"{'-':>8}"))
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="d12,small")
    p.add_argument("--ranks-list", default="1,2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="steps per schedule per repetition")
    p.add_argument("--reps", type=int, default=4, help="alternations (each schedule runs reps x steps steps)")
    p.add_argument("-B", "--batch-size", type=int, default=4)
    p.add_argument("-T", "--seq-len", type=int, default=64)
    p.add_argument("--task-block", type=int, default=None, help="default: trainer.config.DEFAULT_TASK_BLOCK")
    p.add_argument("--out", type=Path, default=RESULTS / "schedules.json")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--ranks", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.task_block is None:
        sys.path.insert(0, str(ROOT))
        from trainer.config import DEFAULT_TASK_BLOCK
        args.task_block = DEFAULT_TASK_BLOCK
    if args.worker:
        row = worker(args)
        if row.pop("rank") == 0:
            print(json.dumps(row))
        return
    rows = []
    for model in args.models.split(","):
        for ranks in (int(r) for r in args.ranks_list.split(",")):
            rows.append(measure(args, model, ranks))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print(f"\ncpu: {rows[0]['cpu']}; {args.threads} threads per rank; task block {args.task_block} rows; "
          f"medians over {args.reps} x {args.steps} steps per schedule (min-max)")
    print(table(rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
