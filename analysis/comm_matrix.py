"""The communication matrix: bytes, messages and seconds per (source, destination) rank pair and per communicator.

Point-to-point: each matched message (`gpt2trace.format.matching`, through `analysis.mpi.calls`) is one message
of the send's bytes from the sender to its receiver.

Collectives are attributed by what they mean, not by how an MPI library runs them (a ring allreduce and a tree
allreduce move different bytes between different pairs; the data dependency between ranks is the same): one
collective instance gives one logical message to each (source, destination) pair of its members whose result
depends on the source's data, with the bytes of the source's contribution, from the bytes the calls record
(docs/trace-format.md):
- allreduce, scan (source below destination only, in world rank order), exscan, barrier (0 bytes): the source's
  whole buffer to every other member;
- allgather(v), alltoall(v/w), reduce_scatter(_block): the source's record / members (its piece for each
  destination: allgather records the gathered buffer, reduce_scatter and alltoall the whole send buffer);
- bcast: the root's buffer to every other member; scatter(v): each member's received piece, from the root;
- reduce, gather(v): each member's buffer to the root.

Seconds: each call's duration is shared evenly among the pairs the calling rank is an end of in that call (a send
or receive: its one pair; a Sendrecv: its send and receive halves; an allreduce of p ranks: the 2(p-1) pairs its
rank is in), so the seconds of the matrix add up to the time in the calls that carry data. A wait completing a
nonblocking call names no peer and is left out, as are a nonblocking collective's posting (its data moves in the
wait) and local calls.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.mpi import GROUP
from analysis.records import NS
from gpt2trace.format.mpi_calls import ALL_TO_ONE, COLL, ONE_TO_ALL
from gpt2trace.format.schema import BYTES, COMMUNICATOR, END_NS, PEER, RANK, START_NS

SRC, DST = "src", "dst"
COLUMNS = [GROUP, COMMUNICATOR, SRC, DST, BYTES, "messages", "time_s"]
PAIR_COLUMNS = [SRC, DST, BYTES, "messages", "time_s", "p2p_bytes", "collective_bytes"]

# Collectives whose record holds every member's pieces: a pair gets the record / members.
PER_MEMBER = frozenset(("MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall", "MPI_Alltoallv", "MPI_Alltoallw",
                        "MPI_Reduce_scatter", "MPI_Reduce_scatter_block"))
# Rooted collectives whose destination's record is what it got from the root.
FROM_DESTINATION = frozenset(("MPI_Scatter", "MPI_Scatterv"))
ORDERED = frozenset(("MPI_Scan", "MPI_Exscan"))          # rank i's data reaches only the ranks after it


def comm_matrix(calls: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{"communicators": one row per (communicator, source, destination) (COLUMNS), "pairs": the same summed over
    communicators (PAIR_COLUMNS)}, both by bytes, largest first. `calls` is `analysis.mpi.calls`."""
    parts = [_p2p(calls), _collectives(calls)]
    df = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    if df is None:
        return {"communicators": pd.DataFrame(columns=COLUMNS), "pairs": pd.DataFrame(columns=PAIR_COLUMNS)}
    by_comm = (df.groupby([GROUP, COMMUNICATOR, SRC, DST], as_index=False)
               .agg(bytes=(BYTES, "sum"), messages=("messages", "sum"), time_ns=("time_ns", "sum")))
    by_comm["time_s"] = by_comm.pop("time_ns") / NS
    df["p2p_bytes"] = np.where(df["p2p"], df[BYTES], 0)
    df["collective_bytes"] = np.where(df["p2p"], 0, df[BYTES])
    pairs = (df.groupby([SRC, DST], as_index=False)
             .agg(bytes=(BYTES, "sum"), messages=("messages", "sum"), time_ns=("time_ns", "sum"),
                  p2p_bytes=("p2p_bytes", "sum"), collective_bytes=("collective_bytes", "sum")))
    pairs["time_s"] = pairs.pop("time_ns") / NS
    return {"communicators": _sorted(by_comm[COLUMNS]), "pairs": _sorted(pairs[PAIR_COLUMNS])}


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    for c in (BYTES, "messages"):
        df[c] = df[c].astype(np.int64)
    return df.sort_values([BYTES, "time_s", SRC, DST], ascending=[False, False, True, True],
                          kind="stable").reset_index(drop=True)


def _p2p(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per matched message; each call's time shared among its roles (a Sendrecv sends and receives)."""
    send = np.flatnonzero(calls["recv_of"].to_numpy() >= 0)
    if not len(send):
        return pd.DataFrame()
    recv = calls["recv_of"].to_numpy()[send]
    dur = (calls[END_NS] - calls[START_NS]).to_numpy().astype(np.float64)
    roles = (calls["recv_of"].to_numpy() >= 0).astype(int) + (calls["send_of"].to_numpy() >= 0)
    share = dur / np.maximum(roles, 1)
    rank = calls[RANK].to_numpy()
    return pd.DataFrame({GROUP: calls[GROUP].to_numpy()[send], COMMUNICATOR: calls[COMMUNICATOR].to_numpy()[send],
                         SRC: rank[send], DST: rank[recv], BYTES: np.maximum(calls[BYTES].to_numpy()[send], 0),
                         "messages": 1, "time_ns": share[send] + share[recv], "p2p": True})


def _collectives(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per (instance, source, destination) that the collective's definition connects (module docstring)."""
    coll = calls[(calls["op"] == COLL) & (calls["inst"] >= 0)]
    if coll.empty:
        return pd.DataFrame()
    m = pd.DataFrame({"inst": coll["inst"].to_numpy(), RANK: coll[RANK].to_numpy(),
                      BYTES: np.maximum(coll[BYTES].to_numpy(), 0).astype(np.float64),
                      "dur": (coll[END_NS] - coll[START_NS]).to_numpy().astype(np.float64),
                      "base": coll["base"].to_numpy(), "cls": coll["cls"].to_numpy(),
                      "root": np.where(coll[PEER].to_numpy() >= 0, coll[PEER].to_numpy(), 0),
                      GROUP: coll[GROUP].to_numpy(), COMMUNICATOR: coll[COMMUNICATOR].to_numpy()})
    members = m.groupby("inst")[RANK].transform("nunique").to_numpy()
    m["members"] = members
    p = m.merge(m[["inst", RANK, BYTES, "dur"]], on="inst", suffixes=("_s", "_d"))
    p = p[p[f"{RANK}_s"] != p[f"{RANK}_d"]]
    src, dst = p[f"{RANK}_s"].to_numpy(), p[f"{RANK}_d"].to_numpy()
    cls, base, root = p["cls"].to_numpy(), p["base"].to_numpy(), p["root"].to_numpy()
    keep = np.where(cls == ONE_TO_ALL, src == root, np.where(cls == ALL_TO_ONE, dst == root, True))
    keep &= ~np.isin(base, list(ORDERED)) | (src < dst)
    p = p[keep]
    base = p["base"].to_numpy()
    nbytes = np.where(np.isin(base, list(FROM_DESTINATION)), p[f"{BYTES}_d"], p[f"{BYTES}_s"])
    nbytes = np.where(np.isin(base, list(PER_MEMBER)), nbytes / p["members"].to_numpy(), nbytes)
    # each call's time shared among the pairs its rank is an end of in this instance
    s, d = p[f"{RANK}_s"].to_numpy(), p[f"{RANK}_d"].to_numpy()
    key_s, key_d = p["inst"].to_numpy() * (1 << 32) + s, p["inst"].to_numpy() * (1 << 32) + d
    ends = pd.Series(np.concatenate([key_s, key_d])).value_counts()
    time_ns = (p["dur_s"].to_numpy() / ends.reindex(key_s).to_numpy()
               + p["dur_d"].to_numpy() / ends.reindex(key_d).to_numpy())
    return pd.DataFrame({GROUP: p[GROUP].to_numpy(), COMMUNICATOR: p[COMMUNICATOR].to_numpy(), SRC: s, DST: d,
                         BYTES: np.rint(nbytes).astype(np.int64), "messages": 1, "time_ns": time_ns, "p2p": False})
