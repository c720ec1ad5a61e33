"""The critical path is total: on random multi-rank traces with what real traces of other tools hold (equal
timestamps, zero-length calls, Sendrecv rings, receives that complete before their send on the trace's clock,
ranks whose clocks are skewed, calls of several threads of one rank at once), the walk ends, its pieces tile the
window one after the other, and each piece lies inside a record of its rank."""
from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import critical_path as cp
from analysis import mpi
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, RANK, START_NS, State
from gpt2trace.testing import synthetic as syn

KINDS = ("kernel", "send", "isend", "sendrecv", "allreduce", "bcast", "iallreduce")


@st.composite
def traces(draw) -> Trace:
    """Ranks x threads lanes; a list of operations placed lane by lane at a cursor that moves by whole seconds
    (ties everywhere), durations of 0 to 3 s, a per-rank clock offset (skew) added at the end."""
    ranks, threads = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    cursor = {(r, th): 0 for r in range(ranks) for th in range(threads)}
    recs: list[dict] = []

    def place(rank: int) -> tuple[int, float, float]:
        th = draw(st.integers(0, threads - 1))
        start = cursor[rank, th] + draw(st.integers(0, 2))
        end = start + draw(st.integers(0, 3))
        cursor[rank, th] = end
        return th, float(start), float(end)

    seq = 0
    for tag, kind in enumerate(draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=14))):
        if kind == "kernel":
            rank = draw(st.integers(0, ranks - 1))
            th, s, e = place(rank)
            recs.append(syn.kernel(rank, th, s, e, draw(st.sampled_from(("matmul_forward", "gelu_forward"))), 0, 0))
        elif kind in ("send", "isend") and ranks > 1:
            a = draw(st.integers(0, ranks - 1))
            b = draw(st.integers(0, ranks - 1).filter(lambda x, a=a: x != a))
            sender, receiver = ("MPI_Send", "MPI_Recv") if kind == "send" else ("MPI_Isend", "MPI_Irecv")
            for rank, name, peer in ((a, sender, b), (b, receiver, a)):
                th, s, e = place(rank)
                recs.append(syn.comm(rank, s, e, name, nbytes=8, peer=peer, step=0, thread=th, tag=tag))
                if kind == "isend":
                    th, s, e = place(rank)
                    recs.append(syn.comm(rank, s, e, "MPI_Wait", step=0, thread=th))
        elif kind == "sendrecv" and ranks > 1:
            for rank in range(ranks):                                 # a ring: each sends to the next
                th, s, e = place(rank)
                recs.append(syn.comm(rank, s, e, "MPI_Sendrecv", nbytes=8, peer=(rank + 1) % ranks, step=0,
                                     thread=th, tag=tag))
        elif kind in ("allreduce", "bcast", "iallreduce"):
            name = {"allreduce": "MPI_Allreduce", "bcast": "MPI_Bcast", "iallreduce": "MPI_Iallreduce"}[kind]
            for rank in range(ranks):
                th, s, e = place(rank)
                recs.append(syn.comm(rank, s, e, name, seq=seq, nbytes=8, peer=0 if kind == "bcast" else None,
                                     step=0, thread=th))
                if kind == "iallreduce":
                    th, s, e = place(rank)
                    recs.append(syn.comm(rank, s, e, "MPI_Wait", seq=seq, step=0, thread=th))
            seq += 1
    end = max(cursor.values()) + 1
    skew = [draw(st.integers(0, 2)) for _ in range(ranks)]
    for rec in recs:
        rec[START_NS] += skew[rec[RANK]] * 10**9
        rec[END_NS] += skew[rec[RANK]] * 10**9
    recs += [syn.state(r, th, 0, end + 2, State.RUNNING) for r in range(ranks) for th in range(threads)]
    recs += [syn.phase(r, 0, end + 2, "forward", 0) for r in range(ranks)]
    return Trace.from_table(syn.from_records(recs))


@settings(max_examples=150, deadline=None)
@given(traces())
def test_the_walk_ends_and_its_pieces_tile_the_window(trace):
    window = select(trace)
    found = cp.critical_path(trace, window)
    p = found.pieces
    assert found.length_ns == window.t1_ns - window.t0_ns
    assert (p[END_NS] > p[START_NS]).all()
    starts, ends = p[START_NS].to_numpy(), p[END_NS].to_numpy()
    assert (starts[1:] == ends[:-1]).all()                            # one after the other, no gap, no overlap
    if len(p):
        assert starts[0] == window.t0_ns and ends[-1] == window.t1_ns
    rec = pd.concat([trace.parts[k].select([RANK, START_NS, END_NS]).to_pandas() for k in ("kernel", "comm")
                     if k in trace.parts] + [pd.DataFrame({RANK: [], START_NS: [], END_NS: []})])
    calls = mpi.calls(trace, window)
    for piece in p.itertuples(index=False):
        if piece.category in (cp.KERNEL, cp.FORK, cp.MPI):            # a region's or a call's record holds it
            own = rec[(rec[RANK] == piece.rank) & (rec[START_NS] <= piece.start_ns) & (rec[END_NS] >= piece.end_ns)]
            assert len(own) or piece.category == cp.FORK, piece
    assert found.clock_violations <= len(calls)
    tables = cp.tables(found)
    assert np.isclose(tables["length_s"], tables["window_s"])
