"""The replay's loop over the calls of every rank, compiled with Numba (see `analysis.replay` for the model).

`inst_cost` (per collective instance) and `xfer` (per call) are the network's costs, in ns (zero: the ideal network).

Its own module so that importing the analyses does not import Numba: `analysis.replay` imports it when a window
has MPI calls to replay.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from gpt2trace.format import mpi_calls as C


@njit(cache=True)
def _coll_ready(i, inst, cls, is_root, enter, arrived, parts, maxe, root_e, root_present, inst_cost, xfer):
    k = inst[i]
    if cls[i] == C.NXN:
        return maxe[k] + inst_cost[k] if arrived[k] == parts[k] else -1
    if cls[i] == C.ONE_TO_ALL:
        if is_root[i] or not root_present[k]:
            return enter[i] + inst_cost[k]
        return max(enter[i], root_e[k]) + inst_cost[k] if root_e[k] >= 0 else -1
    if is_root[i]:                                  # ALL_TO_ONE
        return maxe[k] + inst_cost[k] if arrived[k] == parts[k] else -1
    return enter[i] + xfer[i]                       # a non-root sends its part


@njit(cache=True)
def replay_calls(ptr, op, cls, inst, is_root, send_of, wait_inst, burst, tail, parts, root_present, inst_cost,
                 xfer):
    """(when the last rank ends, when each call returns, which calls were released without their partner)."""
    n, nrank, n_inst = len(op), len(ptr) - 1, len(parts)
    enter = np.zeros(n, dtype=np.int64)
    leave = np.zeros(n, dtype=np.int64)
    entered = np.zeros(n, dtype=np.bool_)
    done = np.zeros(n, dtype=np.bool_)           # a nonblocking request completed by a wait
    arrived = np.zeros(n_inst, dtype=np.int64)
    maxe = np.zeros(n_inst, dtype=np.int64)
    root_e = np.full(n_inst, -1, dtype=np.int64)
    forced = np.zeros(n, dtype=np.bool_)
    pos = ptr[:-1].copy()
    wait_from = ptr[:-1].copy()
    cur = np.zeros(nrank, dtype=np.int64)
    while True:
        progress = False
        remaining = False
        for r in range(nrank):
            while pos[r] < ptr[r + 1]:
                i = pos[r]
                if not entered[i]:
                    entered[i] = True
                    enter[i] = cur[r] + burst[i]
                    k = inst[i]
                    if k >= 0:
                        arrived[k] += 1
                        maxe[k] = max(maxe[k], enter[i])
                        if is_root[i]:
                            root_e[k] = enter[i]
                x = _ready(i, r, op, cls, inst, is_root, send_of, wait_inst, enter, entered, done, arrived, parts,
                           maxe, root_e, root_present, wait_from, ptr, False, inst_cost, xfer)
                if x < 0:
                    break
                cur[r] = x
                leave[i] = x
                pos[r] += 1
                progress = True
            if pos[r] < ptr[r + 1]:
                remaining = True
        if not remaining:
            break
        if not progress:
            # An inconsistent trace: release the blocked call that entered first as if it did not wait, and go on.
            best, best_r = -1, -1
            for r in range(nrank):
                if pos[r] < ptr[r + 1] and (best < 0 or enter[pos[r]] < enter[best]):
                    best, best_r = pos[r], r
            _ready(best, best_r, op, cls, inst, is_root, send_of, wait_inst, enter, entered, done, arrived, parts,
                   maxe, root_e, root_present, wait_from, ptr, True, inst_cost, xfer)
            forced[best] = True
            cur[best_r] = enter[best]
            leave[best] = enter[best]
            pos[best_r] += 1
    t = 0
    for r in range(nrank):
        t = max(t, cur[r] + tail[r])
    return t, leave, forced


@njit(cache=True)
def _ready(i, r, op, cls, inst, is_root, send_of, wait_inst, enter, entered, done, arrived, parts, maxe, root_e,
           root_present, wait_from, ptr, force, inst_cost, xfer):
    """Exit time of call i on rank r in the replay, or -1 while it still waits for another rank."""
    o = op[i]
    if o == C.COLL:
        return _coll_ready(i, inst, cls, is_root, enter, arrived, parts, maxe, root_e, root_present, inst_cost,
                           xfer)
    if o == C.RECV or o == C.SENDRECV:
        s = send_of[i]
        if s < 0:
            return enter[i]
        return max(enter[i], enter[s] + xfer[i]) if entered[s] else -1
    if o != C.WAIT:
        return enter[i]                            # local call, posting, eager send: zero time
    x = enter[i]
    for j in range(wait_from[r], i):
        if done[j] or (op[j] != C.COLL_POST and op[j] != C.IRECV):
            continue
        if wait_inst[i] >= 0 and inst[j] != wait_inst[i]:
            continue
        if op[j] == C.COLL_POST:
            y = _coll_ready(j, inst, cls, is_root, enter, arrived, parts, maxe, root_e, root_present, inst_cost,
                            xfer)
        else:
            s = send_of[j]
            y = enter[j] if s < 0 else (max(enter[j], enter[s] + xfer[j]) if entered[s] else -1)
        if y < 0 and not force:
            return -1
        x = max(x, y)
    for j in range(wait_from[r], i):               # complete what this wait covered
        if (op[j] == C.COLL_POST or op[j] == C.IRECV) and (wait_inst[i] < 0 or inst[j] == wait_inst[i]):
            done[j] = True
    if wait_inst[i] < 0:
        wait_from[r] = i + 1
    return x
