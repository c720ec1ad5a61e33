"""synthetic.generate_by_rank: a trace made one rank at a time is a valid MPI trace (what big_trace.py writes)."""
from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format import schema as S
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.testing import invariants as inv
from gpt2trace.testing import synthetic as syn

CFG = syn.SyntheticConfig(ranks=3, threads=3, steps=3, layers=2, seed=4, late_rank=(1, 1.2), p2p=True, rss=True)


def _trace() -> tuple[Trace, list[pa.Table]]:
    pieces = list(syn.generate_by_rank(CFG))
    return Trace.from_table(pa.concat_tables(pieces).unify_dictionaries()), pieces


def test_one_table_per_rank_and_the_same_trace_each_time():
    trace, pieces = _trace()
    assert [pc.unique(t.column(S.RANK)).to_pylist() for t in pieces] == [[0], [1], [2]]
    again = list(syn.generate_by_rank(CFG))
    assert all(a.equals(b) for a, b in zip(pieces, again))
    assert check_states(trace) == []


def test_every_rank_partitions_its_threads_and_messages_match():
    trace, _ = _trace()
    for r in range(CFG.ranks):
        rank = replace(trace, parts={k: v.filter(pc.equal(v.column(S.RANK), r)) for k, v in trace.parts.items()})
        inv.check_partition(rank, threads=CFG.threads, mpi=True)
    inv.check_messages(trace)
    inv.check_running_per_step(trace)


def test_collectives_and_exchanges():
    trace, _ = _trace()
    comm = trace.records(S.Kind.COMM).to_pandas()
    comm["name"] = comm["name"].astype(str)
    allreduce = comm[comm["name"] == syn.ALLREDUCE]
    # every rank calls step s's Allreduce with seq s, and all leave it together (the last one in + transfer)
    assert allreduce.groupby("seq")["rank"].apply(sorted).tolist() == [[0, 1, 2]] * CFG.steps
    assert (allreduce.groupby("seq")["end_ns"].nunique() == 1).all()
    # pairs 0-1 exchange once a step; rank 2, the last of an odd count, has no partner
    sendrecv = comm[comm["name"] == syn.SENDRECV]
    assert sorted(zip(sendrecv["rank"], sendrecv["peer"])) == [(0, 1)] * CFG.steps + [(1, 0)] * CFG.steps
    assert (sendrecv.groupby("step")["end_ns"].nunique() == 1).all()      # an exchange ends for both at once
    enter = sendrecv.pivot(index="step", columns="rank", values="start_ns")
    assert (enter[1] > enter[0]).all()                       # the late rank 1 keeps rank 0 waiting
    # the two leave their exchange together, so they enter the Allreduce together
    assert (allreduce[allreduce["rank"] < 2].groupby("seq")["start_ns"].nunique() == 1).all()
    counters = trace.records(S.Kind.COUNTER).to_pandas()
    rss = counters[counters["name"].astype(str) == S.Counter.RSS_BYTES]
    assert len(rss) == CFG.ranks * CFG.steps * 5             # one per phase end: 5 phases a step
