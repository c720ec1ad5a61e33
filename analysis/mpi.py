"""MPI calls of a trace as one table: what each call is, which collective instance it joins, its matched partner.

Collective instances are matched across ranks by (communicator, collective, seq) (`seq` counts the collectives of
one communicator); without a seq by their order on each rank. A trace without the `communicator` column ran every
call on the world (id 0).
Point-to-point calls are matched by `gpt2trace.format.matching` (in order per pair of ranks; Sendrecv by round).
`peer` is the partner of a point-to-point call and the root of a rooted collective (rank 0 when null).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import Records, decode, records
from analysis.window import Window
from gpt2trace.format import communicators
from gpt2trace.format.matching import match_messages
from gpt2trace.format.mpi_calls import (
    ALL_TO_ONE,
    COLL,
    COLL_POST,
    IRECV,
    NXN,
    ONE_TO_ALL,
    SYNCHRONIZING,
    WAIT,
    classify,
)
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import BYTES, COMMUNICATOR, END_NS, NAME, PEER, RANK, SEQ, START_NS, STEP, THREAD, Kind

GROUP = "group"     # the communicator's name (world, sp, dp, ...), from the trace's communicator table

# The Scalasca wait state each collective class can show.
WAIT_STATE = {NXN: "Wait at NxN", ONE_TO_ALL: "Late Broadcast", ALL_TO_ONE: "Early Reduce"}


def calls(trace: Trace, window: Window | None = None) -> pd.DataFrame:
    """The comm records starting in the window, sorted by rank and start, with their type and matches.

    Columns: the record's rank, thread, start_ns, end_ns, name, bytes, peer, seq, step, communicator (id), group
    (its name), and
    prev_end (end of the rank's earlier calls, -1 for its first),
    sync_end (end of the rank's earlier synchronizing calls, those that can wait for another rank: blocking
    collectives and point-to-point calls and waits; -1 if none),
    op, cls, base (see `classify`), inst (collective instance id, -1 for others), is_root, parts (ranks in the
    instance), send_of (row of the send a receive is matched with, -1), recv_of (the reverse),
    wait_inst (the instance a wait names through its seq; -1 = every outstanding request).
    """
    rec: Records = records(trace, Kind.COMM, (RANK, THREAD, NAME, BYTES, PEER, SEQ, STEP, COMMUNICATOR), None)
    if window is not None:
        keep = (rec[START_NS] >= window.t0_ns) & (rec[START_NS] < window.t1_ns)
        rec = rec.take(keep)
    df = pd.DataFrame({c: rec[c] for c in (RANK, THREAD, START_NS, END_NS, BYTES, PEER, SEQ, STEP)})
    df[COMMUNICATOR] = communicators.ids(rec[COMMUNICATOR])
    table = trace.communicators
    df[GROUP] = df[COMMUNICATOR].map(lambda c: table[c].name if c in table else f"comm{c}")
    df[NAME] = decode(rec[NAME], rec.names)
    # calls of one rank at the same time on several threads: by thread (a thread's own keep their order)
    df = df.sort_values([RANK, START_NS, END_NS, THREAD], kind="stable").reset_index(drop=True)
    kinds = {n: classify(str(n)) for n in df[NAME].unique()}
    df["op"] = df[NAME].map(lambda n: kinds[n][0]).astype(np.int64)
    df["cls"] = df[NAME].map(lambda n: kinds[n][1]).astype(np.int64)
    df["base"] = df[NAME].map(lambda n: kinds[n][2])
    # The end of the rank's earlier calls (-1 for its first): the compute burst before a call starts there.
    reach = df.groupby(RANK)[END_NS].cummax()
    df["prev_end"] = reach.groupby(df[RANK]).shift(1).fillna(-1).astype(np.int64)
    # A posting or a local call does not synchronize ranks, so it does not end the interval that root causes
    # compare: only calls that can wait for another rank do.
    sync = pd.Series(np.where(df["op"].isin(SYNCHRONIZING), df[END_NS], -1), index=df.index)
    reach = sync.groupby(df[RANK]).cummax()
    df["sync_end"] = reach.groupby(df[RANK]).shift(1).fillna(-1).astype(np.int64)
    _instances(df)
    _match_p2p(df)
    _wait_targets(df)
    return df


def _instances(df: pd.DataFrame) -> None:
    coll = df["op"].isin((COLL, COLL_POST)).to_numpy()
    df["inst"], df["is_root"], df["parts"] = -1, False, 0
    if not coll.any():
        return
    sub = df.loc[coll, [RANK, SEQ, "base", PEER, COMMUNICATOR]].copy()
    order = sub.groupby([RANK, COMMUNICATOR, "base"]).cumcount()
    sub["key"] = np.where(sub[SEQ] >= 0, sub[SEQ], -1 - order)   # no seq: the k-th call of that collective
    inst = sub.groupby([COMMUNICATOR, "base", "key"], sort=False).ngroup().to_numpy()
    df.loc[coll, "inst"] = inst
    df.loc[coll, "is_root"] = (sub[RANK] == np.where(sub[PEER] >= 0, sub[PEER], 0)).to_numpy()
    df.loc[coll, "parts"] = np.bincount(inst)[inst]


def _match_p2p(df: pd.DataFrame) -> None:
    df["send_of"], df["recv_of"] = -1, -1
    s, r = match_messages(df[RANK].to_numpy(), df[PEER].to_numpy(), df["op"].to_numpy(), df[START_NS].to_numpy(),
                          df[END_NS].to_numpy())
    df.loc[r, "send_of"] = s
    df.loc[s, "recv_of"] = r


def _wait_targets(df: pd.DataFrame) -> None:
    df["wait_inst"] = -1
    waits = df[(df["op"] == WAIT) & (df[SEQ] >= 0)]
    posts = df[df["op"] == COLL_POST]
    if waits.empty or posts.empty:
        return
    m = waits[[RANK, SEQ, COMMUNICATOR]].reset_index().merge(posts[[RANK, SEQ, COMMUNICATOR, "inst"]],
                                                             on=[RANK, SEQ, COMMUNICATOR], how="inner")
    df.loc[m["index"].to_numpy(), "wait_inst"] = m["inst"].to_numpy()


def post_waits(df: pd.DataFrame) -> np.ndarray:
    """For each row, the row of the wait that completes it if it is a nonblocking post (else -1).

    A post is completed by the first wait on its rank after it that names its instance (seq) or names none.
    """
    out = np.full(len(df), -1, dtype=np.int64)
    posts = np.flatnonzero(df["op"].isin((COLL_POST, IRECV)).to_numpy())
    waits = np.flatnonzero((df["op"] == WAIT).to_numpy())
    if not len(posts) or not len(waits):
        return out
    rank = df[RANK].to_numpy()
    inst, wait_inst = df["inst"].to_numpy(), df["wait_inst"].to_numpy()
    anyw = waits[wait_inst[waits] < 0]
    # rows are sorted by rank then start: the next generic wait is the next row index in `anyw` on the same rank
    nxt = np.searchsorted(anyw, posts, side="right")
    ok = nxt < len(anyw)
    cand = np.where(ok, anyw[np.minimum(nxt, len(anyw) - 1)], -1) if len(anyw) else np.full(len(posts), -1)
    cand = np.where((cand >= 0) & (rank[np.maximum(cand, 0)] == rank[posts]), cand, -1)
    named = waits[wait_inst[waits] >= 0]
    if len(named):
        width = int(inst.max()) + 2                                   # (rank, instance) as one key
        first_named = pd.Series(named).groupby(rank[named] * width + wait_inst[named]).first()
        hit = pd.Series(rank[posts] * width + inst[posts]).map(first_named).fillna(-1).to_numpy().astype(np.int64)
        use = (hit > posts) & ((cand < 0) | (hit < cand))
        cand = np.where(use, hit, cand)
    out[posts] = cand
    return out
