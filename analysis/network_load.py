"""The load on an emulated cluster's links (`gpt2trace run --emulate-network`): which node's link carries the most.

For a trace whose run metadata describes an emulated network (`network`: nodes, link bytes/s, `node_of_rank`), each
collective instance and each point-to-point message in the window is charged to the node links it crosses, as
the emulation priced it (gpt2trace.format.network.link_bytes: rooted collectives flat through the root node's link,
ring collectives through every node's; a message between two nodes through both links). Per node: its ranks, bytes
per step through its link, the seconds that takes at the link's bandwidth, the share of the median step, and the
MPI call that loads it most. The busiest link is where an update phase congests, as in the porting study (9 ranks
on 5 nodes reducing onto one node behind a 10 Gb/s link).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.order import by_value
from analysis.plain import rows
from analysis.sections import Inputs, Section
from gpt2trace.format.mpi_calls import COLL, RECV, SENDRECV
from gpt2trace.format.network import link_bytes
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import BYTES, NAME, PEER, RANK

COLUMNS = ["node", "ranks", "bytes_per_step", "link_s_per_step", "share_of_step", "top_call"]


def network_of(trace: Trace) -> dict | None:
    net = (trace.run or {}).get("network") if isinstance(trace.run, dict) else None
    if not isinstance(net, dict) or not net.get("node_of_rank") or not net.get("link_bytes_per_s"):
        return None
    return net


def link_load(trace: Trace, calls: pd.DataFrame, steps: int, step_s: float | None) -> pd.DataFrame | None:
    """Per node of the emulated network, busiest first; None when the trace ran on no emulated network."""
    net = network_of(trace)
    if net is None:
        return None
    node_of = [int(n) for n in net["node_of_rank"]]
    bw = float(net["link_bytes_per_s"])
    rooted = net.get("rooted", "flat")
    per_node: dict[int, float] = {}
    per_call: dict[tuple[int, str], float] = {}

    def charge(loads: dict[int, float], name: str) -> None:
        for node, b in loads.items():
            per_node[node] = per_node.get(node, 0.0) + b
            per_call[(node, name)] = per_call.get((node, name), 0.0) + b

    coll = calls[(calls["op"] == COLL) & (calls["inst"] >= 0)]
    for _, inst in coll.groupby("inst"):
        members = [node_of[int(r)] for r in inst[RANK] if int(r) < len(node_of)]
        roots = inst.loc[inst["is_root"], RANK]
        root_node = node_of[int(roots.iloc[0])] if len(roots) else None
        nbytes = float(np.nan_to_num(inst[BYTES].to_numpy(dtype=float)).max()) if len(inst) else 0.0
        charge(link_bytes(str(inst["base"].iloc[0]), nbytes, members, root_node, rooted), str(inst[NAME].iloc[0]))
    recv = calls[calls["op"].isin((RECV, SENDRECV)) & calls[PEER].notna()]
    for me, peer, nbytes, name in zip(recv[RANK], recv[PEER], recv[BYTES], recv[NAME]):
        a, b = node_of[int(me)], node_of[int(peer)]
        if a != b and nbytes == nbytes:
            charge({a: float(nbytes), b: float(nbytes)}, str(name))
    rows = []
    for node in sorted(set(node_of)):
        b = per_node.get(node, 0.0) / max(steps, 1)
        mine = {n: v for (nd, n), v in per_call.items() if nd == node}
        rows.append({"node": node, "ranks": [r for r, n in enumerate(node_of) if n == node], "bytes_per_step": b,
                     "link_s_per_step": b / bw, "share_of_step": (b / bw) / step_s if step_s else None,
                     "top_call": min(mine, key=lambda n: (-mine[n], n)) if mine else None})
    out = pd.DataFrame(rows, columns=COLUMNS)
    return by_value(out, "bytes_per_step", ["node"])


def _section(inputs: Inputs, parts: list) -> list[dict] | None:
    links = link_load(inputs.trace, inputs.calls, len(inputs.window.steps), (inputs.summary or {}).get("step_s_median"))
    return rows(links) if links is not None else None


# The links of the emulated cluster (None on one node); JSON only (the findings name the busiest).
SECTION = Section("network_links", "network links", _section)
