"""Collectives, waits and root causes per communicator, and the parallel layout in words (analysis.groups)."""
from __future__ import annotations

import json

import pytest

from analysis import groups, mpi, rootcause, segments, waits
from analysis.analyze import analyze, rows
from analysis.window import select
from gpt2trace.format import communicators as comms
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn

RUN, GROUP = State.RUNNING, State.GROUP_COMMUNICATION
# 4 ranks in 2 sequence groups {0,1} (id 4) and {2,3} (id 6), and the world (id 0), as `--ranks 4 --sp 2` makes
TABLE = [comms.world(range(4)), comms.Communicator(4, "sp", (0, 1)), comms.Communicator(6, "sp", (2, 3))]
RUN_META = {"parallel": {"ranks": 4, "rank": 0, "threads": 1, "sp": 2, "sp_split": "contiguous",
                         "sp_reduce": "allreduce", "dp_sync": "allreduce"}}


def _trace():
    """Every rank: attention_backward (layer 0) [0, a], then the sequence group's MPI_Allreduce (seq 0) [a, 10],
    then the world's MPI_Allreduce (seq 0 too: seq counts per communicator) [10, 11]. The last rank of each group
    computes longer: a = 2, 6 (group {0,1}) and 3, 5 (group {2,3})."""
    recs = []
    for rank, a in ((0, 2), (1, 6), (2, 3), (3, 5)):
        sp = 4 if rank < 2 else 6
        recs += [syn.state(rank, 0, 0, a, RUN), syn.state(rank, 0, a, 11, GROUP),
                 syn.kernel(rank, 0, 0, a, "attention_backward", 0, 0),
                 syn.phase(rank, 0, 10, "backward", 0), syn.phase(rank, 10, 11, "grad_sync", 0),
                 syn.comm(rank, a, 10, "MPI_Allreduce", seq=0, nbytes=100, step=0, communicator=sp),
                 syn.comm(rank, 10, 11, "MPI_Allreduce", seq=0, nbytes=50, step=0, communicator=0)]
    meta = {**comms.to_metadata(TABLE), b"gpt2trace.run": json.dumps(RUN_META).encode()}
    return Trace.from_table(syn.from_records(recs, meta))


def test_instances_are_per_communicator():
    trace = _trace()
    calls = mpi.calls(trace, select(trace))
    # seq 0 on three communicators: three instances, of 2, 2 and 4 ranks
    inst = calls.groupby(["communicator", "seq"])["inst"].nunique()
    assert inst.to_dict() == {(0, 0): 1, (4, 0): 1, (6, 0): 1}
    assert calls.groupby("communicator")["parts"].first().to_dict() == {0: 4, 4: 2, 6: 2}
    assert set(calls["group"]) == {"world", "sp"}


def test_waits_and_root_causes_per_group():
    trace = _trace()
    window = select(trace)
    calls = mpi.calls(trace, window)
    w = waits.wait_states(calls)
    # sequence groups: rank 0 waits 6 - 2 = 4 s for rank 1, rank 2 waits 5 - 3 = 2 s for rank 3; the world's
    # allreduce starts at 10 on every rank: no wait there
    assert sorted(zip(w["rank"], w["culprit"], w["wait_ns"], w["group"])) == [
        (0, 1, 4_000_000_000, "sp"), (2, 3, 2_000_000_000, "sp")]
    table = waits.per_call(calls, w).set_index(["name", "group"])
    # the same call name on two communicators: two rows
    assert table.loc[("MPI_Allreduce", "sp"), "wait_s"] == pytest.approx(6.0)
    assert table.loc[("MPI_Allreduce", "world"), "wait_s"] == pytest.approx(0.0)
    causes = rootcause.root_causes(calls, w, segments.segments(segments.kernel_records(trace, window)), window)
    # each wait is charged to the late rank's extra attention_backward: 4 s to rank 1, 2 s to rank 3
    assert causes[["group", "rank", "kernel", "wait_s"]].values.tolist() == [
        ["sp", 1, "attention_backward", 4.0], ["sp", 3, "attention_backward", 2.0]]
    assert rootcause.sentence(causes.iloc[0].to_dict()) == (
        "4 s of waits in the sequence group caused by kernel attention_backward (layer 0) on rank 1")


def test_per_communicator_table_names_groups_and_split():
    trace = _trace()
    window = select(trace)
    calls = mpi.calls(trace, window)
    layout = groups.parallel(trace)
    assert layout == {"ranks": 4, "dp": 2, "tp": 1, "sp": 2, "sp_split": "contiguous", "sp_reduce": "allreduce",
                      "dp_sync": "allreduce", "pp": 1, "pp_schedule": None, "recompute": None}
    table = groups.per_communicator(calls, waits.wait_states(calls), trace, layout).set_index("communicator")
    # {0,1}: calls [2,10] and [6,10] = 12 s, 4 s waiting; {2,3}: 7 + 5 = 12 s, 2 s; world: 4 x 1 s
    assert table.loc[4, ["group", "ranks", "split", "calls"]].tolist() == ["sp", [0, 1], "contiguous", 2]
    assert table.loc[4, ["total_s", "wait_s"]].tolist() == pytest.approx([12.0, 4.0])
    assert table.loc[6, ["total_s", "wait_s"]].tolist() == pytest.approx([12.0, 2.0])
    world = rows(table.reset_index())[-1]          # as `analyze --json` gives it
    assert (world["group"], world["split"], world["total_s"], world["top_wait_call"]) == ("world", None, 4.0, None)


def test_findings_name_the_effect_in_words():
    result = analyze(_trace())
    texts = [f["text"] for f in result["findings"]]
    # attention_backward: ranks 2, 6, 3, 5 s: max/min 6 / 2 = 3.0x, slowest rank 1, fastest rank 0
    assert any("attention_backward (all layers) is imbalanced across ranks, 3.0x slower on rank 1 than on rank 0 "
               "(contiguous sequence split: later positions attend to more tokens)" in t for t in texts), texts
    # 4 + 2 = 6 s of the 6 s of waits are in the sequence groups' allreduce
    assert any("ranks wait 6 s in the sequence group's MPI_Allreduce (contiguous sequence split), 100% of all MPI "
               "wait time" in t for t in texts), texts
    calls = result["waits"]["calls"]
    assert [(c["name"], c["group"], c["split"]) for c in calls] == [("MPI_Allreduce", "sp", "contiguous"),
                                                                     ("MPI_Allreduce", "world", None)]


def test_no_layout_no_cause():
    assert groups.cause("attention_forward", None) is None
    assert groups.cause("attention_forward", {"sp_split": "interleaved"}) is None
    assert groups.cause("matmul_forward", {"sp_split": "contiguous"}) is None
    assert groups.split_of("sp>=2", {"sp_split": "contiguous"}) == "contiguous"
    assert groups.split_of("dp", {"sp_split": "contiguous"}) is None


def test_a_trace_without_communicators_runs_on_the_world(late_rank):
    calls = mpi.calls(late_rank, select(late_rank))
    assert set(calls["communicator"]) == {0} and set(calls["group"]) == {"world"}
    assert late_rank.communicators == {0: comms.world([0, 1])}
