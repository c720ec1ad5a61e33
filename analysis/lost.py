"""The time a window loses, split by cause so that each loss is counted once: the shares add up to 1 - PE.

All shares are of the thread time P x T (P threads, T runtime). With A the computing time of a rank (in a
parallel region or Running serially, `analysis.openmp`), averaged over the P threads (avg A) and at its maximum:
    mpi_load_balance      (max A - avg A) / T           ranks compute for different times
    outside_computation   (max_ideal - max A) / T       the main thread neither computes nor is in MPI (I/O, ...)
    serialization         (T_ideal - max_ideal) / T     waits an ideal network would still have
    transfer              (T - T_ideal) / T             what the real network adds
    serial_regions, region_load_balance, region_scheduling    `analysis.openmp`'s losses / (P x T)
max_ideal is the longest a rank computes in the ideal-network replay (its time outside MPI calls). Without MPI
there is no replay: outside_computation is all of (T - max A) / T, serialization and transfer are None. Each of
the first four is clipped to what is left of (T - avg A) / T, so a replay that does not fit the run (a warning)
cannot push the sum past the loss.
"""
from __future__ import annotations

KEYS = ("mpi_load_balance", "outside_computation", "serialization", "transfer", "serial_regions",
        "region_load_balance", "region_scheduling")


def partition(p: dict) -> dict | None:
    """{total, <KEYS>} from a `analysis.pop.pop` result (fractions of P x T; None without useful time)."""
    T, cpus = p.get("runtime_s") or 0.0, p.get("cpus") or 0
    if T <= 0 or not cpus or p.get("parallel_efficiency") is None:
        return None
    avg_a, max_a = p["outside_mpi_avg_s"], p["outside_mpi_max_s"]
    comm = max(T - max_a, 0.0) / T
    out = {"total": 1 - p["useful_total_s"] / (cpus * T), "mpi_load_balance": max(max_a - avg_a, 0.0) / T}
    ideal, busy = p.get("ideal_runtime_s"), p.get("useful_ideal_max_s")
    if ideal is None or busy is None:
        out.update(outside_computation=comm, serialization=None, transfer=None)
    else:
        outside = min(max(busy - max_a, 0.0) / T, comm)
        ser = min(max(ideal - busy, 0.0) / T, comm - outside)
        out.update(outside_computation=outside, serialization=ser, transfer=comm - outside - ser)
    omp = p.get("openmp") or {}
    capacity = cpus * T
    for key, src in (("serial_regions", "serial_lost_s"), ("region_load_balance", "region_imbalance_lost_s"),
                     ("region_scheduling", "region_scheduling_lost_s")):
        out[key] = omp.get(src, 0.0) / capacity
    return out
