"""Which send each point-to-point receive gets, from the MPI call records alone (a trace keeps no message ids).

Calls are taken in order on each rank (by start, then end, then as given). The k-th send from rank a to rank b
(`peer` b) pairs with the k-th receive on b from a (`peer` a), whatever the tags: MPI's non-overtaking rule
between one pair of ranks, for traces that do not record tags. A nonblocking Isend/Irecv is matched like its
blocking twin; its wait names no peer and is not a message.

A Sendrecv has two partners but the trace keeps one `peer`: its destination (Extrae's send record, which the
Paraver import reads first), or its source when it sends to no one. Its receive half is matched by the exchange's
round: the j-th Sendrecv of rank s whose peer is d is received by the j-th Sendrecv of rank d (rings, shifts, halo
and pairwise exchanges all call Sendrecv in the same rounds on every rank). When two such calls target one
receive, the one that does not name the receiver back is its source: a mutual pair that is not the only candidate
is the receiver's own destination, seen from a boundary rank that only receives. A Sendrecv whose send half no
Sendrecv received is then matched as a plain send.
"""
from __future__ import annotations

import numpy as np

from gpt2trace.format.lanes import ordinal
from gpt2trace.format.mpi_calls import IRECV, RECV, SENDING, SENDRECV

_NONE = np.zeros(0, dtype=np.int64)


def match_messages(rank: np.ndarray, peer: np.ndarray, op: np.ndarray, start_ns: np.ndarray,
                   end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(send rows, receive rows) of the matched messages, ordered by send row.

    One row per MPI call: its rank, peer (-1: none), operation type (`mpi_calls.classify`), start and end.
    """
    rank, peer, op = (np.asarray(a, dtype=np.int64) for a in (rank, peer, op))
    order = np.lexsort((end_ns, start_ns, rank))                       # stable: rows as given at equal keys
    rank, peer, op = rank[order], peer[order], op[order]
    ring_s, ring_r = _sendrecv_rounds(rank, peer, op)
    sending = np.isin(op, SENDING) & (peer >= 0)
    sending[ring_s] = False
    sends = np.flatnonzero(sending)
    recvs = np.flatnonzero(np.isin(op, (RECV, IRECV)) & (peer >= 0))
    s, r = _in_order(rank, peer, sends, recvs)
    s, r = np.concatenate([ring_s, s]), np.concatenate([ring_r, r])
    by_send = np.argsort(order[s], kind="stable")
    return order[s][by_send], order[r][by_send]


def _in_order(rank: np.ndarray, peer: np.ndarray, sends: np.ndarray, recvs: np.ndarray):
    """The k-th send of each (source, destination) with the k-th receive of it (rows in rank/time order)."""
    if not len(sends) or not len(recvs):
        return _NONE, _NONE
    width = int(max(rank.max(), peer.max())) + 1
    s_pair = rank[sends] * width + peer[sends]
    r_pair = peer[recvs] * width + rank[recvs]
    s_k, r_k = ordinal(s_pair), ordinal(r_pair)
    big = int(max(s_k.max(), r_k.max())) + 1
    _, si, ri = np.intersect1d(s_pair * big + s_k, r_pair * big + r_k, assume_unique=True, return_indices=True)
    return sends[si], recvs[ri]


def _sendrecv_rounds(rank: np.ndarray, peer: np.ndarray, op: np.ndarray):
    """Sendrecv to Sendrecv by round (see the module's docstring): (send rows, receive rows)."""
    sr = np.flatnonzero((op == SENDRECV) & (peer >= 0))
    if not len(sr):
        return _NONE, _NONE
    r_of, p_of = rank[sr], peer[sr]
    j = ordinal(r_of)                                                  # the round of each call on its rank
    big = int(j.max()) + 1
    key = r_of * big + j                                               # sorted: rows are in rank/time order
    target = p_of * big + j
    at = np.minimum(np.searchsorted(key, target), len(key) - 1)
    hit = np.flatnonzero(key[at] == target)
    cand_s, cand_r = hit, at[hit]                                      # positions in `sr`: sender, receiver
    if not len(cand_s):
        return _NONE, _NONE
    mutual = p_of[cand_r] == r_of[cand_s]
    single = np.bincount(cand_r, minlength=len(sr))[cand_r] == 1
    pick = np.lexsort((r_of[cand_s], mutual, cand_r))                 # per receiver: non-mutual, lowest rank
    cand_s, cand_r = cand_s[pick], cand_r[pick]
    keep = (single | ~mutual)[pick]
    cand_s, cand_r = cand_s[keep], cand_r[keep]
    _, first = np.unique(cand_r, return_index=True)
    return sr[cand_s[first]], sr[cand_r[first]]
