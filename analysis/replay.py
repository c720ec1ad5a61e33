"""Replay of a trace's MPI calls under a network model (as Dimemas does), the ideal network included.

Each rank keeps its compute bursts (the time between its MPI calls) and replays its calls in order. On the ideal
network (`gpt2trace.format.network.IDEAL`, the one POP's Serialization / Transfer split uses) transfers take no time: a
posting or an (eager) send returns at once; an all-to-all collective ends when its last rank enters; a
broadcast/scatter ends for a non-root when the root has entered; a reduce/gather ends for the root when the last
rank has entered; a receive (or a Sendrecv's receive half) ends when its matched send starts; a wait ends when
what it waits for is complete. On another network the same events happen later by the model's costs: a message
arrives L + n/B after its send starts; every rank of a collective leaves the algorithm's time (`Network.
collective_ns`) after the event above (the last entry, the root's entry), the root of a one-to-all after its own
entry plus that time; a non-root of an all-to-one leaves after sending its part (L + n/B); sends stay eager.
A nonblocking collective completes at its wait, no earlier than the blocking one would end.
T_replay is when the last rank ends. The ideal replay of a causally consistent trace is never slower than the
trace; when it is (the calls do not match, or clocks disagree), T_ideal is returned as it is and the caller warns.
A blocked call whose partner never comes (a collective missing on a rank, an unmatched receive) is released at
its entry so the replay can go on, and counted.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from gpt2trace.format.limits import MAX_ADDED_NS
from gpt2trace.format.mpi_calls import ALL_TO_ONE, COLL, COLL_POST, IRECV, LOCAL, NO_CLASS, RECV, SENDRECV
from gpt2trace.format.network import IDEAL, Network
from gpt2trace.format.schema import BYTES, END_NS, NAME, RANK, START_NS

MARK = "mark"     # a column of the calls table for `program`'s marks: the mark's index, -1 for a call


@dataclass(frozen=True)
class Replay:
    ideal_ns: int               # T_ideal, never clipped to the runtime
    busy_ns: np.ndarray         # per rank (in the order given): the compute bursts it plays, its useful time
    forced: dict[str, int]      # call name -> blocked calls released without their partner


@dataclass(frozen=True)
class Program:
    """What each rank plays: its calls in order (rows sorted by rank, `ptr` cuts them), the compute burst before
    each, and the compute after its last call (`tail`); times in ns from the window's start."""
    ranks: np.ndarray           # the world ranks, in the order of `ptr`
    ptr: np.ndarray             # rows of rank i: ptr[i]:ptr[i + 1]
    start_ns: np.ndarray        # the call's start in the trace (from the window's start)
    end_ns: np.ndarray          # and its end
    since_ns: np.ndarray        # where the burst before it starts: the end of the rank's earlier calls (or 0)
    source: np.ndarray          # the call's row label in the calls table given to `program` (-1 for a mark)
    burst: np.ndarray           # compute before the call
    tail: np.ndarray            # per rank, compute after its last call
    name: np.ndarray            # the call's name
    base: np.ndarray            # the blocking collective's name for a collective, else the name
    nbytes: np.ndarray          # the call's bytes (0 when null)
    mark: np.ndarray            # -1 for a call, i for the i-th of `program`'s marks (zero-time, no MPI call)
    op: np.ndarray
    cls: np.ndarray
    inst: np.ndarray
    is_root: np.ndarray
    send_of: np.ndarray         # position of the matched send of a receive, -1
    wait_inst: np.ndarray
    parts: np.ndarray           # per collective instance: its ranks
    root_present: np.ndarray    # per collective instance

    def with_bursts(self, burst: np.ndarray, tail: np.ndarray) -> Program:
        return replace(self, burst=burst.astype(np.int64), tail=tail.astype(np.int64))


@dataclass(frozen=True)
class Played:
    end_ns: int                 # when the last rank ends
    leave_ns: np.ndarray        # per row of the program: when the call returns in the replay
    busy_ns: np.ndarray         # per rank: the compute it played
    forced: dict[str, int]


def replay(calls: pd.DataFrame, ranks: np.ndarray, t0_ns: int, t1_ns: int) -> Replay:
    """The ideal-network replay of the window [t0, t1) for `ranks` (sorted); `calls` is `mpi.calls` of it."""
    runtime = t1_ns - t0_ns
    ranks = np.asarray(ranks)
    if calls.empty or not len(ranks):
        return Replay(runtime, np.full(len(ranks), runtime, dtype=np.int64), {})
    out = play(program(calls, ranks, t0_ns, t1_ns), IDEAL)
    return Replay(out.end_ns, out.busy_ns, out.forced)


def program(calls: pd.DataFrame, ranks: np.ndarray, t0_ns: int, t1_ns: int,
            marks: tuple[np.ndarray, np.ndarray] | None = None) -> Program:
    """Each rank's bursts and calls in the window [t0, t1) for `ranks` (sorted); `calls` is `mpi.calls` of it.

    `marks` = (rank, time_ns) inserts zero-time local calls that cut the bursts there (a step's start), so that
    the replay tells when each rank reaches them (`Program.mark` numbers them in the order given); a mark at a
    time inside a call comes after that call.
    """
    ranks = np.asarray(ranks)
    df = calls
    if marks is not None and len(marks[0]):
        df = pd.concat([calls.assign(**{MARK: -1}), _marks(*marks, start_label=len(calls))])
        df = df.sort_values([RANK, START_NS, END_NS], kind="stable")
    dense = {int(r): i for i, r in enumerate(ranks)}
    rank = df[RANK].map(dense).fillna(-1).to_numpy().astype(np.int64)
    keep = rank >= 0
    df = df[keep]
    rank = rank[keep]
    ptr = np.searchsorted(rank, np.arange(len(ranks) + 1))          # rows are sorted by rank
    start = df[START_NS].to_numpy().astype(np.int64) - t0_ns
    end = df[END_NS].to_numpy().astype(np.int64) - t0_ns
    # The end of the rank's earlier calls (the window's start for its first): the burst before a call starts there.
    reach = pd.Series(end).groupby(rank).cummax()
    since = np.maximum(reach.groupby(rank).shift(1).fillna(-1).to_numpy().astype(np.int64), 0)
    burst = np.maximum(start - since, 0)
    has = ptr[1:] > ptr[:-1]
    last_end = np.zeros(len(ranks), dtype=np.int64)
    last_end[has] = np.maximum.reduceat(end, ptr[:-1][has]) if has.any() else 0
    runtime = t1_ns - t0_ns
    tail = np.where(has, np.maximum(runtime - last_end, 0), runtime).astype(np.int64)
    inst = df["inst"].to_numpy().astype(np.int64)
    n_inst = int(inst.max()) + 1 if len(df) else 0
    parts = np.bincount(inst[inst >= 0], minlength=n_inst).astype(np.int64)
    is_root = df["is_root"].to_numpy().astype(np.bool_)
    root_present = np.zeros(n_inst, dtype=np.bool_)
    root_present[inst[is_root & (inst >= 0)]] = True
    source = np.where(df[MARK].to_numpy() < 0, df.index.to_numpy(), -1) if MARK in df else df.index.to_numpy()
    return Program(ranks=ranks, ptr=ptr, start_ns=start, end_ns=end, since_ns=since,
                   source=source.astype(np.int64), burst=burst, tail=tail,
                   name=df[NAME].to_numpy().astype(str), base=df["base"].to_numpy().astype(str),
                   nbytes=np.maximum(df[BYTES].to_numpy(), 0).astype(np.int64),
                   mark=df[MARK].to_numpy().astype(np.int64) if MARK in df else np.full(len(df), -1, dtype=np.int64),
                   op=df["op"].to_numpy().astype(np.int64), cls=df["cls"].to_numpy().astype(np.int64), inst=inst,
                   is_root=is_root, send_of=_renumber(df["send_of"].to_numpy(), df.index.to_numpy()),
                   wait_inst=df["wait_inst"].to_numpy().astype(np.int64), parts=parts, root_present=root_present)


def play(prog: Program, network: Network = IDEAL, node_of: dict[int, int] | None = None) -> Played:
    """Replays the program on the network: when each call returns and when the last rank ends."""
    inst_cost, xfer = costs(prog, network, node_of)
    from analysis.replay_kernels import replay_calls  # Numba: only when there is something to replay
    end, leave, forced = replay_calls(prog.ptr, prog.op, prog.cls, prog.inst, prog.is_root, prog.send_of,
                                      prog.wait_inst, prog.burst, prog.tail, prog.parts, prog.root_present,
                                      inst_cost, xfer)
    rank = np.repeat(np.arange(len(prog.ranks)), np.diff(prog.ptr))
    busy = np.bincount(rank, weights=prog.burst, minlength=len(prog.ranks)).astype(np.int64) + prog.tail
    names, counts = np.unique(prog.name[forced], return_counts=True)
    return Played(int(end), leave, busy, {str(n): int(c) for n, c in zip(names, counts)})


def warm() -> None:
    """Loads the replay's compiled code (Numba's import and its on-disk cache: ~1.5-2 s on this project's VMs) by
    playing an empty program of the types `program` makes: what a process waiting for others can do first
    (analysis.distributed), so that its replay later starts at once."""
    none, empty = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
    play(Program(ranks=none, ptr=np.zeros(1, dtype=np.int64), start_ns=none, end_ns=none, since_ns=none,
                 source=none, burst=none, tail=none, name=np.zeros(0, dtype=str), base=np.zeros(0, dtype=str),
                 nbytes=none, mark=none, op=none, cls=none, inst=none, is_root=empty, send_of=none, wait_inst=none,
                 parts=none, root_present=empty))


def costs(prog: Program, network: Network, node_of: dict[int, int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(per collective instance: the algorithm's time, per row: the time of the message it waits for or sends to
    a reducing root), in ns; all zero on the ideal network. `node_of` (world rank -> node) places the ranks on a
    cluster's nodes: only traffic between nodes costs (Network.on_nodes); default: a node per rank."""
    n_inst = len(prog.parts)
    inst_cost = np.zeros(n_inst, dtype=np.float64)        # ns, as floats until they are known to fit int64
    xfer = np.zeros(len(prog.op), dtype=np.float64)
    if network.ideal:
        return inst_cost.astype(np.int64), xfer.astype(np.int64)
    coll = np.flatnonzero(prog.inst >= 0)
    if node_of is not None:       # each row's node, and each instance's root's (-1: no root)
        node = np.array([node_of[int(r)] for r in prog.ranks], dtype=np.int64)[
            np.repeat(np.arange(len(prog.ranks)), np.diff(prog.ptr))]
        roots = coll[prog.is_root[coll]]
        root_node = np.full(n_inst, -1, dtype=np.int64)
        root_node[prog.inst[roots]] = node[roots]
    if len(coll):
        size = np.zeros(n_inst, dtype=np.int64)
        np.maximum.at(size, prog.inst[coll], prog.nbytes[coll])
        base = np.empty(n_inst, dtype=object)
        base[prog.inst[coll]] = prog.base[coll]
        if node_of is None:
            inst_cost[:] = [network.collective_ns(base[k], size[k], prog.parts[k]) for k in range(n_inst)]
        else:
            members: list[list[int]] = [[] for _ in range(n_inst)]
            for k, n in zip(prog.inst[coll].tolist(), node[coll].tolist()):
                members[k].append(n)
            inst_cost[:] = [network.on_nodes(base[k], size[k], members[k],
                                             int(root_node[k]) if root_node[k] >= 0 else None)
                            for k in range(n_inst)]
    recv = np.flatnonzero(np.isin(prog.op, (RECV, SENDRECV, IRECV)) & (prog.send_of >= 0))
    xfer[recv] = network.message_ns(prog.nbytes[prog.send_of[recv]])
    leaf = np.flatnonzero(np.isin(prog.op, (COLL, COLL_POST)) & (prog.cls == ALL_TO_ONE) & ~prog.is_root)
    xfer[leaf] = network.message_ns(prog.nbytes[leaf])
    if node_of is not None:
        # inside a node a message is free; a reduce's leaf part inside the root's node too, and with flat rooted
        # collectives the root link's cost is the instance's, not each leaf's
        xfer[recv[node[recv] == node[prog.send_of[recv]]]] = 0
        leaf_inst = prog.inst[leaf]
        own_root = np.zeros(len(leaf), dtype=bool)
        own_root[leaf_inst >= 0] = root_node[leaf_inst[leaf_inst >= 0]] == node[leaf[leaf_inst >= 0]]
        xfer[leaf[(network.rooted == "flat") | own_root]] = 0
    added = float(inst_cost.sum() + xfer.sum())     # at most what the network adds to the run, all in a row
    if not added <= MAX_ADDED_NS:
        raise ClockOverflow(added)
    return np.rint(inst_cost).astype(np.int64), np.rint(xfer).astype(np.int64)


class ClockOverflow(ValueError):
    """The network's costs do not fit the int64 nanosecond clock the replay keeps time in."""

    def __init__(self, added_ns: float):
        super().__init__(f"the network would add {added_ns / 1e9:.3g} s to the run, beyond the "
                         f"{MAX_ADDED_NS / 1e9:.3g} s the int64 nanosecond clock holds")
        self.added_ns = added_ns


def _marks(rank: np.ndarray, t_ns: np.ndarray, start_label: int) -> pd.DataFrame:
    n = len(rank)
    return pd.DataFrame({RANK: rank, START_NS: t_ns, END_NS: t_ns, NAME: "", "base": "", BYTES: 0,
                         "op": LOCAL, "cls": NO_CLASS, "inst": -1, "is_root": False, "send_of": -1,
                         "wait_inst": -1, MARK: np.arange(n)}, index=np.arange(start_label, start_label + n))


def _renumber(rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Row labels of the calls table -> positions in the kept rows (-1 stays, a dropped row becomes -1)."""
    pos = pd.Series(np.arange(len(index)), index=index)
    return pd.Series(rows).map(pos).fillna(-1).to_numpy().astype(np.int64)
