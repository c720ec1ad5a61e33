"""Pipeline parallelism: per step and stage, the share of the pipeline's window a stage does not compute (the
bubble) against the ideal (P-1)/(M+P-1), and the Late Sender waits between neighbouring stages with their cause.

Layout (`layout`): each communicator named `pp` is one pipeline, its world ranks in stage order; a rank's stage is
its index there. M, the micro-batches, is the most forward phases a rank has in one step (else the run's
grad_accum). A trace without a `pp` communicator of two or more ranks has no pipeline, and no pipeline analysis.

Per step s, pipeline d and stage k (rank r), in nanoseconds of that step:
  window     from the first stage's first forward start to the last backward end on any stage of d (the later
             stages open each forward with a receive, which they may post before the pipeline starts)
  busy       r's forward and backward phases less its MPI time inside them: computing (kernels and the Python
             between them)
  neighbour  r's point-to-point MPI time in the window (receives, sends, waits on them, any call on a pp
             communicator): waiting for a neighbour, or moving data to it
  other_mpi  r's other MPI time in the window (a sequence group's collectives, the gradient sync of a stage that
             finished its backwards early)
  idle       the rest of the window (data loading, Python between micro-batches)
  bubble     1 - busy / window; of_step: (window - busy) / the step's time
The ideal bubble (P-1)/(M+P-1) holds for GPipe and 1F1B alike when every stage takes the same time and messages
are free. The stage imbalance, max/mean of the stages' busy time, says how far the stages are from equal: the
others wait for the slowest, and their bubble grows beyond the ideal.

Late Sender waits (`analysis.waits`): a receive on stage k that entered before its matched send from stage k-1 (an
activation: forward) or k+1 (a gradient: backward), with the micro-batch whose message came late (the receiving
phase's), charged to what the sender did (`analysis.rootcause`, directly: not on through the sender's own waits)
from the receiver's previous message, sent or received, to the late send: its kernels and their layers (in 1F1B,
the backward of one micro-batch can delay the forward activation of another). Messages bound these intervals
rather than every synchronizing call, because the receiver's wait on an earlier send request just before the late
receive would leave the interval empty and hide the kernels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.mpi import post_waits
from analysis.order import by_value
from analysis.records import NS, decode, records
from analysis.rootcause import OUTSIDE, UNATTRIBUTED, root_causes
from analysis.segments import Segments
from analysis.steps import steps_table
from analysis.waits import LATE_SENDER
from analysis.window import Window
from gpt2trace.format import mpi_calls as C
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import COMMUNICATOR, END_NS, LAYER, MICROSTEP, NAME, RANK, START_NS, STEP, Kind, Phase

PIPELINE = "pp"                       # the communicator name of one pipeline (the trainer's rank grid)
FORWARD, BACKWARD = "forward", "backward"   # the direction of a message: activations down, gradients up
MESSAGES = (C.SEND, C.ISEND, C.RECV, C.IRECV, C.SENDRECV)
STEP_COLUMNS = [STEP, "pipeline", "stage", RANK, "window_s", "busy_s", "neighbour_s", "other_mpi_s", "idle_s",
                "bubble", "of_step"]
STAGE_COLUMNS = ["stage", "ranks", "window_s", "busy_s", "neighbour_s", "other_mpi_s", "idle_s", "bubble", "ideal",
                 "of_step", "busy_ratio"]
LATE_COLUMNS = ["stage", "direction", "sender_stage", "waits", "wait_s", "per_step_s", "worst_microbatch",
                "worst_microbatch_s"]
CAUSE_COLUMNS = ["stage", "direction", "sender_stage", "ranks", "kernel", LAYER, "microbatches", "wait_s", "waits",
                 "share", "text"]


@dataclass(frozen=True)
class Layout:
    pipelines: tuple[tuple[int, ...], ...]     # world ranks of each pipeline, in stage order
    comm_ids: frozenset[int]                   # the pipelines' communicators
    micro_batches: int
    schedule: str | None                       # from the run metadata: gpipe, 1f1b
    recompute: bool | None

    @property
    def stages(self) -> int:
        return len(self.pipelines[0])

    @property
    def ideal_bubble(self) -> float:
        return (self.stages - 1) / (self.micro_batches + self.stages - 1)

    def stage_of(self) -> dict[int, int]:
        return {r: k for ranks in self.pipelines for k, r in enumerate(ranks)}

    def pipeline_of(self) -> dict[int, int]:
        return {r: d for d, ranks in enumerate(self.pipelines) for r in ranks}

    def stage_ranks(self, stage: int) -> list[int]:
        return [ranks[stage] for ranks in self.pipelines]


def layout(trace: Trace) -> Layout | None:
    """The pipelines of a trace, or None when it has none (or they differ in length, which no schedule makes)."""
    pipes = sorted((c for c in trace.communicators.values() if c.name == PIPELINE and len(c.ranks) > 1),
                   key=lambda c: c.ranks[0])
    if not pipes or len({len(c.ranks) for c in pipes}) > 1:
        return None
    run = trace.run or {}
    par, train = run.get("parallel") or {}, run.get("train") or {}
    micro = _most_forwards(trace) or int(train.get("grad_accum") or 0)
    if micro < 1:
        return None
    recompute = par.get("recompute")
    return Layout(tuple(c.ranks for c in pipes), frozenset(c.id for c in pipes), micro, par.get("pp_schedule"),
                  bool(recompute) if recompute is not None else None)


def _most_forwards(trace: Trace) -> int:
    ph = records(trace, Kind.PHASE, (RANK, NAME, STEP))
    if not len(ph) or Phase.FORWARD not in ph.names:
        return 0
    sel = (ph[NAME] == ph.names.index(Phase.FORWARD)) & (ph[STEP] >= 0)
    if not sel.any():
        return 0
    key = ph[RANK][sel].astype(np.int64) * (int(ph[STEP][sel].max()) + 1) + ph[STEP][sel]
    return int(np.unique(key, return_counts=True)[1].max())


def pipeline(trace: Trace, window: Window, calls: pd.DataFrame, waits: pd.DataFrame, segs: Segments,
             steps: pd.DataFrame | None = None) -> dict | None:
    """The pipeline analysis of the window (None without a pipeline): the layout, the ideal bubble, the measured
    bubble (mean over stages), its share of the step, the stage imbalance, and the tables `per_step`, `per_stage`,
    `late_senders` and `causes` (the late senders' root causes). `steps`: `steps_table(trace)` when the caller has
    it."""
    lay = layout(trace)
    if lay is None:
        return None
    phases = _compute_phases(trace, lay, window)
    call_phase = _phase_of_calls(calls, phases)
    per_step = _per_step(steps_table(trace) if steps is None else steps, lay, phases, calls, call_phase)
    per_stage = _per_stage(per_step, lay)
    late, causes = _late_senders(lay, calls, waits, segs, window, call_phase, len(window.steps))
    busy = per_stage["busy_s"].to_numpy()
    return {
        "stages": lay.stages, "pipelines": len(lay.pipelines), "micro_batches": lay.micro_batches,
        "schedule": lay.schedule, "recompute": lay.recompute,
        "ranks": [list(p) for p in lay.pipelines], "ideal_bubble": lay.ideal_bubble,
        "bubble": float(per_stage["bubble"].mean()) if len(per_stage) else None,
        "of_step": float(per_stage["of_step"].mean()) if len(per_stage) else None,
        "stage_imbalance": float(busy.max() / busy.mean()) if len(busy) and busy.mean() > 0 else None,
        "late_sender_s": float(late["wait_s"].sum()) if len(late) else 0.0,
        "per_stage": per_stage, "per_step": per_step, "late_senders": late, "causes": causes,
    }


def _compute_phases(trace: Trace, lay: Layout, window: Window) -> pd.DataFrame:
    """Forward and backward phases of the window's steps on the pipelines' ranks, sorted by start."""
    ph = records(trace, Kind.PHASE, (RANK, NAME, STEP, MICROSTEP))
    names = decode(ph[NAME], ph.names)
    df = pd.DataFrame({RANK: ph[RANK], "phase": names, STEP: ph[STEP], MICROSTEP: ph[MICROSTEP],
                       START_NS: ph[START_NS], END_NS: ph[END_NS]})
    stage, pipe = lay.stage_of(), lay.pipeline_of()
    df = df[df["phase"].isin((Phase.FORWARD, Phase.BACKWARD)) & df[STEP].isin(window.steps)
            & df[RANK].isin(stage)].copy()
    df["stage"] = df[RANK].map(stage)
    df["pipeline"] = df[RANK].map(pipe)
    return df.sort_values([START_NS, RANK, END_NS], kind="stable").reset_index(drop=True)


def _phase_of_calls(calls: pd.DataFrame, phases: pd.DataFrame) -> pd.DataFrame:
    """For each call (by row): the step and micro-batch of the compute phase holding its start (-1: none), and its
    time inside that phase."""
    out = pd.DataFrame({STEP: -1, MICROSTEP: -1, "inside_ns": 0}, index=calls.index)
    if calls.empty or phases.empty:
        return out
    left = pd.DataFrame({"row": calls.index, RANK: calls[RANK].to_numpy().astype(np.int64),
                         START_NS: calls[START_NS].to_numpy().astype(np.int64),
                         "call_end": calls[END_NS].to_numpy()}).sort_values(START_NS, kind="stable")
    right = phases[[RANK, START_NS, END_NS, STEP, MICROSTEP]].rename(columns={END_NS: "phase_end"}).astype(
        {RANK: np.int64, START_NS: np.int64})
    m = pd.merge_asof(left, right, on=START_NS, by=RANK, direction="backward")
    inside = m["phase_end"].notna() & (m[START_NS] < m["phase_end"].fillna(0))
    m = m[inside]
    out.loc[m["row"], STEP] = m[STEP].to_numpy().astype(np.int64)
    out.loc[m["row"], MICROSTEP] = m[MICROSTEP].to_numpy().astype(np.int64)
    out.loc[m["row"], "inside_ns"] = (np.minimum(m["call_end"], m["phase_end"]) - m[START_NS]).to_numpy()
    return out


def _is_neighbour(calls: pd.DataFrame, lay: Layout) -> np.ndarray:
    """Point-to-point calls, waits that complete no collective, and any call on a pipeline's communicator."""
    op = calls["op"].to_numpy()
    completer = post_waits(calls)
    completes_collective = np.zeros(len(calls), dtype=bool)
    posts = np.flatnonzero(op == C.COLL_POST)
    completes_collective[completer[posts][completer[posts] >= 0]] = True
    return (np.isin(op, MESSAGES) | ((op == C.WAIT) & ~completes_collective)
            | calls[COMMUNICATOR].isin(lay.comm_ids).to_numpy())


def _per_step(steps: pd.DataFrame, lay: Layout, phases: pd.DataFrame, calls: pd.DataFrame,
              call_phase: pd.DataFrame) -> pd.DataFrame:
    if phases.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    first = phases[(phases["stage"] == 0) & (phases["phase"] == Phase.FORWARD)].groupby([STEP, "pipeline"])[
        START_NS].min()
    last = phases[phases["phase"] == Phase.BACKWARD].groupby([STEP, "pipeline"])[END_NS].max()
    win = pd.DataFrame({"w0": first, "w1": last}).dropna().astype(np.int64)
    win = win[win["w1"] > win["w0"]].reset_index()
    if win.empty:                                   # no step in which the pipeline both started and finished
        return pd.DataFrame(columns=STEP_COLUMNS)
    rows = pd.DataFrame([(s, d, k, r) for s, d in zip(win[STEP], win["pipeline"])
                         for k, r in enumerate(lay.pipelines[d])], columns=[STEP, "pipeline", "stage", RANK])
    rows = rows.merge(win, on=[STEP, "pipeline"])
    in_phases = phases.assign(ns=phases[END_NS] - phases[START_NS]).groupby([STEP, RANK])["ns"].sum()
    mpi_inside = call_phase[call_phase[STEP] >= 0].assign(**{RANK: calls[RANK]}).groupby([STEP, RANK])[
        "inside_ns"].sum()
    key = pd.MultiIndex.from_frame(rows[[STEP, RANK]])
    busy = in_phases.reindex(key, fill_value=0).to_numpy() - mpi_inside.reindex(key, fill_value=0).to_numpy()
    neighbour, other = _mpi_in_windows(rows, calls, _is_neighbour(calls, lay))
    window_ns = (rows["w1"] - rows["w0"]).to_numpy()
    step_s = steps.set_index(STEP)["seconds"].reindex(rows[STEP]).to_numpy()
    out = rows[[STEP, "pipeline", "stage", RANK]].copy()
    out["window_s"] = window_ns / NS
    out["busy_s"] = busy / NS
    out["neighbour_s"], out["other_mpi_s"] = neighbour / NS, other / NS
    out["idle_s"] = np.maximum(window_ns - busy - neighbour - other, 0) / NS
    out["bubble"] = 1 - busy / window_ns
    out["of_step"] = (window_ns - busy) / NS / step_s
    return out[STEP_COLUMNS].sort_values([STEP, "pipeline", "stage", RANK], kind="stable").reset_index(drop=True)


def _mpi_in_windows(rows: pd.DataFrame, calls: pd.DataFrame, neighbour: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per row (a rank in one step's window), its neighbour and other MPI time inside the window."""
    out_n, out_o = np.zeros(len(rows)), np.zeros(len(rows))
    if calls.empty:
        return out_n, out_o
    rank, start, end = calls[RANK].to_numpy(), calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
    for r, idx in rows.groupby(RANK).indices.items():        # one iteration per rank
        mine = rank == r
        s, e, nb = start[mine], end[mine], neighbour[mine]
        w0, w1 = rows["w0"].to_numpy()[idx], rows["w1"].to_numpy()[idx]
        order = np.argsort(w0)
        w0, w1, idx = w0[order], w1[order], idx[order]
        # the windows of one rank never overlap: a call overlaps the one starting before it or the next one
        for shift in (0, 1):
            at = np.searchsorted(w0, s, side="right") - 1 + shift
            ok = (at >= 0) & (at < len(w0))
            at = np.clip(at, 0, len(w0) - 1)
            ns = np.where(ok, np.clip(np.minimum(e, w1[at]) - np.maximum(s, w0[at]), 0, None), 0)
            np.add.at(out_n, idx[at], np.where(nb, ns, 0))
            np.add.at(out_o, idx[at], np.where(nb, 0, ns))
    return out_n, out_o


def _per_stage(per_step: pd.DataFrame, lay: Layout) -> pd.DataFrame:
    if per_step.empty:
        return pd.DataFrame(columns=STAGE_COLUMNS)
    means = per_step.groupby("stage")[["window_s", "busy_s", "neighbour_s", "other_mpi_s", "idle_s", "bubble",
                                       "of_step"]].mean().reset_index()
    means["ranks"] = [lay.stage_ranks(int(k)) for k in means["stage"]]
    means["ideal"] = lay.ideal_bubble
    mean_busy = means["busy_s"].mean()
    means["busy_ratio"] = means["busy_s"] / mean_busy if mean_busy > 0 else np.nan
    return means[STAGE_COLUMNS]


def _late_senders(lay: Layout, calls: pd.DataFrame, waits: pd.DataFrame, segs: Segments, window: Window,
                  call_phase: pd.DataFrame, steps: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    stage, pipe = lay.stage_of(), lay.pipeline_of()
    w = waits[waits["wait_state"] == LATE_SENDER]
    w = w[w[RANK].isin(stage) & w["culprit"].isin(stage)]
    w = w[(w[RANK].map(pipe) == w["culprit"].map(pipe))
          & ((w[RANK].map(stage) - w["culprit"].map(stage)).abs() == 1)].copy()
    if w.empty:
        return pd.DataFrame(columns=LATE_COLUMNS), pd.DataFrame(columns=CAUSE_COLUMNS)
    w["stage"] = w[RANK].map(stage)
    w["sender_stage"] = w["culprit"].map(stage)
    w["direction"] = np.where(w["sender_stage"] < w["stage"], FORWARD, BACKWARD)
    w["microbatch"] = call_phase[MICROSTEP].to_numpy()[w["row"].to_numpy()]
    g = w.groupby(["stage", "direction", "sender_stage"])
    late = g.agg(waits=("wait_ns", "size"), wait_ns=("wait_ns", "sum")).reset_index()
    per_micro = w.groupby(["stage", "direction", "microbatch"])["wait_ns"].sum().reset_index()
    worst = per_micro.loc[per_micro.groupby(["stage", "direction"])["wait_ns"].idxmax()]
    late = late.merge(worst.rename(columns={"wait_ns": "worst_ns", "microbatch": "worst_microbatch"}),
                      on=["stage", "direction"])
    late["wait_s"] = late["wait_ns"] / NS
    late["per_step_s"] = late["wait_s"] / max(steps * len(lay.pipelines), 1)
    late["worst_microbatch_s"] = late["worst_ns"] / NS
    late["worst_microbatch"] = late["worst_microbatch"].astype("Int64").where(late["worst_microbatch"] >= 0)
    late = by_value(late[LATE_COLUMNS], "wait_s", ["stage", "direction", "sender_stage"])
    return late, _causes(calls, w, segs, window, stage)


def _causes(calls: pd.DataFrame, w: pd.DataFrame, segs: Segments, window: Window,
            stage: dict[int, int]) -> pd.DataFrame:
    """The late senders' root causes: what each sender computed between its previous message and the late one."""
    msg = calls.copy()
    is_msg = np.isin(msg["op"].to_numpy(), MESSAGES)
    reach = pd.Series(np.where(is_msg, msg[END_NS].to_numpy(), -1), index=msg.index).groupby(msg[RANK]).cummax()
    msg["sync_end"] = reach.groupby(msg[RANK]).shift(1).fillna(-1).astype(np.int64)
    keys = ("stage", "direction", "microbatch")
    rc = root_causes(msg, w, segs, window, keys=keys, propagate=False)
    rc = rc.assign(layer_key=rc[LAYER].fillna(-1), sender_stage=rc[RANK].map(stage))
    agg = rc.groupby(["stage", "direction", "sender_stage", "kernel", "layer_key"], sort=False).agg(
        wait_s=("wait_s", "sum"), waits=("waits", "sum"), ranks=(RANK, lambda r: sorted(int(x) for x in set(r))),
        microbatches=("microbatch", lambda m: sorted(int(x) for x in set(m) if x >= 0))).reset_index()
    total = w["wait_ns"].sum() / NS
    out = pd.DataFrame({"stage": agg["stage"].astype(int), "direction": agg["direction"],
                        "sender_stage": agg["sender_stage"].astype(int), "ranks": agg["ranks"],
                        "kernel": agg["kernel"], LAYER: agg["layer_key"].where(agg["layer_key"] >= 0).astype("Int64"),
                        "microbatches": agg["microbatches"], "wait_s": agg["wait_s"],
                        "waits": agg["waits"].astype(int)})
    out["share"] = out["wait_s"] / total if total > 0 else np.nan
    out["text"] = [sentence(r) for r in out.to_dict("records")]
    return by_value(out[CAUSE_COLUMNS], "wait_s", ["stage", "direction", "sender_stage", "kernel", LAYER])


_DOING = {OUTSIDE: "was outside kernels (MPI, Python, data loading)",
          UNATTRIBUTED: "computed no more than the waiting stage"}


def sentence(row: dict) -> str:
    """'stage 2 waited 0.012 s for the activations of micro-batches 0-3, 6 from stage 1 (rank 1), which computed
    matmul_forward (layer 3) before sending them' (the sender stage's ranks: one per pipeline)."""
    what = "activations" if row["direction"] == FORWARD else "gradients"
    layer = row.get(LAYER)
    doing = _DOING.get(row["kernel"]) or (f"computed {row['kernel']}"
                                          + (f" (layer {layer})" if layer is not None and not pd.isna(layer) else ""))
    micro = row.get("microbatches") or []
    of = f" of micro-batch{'es' if len(micro) > 1 else ''} {ranges(micro)}" if micro else ""
    ranks = list(row.get("ranks") or [])
    who = f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if ranks else ""
    return (f"stage {row['stage']} waited {row['wait_s']:.3g} s for the {what}{of} from stage "
            f"{row['sender_stage']}{who}, which {doing} before sending them")


def ranges(values: list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8'."""
    out, run = [], []
    for v in sorted(values):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [v]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)
