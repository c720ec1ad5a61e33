"""The pre-run memory check's estimate of a rank against the real run's peak resident memory, and MPI's temporaries.

    python benchmarks/memory_estimate.py                         # tiny, small, d12 at 1, 2 and 8 ranks (~6 min)
    python benchmarks/memory_estimate.py --models tiny --ranks 1 2 --no-mpi

Each row is a real `gpt2trace run --model M --ranks R -B 1 -T 16 --steps 2` (tracing on, the default allreduce,
the default threads). While it runs, every Python process under it is read every 20 ms: its VmHWM (the kernel's
own high-water mark of its resident memory, exact between reads) and, at its largest resident sample,
/proc/PID/smaps_rollup's Anonymous memory (the process's own) and the rest of its Rss (pages mapped from files:
the libraries, the same pages in every rank) and its Pss. The ranks are the processes under mpiexec (with one rank
the command's own process, which trains); `os.wait4` adds the largest descendant's exact peak at the end.

Per row: the estimate of one rank, `trainer.memory.estimate(...).total` (what check_fits counts for each rank,
with grad_ranks = R as the pre-run check gives it), the largest and smallest rank's peak and estimate / largest;
what this row measures for the two constants the estimate adds, PROCESS_BASELINE (a rank's peak less its file
pages and the estimate's model part, from the smallest rank to the largest: rank 0, which merges the trace's parts
after the last step) and SHARED_LIBRARIES (the file pages); and for the node, the check's total
(MemoryEstimate.on_node: R processes, the libraries once) against the sum of the ranks' Pss (which splits each
shared page among the processes that map it) at their largest samples.

The MPI table (skipped with --no-mpi) is where trainer.memory.sync_bytes comes from: each call the --dp-sync
strategies make on the gradients (or parameters), in place where they are, on a 95 MiB float32 buffer under
`mpiexec -n N`: the largest rise in VmHWM on any rank during the call, over the buffer's size, next to what
sync_bytes counts for that strategy (relative to what its call reduces). Writes benchmarks/results/memory_estimate.json.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from trainer.config import DPSync, model_config
from trainer.cpu import cpu_model
from trainer.memory import MIB, PROCESS_BASELINE, SHARED_LIBRARIES, estimate, sync_bytes
from trainer.params import ParamLayout

RESULTS = Path(__file__).resolve().parent / "results"
CORES = len(os.sched_getaffinity(0))
POLL_S = 0.02

# One call per job, so the rise of each rank's VmHWM is that call's alone.
MPI_CALL = r"""
import sys, numpy as np
from mpi4py import MPI
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
comm, call, n = MPI.COMM_WORLD, sys.argv[1], int(sys.argv[2])
N, r = comm.size, comm.rank
counts = [n // N + (i < n % N) for i in range(N)]
displs = [sum(counts[:i]) for i in range(N)]
buf, shard = np.ones(n, np.float32), np.empty(counts[r], np.float32)
calls = {
    "Allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
    "Iallreduce x12": lambda: MPI.Request.Waitall([comm.Iallreduce(MPI.IN_PLACE, p, op=MPI.SUM)
                                                   for p in np.array_split(buf, 12)]),
    "Reduce": lambda: (comm.Reduce(MPI.IN_PLACE, buf, op=MPI.SUM, root=0) if r == 0
                       else comm.Reduce(buf, None, op=MPI.SUM, root=0)),
    "Bcast": lambda: comm.Bcast(buf, root=0),
    "Reduce_scatter": lambda: comm.Reduce_scatter(buf, shard, recvcounts=counts, op=MPI.SUM),
    "Allgatherv": lambda: comm.Allgatherv(MPI.IN_PLACE, [buf, counts, displs, MPI.FLOAT]),
}
comm.Barrier()
h0 = hwm()
calls[call]()
comm.Barrier()
rise = comm.gather(hwm() - h0, root=0)
if r == 0:
    print(max(rise) / (4 * n))
"""
# the call each strategy makes on its gradients or parameters, and what sync_bytes counts it against
MPI_CALLS = [("Allreduce", "allreduce"), ("Iallreduce x12", "overlap"), ("Reduce", "reduce-bcast"),
             ("Bcast", "reduce-bcast"), ("Reduce_scatter", "zero1"), ("Allgatherv", "zero1")]
PARAMETER_CALLS = ("Bcast", "Allgatherv")      # the updated parameters back to every rank
MPI_FLOATS = 25_000_000             # 95 MiB
MPI_RANKS = (2, 3, 4, 8)


def _rollup(pid: int) -> dict[str, int]:
    """Rss, Pss, Anonymous from smaps_rollup and VmHWM from status, in bytes."""
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Rss", "Pss", "Anonymous"):
                out[key] = int(rest.split()[0]) * 1024
    with open(f"/proc/{pid}/status") as f:
        out["VmHWM"] = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    return out


def _ranks(pid: int) -> dict[int, str]:
    """The processes under `pid` that run `python -m gpt2trace run` (the ranks), with their command lines; not one
    forked by a process that runs it too (a subprocess between its fork and its exec)."""
    import psutil

    def runs_gpt2trace(p) -> bool:
        return p.cmdline()[:4] == [sys.executable, "-m", "gpt2trace", "run"]      # not mpiexec's line

    found = {}
    try:
        for p in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if runs_gpt2trace(p) and not runs_gpt2trace(p.parent()):
                    found[p.pid] = " ".join(p.cmdline())
    except psutil.Error:
        pass
    return found


def measure(cmd: list[str], ranks: int) -> dict:
    """Run `cmd`, reading its Python processes until it ends; the ranks' peaks and their parts at their peaks."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        seen: dict[int, dict] = {}
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)     # not Popen.poll: it would reap the usage
            if pid:
                break
            pids = _ranks(proc.pid) if ranks > 1 else {proc.pid: ' '.join(cmd)}
            for pid in pids:
                try:
                    now = _rollup(pid)
                except (OSError, StopIteration, KeyError):
                    continue                                 # not started yet, or gone
                best = seen.setdefault(pid, now | {"cmd": pids[pid]})
                if now["Rss"] >= best["Rss"]:
                    best.update(now)
                best["VmHWM"] = max(best["VmHWM"], now["VmHWM"])
            time.sleep(POLL_S)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        return {"error": stderr.strip().splitlines()[-1] if stderr.strip() else f"exit {status}", "wall_s": wall}
    if len(seen) != ranks:
        found = "\n".join(p["cmd"] for p in seen.values())
        raise SystemExit(f"{' '.join(cmd)}: read {len(seen)} rank processes, expected {ranks}:\n{found}")
    peaks = sorted((p["VmHWM"], p["Rss"] - p["Anonymous"], p["Pss"]) for p in seen.values())
    if usage.ru_maxrss * 1024 > peaks[-1][0]:           # wait4: the largest descendant's exact peak
        peaks[-1] = (usage.ru_maxrss * 1024, *peaks[-1][1:])
    return {"peaks": [p[0] for p in peaks], "files": [p[1] for p in peaks], "pss_sum": sum(p[2] for p in peaks),
            "wall_s": wall}


def memory_row(model: str, ranks: int, B: int, T: int, steps: int, workdir: Path) -> dict:
    need = estimate(model_config(model), B, T, dp_sync=DPSync.allreduce, grad_ranks=ranks)
    trace = workdir / f"{model}_{ranks}.parquet"
    cmd = [sys.executable, "-m", "gpt2trace", "run", "--model", model, "--ranks", str(ranks), "-B", str(B), "-T",
           str(T), "--steps", str(steps), "--trace", str(trace)]
    row = {"model": model, "ranks": ranks, "estimate": need.total, "model_bytes": need.model, "sync": need.sync,
           "on_node": need.on_node(ranks)} | measure(cmd, ranks)
    trace.unlink(missing_ok=True)
    if "error" not in row:
        row["ratio"] = need.total / max(row["peaks"])
        row["baselines"] = [peak - files - need.model for peak, files in zip(row["peaks"], row["files"])]
    return row


def mpi_factor(call: str, ranks: int) -> float:
    from gpt2trace.run.mpiexec import find_mpiexec
    out = subprocess.run([find_mpiexec(), "-n", str(ranks), sys.executable, "-c", MPI_CALL, call, str(MPI_FLOATS)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


def counted_factor(call: str, strategy: str, ranks: int) -> float:
    """What sync_bytes counts for `strategy`, over what its call reduces; nothing for the parameters' calls."""
    if call in PARAMETER_CALLS:
        return 0.0
    layout = ParamLayout.for_model(model_config("d12"))
    return sync_bytes(layout, DPSync(strategy), ranks) / (4 * layout.size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "small", "d12"])
    ap.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 8])
    ap.add_argument("-B", "--batch-size", type=int, default=1)
    ap.add_argument("-T", "--seq-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--no-mpi", action="store_true", help="skip the MPI temporaries table")
    args = ap.parse_args()

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            for ranks in args.ranks:
                row = memory_row(model, ranks, args.batch_size, args.seq_len, args.steps, Path(tmp))
                rows.append(row)
                print(f"{model} x {ranks}: " + (f"{max(row['peaks']) / MIB:,.0f} MiB peak, ratio {row['ratio']:.2f}"
                                                if "error" not in row else row["error"])
                      + f" ({row['wall_s']:.0f} s)", flush=True)
    mpi = []
    if not args.no_mpi:
        for call, strategy in MPI_CALLS:
            measured = {n: mpi_factor(call, n) for n in MPI_RANKS}
            counted = {n: counted_factor(call, strategy, n) for n in MPI_RANKS}
            mpi.append({"call": call, "strategy": strategy, "measured": measured, "counted": counted})

    cpu, today = cpu_model(), date.today().isoformat()
    print(f"\nmemory per rank, B={args.batch_size} T={args.seq_len} {args.steps} steps, allreduce, {CORES} cores "
          f"({cpu}), {today}; MiB. estimate = trainer.memory.estimate(...).total: model "
          f"+ PROCESS_BASELINE {PROCESS_BASELINE / MIB:.0f} + SHARED_LIBRARIES {SHARED_LIBRARIES / MIB:.0f}")
    print(f"{'model':>6} {'ranks':>5} {'estimate':>9} {'peak max':>9} {'peak min':>9} {'est/max':>7} "
          f"{'(MPI tmp)':>9} {'baseline':>9} {'libs':>9} {'check node':>10} {'sum Pss':>8} {'s':>4}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:>6} {r['ranks']:>5} {r['estimate'] / MIB:>9,.0f}  not run: {r['error']}")
            continue
        span = [f"{min(r[k]) / MIB:.0f}-{max(r[k]) / MIB:.0f}" for k in ("baselines", "files")]
        print(f"{r['model']:>6} {r['ranks']:>5} {r['estimate'] / MIB:>9,.0f} {max(r['peaks']) / MIB:>9,.0f} "
              f"{min(r['peaks']) / MIB:>9,.0f} {r['ratio']:>7.2f} {r['sync'] / MIB:>9,.0f} {span[0]:>9} "
              f"{span[1]:>9} {r['on_node'] / MIB:>10,.0f} {r['pss_sum'] / MIB:>8,.0f} {r['wall_s']:>4.0f}")
    print("peak: VmHWM of the largest / smallest rank; baseline: a rank's peak less its file pages and the "
          "estimate's model part (buffers + MPI tmp), smallest-largest rank (the largest is rank 0, which merges "
          "the trace at the end); libs: file pages; check node: R x (model + baseline) + libraries once, against "
          "the sum of the ranks' Pss")
    if mpi:
        print(f"\nMPI's temporary inside each call, x the buffer ({MPI_FLOATS * 4 / MIB:.0f} MiB float32), largest "
              "rise of VmHWM on any rank; counted: trainer.memory.sync_bytes for the strategy")
        print(f"{'call':<15} {'strategy':<13} " + " ".join(f"{'N=' + str(n):>11}" for n in MPI_RANKS))
        for m in mpi:
            cells = " ".join(f"{m['measured'][n]:>5.2f} ({m['counted'][n]:.2f})" for n in MPI_RANKS)
            print(f"{m['call']:<15} {m['strategy']:<13} {cells}")
        print("measured (counted)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "memory_estimate.json"
    out.write_text(json.dumps({"config": vars(args), "cores": CORES, "cpu": cpu, "date": today,
                               "process_baseline": PROCESS_BASELINE, "shared_libraries": SHARED_LIBRARIES,
                               "rows": rows, "mpi": mpi}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
