"""The timeline's data: lanes grouped by rank, exact records everywhere for a small trace, and the detail window
of a big one chosen from whole steps within the record budget."""
import json

import numpy as np
import pytest

from analysis.steps import steps_table
from analysis.window import select
from gpt2trace.format import schema
from gpt2trace.format.grid import GRID_KEY
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, RANK, START_NS, STATE, Kind, State
from gpt2trace.report.timeline import build
from gpt2trace.testing import grid_trace
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp


@pytest.fixture(scope="module")
def two_ranks() -> Trace:
    return Trace.from_table(syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=3, layers=1)))


@pytest.fixture(scope="module")
def one_rank() -> Trace:
    return Trace.from_table(syn.generate(syn.SyntheticConfig(ranks=1, threads=2, steps=5, layers=1,
                                                             allreduce=False)))


def analyzed(trace):
    w = select(trace)
    return w.t0_ns, w.t1_ns


def views(tl):
    return {v.key: v for v in tl.views}


def test_lanes_grouped_by_rank(two_ranks):
    v = views(build(two_ranks, analyzed(two_ranks)))
    assert v["states"].lanes == ("0.0", "0.1", "1.0", "1.1") and v["states"].lane_rank == (0, 0, 1, 1)
    assert v["kernels"].lanes == v["states"].lanes
    # the run metadata says 2 ranks and nothing else: its degrees make them dp 0 and dp 1, said once per rank
    assert v["phases"].lanes == ("rank 0 · dp 0", "rank 1 · dp 1")
    assert v["states"].ticks == ("rank 0 · dp 0 · 0.0", "0.1", "rank 1 · dp 1 · 1.0", "1.1")
    assert v["kernels"].ticks == v["states"].ticks
    assert v["mpi"].lanes == ("0.0", "1.0")                  # only the threads that make MPI calls
    assert v["mpi"].ticks == ("rank 0 · dp 0 · 0.0", "rank 1 · dp 1 · 1.0")
    assert v["steps"].lanes == ("steps",) and v["steps"].ticks == ()


def test_rank_groups_named_by_their_coordinates():
    # gpt2trace/testing/grid_trace.py: tp 2 x dp 2, rank = dp x 2 + tp; sp and pp have degree 1 and are not shown
    trace = Trace.from_table(grid_trace.tp_dp_trace())
    v = views(build(trace, analyzed(trace)))
    names = ("rank 0 · dp 0 tp 0", "rank 1 · dp 0 tp 1", "rank 2 · dp 1 tp 0", "rank 3 · dp 1 tp 1")
    assert v["phases"].lanes == names
    assert v["states"].ticks == tuple(f"{n} · {r}.0" for r, n in enumerate(names))
    assert v["states"].lanes == ("0.0", "1.0", "2.0", "3.0")      # the lanes' names stay rank.thread


def test_without_a_grid_ranks_are_not_renamed(one_rank):
    # one rank, or a trace without run metadata (its one dp dimension of all ranks would repeat the rank)
    assert views(build(one_rank, analyzed(one_rank)))["states"].ticks == ()
    recs = [syn.state(r, 0, 0, 1, State.RUNNING) for r in (0, 1)] + [syn.phase(r, 0, 1, "forward", 0) for r in (0, 1)]
    bare = Trace.from_table(syn.from_records(recs))
    v = views(build(bare, analyzed(bare)))
    assert v["phases"].lanes == ("rank 0", "rank 1") and v["states"].ticks == ()


def test_small_trace_is_exact_everywhere(two_ranks):
    tl = build(two_ranks, analyzed(two_ranks))
    assert tl.detail == (tl.t0_ns, tl.t1_ns)
    for v in tl.views:
        assert len(v.exact[START_NS]) == v.records and v.exact_span == (tl.t0_ns, tl.t1_ns)


def test_states_use_paraver_ids_as_codes(two_ranks):
    states = views(build(two_ranks, analyzed(two_ranks)))["states"]
    assert states.cats[State.RUNNING].name == "Running" and states.cats[State.RUNNING].color == "#0000ff"
    assert set(np.unique(states.exact["cat"])) <= {int(s) for s in State}


def records_per_step(trace):
    steps = steps_table(trace)
    starts = np.concatenate([trace.records(k).column(START_NS).to_numpy() for k in (Kind.STATE, Kind.KERNEL)])
    idx = np.searchsorted(steps[START_NS].to_numpy(), starts, side="right") - 1
    return steps, np.bincount(idx, minlength=len(steps)), np.sort(starts)


def test_detail_window_takes_whole_steps_within_the_budget(one_rank):
    steps, count, _ = records_per_step(one_rank)
    # analyzed from step 1 (step 0 is warm-up); steps 1 and 2 fit, step 3 does not
    budget = int(count[1] + count[2] + count[3] // 2)
    tl = build(one_rank, analyzed(one_rank), exact_budget=budget)
    assert tl.detail == (steps[START_NS][1], steps[END_NS][2])
    assert "steps 1-2" in tl.detail_note
    states = views(tl)["states"]
    assert states.exact_span == tl.detail and len(states.exact[START_NS]) < states.records


def test_detail_window_cut_inside_a_step(one_rank):
    steps, count, starts = records_per_step(one_rank)
    budget = int(count[1] // 2)
    tl = build(one_rank, analyzed(one_rank), exact_budget=budget)
    a, b = tl.detail
    assert a == steps[START_NS][1] and b < steps[END_NS][1]
    assert ((starts >= a) & (starts < b)).sum() == budget     # exactly the budget's records start inside


def test_detail_window_from_a_time_window(one_rank):
    steps, count, starts = records_per_step(one_rank)
    a, b = int(steps[START_NS][2]), int(steps[START_NS][2] + 1000)
    tl = build(one_rank, analyzed(one_rank), window=(a, b), exact_budget=int(count.max()))
    assert tl.detail == (a, b)


def test_collectives_are_joined_across_ranks(two_ranks):
    mpi = views(build(two_ranks, analyzed(two_ranks)))["mpi"]
    inst, lane = mpi.exact["inst"], mpi.exact["lane"]
    for k in np.unique(inst):                                  # each MPI_Allreduce: one call on each rank
        assert sorted(lane[inst == k].tolist()) == [0, 1]


def test_occupancy_levels_hold_the_running_time(two_ranks):
    tl = build(two_ranks, analyzed(two_ranks))
    states = two_ranks.records(Kind.STATE).to_pandas()
    run = states[states[STATE] == State.RUNNING]
    for _bins, bin_ns, values in tl.occupancy.levels:
        for i, rank in enumerate(tl.occupancy.ranks):
            sel = run[run[RANK] == rank]
            # mean Running threads per bin x bin width = the rank's Running time
            assert values[i].sum() * bin_ns == pytest.approx((sel[END_NS] - sel[START_NS]).sum(), rel=1e-5)


def test_pipeline_phases_carry_their_micro_batch_and_stage():
    trace = Trace.from_table(sp.generate(sp.PipelineConfig(stages=2, pipelines=2, micro_batches=3, steps=2)))
    phases = views(build(trace, analyzed(trace)))["phases"]
    # rank = stage x 2 + pipeline (the grid in its metadata): the pp coordinate is the stage
    assert phases.lanes == ("rank 0 · dp 0 pp 0", "rank 1 · dp 1 pp 0", "rank 2 · dp 0 pp 1", "rank 3 · dp 1 pp 1")
    # without the grid key, the trainer's order read from the degrees contradicts the pp communicators: no grid
    # coordinates, and the stage is said in words
    table = sp.generate(sp.PipelineConfig(stages=2, pipelines=2, micro_batches=3, steps=2))
    meta = dict(table.schema.metadata)
    meta[schema.META_RUN] = json.dumps({k: v for k, v in json.loads(meta[schema.META_RUN]).items()
                                        if k != GRID_KEY}).encode()
    bare = Trace.from_table(table.replace_schema_metadata(meta))
    assert views(build(bare, analyzed(bare)))["phases"].lanes == ("rank 0 stage 0", "rank 1 stage 0",
                                                                   "rank 2 stage 1", "rank 3 stage 1")
    names = np.array([phases.cats[c].name for c in phases.exact["cat"]])
    micro = phases.exact["microstep"]
    # forward, backward and data loading show their micro-batch (0, 1, 2 each step); the step's other phases none
    for name in ("forward", "backward", "dataload"):
        assert sorted(set(micro[names == name])) == [0, 1, 2]
    assert (micro[~np.isin(names, ["forward", "backward", "dataload"])] == -1).all()


def test_one_micro_batch_per_step_labels_none(one_rank):
    # every phase of a run without gradient accumulation is micro-batch 0: nothing worth a label
    assert (views(build(one_rank, analyzed(one_rank)))["phases"].exact["microstep"] == -1).all()
