"""Root causes of communication waits: which kernel on which rank made the others wait, directly or through a
chain of waits, per communicator (`group`): the delay costs of `analysis.delay` (Scalasca's), as a table of
causes and a sentence for each.

A wait's cost goes to the rank it waited for, to the kernels (name, layer) and the time outside kernels in which
that rank spent longer than the waiter since the waiter last synchronized; what that rank spent waiting itself is
passed on to whoever delayed it (long-term costs). "(unattributed)": a wait whose delayer did no more than the
waiter. Costs keep the communicator of the wait they come from: a sequence group's waits and the gradient sync's
have different causes.
"""
from __future__ import annotations

import pandas as pd

from analysis.delay import OUTSIDE, UNATTRIBUTED, DelayCosts, delay_costs
from analysis.mpi import GROUP
from analysis.segments import Segments
from analysis.window import Window
from gpt2trace.format import communicators
from gpt2trace.format.schema import LAYER, RANK

__all__ = ["OUTSIDE", "UNATTRIBUTED", "root_causes", "table", "sentence"]


def root_causes(calls: pd.DataFrame, waits: pd.DataFrame, segs: Segments, window: Window,
                keys: tuple[str, ...] = (), propagate: bool = True) -> pd.DataFrame:
    """Waits charged to (group, culprit rank, kernel, layer): wait_s (short + long-term cost), short_s, long_s,
    waits (the wait states that charge it directly), share of all wait time; sorted. `keys` are more columns of
    `waits` to keep the charges apart by (and to return), such as the pipeline stage that waited;
    `propagate=False` charges each wait to its direct delayer only (`analysis.delay`)."""
    return table(delay_costs(calls, waits, segs, window, (GROUP, *keys), propagate), keys)


def table(costs: DelayCosts, keys: tuple[str, ...] = ()) -> pd.DataFrame:
    """The causes of `delay_costs` computed with keys (group, *keys), in root_causes' columns."""
    c = costs.causes
    return pd.DataFrame({GROUP: c[GROUP], **{k: c[k] for k in keys}, RANK: c[RANK], "kernel": c["kernel"],
                         LAYER: c[LAYER], "wait_s": c["cost_s"], "short_s": c["short_s"], "long_s": c["long_s"],
                         "waits": c["waits"], "share": c["share"]})


def sentence(row: dict) -> str:
    """'X s of waits caused by kernel K (layer L) on rank r', in which group unless it is the world, and how much
    of it through other waits."""
    layer = f" (layer {row[LAYER]})" if row.get(LAYER) is not None else ""
    what = f"kernel {row['kernel']}" if not str(row["kernel"]).startswith("(") else row["kernel"]
    group = row.get(GROUP)
    where = f" in {communicators.describe(group)}" if group and group != communicators.WORLD_NAME else ""
    long_s = row.get("long_s") or 0.0
    chain = (f", {row['wait_s'] - long_s:.3g} s directly and {long_s:.3g} s through other waits"
             if long_s > 0 else "")
    return f"{row['wait_s']:.3g} s of waits{where} caused by {what}{layer} on rank {row[RANK]}{chain}"
