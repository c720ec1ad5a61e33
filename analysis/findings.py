"""Findings: the biggest losses of an analysis, in plain words with numbers, each naming the metric behind it.

Losses are put on one scale, the fraction of all thread time (P threads x runtime), so they can be ordered:
1 - PE splits exactly into load imbalance (max(U) - avg(U)) / T, serialization (T_ideal - max(U)) / T and transfer
(T - T_ideal) / T. Rank-level losses (a rank's kernel wall time, a wait) idle all threads of the rank.
"""
from __future__ import annotations

from gpt2trace.format.schema import LAYER, NAME, RANK, State


_TRAINING_PHASES = ("forward", "backward", "grad_sync", "optimizer")
_COMPLETIONS = ("MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome")
# Thread states worth a finding of their own (MPI states are covered by the waits and root causes).
_NOT_RUNNING = (State.IDLE, State.SYNCHRONIZATION, State.SCHEDULING_FORK_JOIN, State.IO)


def _finding(metric: str, lost: float | None, text: str) -> dict:
    return {"metric": metric, "lost_fraction": lost, "text": text}


def findings(result: dict, top: int = 10) -> list[dict]:
    """An ordered list of {metric, lost_fraction, text}: the losses largest first, then notes (lost None)."""
    s, p, occ = result["summary"], result["pop"], result["occupancy"]
    out: list[dict] = []
    T = p.get("runtime_s") or 0.0
    cpus = p.get("cpus") or 0
    thread_time = T * cpus
    threads = max(s.get("threads_per_rank") or 1, 1)
    if p.get("load_balance") is not None and T > 0:
        lb = p["useful_max_s"] - p["useful_avg_s"]
        out.append(_finding("pop.load_balance", lb / T,
                            f"Load imbalance costs {lb / T:.1%} of thread time: threads are Running "
                            f"{p['load_balance']:.0%} as long as the busiest one on average "
                            f"(load balance {p['load_balance']:.3f}; MPI level "
                            f"{_fmt(p['mpi']['load_balance'])}, thread level {_fmt(p['threads']['load_balance'])})."))
        ser = p["ideal_runtime_s"] - p["useful_max_s"]
        if result["waits"]["calls"]:
            text = (f"Serialization costs {ser / T:.1%}: even with an ideal network the run would take "
                    f"{p['ideal_runtime_s']:.4g} s against {p['useful_max_s']:.4g} s of the busiest thread's "
                    f"useful time (serialization efficiency {p['serialization_efficiency']:.3f}).")
        else:  # no MPI: what keeps even the busiest thread from useful work is in the thread states
            text = (f"Even the busiest thread is Running only {p['useful_max_s'] / T:.0%} of the runtime "
                    f"({ser / T:.1%} of thread time lost; no MPI, so this is fork/join, synchronization and "
                    f"serial work: see the state profile).")
        out.append(_finding("pop.serialization_efficiency", ser / T, text))
        tr = T - p["ideal_runtime_s"]
        out.append(_finding("pop.transfer_efficiency", tr / T,
                            f"Data transfer costs {tr / T:.1%}: {tr:.4g} s of the {T:.4g} s runtime go to moving "
                            f"data (transfer efficiency {p['transfer_efficiency']:.3f})."))
    if thread_time > 0:
        for i, row in enumerate(result["imbalance"][:3]):
            scale = threads if row["scope"] == "ranks" else 1
            where = f"layer {row[LAYER]}" if row[LAYER] is not None else "all layers"
            across = "ranks" if row["scope"] == "ranks" else f"the threads of rank {row[RANK]}"
            out.append(_finding(f"imbalance[{i}]", row["lost_s"] * scale / thread_time,
                                f"{row['kernel']} ({where}) is imbalanced across {across}: max/mean "
                                f"{row['imbalance']:.2f}, {row['lost_s']:.4g} s lost, slowest {row['slowest']}."))
        for i, row in enumerate(result["root_causes"][:3]):
            out.append(_finding(f"root_causes[{i}]", row["wait_s"] * threads / thread_time,
                                f"{row['text']} ({row['share']:.0%} of all MPI wait time)."))
        serial = sum(r["serial_s"] * (r["threads"] - 1) for r in occ["per_rank"])
        if serial > 0:
            longest = sum(r["serial_s"] for r in occ["per_rank"])
            out.append(_finding("occupancy.per_rank.serial_s", serial / thread_time,
                                f"Serial sections (only the main thread Running) last {longest:.4g} s over all "
                                f"ranks and leave the other threads idle: {serial / thread_time:.1%} of thread "
                                f"time."))
        if occ["per_kernel"] and occ["per_kernel"][0]["sync_s"] > 0:
            k = occ["per_kernel"][0]
            where = f" (layer {k[LAYER]})" if k[LAYER] is not None else ""
            out.append(_finding("occupancy.per_kernel[0].sync_s", k["sync_s"] / thread_time,
                                f"Threads wait {k['sync_s']:.4g} s in Synchronization at the end of "
                                f"{k['kernel']}{where}, the most of any kernel (mean occupancy "
                                f"{k['mean_occupancy']:.2f} threads)."))
    for i, row in enumerate(result.get("states", {}).get("totals", [])):
        if row["state"] in _NOT_RUNNING and row["share"] and row["share"] > 0.01:
            out.append(_finding(f"states.totals[{i}]", row["share"],
                                f"Threads spend {row['share']:.1%} of their time in {row['name']} "
                                f"({row['seconds']:.4g} s over all threads)."))
    for row in s.get("phases", []):
        if row["phase"] not in _TRAINING_PHASES and row["share"] and row["share"] > 0.02:
            out.append(_finding("summary.phases", row["share"],
                                f"Phase {row['phase']} takes {row['share']:.1%} of the runtime "
                                f"({row['mean_s']:.4g} s each time, {row['count']} times)."))
    out = sorted((f for f in out if f["lost_fraction"] and f["lost_fraction"] > 1e-4),
                 key=lambda f: -f["lost_fraction"])[:top]
    for row in result["waits"]["calls"]:
        if row.get("hidden_fraction") is not None:
            waited = sum(c["total_s"] for c in result["waits"]["calls"] if c[NAME] in _COMPLETIONS)
            out.append(_finding("waits.calls.hidden_fraction", None,
                                f"{row[NAME]} was in flight {row['inflight_s']:.4g} s, {row['hidden_fraction']:.0%} "
                                f"of it while the rank computed; the waits that complete it still took "
                                f"{waited:.4g} s (data moves behind computation only if the MPI progresses "
                                f"in the background: MPICH does not by default)."))
    if s.get("warmup_excluded"):
        note = " and it was an outlier" if s.get("warmup_outlier") else ""
        out.append(_finding("summary.warmup_excluded", None,
                            f"The first step was left out as warm-up{note}; use --steps to choose the window."))
    if s.get("outlier_steps"):
        out.append(_finding("summary.outlier_steps", None,
                            f"Outlier step(s) by time: {', '.join(map(str, s['outlier_steps'][:10]))}."))
    if s.get("mfu") is not None:
        out.append(_finding("summary.mfu", None,
                            f"Model FLOPs utilization {s['mfu']:.1%} ({s['achieved_gflops_per_core']:.3g} GFLOP/s "
                            f"per core against a {s['peak_gflops_per_core']:.3g} GFLOP/s sgemm peak)."))
    return out


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"
