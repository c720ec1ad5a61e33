"""Communication waits with Scalasca's definitions, per-call statistics and the overlap of nonblocking collectives.

Wait states (each clipped to the waiting call's duration):
  Wait at NxN     all-to-all collectives: latest enter of the instance - own enter (blocking), or for a nonblocking
                  one, latest posting of the instance - enter of the wait that completes it;
  Late Broadcast  one-to-all: root's enter - own enter, on non-roots;
  Early Reduce    all-to-one: first non-root enter - root's enter, on the root;
  Late Sender     a receive (or sendrecv) that entered before its matched send: matched send's enter - own enter;
                  for an Irecv, seen in the wait that completes it (see below): send's enter - the wait's enter;
  Late Receiver   a blocking send that entered before its matched receive (only synchronous sends show it).
The culprit is the rank that arrived last (for Early Reduce: the first sender). Transfer time is the call's time
minus its wait; bandwidth is bytes over transfer time. Instances are per communicator (`analysis.mpi`), and every
wait and per-call row names its communicator (`group`: world, sp, dp, ...), so the same call on two groups (the
sequence group's MPI_Allreduce and the gradient sync's) is reported apart.

Which wait completes an Irecv. Our traces keep no request ids, so requests are paired with completions by time on
the rank: an Irecv is completed by the first completion call (MPI_Wait, Waitall, Waitany, Waitsome naming no
collective) after it on its rank that ends after its matched send entered, since no receive completes before its
message is sent. `Irecv; Wait` pairs the two; in `Irecv; Isend; Wait(send); Wait(recv)` with a late sender the
first Wait ends before the send and the Irecv goes to the second one (with a punctual sender the first Wait may
take it, but then there is no wait to find); a Waitall completing several Irecvs waits for the latest of their
senders, and is one wait, as is a completion that also finishes a nonblocking collective (the longer wait counts).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import mpi
from analysis.mpi import GROUP
from analysis.order import by_value
from analysis.records import NS
from gpt2trace.format import mpi_calls as C
from gpt2trace.format.lanes import time_key
from gpt2trace.format.schema import BYTES, COMMUNICATOR, END_NS, NAME, RANK, START_NS

LATE_SENDER, LATE_RECEIVER = "Late Sender", "Late Receiver"


def wait_states(calls: pd.DataFrame) -> pd.DataFrame:
    """One row per call that waited: row (where the time was lost), sync_row (where the waiter arrived: its own
    call of the operation, or for a nonblocking collective or an Irecv the wait that completes it; root causes
    compare what led up to it with what led up to the culprit_row), culprit_row, culprit rank, wait_ns, state,
    and the communicator (id) and group (name) of the call that waited."""
    start, end = calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
    dur = end - start
    op, cls, inst, root = (calls[c].to_numpy() for c in ("op", "cls", "inst", "is_root"))
    parts: list[tuple] = []

    def add(rows, sync_rows, culprit_rows, wait, state):
        keep = wait > 0
        parts.append((rows[keep], sync_rows[keep], culprit_rows[keep], wait[keep], state))

    blocking = np.flatnonzero(op == C.COLL)
    if len(blocking):
        g = pd.DataFrame({"row": blocking, "inst": inst[blocking], "cls": cls[blocking], "root": root[blocking],
                          "s": start[blocking]})
        last = g.loc[g.groupby("inst")["s"].idxmax()].set_index("inst")["row"]
        nxn = g[g["cls"] == C.NXN]
        c = last.reindex(nxn["inst"]).to_numpy()
        add(nxn["row"].to_numpy(), nxn["row"].to_numpy(), c, np.minimum(start[c] - nxn["s"].to_numpy(),
                                                                        dur[nxn["row"].to_numpy()]),
            mpi.WAIT_STATE[C.NXN])
        bc = g[g["cls"] == C.ONE_TO_ALL]
        roots = bc[bc["root"]].drop_duplicates("inst").set_index("inst")["row"]
        nonroot = bc[~bc["root"] & bc["inst"].isin(roots.index)]
        c = roots.reindex(nonroot["inst"]).to_numpy()
        r = nonroot["row"].to_numpy()
        add(r, r, c, np.minimum(start[c] - start[r], dur[r]), mpi.WAIT_STATE[C.ONE_TO_ALL])
        red = g[g["cls"] == C.ALL_TO_ONE]
        senders = red[~red["root"]]
        if len(senders):
            first = senders.loc[senders.groupby("inst")["s"].idxmin()].set_index("inst")["row"]
            rootrows = red[red["root"] & red["inst"].isin(first.index)]
            c = first.reindex(rootrows["inst"]).to_numpy()
            r = rootrows["row"].to_numpy()
            add(r, r, c, np.minimum(start[c] - start[r], dur[r]), mpi.WAIT_STATE[C.ALL_TO_ONE])
    _nonblocking(calls, start, dur, add)
    _irecv_waits(calls, start, end, dur, add)
    recv_of, send_of = calls["recv_of"].to_numpy(), calls["send_of"].to_numpy()
    r = np.flatnonzero(np.isin(op, (C.RECV, C.SENDRECV)) & (send_of >= 0))
    add(r, r, send_of[r], np.minimum(start[send_of[r]] - start[r], dur[r]), LATE_SENDER)
    s = np.flatnonzero((op == C.SEND) & (recv_of >= 0))
    add(s, s, recv_of[s], np.minimum(start[recv_of[s]] - start[s], dur[s]), LATE_RECEIVER)
    rank = calls[RANK].to_numpy()
    out = pd.DataFrame({
        "row": np.concatenate([p[0] for p in parts]).astype(np.int64),
        "sync_row": np.concatenate([p[1] for p in parts]).astype(np.int64),
        "culprit_row": np.concatenate([p[2] for p in parts]).astype(np.int64),
        "wait_ns": np.concatenate([p[3] for p in parts]).astype(np.int64),
        "wait_state": np.concatenate([np.full(len(p[0]), p[4], dtype=object) for p in parts])})
    out[RANK] = rank[out["row"].to_numpy()]
    out["culprit"] = rank[out["culprit_row"].to_numpy()]
    out[COMMUNICATOR] = calls[COMMUNICATOR].to_numpy()[out["row"].to_numpy()]
    out[GROUP] = calls[GROUP].to_numpy()[out["row"].to_numpy()]
    # A completion call waits once, however many of its requests came late (a Waitall finishing an Irecv and a
    # nonblocking collective): its longest wait is the one.
    is_wait = op[out["row"].to_numpy()] == C.WAIT
    longest = out[is_wait].sort_values("wait_ns", ascending=False, kind="stable").drop_duplicates("row")
    return pd.concat([out[~is_wait], longest]).sort_index().reset_index(drop=True)


def _nonblocking(calls, start, dur, add) -> None:
    """Wait at NxN of nonblocking collectives, seen in the wait that completes the posting."""
    op, inst = calls["op"].to_numpy(), calls["inst"].to_numpy()
    posts = np.flatnonzero(op == C.COLL_POST)
    if not len(posts):
        return
    completer = mpi.post_waits(calls)[posts]
    g = pd.DataFrame({"row": posts, "inst": inst[posts], "s": start[posts], "wait": completer})
    last = g.loc[g.groupby("inst")["s"].idxmax()].set_index("inst")["row"]
    g["culprit"] = last.reindex(g["inst"]).to_numpy()
    g["late"] = start[g["culprit"].to_numpy()]
    g = g[g["wait"] >= 0]
    if g.empty:
        return
    worst = g.loc[g.groupby("wait")["late"].idxmax()]                 # the latest instance a wait covers
    w = worst["wait"].to_numpy()
    # The waiter arrives at its wait, not at its posting: what it computed between the two is time it did not
    # lose, so its side of the comparison runs up to the wait.
    add(w, w, worst["culprit"].to_numpy(), np.minimum(worst["late"].to_numpy() - start[w], dur[w]),
        mpi.WAIT_STATE[C.NXN])


def _irecv_waits(calls, start, end, dur, add) -> None:
    """Late Sender of Irecvs, seen in the completion call that completes each (see the module's docstring)."""
    op, send_of = calls["op"].to_numpy(), calls["send_of"].to_numpy()
    recvs = np.flatnonzero((op == C.IRECV) & (send_of >= 0))
    waits = np.flatnonzero((op == C.WAIT) & (calls["wait_inst"].to_numpy() < 0))
    if not len(recvs) or not len(waits):
        return
    rank = calls[RANK].to_numpy()
    sent = start[send_of[recvs]]
    lo = int(min(start.min(), sent.min()))
    span = int(max(end.max(), sent.max())) - lo + 1
    # Rows are in (rank, start) order; the ends a rank's completions reach grow with them, so (rank, reach) is a
    # sorted key, and the first completion reaching the send is one search away.
    reach = pd.Series(end[waits]).groupby(rank[waits]).cummax().to_numpy()
    key = time_key(rank[waits], reach, lo, span)
    at = np.maximum(np.searchsorted(key, time_key(rank[recvs], sent, lo, span), side="left"),
                    np.searchsorted(waits, recvs, side="right"))          # and after the Irecv
    ok = at < len(waits)
    at = np.minimum(at, len(waits) - 1)
    ok &= rank[waits[at]] == rank[recvs]
    if not ok.any():
        return
    g = pd.DataFrame({"wait": waits[at[ok]], "send": send_of[recvs[ok]], "sent": sent[ok]})
    worst = g.loc[g.groupby("wait")["sent"].idxmax()]                # a Waitall waits for its latest sender
    w = worst["wait"].to_numpy()
    add(w, w, worst["send"].to_numpy(), np.minimum(worst["sent"].to_numpy() - start[w], dur[w]), LATE_SENDER)


def per_call(calls: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """Per MPI call name and group: count, bytes, total/wait/transfer seconds, bandwidth (GB/s), the wait state it
    shows, and for nonblocking postings the in-flight, hidden seconds and the hidden fraction."""
    cols = [NAME, GROUP, "wait_state", "count", BYTES, "total_s", "wait_s", "transfer_s", "bandwidth_gb_s",
            "inflight_s", "hidden_s", "hidden_fraction"]
    if calls.empty:
        return pd.DataFrame(columns=cols)
    dur = (calls[END_NS] - calls[START_NS]).to_numpy()
    wait = np.bincount(waits["row"].to_numpy(), weights=waits["wait_ns"].to_numpy(), minlength=len(calls))
    state = pd.Series(waits["wait_state"].to_numpy(), index=waits["row"].to_numpy())
    df = pd.DataFrame({NAME: calls[NAME].to_numpy(), GROUP: calls[GROUP].to_numpy(),
                       BYTES: np.maximum(calls[BYTES].to_numpy(), 0),
                       "dur": dur, "wait": wait, "wait_state": state[~state.index.duplicated()].reindex(
                           np.arange(len(calls))).to_numpy()})
    agg = df.groupby([NAME, GROUP]).agg(
        count=("dur", "size"), nbytes=(BYTES, "sum"), total=("dur", "sum"), wait=("wait", "sum"),
        wait_state=("wait_state", lambda s: s.dropna().iloc[0] if s.notna().any() else None))
    out = pd.DataFrame({NAME: agg.index.get_level_values(0), GROUP: agg.index.get_level_values(1),
                        "wait_state": agg["wait_state"].to_numpy(),
                        "count": agg["count"].to_numpy(), BYTES: agg["nbytes"].to_numpy(),
                        "total_s": agg["total"].to_numpy() / NS, "wait_s": agg["wait"].to_numpy() / NS})
    out["transfer_s"] = (out["total_s"] - out["wait_s"]).clip(lower=0)
    bw = out[BYTES] / out["transfer_s"].where(out["transfer_s"] > 0) / 1e9
    # a posting's time is its enqueue, not the transfer (an NCCL collective's CPU side is one): no rate from it
    posting = out[NAME].map(lambda n: C.operation(str(n)) in (C.COLL_POST, C.ISEND, C.IRECV)).astype(bool)
    out["bandwidth_gb_s"] = bw.where((out[BYTES] > 0) & ~posting)
    ov = overlap(calls)
    out = out.merge(ov, on=[NAME, GROUP], how="left")
    return by_value(out[cols], "total_s", [NAME, GROUP])


def overlap(calls: pd.DataFrame) -> pd.DataFrame:
    """Per nonblocking posting name and group: time in flight (union over a rank of posting -> completing wait), the
    exposed part (the postings and their completing waits), hidden = in flight - exposed, and hidden / in flight."""
    cols = [NAME, GROUP, "inflight_s", "hidden_s", "hidden_fraction"]
    completer = mpi.post_waits(calls)
    posts = np.flatnonzero(completer >= 0)
    if not len(posts):
        return pd.DataFrame(columns=cols)
    start, end = calls[START_NS].to_numpy(), calls[END_NS].to_numpy()
    g = pd.DataFrame({NAME: calls[NAME].to_numpy()[posts], GROUP: calls[GROUP].to_numpy()[posts],
                      RANK: calls[RANK].to_numpy()[posts],
                      "s": start[posts], "e": end[completer[posts]], "post": end[posts] - start[posts],
                      "wait": completer[posts]})
    rows = []
    for (name, group), sub in g.groupby([NAME, GROUP], sort=False):    # one iteration per call name and group
        sub = sub.sort_values([RANK, "s"], kind="stable")
        s, e, rk = sub["s"].to_numpy(), sub["e"].to_numpy(), sub[RANK].to_numpy()
        new = np.ones(len(sub), dtype=bool)
        reach = pd.Series(e).groupby(rk).cummax().to_numpy()
        new[1:] = (rk[1:] != rk[:-1]) | (s[1:] > reach[:-1])
        inflight = (np.maximum.reduceat(e, np.flatnonzero(new)) - s[new]).sum()
        waits = np.unique(sub["wait"].to_numpy())
        exposed = sub["post"].sum() + (end[waits] - start[waits]).sum()
        hidden = max(inflight - exposed, 0)
        rows.append((name, group, inflight / NS, hidden / NS, hidden / inflight if inflight > 0 else None))
    return pd.DataFrame(rows, columns=cols)
