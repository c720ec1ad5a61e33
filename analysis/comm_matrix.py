"""The communication matrix: bytes, messages and seconds per (source, destination) rank pair and per communicator.

Point-to-point: each matched message (`gpt2trace.format.matching`, through `analysis.mpi.calls`) is one message
of the send's bytes from the sender to its receiver.

Collectives are attributed by what they mean, not by how an MPI library runs them (a ring allreduce and a tree
allreduce move different bytes between different pairs; the data dependency between ranks is the same): one
collective instance gives one logical message to each (source, destination) pair of its members whose result
depends on the source's data, with the bytes of the source's contribution, from the bytes the calls record
(docs/trace-format.md), as each call's record says they hold (`mpi_calls.MPICall.holds`):
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
from gpt2trace.format.lanes import distinct_index
from gpt2trace.format.mpi_calls import ALL_TO_ONE, COLL, ONE_TO_ALL, Bytes, collective
from gpt2trace.format.schema import BYTES, COMMUNICATOR, END_NS, PEER, RANK, START_NS

SRC, DST = "src", "dst"
COLUMNS = [GROUP, COMMUNICATOR, SRC, DST, BYTES, "messages", "time_s"]
PAIR_COLUMNS = [SRC, DST, BYTES, "messages", "time_s", "p2p_bytes", "collective_bytes"]


def comm_matrix(calls: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """{"communicators": one row per (communicator, source, destination) (COLUMNS), "pairs": the same summed over
    communicators (PAIR_COLUMNS)}, both by bytes, largest first. `calls` is `analysis.mpi.calls`."""
    # the communicators' names as codes that sort like them: a million pairs are grouped by integers, not text
    names, code = np.unique(calls[GROUP].to_numpy(dtype=object), return_inverse=True)
    parts = [_p2p(calls, code), _collectives(calls, code)]
    df = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(len(p) for p in parts) else None
    if df is None:
        return {"communicators": pd.DataFrame(columns=COLUMNS), "pairs": pd.DataFrame(columns=PAIR_COLUMNS)}
    by_comm = (df.groupby([_CODE, COMMUNICATOR, SRC, DST], as_index=False)
               .agg(bytes=(BYTES, "sum"), messages=("messages", "sum"), time_ns=("time_ns", "sum")))
    by_comm[GROUP] = names[by_comm[_CODE].to_numpy()]
    by_comm["time_s"] = by_comm.pop("time_ns") / NS
    df["p2p_bytes"] = np.where(df["p2p"], df[BYTES], 0)
    df["collective_bytes"] = np.where(df["p2p"], 0, df[BYTES])
    pairs = (df.groupby([SRC, DST], as_index=False)
             .agg(bytes=(BYTES, "sum"), messages=("messages", "sum"), time_ns=("time_ns", "sum"),
                  p2p_bytes=("p2p_bytes", "sum"), collective_bytes=("collective_bytes", "sum")))
    pairs["time_s"] = pairs.pop("time_ns") / NS
    return {"communicators": _sorted(by_comm[COLUMNS]), "pairs": _sorted(pairs[PAIR_COLUMNS])}


_CODE = "group_code"


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    for c in (BYTES, "messages"):
        df[c] = df[c].astype(np.int64)
    return df.sort_values([BYTES, "time_s", SRC, DST], ascending=[False, False, True, True],
                          kind="stable").reset_index(drop=True)


def _p2p(calls: pd.DataFrame, code: np.ndarray) -> pd.DataFrame:
    """One row per matched message; each call's time shared among its roles (a Sendrecv sends and receives)."""
    send = np.flatnonzero(calls["recv_of"].to_numpy() >= 0)
    if not len(send):
        return pd.DataFrame()
    recv = calls["recv_of"].to_numpy()[send]
    dur = (calls[END_NS] - calls[START_NS]).to_numpy().astype(np.float64)
    roles = (calls["recv_of"].to_numpy() >= 0).astype(int) + (calls["send_of"].to_numpy() >= 0)
    share = dur / np.maximum(roles, 1)
    rank = calls[RANK].to_numpy()
    return pd.DataFrame({_CODE: code[send], COMMUNICATOR: calls[COMMUNICATOR].to_numpy()[send],
                         SRC: rank[send], DST: rank[recv], BYTES: np.maximum(calls[BYTES].to_numpy()[send], 0),
                         "messages": 1, "time_ns": share[send] + share[recv], "p2p": True})


def _collectives(calls: pd.DataFrame, code: np.ndarray) -> pd.DataFrame:
    """One row per (instance, source, destination) that the collective's definition connects (module docstring),
    in the order of the source's call, then the destination's."""
    sel = np.flatnonzero((calls["op"].to_numpy() == COLL) & (calls["inst"].to_numpy() >= 0))
    if not len(sel):
        return pd.DataFrame()
    inst, rank = calls["inst"].to_numpy()[sel], calls[RANK].to_numpy()[sel]
    nbytes = np.maximum(calls[BYTES].to_numpy()[sel], 0).astype(np.float64)
    dur = (calls[END_NS] - calls[START_NS]).to_numpy()[sel].astype(np.float64)
    cls, peer = calls["cls"].to_numpy()[sel], calls[PEER].to_numpy()[sel]
    root = np.where(peer >= 0, peer, 0)
    base = calls["base"].to_numpy(dtype=object)[sel]
    # every call with every call of its instance (itself too), the calls of an instance in row order
    size = np.bincount(inst)
    width = int(rank.max()) + 1                                        # (instance, rank) as one key
    members = np.bincount(distinct_index(inst * width + rank)[0] // width, minlength=len(size))[inst]
    by_inst = np.argsort(inst, kind="stable")
    first = np.r_[0, np.cumsum(size)[:-1]]
    n = size[inst]
    a = np.repeat(np.arange(len(sel)), n)
    b = by_inst[first[inst[a]] + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)]
    src, dst = rank[a], rank[b]
    keep = (src != dst) & np.where(cls[a] == ONE_TO_ALL, src == root[a], np.where(cls[a] == ALL_TO_ONE,
                                                                                  dst == root[a], True))
    # what each call's bytes hold (its record; a collective without one is an error, mpi_calls.UnknownCall)
    holds = {b: collective(str(b)).holds for b in set(base.tolist())}
    ordered, from_dst, per_member = (np.isin(base, [b for b, h in holds.items() if h is which])
                                     for which in (Bytes.PREFIX, Bytes.RECEIVED, Bytes.PER_MEMBER))
    keep &= ~ordered[a] | (src < dst)
    a, b, src, dst = a[keep], b[keep], src[keep], dst[keep]
    moved = np.where(from_dst[a], nbytes[b], nbytes[a])
    moved = np.where(per_member[a], moved / members[a], moved)
    # each call's time shared among the pairs its rank is an end of in this instance
    at = distinct_index(np.concatenate([inst[a] * width + src, inst[a] * width + dst]))[1]
    ends = np.bincount(at)[at]
    time_ns = dur[a] / ends[:len(a)] + dur[b] / ends[len(a):]
    return pd.DataFrame({_CODE: code[sel][a], COMMUNICATOR: calls[COMMUNICATOR].to_numpy()[sel][a], SRC: src,
                         DST: dst, BYTES: np.rint(moved).astype(np.int64), "messages": 1, "time_ns": time_ns,
                         "p2p": False})
