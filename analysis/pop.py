"""POP efficiencies (BSC definitions) of a window, with the hybrid MPI / thread levels and the ideal replay.

Useful time U_i = time thread i spends Running; P = every thread of every rank; T = the window's runtime.
    LB = avg(U) / max(U)     CommE = max(U) / T     PE = LB x CommE = avg(U) / T
MPI level (BSC's multiplicative hybrid model): the same formulas on O_i, the computing time of thread i's rank
(in a parallel region or Running serially, `analysis.openmp`), averaged over the same P threads. BSC takes the
time outside MPI calls; ours also leaves out the rank's I/O, Others and Not created time, which is neither MPI
nor thread parallelism, so that a pure-MPI trace has O = U and a thread level of exactly 1.
Thread level: the residual factors, PE / PE_mpi, LB / LB_mpi, CommE / CommE_mpi. The thread LB residual can
exceed 1 when the rank that computes longest is not the one with the most useful time (a known property of the
multiplicative model).
Serialization and transfer (BSC): from the ideal-network replay (`analysis.replay`), T_ideal and max_ideal, the
longest a rank computes in it (its compute bursts, the time between its MPI calls):
    SerE = max_ideal / T_ideal     TE = CommE_mpi / SerE     (so CommE_mpi = SerE x TE)
They are the MPI level's; on a pure-MPI trace the whole trace's too (CommE = CommE_mpi). A replay longer than the
run is reported as is, with a warning (`warnings`): it means the trace's MPI calls do not match.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import pandas as pd

from analysis import lost, mpi, openmp, replay, segments
from analysis.records import NS, Records, records
from analysis.state_profile import LaneStates
from analysis.window import Window
from gpt2trace.format.lanes import lane_index
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, RANK, START_NS, STATE, THREAD, Kind, State

LEVEL_KEYS = ("parallel_efficiency", "load_balance", "communication_efficiency")
COMM_KEYS = ("serialization_efficiency", "transfer_efficiency")


def thread_times(states: Records) -> dict[str, np.ndarray]:
    """Per thread (rank, thread) present in the window's state records: Running nanoseconds."""
    rank, thread, lane = lane_index(states[RANK], states[THREAD])       # threads with state records
    dur = states[END_NS] - states[START_NS]
    running = np.bincount(lane, weights=dur * (states[STATE] == State.RUNNING), minlength=len(rank))
    return {RANK: rank, THREAD: thread, "useful_ns": running}


def efficiencies(useful: np.ndarray, outside_mpi: np.ndarray, runtime: float, ideal: float | None = None,
                 ideal_busy_max: float | None = None, hybrid: bool = False) -> dict:
    """The POP factors from per-thread useful and computing (outside-MPI) times and, with MPI, the replay's
    T_ideal and max_ideal (any unit, the same for all). With threads (`hybrid`), serialization and transfer are
    the MPI level's only: BSC gets the whole trace's from a replay that also simulates the threads."""
    if not len(useful) or runtime <= 0 or useful.max() <= 0:
        return _empty()
    lb, comm = useful.mean() / useful.max(), useful.max() / runtime
    lb_mpi, comm_mpi = outside_mpi.mean() / outside_mpi.max(), outside_mpi.max() / runtime
    ser = tr = None
    if ideal is not None and ideal > 0 and ideal_busy_max is not None:
        ser = ideal_busy_max / ideal
        tr = comm_mpi / ser if ser > 0 else None
    return {"parallel_efficiency": lb * comm, "load_balance": lb, "communication_efficiency": comm,
            "serialization_efficiency": None if hybrid else ser, "transfer_efficiency": None if hybrid else tr,
            "mpi": {"parallel_efficiency": lb_mpi * comm_mpi, "load_balance": lb_mpi,
                    "communication_efficiency": comm_mpi, "serialization_efficiency": ser,
                    "transfer_efficiency": tr},
            "threads": {"parallel_efficiency": (lb * comm) / (lb_mpi * comm_mpi), "load_balance": lb / lb_mpi,
                        "communication_efficiency": comm / comm_mpi}}


def pop(trace: Trace, window: Window, calls: pd.DataFrame | None = None, states: Records | None = None,
        kern: Records | None = None) -> dict:
    """The POP factors and the times behind them (seconds); `calls` (`mpi.calls`), `states` (the window's state
    records) and `kern` (its kernel records) if the caller has them already."""
    st = states if states is not None else records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    kern = kern if kern is not None else segments.kernel_records(trace, window)
    calls = mpi.calls(trace, window) if calls is None else calls
    return from_parts([part(st, kern)], calls, window)


@dataclass(frozen=True)
class Part:
    """What some ranks contribute: their threads' Running time (`thread_times`) and their `openmp.split`."""
    times: dict[str, np.ndarray]
    split: openmp.Split | None


def part(states: Records, kern: Records, times: LaneStates | None = None) -> Part:
    """The `Part` of the ranks of `states` and `kern` (the window's state and kernel records of some ranks);
    `times`: the states' `lane_states` if the caller has them (a thread's Running time is its time in the
    Running state)."""
    tt = (thread_times(states) if times is None else
          {RANK: times.rank, THREAD: times.thread, "useful_ns": np.ascontiguousarray(times.ns[:, State.RUNNING])})
    return Part(tt, openmp.split(states, kern) if len(tt[RANK]) else None)


def from_parts(parts: list[Part], calls: pd.DataFrame, window: Window) -> dict:
    """`pop` of all ranks from the `Part`s of groups of them (in rank order) and the MPI calls of all."""
    parts = [p for p in parts if p.split is not None]
    runtime = window.t1_ns - window.t0_ns
    if not parts:
        return {**_empty(), "runtime_s": runtime / NS, "cpus": 0, "openmp": None, "lost": None,
                "replay": None}
    tt = {k: np.concatenate([p.times[k] for p in parts]) for k in parts[0].times}
    sp = (parts[0].split if len(parts) == 1 else
          openmp.Split(*(np.concatenate([getattr(p.split, f.name) for p in parts]) for f in fields(openmp.Split))))
    useful = tt["useful_ns"].astype(float)
    at = np.searchsorted(sp.rank, tt[RANK])
    # A one-thread rank computes exactly its useful time: the same numbers, so its thread level is exactly 1.
    outside = np.where(sp.threads[at] >= 2, sp.computing_ns[at], useful)
    rep = replay.replay(calls, sp.rank, window.t0_ns, window.t1_ns) if len(calls) else None
    ideal = float(rep.ideal_ns) if rep is not None else None
    busy_max = float(rep.busy_ns.max()) if rep is not None else None
    replayed = ideal
    if ideal is not None and ideal < useful.max():
        # No network makes a thread compute faster: the replay, which puts a rank's calls on one line, came out
        # shorter than a thread's useful time when calls of several threads of a rank overlap
        ideal = float(useful.max())
    out = efficiencies(useful, outside, float(runtime), ideal, busy_max, hybrid=bool(sp.threads.max() >= 2))
    out.update(runtime_s=runtime / NS, cpus=len(useful), useful_avg_s=useful.mean() / NS,
               useful_max_s=useful.max() / NS, useful_total_s=useful.sum() / NS,
               outside_mpi_avg_s=outside.mean() / NS, outside_mpi_max_s=outside.max() / NS,
               ideal_runtime_s=ideal / NS if ideal is not None else None,
               useful_ideal_max_s=busy_max / NS if busy_max is not None else None,
               replay={"forced_releases": dict(rep.forced),
                       "replayed_s": replayed / NS} if rep is not None else None,
               openmp=openmp.factors(sp, runtime))
    out["lost"] = lost.partition(out)
    return out


NO_COMPUTATION = ("no thread is Running in the analyzed window: the trace records no computation (a measurement "
                  "that filtered out the user code, or one of MPI calls only), so the POP factors are not defined; "
                  "the MPI tables still hold")


def warnings(p: dict) -> list[str]:
    """What makes the POP factors undefined or the replay's numbers unreliable, in words (`analysis.analyze` adds
    them to its warnings)."""
    out = [NO_COMPUTATION] if p.get("cpus") and not p.get("useful_max_s") else []
    ideal, runtime = p.get("ideal_runtime_s"), p.get("runtime_s")
    if ideal is not None and runtime and ideal > runtime:
        out.append(f"the ideal-network replay takes {ideal:.6g} s, longer than the measured {runtime:.6g} s: a "
                   f"replay never waits longer than the run did, so the trace's MPI calls do not match (a "
                   f"missing or reordered call, clocks out of sync); serialization and transfer efficiency are "
                   f"not reliable (reported as they are, not clipped)")
    replayed = (p.get("replay") or {}).get("replayed_s")
    if replayed is not None and ideal is not None and replayed < ideal:
        out.append(f"the ideal-network replay takes {replayed:.6g} s, less than the longest useful time of a thread "
                   f"({ideal:.6g} s), which no network shortens: MPI calls of several threads of a rank overlap, "
                   f"and the replay puts a rank's calls in one line; the ideal runtime is taken as {ideal:.6g} s, "
                   f"so serialization and transfer efficiency are approximate")
    forced = (p.get("replay") or {}).get("forced_releases") or {}
    if forced:
        calls = ", ".join(f"{name} x{count}" for name, count in sorted(forced.items(), key=lambda kv: (-kv[1], kv[0])))
        out.append(f"the ideal-network replay found no partner for {sum(forced.values())} blocked MPI call(s) and "
                   f"released them at their entry ({calls}): the trace's MPI calls do not match, so "
                   f"serialization and transfer efficiency are approximate")
    return out


def _empty() -> dict:
    return {**dict.fromkeys(LEVEL_KEYS + COMM_KEYS), "mpi": dict.fromkeys(LEVEL_KEYS + COMM_KEYS),
            "threads": dict.fromkeys(LEVEL_KEYS)}
