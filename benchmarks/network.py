"""This machine's MPI latency and bandwidth between 2 ranks: an mpi4py ping-pong, for `gpt2trace whatif`.

    python benchmarks/network.py              # starts `mpiexec -n 2` itself
    python benchmarks/network.py --reps 200

Rank 0 sends n bytes to rank 1, which sends them back; one-way time = half the round trip, the median of `reps`
round trips after a warm-up, for n from 8 B to 4 MiB. The model L + n/B is fitted by least squares to the
fastest one-way times (L = intercept, B = 1/slope): what the network does when both ranks have a core; on a
loaded machine the medians also hold the time a rank waits for a core (both are printed and written). Writes
benchmarks/results/network.json; use the figures as `gpt2trace whatif TRACE --bandwidth <GB/s> --latency <us>`.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SIZES = (8, 1024, 16 * 1024, 128 * 1024, 512 * 1024, 1024 * 1024, 4 * 1024 * 1024)

PING_PONG = r"""
import sys, time, json, numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
reps, sizes = int(sys.argv[1]), [int(s) for s in sys.argv[2].split(",")]
out = {}
for n in sizes:
    buf = np.zeros(n, dtype=np.uint8)
    times = []
    for i in range(reps + 10):                       # the first 10: warm-up (pages, shared-memory segments)
        comm.Barrier()
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send(buf, dest=1)
            comm.Recv(buf, source=1)
        else:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
        if i >= 10:
            times.append((time.perf_counter() - t0) / 2)
    out[n] = [float(np.min(times)), float(np.median(times))]
if rank == 0:
    print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    from gpt2trace.run.mpiexec import find_mpiexec
    run = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", PING_PONG, str(args.reps),
                          ",".join(map(str, SIZES))], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"mpiexec failed:\n{run.stderr[-3000:]}")
    one_way = {int(n): t for n, t in json.loads(run.stdout.strip().splitlines()[-1]).items()}
    import numpy as np
    n = np.array(sorted(one_way), dtype=float)
    t = np.array([one_way[int(k)][0] for k in n])
    median = np.array([one_way[int(k)][1] for k in n])
    slope, intercept = np.polyfit(n, t, 1)
    result = {"sizes_bytes": [int(k) for k in n], "one_way_min_s": t.tolist(), "one_way_median_s": median.tolist(),
              "reps": args.reps, "latency_us": max(intercept, 0.0) * 1e6, "bandwidth_GBps": 1 / slope / 1e9,
              "latency_8B_us": t[0] * 1e6}
    print(f"{'bytes':>10} {'one-way min us':>15} {'GB/s':>7} {'median us':>10}")
    for k, v, m in zip(n, t, median):
        print(f"{int(k):>10,} {v * 1e6:>15.2f} {k / v / 1e9:>7.3f} {m * 1e6:>10.2f}")
    print(f"fit L + n/B: latency {result['latency_us']:.2f} us, bandwidth {result['bandwidth_GBps']:.3f} GB/s "
          f"(8 B one way: {result['latency_8B_us']:.2f} us)")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "network.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {RESULTS / 'network.json'}")


if __name__ == "__main__":
    main()
