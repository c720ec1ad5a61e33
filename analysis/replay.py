"""Ideal-network replay (as Dimemas does for POP's Serialization / Transfer split).

Each rank keeps its compute bursts (the time between its MPI calls) and replays its calls with zero-time
transfers: a posting or an (eager) send returns at once; an all-to-all collective ends when its last rank enters;
a broadcast/scatter ends for a non-root when the root has entered; a reduce/gather ends for the root when the last
rank has entered; a receive (or a Sendrecv's receive half) ends when its matched send starts; a wait ends when
what it waits for is complete. T_ideal is when the last rank ends. The replay of a causally consistent trace is
never slower than the trace; when it is (the calls do not match, or clocks disagree), T_ideal is returned as it
is and the caller warns. A blocked call whose partner never comes (a collective missing on a rank, an unmatched
receive) is released at its entry so the replay can go on, and counted.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS


@dataclass(frozen=True)
class Replay:
    ideal_ns: int               # T_ideal, never clipped to the runtime
    busy_ns: np.ndarray         # per rank (in the order given): the compute bursts it plays, its useful time
    forced: dict[str, int]      # call name -> blocked calls released without their partner


def replay(calls: pd.DataFrame, ranks: np.ndarray, t0_ns: int, t1_ns: int) -> Replay:
    """The ideal-network replay of the window [t0, t1) for `ranks` (sorted); `calls` is `mpi.calls` of it."""
    runtime = t1_ns - t0_ns
    ranks = np.asarray(ranks)
    if calls.empty or not len(ranks):
        return Replay(runtime, np.full(len(ranks), runtime, dtype=np.int64), {})
    dense = {int(r): i for i, r in enumerate(ranks)}
    rank = calls[RANK].map(dense).fillna(-1).to_numpy().astype(np.int64)
    keep = rank >= 0
    df = calls[keep]
    rank = rank[keep]
    nrank = len(dense)
    ptr = np.searchsorted(rank, np.arange(nrank + 1))               # rows are sorted by rank
    start = df[START_NS].to_numpy() - t0_ns
    end = df[END_NS].to_numpy() - t0_ns
    since = np.maximum(df["prev_end"].to_numpy() - t0_ns, 0)      # the window start for a rank's first call
    burst = np.maximum(start - since, 0)
    last_end = np.zeros(nrank, dtype=np.int64)
    has = ptr[1:] > ptr[:-1]
    last_end[has] = np.maximum.reduceat(end, ptr[:-1][has]) if has.any() else 0
    tail = np.where(has, np.maximum(runtime - last_end, 0), runtime)
    busy = np.bincount(rank, weights=burst, minlength=nrank).astype(np.int64) + tail
    n_inst = int(df["inst"].max()) + 1 if len(df) else 0
    parts = np.bincount(df["inst"].to_numpy()[df["inst"].to_numpy() >= 0], minlength=n_inst).astype(np.int64)
    root_present = np.zeros(n_inst, dtype=np.bool_)
    root_present[df["inst"].to_numpy()[df["is_root"].to_numpy() & (df["inst"].to_numpy() >= 0)]] = True
    send_of = _renumber(df["send_of"].to_numpy(), df.index.to_numpy())
    from analysis.replay_kernels import replay_calls  # Numba: only when there is something to replay
    t_ideal, forced = replay_calls(ptr, df["op"].to_numpy().astype(np.int64), df["cls"].to_numpy().astype(np.int64),
                                   df["inst"].to_numpy().astype(np.int64), df["is_root"].to_numpy().astype(np.bool_),
                                   send_of, df["wait_inst"].to_numpy().astype(np.int64), burst,
                                   tail.astype(np.int64), parts, root_present)
    names, counts = np.unique(df[NAME].to_numpy()[forced].astype(str), return_counts=True)
    return Replay(int(t_ideal), busy, {str(n): int(c) for n, c in zip(names, counts)})


def _renumber(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Row labels of the calls table -> positions in the kept rows (-1 stays, a dropped row becomes -1)."""
    pos = pd.Series(np.arange(len(index)), index=index)
    return pd.Series(rows).map(pos).fillna(-1).to_numpy().astype(np.int64)
