"""Communication per group: the MPI calls of every communicator with one name (pp, dp, sp, embed, world) together.

A group name covers all the communicators that carry it (each pipeline has its own `pp`, each stage its own `dp`):
how many there are, the ranks in them, the calls, the bytes (summed over the calls: a message counts on its send
and on its receive), the seconds in those calls summed over ranks, the part spent waiting (Scalasca's wait states,
`analysis.waits`) and the group's share of all MPI time. The groups partition the calls, so their seconds add up to
the trace's MPI time. A trace that names no communicators ran everything on the world: one row.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.mpi import GROUP
from analysis.records import NS
from gpt2trace.format.schema import BYTES, COMMUNICATOR, END_NS, RANK, START_NS

COLUMNS = [GROUP, "communicators", "ranks", "calls", BYTES, "time_s", "wait_s", "share"]


def per_group(calls: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """One row per communicator name, by time in its calls (largest first)."""
    if calls.empty:
        return pd.DataFrame(columns=COLUMNS)
    wait = np.bincount(waits["row"].to_numpy(), weights=waits["wait_ns"].to_numpy(), minlength=len(calls))
    df = pd.DataFrame({GROUP: calls[GROUP].to_numpy(), COMMUNICATOR: calls[COMMUNICATOR].to_numpy(),
                       RANK: calls[RANK].to_numpy(), BYTES: np.maximum(calls[BYTES].to_numpy(), 0),
                       "dur": (calls[END_NS] - calls[START_NS]).to_numpy(), "wait": wait})
    agg = df.groupby(GROUP, as_index=False).agg(communicators=(COMMUNICATOR, "nunique"), ranks=(RANK, "nunique"),
                                                calls=("dur", "size"), nbytes=(BYTES, "sum"), dur=("dur", "sum"),
                                                wait=("wait", "sum"))
    total = agg["dur"].sum()
    out = pd.DataFrame({GROUP: agg[GROUP], "communicators": agg["communicators"].astype(int),
                        "ranks": agg["ranks"].astype(int), "calls": agg["calls"].astype(int),
                        BYTES: agg["nbytes"].astype(np.int64), "time_s": agg["dur"] / NS, "wait_s": agg["wait"] / NS,
                        "share": agg["dur"] / total if total > 0 else np.nan})
    return out[COLUMNS].sort_values("time_s", ascending=False, kind="stable").reset_index(drop=True)
