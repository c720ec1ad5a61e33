"""Resident memory per rank: the peak, which phase reaches it, and the timeline the report draws.

The tracer samples each rank's resident set size at every phase end (`rss_bytes` counter, with the phase's step
and micro-batch); a sample belongs to the phase that ends at its time on its rank. Samples are those of the
analyzed window (t0, t1], as each closes its phase. What a schedule or a sharding saves shows here: GPipe holds
the activations of every micro-batch until its backwards, 1F1B only those of the micro-batches in flight (at most
the stages ahead); ZeRO-1 keeps a shard of the AdamW moments.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.plain import tables
from analysis.records import NS, decode, records
from analysis.sections import MIB, TEXT, Column, Inputs, Section, Table
from analysis.window import Window
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, MICROSTEP, NAME, RANK, START_NS, STEP, VALUE, Counter, Kind

PER_RANK = [RANK, "peak_bytes", "phase", STEP, MICROSTEP, "t_s", "min_bytes", "samples"]
PER_PHASE = [RANK, "phase", "peak_bytes", "mean_bytes", "samples"]
UNKNOWN_PHASE = "(no phase)"    # a sample whose phase is not in the trace (an imported or edited trace)


def samples(trace: Trace, window: Window) -> pd.DataFrame:
    """The resident-memory samples in the window: rank, t_ns, bytes, step, microstep (-1: none), phase."""
    rec = records(trace, Kind.COUNTER, (RANK, NAME, STEP, MICROSTEP, VALUE), None)
    cols = [RANK, "t_ns", "bytes", STEP, MICROSTEP, "phase"]
    if Counter.RSS_BYTES not in rec.names:
        return pd.DataFrame(columns=cols)
    t = rec[START_NS]
    # a sample closes its phase, (start, t]: the window's last phase ends at its end
    rec = rec.take((rec[NAME] == rec.names.index(Counter.RSS_BYTES)) & (t > window.t0_ns) & (t <= window.t1_ns))
    out = pd.DataFrame({RANK: rec[RANK].astype(np.int64), "t_ns": rec[START_NS].astype(np.int64),
                        "bytes": rec[VALUE], STEP: rec[STEP].astype(np.int64),
                        MICROSTEP: rec[MICROSTEP].astype(np.int64)})
    ph = records(trace, Kind.PHASE, (RANK, NAME), window, clip=False)
    ends = pd.DataFrame({RANK: ph[RANK].astype(np.int64), "t_ns": ph[END_NS].astype(np.int64),
                         "s": ph[START_NS].astype(np.int64), "phase": decode(ph[NAME], ph.names)})
    # phases ending together (nested): the outermost, then by name, whatever order the file gives them in
    ends = ends.sort_values([RANK, "t_ns", "s", "phase"], kind="stable").drop_duplicates([RANK, "t_ns"])
    ends = ends.drop(columns="s")
    out = out.merge(ends, on=[RANK, "t_ns"], how="left")
    out["phase"] = out["phase"].fillna(UNKNOWN_PHASE)
    return out.sort_values([RANK, "t_ns", STEP, MICROSTEP, "bytes"], kind="stable").reset_index(drop=True)[cols]


def memory(trace: Trace, window: Window, points: int = 400) -> dict | None:
    """None without resident-memory samples; else peak_bytes (the highest rank's), per_rank (peak, with the
    phase, step, micro-batch and time of the sample that reached it first; the lowest sample; samples),
    per_phase (per rank and phase: peak and mean), and timeline: per rank, at most `points` (t_s, bytes) pairs,
    each the highest sample of its slice of the window, so a peak is never thinned away."""
    s = samples(trace, window)
    if s.empty:
        return None
    first_peak = s.loc[s.groupby(RANK)["bytes"].idxmax()]          # idxmax: the first sample at the peak
    per_rank = pd.DataFrame({
        RANK: first_peak[RANK].to_numpy(), "peak_bytes": first_peak["bytes"].to_numpy(),
        "phase": first_peak["phase"].to_numpy(), STEP: first_peak[STEP].to_numpy(),
        MICROSTEP: first_peak[MICROSTEP].to_numpy(), "t_s": first_peak["t_ns"].to_numpy() / NS})
    g = s.groupby(RANK)["bytes"]
    per_rank["min_bytes"] = g.min().reindex(per_rank[RANK]).to_numpy()
    per_rank["samples"] = g.size().reindex(per_rank[RANK]).to_numpy()
    for col in (STEP, MICROSTEP):
        per_rank[col] = per_rank[col].astype("Int64").where(per_rank[col] >= 0)
    per_phase = s.groupby([RANK, "phase"], as_index=False).agg(
        peak_bytes=("bytes", "max"), mean_bytes=("bytes", "mean"), samples=("bytes", "size"))
    per_phase = per_phase.sort_values([RANK, "peak_bytes", "phase"], ascending=[True, False, True], kind="stable")
    return {"peak_bytes": float(s["bytes"].max()), "per_rank": per_rank[PER_RANK].reset_index(drop=True),
            "per_phase": per_phase[PER_PHASE].reset_index(drop=True), "timeline": _timeline(s, window, points)}


def _timeline(s: pd.DataFrame, window: Window, points: int) -> list[dict]:
    """Per rank: {rank, t_s, bytes}, the highest sample of each of `points` equal slices of the window."""
    width = max(window.t1_ns - window.t0_ns, 1)
    slot = np.minimum((s["t_ns"].to_numpy() - window.t0_ns) * points // width, points - 1)
    top = s.assign(slot=slot).sort_values("bytes", ascending=False, kind="stable").drop_duplicates([RANK, "slot"])
    top = top.sort_values([RANK, "t_ns"], kind="stable")
    return [{RANK: int(r), "t_s": (g["t_ns"] / NS).tolist(), "bytes": g["bytes"].tolist()}
            for r, g in top.groupby(RANK)]


def _section(inputs: Inputs, parts: list) -> dict | None:
    return tables(memory(inputs.trace, inputs.window))


# Resident memory per rank (None without samples). The peak per phase is in the JSON only: resident memory rarely
# shrinks (the allocator keeps what it freed), so after the peak every phase shows it, and a table of it would
# repeat one number.
SECTION = Section("memory", "memory", _section, tables=(
    Table("Resident memory per rank (sampled at phase ends)", (
        Column(RANK, "rank", TEXT, name=True), Column("peak_bytes", "peak MiB", MIB),
        Column("phase", "reached after", TEXT, name=True), Column(STEP, "step", TEXT, missing="none"),
        Column(MICROSTEP, "micro-batch", TEXT, missing="none"), Column("min_bytes", "lowest MiB", MIB)),
        rows="per_rank"),))
