"""Communication per communicator name: a hand-checked 4-rank trace, and on a pipeline trace the groups add up to
the trace's MPI time."""
from __future__ import annotations

import numpy as np
import pytest

from analysis import comm_groups, mpi, waits
from analysis.analyze import analyze
from analysis.records import records
from analysis.window import select
from gpt2trace.format import communicators as comms
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, MPI_STATES, RANK, START_NS, STATE, THREAD, Kind, State
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp

RUN, GROUP = State.RUNNING, State.GROUP_COMMUNICATION


def four_ranks() -> Trace:
    # Two sequence groups {0,1} (id 4) and {2,3} (id 6), then the world. sp enters at 2, 6 | 3, 5, all leave at
    # 10; world [10, 11] everywhere.
    recs = []
    for rank, enter, sp_id in ((0, 2, 4), (1, 6, 4), (2, 3, 6), (3, 5, 6)):
        recs += [syn.state(rank, 0, 0, enter, RUN), syn.state(rank, 0, enter, 11, GROUP),
                 syn.kernel(rank, 0, 0, enter, "matmul_forward", 0, 0), syn.phase(rank, 0, 11, "forward", 0),
                 syn.comm(rank, enter, 10, "MPI_Allreduce", seq=0, nbytes=100, communicator=sp_id, step=0),
                 syn.comm(rank, 10, 11, "MPI_Allreduce", seq=0, nbytes=8, communicator=0, step=0)]
    table = [comms.world(range(4)), comms.Communicator(4, "sp", (0, 1)), comms.Communicator(6, "sp", (2, 3))]
    return Trace.from_table(syn.from_records(recs, comms.to_metadata(table)))


def test_groups_by_name_hand_checked():
    trace = four_ranks()
    calls = mpi.calls(trace, select(trace))
    table = comm_groups.per_group(calls, waits.wait_states(calls)).set_index("group")
    # sp: 2 communicators, 4 ranks, 4 calls, 400 bytes, 8 + 4 + 7 + 5 = 24 s, waiting (6 - 2) + (5 - 3) = 6 s
    assert table.loc["sp", ["communicators", "ranks", "calls", "bytes"]].tolist() == [2, 4, 4, 400]
    assert table.loc["sp", ["time_s", "wait_s", "share"]].tolist() == pytest.approx([24.0, 6.0, 24 / 28])
    # world: 1 communicator, 4 calls of 1 s that all enter at 10: no wait
    assert table.loc["world", ["communicators", "ranks", "calls", "bytes"]].tolist() == [1, 4, 4, 32]
    assert table.loc["world", ["time_s", "wait_s", "share"]].tolist() == pytest.approx([4.0, 0.0, 4 / 28])
    assert list(table.index) == ["sp", "world"]                     # by time, largest first


def test_analyze_has_the_groups_and_a_trace_without_names_ran_on_the_world():
    assert [g["group"] for g in analyze(four_ranks())["waits"]["groups"]] == ["sp", "world"]
    unnamed = analyze(Trace.from_table(syn.generate(syn.SyntheticConfig(ranks=2, steps=3))))["waits"]
    calls = sum(c["count"] for c in unnamed["calls"])
    assert [(g["group"], g["calls"]) for g in unnamed["groups"]] == [("world", calls)]


def test_groups_add_up_to_the_mpi_time_of_a_pipeline():
    trace = Trace.from_table(sp.generate(sp.PipelineConfig(stages=4, pipelines=2, micro_batches=4, threads=2)))
    result = analyze(trace, steps="0:3")              # every step: every MPI call of the trace is in the window
    groups = result["waits"]["groups"]
    assert {g["group"] for g in groups} == {"pp", "dp", "embed"}
    window = select(trace, "0:3")
    c = records(trace, Kind.COMM, (RANK,), window)
    st = records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    in_mpi = np.isin(st[STATE], [int(s) for s in State if s in MPI_STATES])
    calls_s = (c[END_NS] - c[START_NS]).sum() / 1e9
    states_s = (st[END_NS] - st[START_NS])[in_mpi].sum() / 1e9
    # every MPI call is in exactly one group, and the calls are exactly the main threads' MPI states
    assert sum(g["time_s"] for g in groups) == pytest.approx(calls_s, rel=1e-12)
    assert calls_s == pytest.approx(states_s, rel=1e-12)
    assert sum(g["time_s"] for g in groups) == pytest.approx(sum(r["total_s"] for r in result["waits"]["calls"]))
    assert sum(g["share"] for g in groups) == pytest.approx(1.0)
    assert sum(g["wait_s"] for g in groups) == pytest.approx(result["waits"]["total_wait_s"])
