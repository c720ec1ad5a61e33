"""Communication per communicator name: a hand-checked 4-rank trace, and on a pipeline trace the groups add up to
the trace's MPI time. Per parallel dimension: a hand-checked tp x dp trace, and the sample traces' communicators
folded into their dimensions."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import comm_groups, mpi, waits
from analysis.analyze import analyze
from analysis.records import records
from analysis.window import Window, select
from gpt2trace.format import communicators as comms
from gpt2trace.format import grid
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.schema import END_NS, MPI_STATES, RANK, START_NS, STATE, THREAD, Kind, State
from gpt2trace.testing import grid_trace
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp

RUN, GROUP = State.RUNNING, State.GROUP_COMMUNICATION
SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


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


def dimensions(trace: Trace, steps: str | None = None) -> pd.DataFrame:
    calls = mpi.calls(trace, select(trace, steps))
    return comm_groups.per_dimension(calls, waits.wait_states(calls), grid.of_trace(trace), trace.communicators,
                                     4, select(trace, steps)).set_index("dimension")


def test_dimensions_hand_checked():
    # gpt2trace/testing/grid_trace.py: tp 2 x dp 2, 2 steps of 10 s: the window is 20 s, 4 ranks, 80 rank-seconds
    table = dimensions(Trace.from_table(grid_trace.tp_dp_trace(tp_s=0.5)), "0:2")
    assert list(table.index) == ["tp", "dp", "dp x tp"]                   # by time: 16, 12, 4 s
    # tp: 4 all-reduces per step on every rank, 0.5 s and 1 MB each: 32 calls, 16 s; per step 16 / 4 / 2 = 2 s of
    # a mean rank, 20% of the step; nobody waits
    tp = table.loc["tp"]
    assert (tp["dims"], tp["degree"], tp["communicators"], tp["ranks"], tp["calls"]) == (["tp"], 2, ["tp"], 4, 32)
    assert [tp[k] for k in ("calls_per_step", "bytes_per_call", "time_s_per_step", "wait_s_per_step", "share",
                            "wait_share")] == pytest.approx([4, 1e6, 2.0, 0.0, 0.2, 0.0])
    assert (tp["top_call"], tp["top_group"]) == ("MPI_Allreduce", "tp")
    assert [tp["top_calls_per_step"], tp["top_bytes_per_call"], tp["top_share"]] == pytest.approx([4, 1e6, 0.2])
    # dp: one 8 MB all-reduce per step; ranks 0 and 1 enter at 6 and wait 1 s for ranks 2 and 3 (at 7), all leave
    # at 8: 2 + 2 + 1 + 1 = 6 s a step, 12 s in all, 1.5 s per step of a mean rank, 15%; waits 4 s, 0.5 s a step, 5%
    dp = table.loc["dp"]
    assert (dp["dims"], dp["communicators"], dp["calls"]) == (["dp"], ["dp"], 8)
    assert [dp[k] for k in ("calls_per_step", "bytes_per_call", "time_s_per_step", "wait_s_per_step", "share",
                            "wait_share")] == pytest.approx([1, 8e6, 1.5, 0.5, 0.15, 0.05])
    # the world's barrier spans both dimensions: a row of its own, no bytes moved; 8 x 0.5 s = 4 s, 5%
    world = table.loc["dp x tp"]
    assert (world["dims"], world["degree"], world["communicators"], world["top_call"]) == (
        ["dp", "tp"], 4, ["world"], "MPI_Barrier")
    assert pd.isna(world["bytes_per_call"])                              # null in the JSON
    assert [world["time_s_per_step"], world["share"]] == pytest.approx([0.5, 0.05])


def test_dimensions_without_whole_steps_have_no_per_step_numbers():
    trace = Trace.from_table(grid_trace.tp_dp_trace(tp_s=0.5, steps=1))
    calls = mpi.calls(trace, None)
    window = Window(0, 10 * 10**9)                                      # the whole trace, no steps
    tp = comm_groups.per_dimension(calls, waits.wait_states(calls), grid.of_trace(trace), trace.communicators, 4,
                                   window).set_index("dimension").loc["tp"]
    # 4 calls x 0.5 s x 4 ranks = 8 s of 40 rank-seconds
    assert pd.isna(tp["calls_per_step"]) and pd.isna(tp["time_s_per_step"]) and tp["share"] == pytest.approx(0.2)


@pytest.mark.parametrize("sample,rows", [
    # sequence parallelism alone: the sp group's collectives and the gradient sync on the world both span sp
    ("small_2ranks_sp_contiguous", {"sp": ["sp", "world"]}),
    # a pipeline: its messages and the embedding group's all-reduce (first and last stage) both span pp
    ("small_2ranks_pp2_1f1b", {"pp": ["embed", "pp"]}),
    ("tiny_2ranks_overlap", {"dp": ["world"]})])
def test_sample_traces_fold_their_communicators_into_dimensions(sample, rows):
    result = analyze(load(SAMPLES / f"{sample}.parquet"))
    dims = result["comm_dimensions"]
    assert {r["dimension"]: r["communicators"] for r in dims} == rows
    # the rows partition the calls: the same MPI seconds and waits as the groups, and shares of the window
    groups = result["waits"]["groups"]
    assert sum(r["time_s"] for r in dims) == pytest.approx(sum(g["time_s"] for g in groups), rel=1e-12)
    assert sum(r["wait_s"] for r in dims) == pytest.approx(result["waits"]["total_wait_s"], rel=1e-12)
    window_s = result["window"]["t1_s"] - result["window"]["t0_s"]
    ranks = result["summary"]["ranks"]
    assert sum(r["share"] for r in dims) == pytest.approx(sum(g["time_s"] for g in groups) / (ranks * window_s))
