"""The run's parallel layout and its communication per group (communicator), in numbers and words.

`parallel` reads the layout from the run's metadata (data-parallel and sequence-parallel degrees, the sequence
split); `per_communicator` sums each communicator's MPI calls and waits; `cause` says in words why a kernel is
imbalanced when the layout explains it (a contiguous sequence split gives the last ranks the longest prefixes
to attend over).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.mpi import GROUP
from analysis.order import by_value
from analysis.records import NS
from gpt2trace.format import communicators, grid
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import COMMUNICATOR, END_NS, NAME, START_NS

SEQUENCE = "sp"          # the sequence group's communicator name (and the prefix of its tails)
CONTIGUOUS = "contiguous"
ATTENTION = "attention"  # kernels whose work per token grows with its position


def parallel(trace: Trace) -> dict | None:
    """{ranks, dp, tp, sp, sp_split, sp_reduce, dp_sync, pp, pp_schedule, recompute} from the run's metadata (dp and
    tp from its rank grid, gpt2trace/format/grid.py); None for a trace without it."""
    par = (trace.run or {}).get("parallel")
    if not isinstance(par, dict) or "ranks" not in par:
        return None
    ranks, sp, pp = int(par["ranks"]), int(par.get("sp", 1)), int(par.get("pp", 1))
    degrees = grid.from_run(trace.run, ranks)
    return {"ranks": ranks, "dp": degrees.degree(grid.DP), "tp": degrees.degree(grid.TP), "sp": sp,
            "sp_split": par.get("sp_split") if sp > 1 else None, "sp_reduce": par.get("sp_reduce") if sp > 1 else None,
            "dp_sync": par.get("dp_sync"), "pp": pp, "pp_schedule": par.get("pp_schedule") if pp > 1 else None,
            "recompute": par.get("recompute")}


def split_of(group: str | None, layout: dict | None) -> str | None:
    """The sequence split a group's waits happened under: the run's split for the sequence group (and its tails)."""
    if not group or not layout or not layout.get("sp_split"):
        return None
    return layout["sp_split"] if group.partition(communicators.TAIL)[0] == SEQUENCE else None


def per_communicator(calls: pd.DataFrame, waits: pd.DataFrame, trace: Trace, layout: dict | None) -> pd.DataFrame:
    """Per communicator (id): its group name, ranks, split, MPI calls, seconds in them and waiting (summed over its
    ranks), and the call that waits most there; sorted by seconds."""
    cols = [COMMUNICATOR, GROUP, "ranks", "split", "calls", "total_s", "wait_s", "top_wait_call"]
    if calls.empty:
        return pd.DataFrame(columns=cols)
    table = trace.communicators
    dur = (calls[END_NS] - calls[START_NS]).to_numpy()
    wait = np.bincount(waits["row"].to_numpy(), weights=waits["wait_ns"].to_numpy(), minlength=len(calls))
    df = pd.DataFrame({COMMUNICATOR: calls[COMMUNICATOR].to_numpy(), GROUP: calls[GROUP].to_numpy(),
                       NAME: calls[NAME].to_numpy(), "dur": dur, "wait": wait})
    agg = df.groupby([COMMUNICATOR, GROUP], as_index=False).agg(calls=("dur", "size"), total=("dur", "sum"),
                                                                 wait=("wait", "sum"))
    by_call = df.groupby([COMMUNICATOR, NAME], as_index=False)["wait"].sum()
    by_call = by_value(by_call[by_call["wait"] > 0], "wait", [COMMUNICATOR, NAME])
    top = by_call.drop_duplicates(COMMUNICATOR).set_index(COMMUNICATOR)[NAME]
    out = pd.DataFrame({
        COMMUNICATOR: agg[COMMUNICATOR].astype(int), GROUP: agg[GROUP],
        "ranks": [list(table[c].ranks) if c in table else None for c in agg[COMMUNICATOR]],
        "split": [split_of(g, layout) for g in agg[GROUP]],
        "calls": agg["calls"].astype(int), "total_s": agg["total"] / NS, "wait_s": agg["wait"] / NS,
        "top_wait_call": [top.get(c) for c in agg[COMMUNICATOR]]})
    return by_value(out[cols], "total_s", [GROUP, COMMUNICATOR])


def cause(kernel: str, layout: dict | None) -> str | None:
    """Why a kernel is imbalanced across ranks, when the parallel layout says so; else None."""
    if layout and layout.get("sp_split") == CONTIGUOUS and str(kernel).startswith(ATTENTION):
        return "contiguous sequence split: later positions attend to more tokens"
    return None
