"""The rank grid of a trace: coordinates, labels, the dimensions a group spans, and where the grid comes from (the
run metadata's grid, its degrees, or one dp dimension of all ranks), with and without the grid key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpt2trace.format import communicators as comms
from gpt2trace.format import grid, schema
from gpt2trace.format.reader import Trace, load
from gpt2trace.testing import grid_trace
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp
from trainer.config import ParallelConfig
from trainer.parallel import grid as trainer_grid

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
# The lead's 3D layout: tp fastest, then sp, pp, dp: rank = ((dp * P + pp) * S + sp) * T + tp
TP2_SP1_PP2_DP2 = grid.Grid((("tp", 2), ("sp", 1), ("pp", 2), ("dp", 2)))


@pytest.mark.parametrize("rank,coords,label", [
    (0, {"tp": 0, "sp": 0, "pp": 0, "dp": 0}, "dp 0 tp 0 pp 0"),
    (1, {"tp": 1, "sp": 0, "pp": 0, "dp": 0}, "dp 0 tp 1 pp 0"),
    (2, {"tp": 0, "sp": 0, "pp": 1, "dp": 0}, "dp 0 tp 0 pp 1"),
    # 7 = ((1 * 2 + 1) * 1 + 0) * 2 + 1
    (7, {"tp": 1, "sp": 0, "pp": 1, "dp": 1}, "dp 1 tp 1 pp 1"),
    (5, {"tp": 1, "sp": 0, "pp": 0, "dp": 1}, "dp 1 tp 1 pp 0")])
def test_coordinates_and_labels_in_the_tp_first_layout(rank, coords, label):
    assert TP2_SP1_PP2_DP2.coords(rank) == coords
    assert TP2_SP1_PP2_DP2.label(rank) == label                 # sp has degree 1: it tells no ranks apart


def test_degrees_in_display_order_and_out_of_range():
    assert TP2_SP1_PP2_DP2.text() == "dp 2 x tp 2 x pp 2 x sp 1" and TP2_SP1_PP2_DP2.size == 8
    assert grid.Grid((("dp", 3), ("xy", 2))).text() == "dp 3 x xy 2"       # an unknown dimension comes last
    with pytest.raises(ValueError, match="rank 8 is outside the grid of 8 ranks"):
        TP2_SP1_PP2_DP2.coords(8)


@pytest.mark.parametrize("ranks,spans", [
    ((0, 1), ("tp",)), ((4, 5), ("tp",)), ((0, 2), ("pp",)), ((1, 5), ("dp",)),
    ((0, 1, 4, 5), ("dp", "tp")),          # a gradient group over tp x dp ranks
    (range(8), ("dp", "tp", "pp")), ((3,), ()), ((), ())])
def test_the_dimensions_a_group_spans(ranks, spans):
    assert TP2_SP1_PP2_DP2.spanned(ranks) == spans


def test_with_the_grid_key_coordinates_come_from_it():
    g = grid.of_trace(Trace.from_table(grid_trace.tp_dp_trace()))
    assert (g.dims, g.source, g.note) == (grid_trace.DIMS, grid.FROM_GRID, None)
    assert g.label(3) == "dp 1 tp 1" and g.coords(2) == {"tp": 0, "sp": 0, "pp": 0, "dp": 1}


def test_without_the_key_the_run_degrees_give_the_trainers_order():
    # tp 2 in the run's degrees: tp first, then sp and pp, dp the rest (4 / 2 = 2): the same grid as the key's
    g = grid.of_trace(Trace.from_table(grid_trace.tp_dp_trace(grid=False)))
    assert (g.dims, g.source, g.note) == (grid_trace.DIMS, grid.FROM_DEGREES, None)


@pytest.mark.parametrize("sample,dims,labels", [
    ("small_2ranks_sp_contiguous", (("sp", 2), ("pp", 1), ("dp", 1)), ["sp 0", "sp 1"]),
    ("small_2ranks_pp2_1f1b", (("sp", 1), ("pp", 2), ("dp", 1)), ["pp 0", "pp 1"]),
    ("tiny_2ranks_allreduce", (("sp", 1), ("pp", 1), ("dp", 2)), ["dp 0", "dp 1"]),
    ("tiny_1thread", (("sp", 1), ("pp", 1), ("dp", 1)), [""])])
def test_sample_traces_written_before_the_key_get_their_coordinates(sample, dims, labels):
    g = grid.of_trace(load(SAMPLES / f"{sample}.parquet"))
    assert (g.dims, g.source, g.note) == (dims, grid.FROM_DEGREES, None)
    assert [g.label(r) for r in range(g.size)] == labels


def test_without_run_metadata_one_dp_dimension_of_all_ranks():
    recs = [syn.state(r, 0, 0, 1, schema.State.RUNNING) for r in range(3)]
    g = grid.of_trace(Trace.from_table(syn.from_records(recs)))
    assert (g.dims, g.source, g.note) == ((("dp", 3),), grid.FROM_RANKS, None)


@pytest.mark.parametrize("run,source,note", [
    # a grid of 8 ranks on a 4-rank trace: the degrees (dp = 4 / (1 x 1)) are used instead
    ({"grid": {"dims": [["tp", 2], ["dp", 4]]}, "parallel": {"ranks": 4}}, grid.FROM_DEGREES,
     "the run metadata grid (dp 4 x tp 2) has 8 ranks, the trace 4"),
    ({"grid": {"dims": [["tp", 0], ["dp", 4]]}}, grid.FROM_RANKS,
     "the run metadata grid is malformed (dimensions must be named once each with a degree >= 1)"),
    ({"grid": {"dims": "tp"}}, grid.FROM_RANKS, "the run metadata grid is malformed"),
    ({"parallel": {"ranks": 4, "sp": 3}}, grid.FROM_RANKS,
     "the run metadata degrees is malformed (tp x sp x pp = 3 does not divide the 4 ranks)")])
def test_a_grid_that_does_not_fit_is_not_used_and_said(run, source, note):
    g = grid.from_run(run, 4)
    assert g.source == source and g.size == 4 and g.note.startswith(note)


def test_a_grid_that_contradicts_the_communicators_is_not_used():
    # The synthetic pipeline lays ranks out stage-slowest (rank = stage x 2 + pipeline) and says so in its grid key:
    # without the key, the trainer's order from the degrees (pp fastest) would put the pipeline {0, 2} along dp
    table = sp.generate(sp.PipelineConfig(stages=2, pipelines=2, micro_batches=2, steps=1))
    g = grid.of_trace(Trace.from_table(table))
    assert (g.dims, g.source) == ((("dp", 2), ("pp", 2)), grid.FROM_GRID) and g.label(1) == "dp 1 pp 0"
    meta = dict(table.schema.metadata)
    run = json.loads(meta[schema.META_RUN])
    del run[grid.GRID_KEY]
    meta[schema.META_RUN] = json.dumps(run).encode()
    g = grid.of_trace(Trace.from_table(table.replace_schema_metadata(meta)))
    assert (g.dims, g.source) == ((("dp", 4),), grid.FROM_RANKS)
    assert g.note == "the run metadata degrees (dp 2 x pp 2 x sp 1) puts communicator pp (ranks 0, 2) along dp"


def test_communicators_not_named_after_a_dimension_are_not_checked():
    table = [comms.world(range(4)), comms.Communicator(4, "grad", (0, 3)), comms.Communicator(5, "sp>=1", (1,))]
    assert grid.from_run({"parallel": {"ranks": 4, "sp": 2}}, 4, table).source == grid.FROM_DEGREES


def test_the_trainers_dimension_names_are_the_formats():
    # trainer/parallel/grid.py names the dimensions and lays them out; the trace format reads them by these names
    assert (trainer_grid.TP, trainer_grid.SP, trainer_grid.PP, trainer_grid.DP) == (grid.TP, grid.SP, grid.PP, grid.DP)
    layout = trainer_grid.GridLayout.from_config(ParallelConfig(ranks=16, tp=2, sp=2, pp=2))
    g = grid.Grid(layout.dims)
    assert all(g.coords(r) == layout.coords(r) for r in range(16))
    assert all(g.spanned(members) == (dim,) for dim, _ in layout.dims if layout.degree(dim) > 1
               for members in layout.groups((dim,)))


def test_a_trace_of_some_of_the_jobs_ranks_keeps_the_jobs_grid():
    # a profiler's file of rank 34 of a 300-rank job (the trace's ranks 0..34 as far as numbering goes): the run
    # metadata states the job's 300 ranks, so its grid is the job's, not one of 35
    g = grid.from_run({"parallel": {"ranks": 300}, "grid": {"dims": [["dp", 300]]}}, 35)
    assert g.source == grid.FROM_GRID and g.size == 300 and g.note is None
