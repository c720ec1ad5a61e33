"""What-if replay: the trace's run replayed under another network, with balanced compute, or with kernels scaled.

Each rank's compute bursts and MPI calls (`analysis.replay.program`) are cut at the rank's step starts (its first
phase record of each step, else kernel record) and replayed on a network model (`gpt2trace.format.network`), after two
optional changes to the bursts, in this order:
- `scale` KERNEL=FACTOR: each invocation of the kernel on a rank (a segment, `analysis.segments`) takes its threads'
  blocks times FACTOR from the segment's start, and the segment's length follows its slowest thread; the burst
  holding the segment grows or shrinks by the change (never below zero).
- `balance`: the k-th burst of step s on every rank becomes the mean over the ranks that have one: what perfect
  load balance would give with the same calls.
Predicted step s starts when the first rank reaches its start in the replay (as the measured one does in the
trace), and the last step ends with the replay. POP factors (MPI level, from the bursts: B_r = rank r's compute,
T the runtime, T_ideal the ideal-network replay of the same bursts): LB = avg(B) / max(B), CommE = max(B) / T,
PE = LB x CommE, SerE = max(B) / T_ideal, TE = T_ideal / T. The measured column gets the same formulas from the
trace's own bursts, so both columns compare like with like (they differ from `analyze`'s useful-time factors by
the non-Running time inside bursts).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import mpi, pop, replay, segments
from analysis.critical_path import CriticalPath, critical_path, main_threads, tables, timeline_path
from analysis.records import NS, Records, decode, records, threads
from analysis.replay_timeline import Stretches, TimeMap, time_map
from analysis.sections import Sections
from analysis.steps import steps_table
from analysis.window import Window, select
from gpt2trace.format.limits import MAX_ADDED_NS
from gpt2trace.format.network import IDEAL, Network, placement
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, STEP, Kind

POP_KEYS = pop.LEVEL_KEYS + pop.COMM_KEYS


class WhatIfError(ValueError):
    """A model that does not fit the trace (an unknown kernel); the message is one line naming the option."""


@dataclass(frozen=True)
class Model:
    network: Network = IDEAL
    balance: bool = False
    scale: tuple[tuple[str, float], ...] = ()       # (kernel name, factor)
    nodes: int = 0          # > 0: the ranks on that many nodes in blocks (gpt2trace.format.network.placement)


def whatif(trace: Trace, model: Model, steps: str | None = None) -> dict:
    """The measured and predicted step times (per step and median), runtime, ideal-network runtime and POP factors
    of the window (`steps` as `analyze --steps`). Raises WhatIfError for a kernel the trace does not run,
    WindowError for `steps` that do not fit."""
    window = select(trace, steps)
    pairs = threads(trace)
    ranks, main = np.unique(pairs[RANK].to_numpy()), main_threads(trace, pairs)
    if model.nodes > len(ranks):
        raise WhatIfError(f"--cluster nodes={model.nodes}: the trace has {len(ranks)} rank(s) and every node needs "
                          f"one; give nodes=1..{len(ranks)}")
    calls = mpi.calls(trace, window)
    mark_rank, mark_t, mark_step = _step_starts(trace, window, ranks)
    prog = replay.program(calls, ranks, window.t0_ns, window.t1_ns, marks=(mark_rank, mark_t))
    kern = segments.kernel_records(trace, window)
    burst, tail, stretches = (_scaled(prog, kern, model.scale, window) if model.scale
                              else (prog.burst, prog.tail, Stretches.none()))
    if model.balance:
        burst, tail = _balanced(prog, burst, tail)
    changed = prog.with_bursts(burst, tail)
    measured = replay.play(prog, IDEAL)
    node_of = dict(zip(ranks.tolist(), placement(len(ranks), model.nodes))) if model.nodes > 0 else None
    try:
        predicted = replay.play(changed, model.network, node_of)
    except replay.ClockOverflow as exc:
        given = "--cluster" if model.nodes > 0 else "--bandwidth/--latency"
        raise WhatIfError(f"{given}: {exc}; give a faster network") from None
    ideal_changed = replay.play(changed, IDEAL) if not model.network.ideal else predicted
    runtime = window.t1_ns - window.t0_ns
    starts = _predicted_starts(prog, predicted, mark_step)
    step_rows = _steps(trace, window, starts, predicted)
    moved = time_map(prog, burst, tail, predicted, runtime, stretches)
    said = _warnings(prog, model, predicted)
    paths = Sections(said)("critical path", lambda: {
        "measured": critical_path(trace, window, calls, kern, main),
        "predicted": _predicted_path(trace, window, calls, kern, main, prog, moved, predicted, starts)})
    out = {
        "trace": trace.name,
        "window": {"t0_s": window.t0_ns / NS, "t1_s": window.t1_ns / NS, "steps": list(window.steps)},
        "model": {"bandwidth_GBps": model.network.bandwidth_bps / 1e9, "latency_us": model.network.latency_ns / 1e3,
                  "balance": model.balance, "scale": dict(model.scale)},
        "mpi_calls": int((prog.mark < 0).sum()),
        "step_time_s": {"measured": _median(step_rows["measured_s"]), "predicted": _median(step_rows["predicted_s"])},
        "runtime_s": {"measured": runtime / NS, "predicted": predicted.end_ns / NS},
        "ideal_runtime_s": {"measured": measured.end_ns / NS, "predicted": ideal_changed.end_ns / NS},
        "pop": {"measured": _factors(measured.busy_ns, runtime, measured.end_ns),
                "predicted": _factors(predicted.busy_ns, predicted.end_ns, ideal_changed.end_ns)},
        "steps": step_rows.to_dict("records"),
        "critical_path": {k: _path_tables(cp) for k, cp in paths.items()} if paths else None,
        "forced_releases": predicted.forced,
        "warnings": said,
    }
    return out


def _warnings(prog: replay.Program, model: Model, predicted: replay.Played) -> list[str]:
    out = []
    if not (prog.mark < 0).any() and not model.network.ideal:
        out.append("the window has no MPI calls: the network changes nothing (a compute-only replay)")
    if predicted.forced:
        calls = ", ".join(f"{n} x{c}" for n, c in sorted(predicted.forced.items(), key=lambda kv: -kv[1]))
        out.append(f"the replay found no partner for {sum(predicted.forced.values())} blocked MPI call(s) and "
                   f"released them at their entry ({calls}): the trace's MPI calls do not match, so the "
                   f"prediction is approximate")
    return out


def _step_starts(trace: Trace, window: Window, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rank, time, step) of each rank's start of each window step (its first phase, else kernel record of it),
    and a last mark at the window's end on every rank (step -1)."""
    starts = pd.DataFrame({RANK: [], START_NS: [], STEP: []})
    for kind in (Kind.PHASE, Kind.KERNEL):
        rec = records(trace, kind, (RANK, STEP), window, clip=False)
        df = pd.DataFrame({RANK: rec[RANK], START_NS: rec[START_NS], STEP: rec[STEP]})
        df = df[df[STEP].isin(window.steps) & df[RANK].isin(ranks)]
        if len(df):
            starts = df.groupby([RANK, STEP], as_index=False)[START_NS].min()
            break
    rank = np.r_[starts[RANK].to_numpy(), ranks].astype(np.int64)
    t = np.r_[np.maximum(starts[START_NS].to_numpy(), window.t0_ns), np.full(len(ranks), window.t1_ns)]
    step = np.r_[starts[STEP].to_numpy(), np.full(len(ranks), -1)].astype(np.int64)
    return rank, t.astype(np.int64), step


def _scaled(prog: replay.Program, kern, scale: tuple[tuple[str, float], ...],
            window: Window) -> tuple[np.ndarray, np.ndarray, Stretches]:
    """The bursts with each scaled kernel's segments made FACTOR times longer, thread by thread, and the scaled
    segments."""
    ran = {kern.names[c] for c in np.unique(kern[NAME]) if c >= 0}
    for name, _ in scale:
        if name not in ran:
            known = ", ".join(sorted(ran)) or "none"
            raise WhatIfError(f"--scale {name}=...: no kernel {name!r} in the window; its kernels: {known}")
    segs = segments.segments(kern)
    factor = np.ones(len(kern.names))
    for name, f in scale:
        factor[kern.names.index(name)] = f
    rank, start, end = kern[RANK].astype(np.int64), kern[START_NS], kern[END_NS]
    f = factor[kern[NAME]]
    seg = segs.locate(rank, start)
    pick = (f != 1) & (seg >= 0)
    seg, f = seg[pick], f[pick]
    # The segment's new length: the latest of its threads' scaled blocks, each from its own start.
    new_len = np.zeros(len(segs), dtype=np.float64)
    np.maximum.at(new_len, seg, start[pick] - segs.start_ns[seg] + f * (end[pick] - start[pick]))
    touched = np.unique(seg)
    delta = new_len[touched] - (segs.end_ns[touched] - segs.start_ns[touched])
    if not float(np.maximum(delta, 0).sum()) <= MAX_ADDED_NS:        # the replay keeps time in int64 ns
        spec = " ".join(f"{name}={f:g}" for name, f in scale)
        raise WhatIfError(f"--scale {spec}: the scaled kernels would add {np.maximum(delta, 0).sum() / 1e9:.3g} s to "
                          f"the run, beyond the {MAX_ADDED_NS / 1e9:.3g} s the int64 nanosecond clock holds; give a "
                          "smaller factor")
    delta = np.rint(delta).astype(np.int64)
    # The burst holding a segment is that of the rank's first call (or mark) starting after the segment starts.
    dense = np.searchsorted(prog.ranks, segs.rank[touched])
    width = int(max(prog.start_ns.max(initial=0), window.t1_ns - window.t0_ns)) + 2
    row_rank = np.repeat(np.arange(len(prog.ranks)), np.diff(prog.ptr))
    row = np.searchsorted(row_rank * width + prog.start_ns, dense * width + (segs.start_ns[touched] - window.t0_ns),
                          side="right")
    in_burst = (row < len(row_rank)) & (row_rank[np.minimum(row, len(row_rank) - 1)] == dense)
    burst = prog.burst.astype(np.float64).copy()
    tail = prog.tail.astype(np.float64).copy()
    np.add.at(burst, row[in_burst], delta[in_burst])
    np.add.at(tail, dense[~in_burst], delta[~in_burst])
    stretches = Stretches(dense, segs.start_ns[touched] - window.t0_ns, segs.end_ns[touched] - window.t0_ns,
                          new_len[touched], np.where(in_burst, row, -1))
    return np.maximum(burst, 0).astype(np.int64), np.maximum(tail, 0).astype(np.int64), stretches


def _balanced(prog: replay.Program, burst: np.ndarray, tail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The k-th burst of each step (counted from the rank's step marks) set to its mean over the ranks."""
    row_rank = np.repeat(np.arange(len(prog.ranks)), np.diff(prog.ptr))
    df = pd.DataFrame({"rank": row_rank, "burst": burst.astype(np.float64)})
    is_mark = (prog.mark >= 0).astype(np.int64)
    df["step"] = pd.Series(is_mark).groupby(row_rank).cumsum() - is_mark          # a mark ends the previous step
    df["pos"] = df.groupby(["rank", "step"]).cumcount()
    mean = df.groupby(["step", "pos"])["burst"].transform("mean")
    return np.rint(mean.to_numpy()).astype(np.int64), np.full(len(tail), np.rint(tail.mean()), dtype=np.int64)


def _predicted_starts(prog: replay.Program, played: replay.Played, mark_step: np.ndarray) -> pd.Series:
    """When each step starts in the replay (ns from the window's start): when the first rank reaches its start."""
    marks = np.flatnonzero(prog.mark >= 0)
    return pd.Series(played.leave_ns[marks]).groupby(mark_step[prog.mark[marks]]).min()


def _steps(trace: Trace, window: Window, reach: pd.Series, played: replay.Played) -> pd.DataFrame:
    """step, measured_s, predicted_s for the window's steps (one row for the window when it has no steps)."""
    runtime = (window.t1_ns - window.t0_ns) / NS
    if not window.steps:
        return pd.DataFrame({STEP: [None], "measured_s": [runtime], "predicted_s": [played.end_ns / NS]})
    table = steps_table(trace)
    table = table[table[STEP].isin(window.steps)]
    starts = np.array([reach.get(s, np.nan) for s in table[STEP]], dtype=np.float64)
    ends = np.r_[starts[1:], played.end_ns]
    return pd.DataFrame({STEP: table[STEP].to_numpy(), "measured_s": table["seconds"].to_numpy(),
                         "predicted_s": (ends - starts) / NS})


def _predicted_path(trace: Trace, window: Window, calls: pd.DataFrame, kern: Records, main: pd.Series,
                    prog: replay.Program, moved: TimeMap, played: replay.Played, starts: pd.Series) -> CriticalPath:
    """The critical path of the replayed run: the trace's calls, kernels and phases at their replayed times
    (`analysis.replay_timeline`), walked as the measured run's (`analysis.critical_path`)."""
    t0 = window.t0_ns
    is_call = prog.mark < 0
    at = calls.copy()
    at.loc[prog.source[is_call], START_NS] = t0 + np.rint(moved.enter_ns[is_call]).astype(np.int64)
    at.loc[prog.source[is_call], END_NS] = t0 + np.rint(moved.leave_ns[is_call]).astype(np.int64)
    dense = np.searchsorted(prog.ranks, kern[RANK])
    kcols = dict(kern.cols)
    for col, end in ((START_NS, False), (END_NS, True)):
        kcols[col] = t0 + np.rint(moved.moved(dense, kern[col] - t0, end)).astype(np.int64)
    ph = records(trace, Kind.PHASE, (RANK, NAME), window)
    p_dense = np.searchsorted(prog.ranks, ph[RANK])
    phases = pd.DataFrame({RANK: ph[RANK].astype(np.int64), NAME: decode(ph[NAME], ph.names),
                           **{col: t0 + np.rint(moved.moved(p_dense, ph[col] - t0, col == END_NS)).astype(np.int64)
                              for col in (START_NS, END_NS)}})
    steps = pd.DataFrame({STEP: starts.index.to_numpy(), START_NS: t0 + np.rint(starts.to_numpy()).astype(np.int64)})
    steps = steps[steps[STEP] >= 0]
    return timeline_path(at, Records(kcols, kern.names), main, t0, t0 + played.end_ns, steps, phases)


def _path_tables(cp: CriticalPath) -> dict:
    """`critical_path.tables` without the path's segments (the report's overlay): its length, items, phases,
    lanes and steps as plain values."""
    return {k: (v.to_dict("records") if isinstance(v, pd.DataFrame) else v) for k, v in tables(cp).items()
            if k != "segments"}


def _factors(busy: np.ndarray, runtime_ns: float, ideal_ns: float) -> dict:
    f = pop.efficiencies(busy.astype(float), busy.astype(float), float(runtime_ns), float(ideal_ns),
                         float(busy.max()) if len(busy) else None)["mpi"]
    return {k: None if f.get(k) is None else float(f[k]) for k in POP_KEYS}


def _median(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return float(v.median()) if len(v) else None
