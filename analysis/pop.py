"""POP efficiencies (BSC definitions) of a window, with the hybrid MPI / thread levels and the ideal replay.

Useful time U_i = time thread i spends Running; P = every thread of every rank; T = the window's runtime.
    LB = avg(U) / max(U)     CommE = max(U) / T     PE = LB x CommE = avg(U) / T
    SerE = max(U) / T_ideal  TE = T_ideal / T       (so CommE = SerE x TE; T_ideal from `analysis.replay`)
MPI level (BSC's multiplicative hybrid model): the same formulas on O_i, the time outside MPI of thread i's rank
(T minus the MPI-state time of the rank's busiest MPI caller), averaged over the same P threads.
Thread level: the residual factors, PE / PE_mpi, LB / LB_mpi, CommE / CommE_mpi. The thread LB residual can
exceed 1 when the rank that is longest outside MPI is not the one with the most useful time (a known property of
the multiplicative model).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import mpi, replay
from analysis.window import NS, Records, Window, records
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, MPI_STATES, RANK, START_NS, STATE, THREAD, Kind, State


def thread_times(trace: Trace, window: Window, states: Records | None = None) -> dict[str, np.ndarray]:
    """Per thread (rank, thread) present in the window's state records: Running and in-MPI nanoseconds."""
    st = states if states is not None else records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    rank, thread = st[RANK].astype(np.int64), st[THREAD].astype(np.int64)
    dur = st[END_NS] - st[START_NS]
    width = int(thread.max()) + 1 if len(thread) else 1
    key = rank * width + thread
    size = int(key.max()) + 1 if len(key) else 0
    lane = np.flatnonzero(np.bincount(key, minlength=size))           # threads with state records
    running = np.bincount(key, weights=dur * (st[STATE] == State.RUNNING), minlength=size)[lane]
    in_mpi = np.bincount(key, weights=dur * np.isin(st[STATE], np.array(MPI_STATES)), minlength=size)[lane]
    return {RANK: lane // width, THREAD: lane % width, "useful_ns": running, "mpi_ns": in_mpi}


def efficiencies(useful: np.ndarray, outside_mpi: np.ndarray, runtime: float, ideal: float) -> dict:
    """The POP factors from per-thread useful and outside-MPI times (any unit, the same for the runtimes)."""
    if not len(useful) or runtime <= 0 or useful.max() <= 0:
        return _empty()
    lb, comm = useful.mean() / useful.max(), useful.max() / runtime
    lb_mpi, comm_mpi = outside_mpi.mean() / outside_mpi.max(), outside_mpi.max() / runtime
    ideal = min(max(ideal, useful.max()), runtime)
    out = {"parallel_efficiency": lb * comm, "load_balance": lb, "communication_efficiency": comm,
           "serialization_efficiency": useful.max() / ideal, "transfer_efficiency": ideal / runtime,
           "mpi": {"parallel_efficiency": lb_mpi * comm_mpi, "load_balance": lb_mpi,
                   "communication_efficiency": comm_mpi},
           "threads": {"parallel_efficiency": (lb * comm) / (lb_mpi * comm_mpi), "load_balance": lb / lb_mpi,
                       "communication_efficiency": comm / comm_mpi}}
    return out


def pop(trace: Trace, window: Window, calls: pd.DataFrame | None = None, states: Records | None = None) -> dict:
    """The POP factors and the times behind them (seconds); `calls` (`mpi.calls`) and `states` (the window's
    state records) if the caller has them already."""
    tt = thread_times(trace, window, states)
    runtime = window.t1_ns - window.t0_ns
    if not len(tt[RANK]):
        return {**_empty(), "runtime_s": runtime / NS, "cpus": 0}
    ranks = np.unique(tt[RANK])
    rank_mpi = np.zeros(int(ranks.max()) + 1)
    np.maximum.at(rank_mpi, tt[RANK], tt["mpi_ns"])
    outside = runtime - rank_mpi[tt[RANK]]
    calls = mpi.calls(trace, window) if calls is None else calls
    ideal = replay.ideal_runtime_ns(calls, ranks, window.t0_ns, window.t1_ns)
    out = efficiencies(tt["useful_ns"].astype(float), outside.astype(float), float(runtime), float(ideal))
    useful = tt["useful_ns"]
    out.update(runtime_s=runtime / NS, ideal_runtime_s=min(max(ideal, useful.max()), runtime) / NS,
               cpus=len(useful), useful_avg_s=useful.mean() / NS, useful_max_s=useful.max() / NS,
               outside_mpi_avg_s=outside.mean() / NS, outside_mpi_max_s=outside.max() / NS)
    return out


def _empty() -> dict:
    keys = ("parallel_efficiency", "load_balance", "communication_efficiency")
    return {**dict.fromkeys(keys + ("serialization_efficiency", "transfer_efficiency")),
            "mpi": dict.fromkeys(keys), "threads": dict.fromkeys(keys)}
