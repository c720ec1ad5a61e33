"""Communication per group and per parallel dimension.

`per_group`: the MPI calls of every communicator with one name (pp, dp, sp, embed, world) together. A group name
covers all the communicators that carry it (each pipeline has its own `pp`, each stage its own `dp`): how many
there are, the ranks in them, the calls, the bytes (summed over the calls: a message counts on its send and on its
receive), the seconds in those calls summed over ranks, the part spent waiting (Scalasca's wait states,
`analysis.waits`) and the group's share of all MPI time. The groups partition the calls, so their seconds add up to
the trace's MPI time. A trace that names no communicators ran everything on the world: one row.

`per_dimension`: the same calls by the parallel dimensions each communicator spans, read from the rank grid
(gpt2trace/format/grid.py): a communicator belongs to the dimensions along which its ranks' coordinates differ,
whatever its name. A tp group is `tp`; the embedding group (a pipeline's first and last stage) is `pp`; the world
of a pure data-parallel run is `dp`, and of a pure sequence-parallel run `sp` (its gradient sync is what sequence
parallelism costs there); a communicator over several dimensions is a row of its own named after them, such as
the gradient group over sequence x data-parallel ranks, `dp x sp` (Megatron's data-parallel group with context
parallel), or the world of a multi-dimensional run. So the rows still partition the calls, and nothing is counted
in two dimensions. A one-rank communicator spans no dimension: its row is its name.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.mpi import GROUP
from analysis.order import by_value
from analysis.plain import rows
from analysis.records import NS
from analysis.sections import COUNT, MS, NUMBER, REPORT, SHARE, TERMINAL, TEXT, Column, Inputs, Section, Table, text
from analysis.window import Window
from gpt2trace.format.communicators import Communicator
from gpt2trace.format.grid import Grid
from gpt2trace.format.schema import BYTES, COMMUNICATOR, END_NS, NAME, RANK, START_NS

COLUMNS = [GROUP, "communicators", "ranks", "calls", BYTES, "time_s", "wait_s", "share"]
DIMENSION = "dimension"
DIM_COLUMNS = [DIMENSION, "dims", "degree", "communicators", "ranks", "calls", "calls_per_step", "bytes_per_call",
               "time_s", "wait_s", "time_s_per_step", "wait_s_per_step", "share", "wait_share", "top_call",
               "top_group", "top_calls_per_step", "top_bytes_per_call", "top_share"]


def per_group(calls: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """One row per communicator name, by time in its calls (largest first)."""
    if calls.empty:
        return pd.DataFrame(columns=COLUMNS)
    df = _call_table(calls, waits)
    agg = df.groupby(GROUP, as_index=False).agg(communicators=(COMMUNICATOR, "nunique"), ranks=(RANK, "nunique"),
                                                calls=("dur", "size"), nbytes=(BYTES, "sum"), dur=("dur", "sum"),
                                                wait=("wait", "sum"))
    total = agg["dur"].sum()
    out = pd.DataFrame({GROUP: agg[GROUP], "communicators": agg["communicators"].astype(int),
                        "ranks": agg["ranks"].astype(int), "calls": agg["calls"].astype(int),
                        BYTES: agg["nbytes"].astype(np.int64), "time_s": agg["dur"] / NS, "wait_s": agg["wait"] / NS,
                        "share": agg["dur"] / total if total > 0 else np.nan})
    return by_value(out[COLUMNS], "time_s", [GROUP])


def per_dimension(calls: pd.DataFrame, waits: pd.DataFrame, grid: Grid, table: dict[int, Communicator],
                  ranks: int, window: Window) -> pd.DataFrame:
    """One row per parallel dimension (or set of them) that communicators span, by time (largest first).

    `ranks` is the trace's number of ranks. Per step (None without whole steps in the window): calls per step per
    rank that makes them, seconds in MPI and waiting per step as the mean over all `ranks` (so the rows add up to
    the MPI time of a mean rank), `share` = that time over the window's length (the share of the mean step;
    the rows' shares add up to MPI's share of rank time) and `wait_share` its waiting part. `bytes_per_call` is
    the median over the calls that move data (bytes > 0; None for a dimension of barriers and waits). `top_call`:
    the call (with its communicator name, `top_group`) that takes the most time in the dimension, its calls per
    step per rank that makes it, median bytes and share of the step.
    """
    if calls.empty:
        return pd.DataFrame(columns=DIM_COLUMNS)
    df = _call_table(calls, waits)
    df[NAME] = calls[NAME].to_numpy()
    spans = {c: _span(grid, table, c, df) for c in df[COMMUNICATOR].unique()}
    labels = {c: " x ".join(dims) if dims else str(df.loc[df[COMMUNICATOR] == c, GROUP].iloc[0])
              for c, dims in spans.items()}
    df[DIMENSION] = df[COMMUNICATOR].map(labels)
    steps = len(window.steps)
    rank_s = ranks * window.seconds * NS                        # rank-ns in the window

    def per_step(value: float) -> float | None:
        return value / steps if steps else None

    rows = []
    for label, sub in df.groupby(DIMENSION, sort=False):
        dims = spans[sub[COMMUNICATOR].iloc[0]]
        dur, wait = float(sub["dur"].sum()), float(sub["wait"].sum())
        by_call = sub.groupby([GROUP, NAME])["dur"].sum().sort_values(ascending=False, kind="stable")  # ties: by name
        top_group, top_name = by_call.index[0]
        top = sub[(sub[GROUP] == top_group) & (sub[NAME] == top_name)]
        rows.append({
            DIMENSION: label, "dims": list(dims), "degree": int(np.prod([grid.degree(d) for d in dims])),
            "communicators": sorted(sub[GROUP].unique()), "ranks": int(sub[RANK].nunique()), "calls": len(sub),
            "calls_per_step": per_step(len(sub) / sub[RANK].nunique()), "bytes_per_call": _median_bytes(sub),
            "time_s": dur / NS, "wait_s": wait / NS,
            "time_s_per_step": per_step(dur / NS / ranks), "wait_s_per_step": per_step(wait / NS / ranks),
            "share": dur / rank_s if rank_s > 0 else None, "wait_share": wait / rank_s if rank_s > 0 else None,
            "top_call": top_name, "top_group": top_group,
            "top_calls_per_step": per_step(len(top) / top[RANK].nunique()), "top_bytes_per_call": _median_bytes(top),
            "top_share": float(by_call.iloc[0]) / rank_s if rank_s > 0 else None})
    out = pd.DataFrame(rows, columns=DIM_COLUMNS)
    return by_value(out, "time_s", [DIMENSION])


def _call_table(calls: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """Each call's group, communicator, rank, bytes (null: 0), duration and wait (ns)."""
    wait = np.bincount(waits["row"].to_numpy(), weights=waits["wait_ns"].to_numpy(), minlength=len(calls))
    return pd.DataFrame({GROUP: calls[GROUP].to_numpy(), COMMUNICATOR: calls[COMMUNICATOR].to_numpy(),
                         RANK: calls[RANK].to_numpy(), BYTES: np.maximum(calls[BYTES].to_numpy(), 0),
                         "dur": (calls[END_NS] - calls[START_NS]).to_numpy(), "wait": wait})


def _span(grid: Grid, table: dict[int, Communicator], comm: int, df: pd.DataFrame) -> tuple[str, ...]:
    """The dimensions a communicator spans: from its ranks in the trace's table, else the ranks that called on it."""
    members = table[comm].ranks if comm in table else df.loc[df[COMMUNICATOR] == comm, RANK].unique()
    try:
        return grid.spanned(members)
    except ValueError:            # a table naming ranks the trace does not hold: what the calls show
        return grid.spanned(df.loc[df[COMMUNICATOR] == comm, RANK].unique())


def _median_bytes(sub: pd.DataFrame) -> float | None:
    moved = sub[BYTES].to_numpy()
    moved = moved[moved > 0]
    return float(np.median(moved)) if len(moved) else None


def _section(inputs: Inputs, parts: list) -> list[dict]:
    return rows(per_dimension(inputs.calls, inputs.wait_rows, inputs.grid, inputs.trace.communicators,
                              len(inputs.ranks), inputs.window))


def _costliest(row: dict) -> str:
    """The dimension's costliest call in a sentence: where, how often, how large, its share of the step."""
    size = f" of {text(row['top_bytes_per_call'], COUNT)} bytes" if row["top_bytes_per_call"] else ""
    return (f"{row['top_call']} on {row['top_group']}: {text(row['top_calls_per_step'], NUMBER)} per step{size}, "
            f"{text(row['top_share'], SHARE)} of the step")


# Per step, unlike the waits: a trace without steps (an Extrae import) has the same waits, not these. Per step,
# the calls of a rank that makes them, the milliseconds in MPI and waiting of a mean rank, and their share of it.
SECTION = Section("comm_dimensions", "communication per dimension", _section, tables=(
    Table("Communication per parallel dimension (per step; ms: mean over all ranks)", (
        Column("dimension", "dimension", TEXT, name=True), Column("communicators", "communicators", TEXT, name=True),
        Column("calls_per_step", "calls/step", NUMBER), Column("bytes_per_call", "bytes/call (median)", COUNT),
        Column("time_s_per_step", "MPI ms/step", MS), Column("wait_s_per_step", "wait ms/step", MS),
        Column("share", "share of step", SHARE),
        Column("top_call", "top call", TEXT, name=True, value=lambda r: f"{r['top_call']} ({r['top_group']})",
               only=TERMINAL),
        Column("top_call", "costliest call", TEXT, name=True, value=_costliest, only=REPORT)),
        top=False, empty="no MPI calls in the analyzed window"),))

