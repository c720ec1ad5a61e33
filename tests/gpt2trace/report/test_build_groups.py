"""The report built group of ranks by group of ranks is the report of the whole trace: the same page, byte for
byte (it carries no timestamp), whichever way the ranks are grouped and whatever the exact-record budget."""
from pathlib import Path

import numpy as np
import pytest

from analysis.rank_groups import split
from gpt2trace.format.reader import load, rank_groups
from gpt2trace.report import build, build_groups, write, write_file
from gpt2trace.report.lod import PyramidFold, pyramid
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
MULTI_RANK = ["tiny_2ranks_allreduce.parquet", "tiny_2ranks_overlap.parquet", "small_2ranks_pp2_1f1b.parquet",
              "small_2ranks_tp2.parquet", "small_8ranks_3d.parquet", "tiny_2ranks_tasks.parquet"]


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> Path:
    """4 ranks x 2 threads, 6 steps, Sendrecv pairs and MPI_Allreduce, written rank by rank (our layout)."""
    path = tmp_path_factory.mktemp("groups") / "four_ranks.parquet"
    cfg = syn.SyntheticConfig(ranks=4, threads=2, steps=6, layers=2, seed=3, late_rank=(2, 1.2), p2p=True, rss=True)
    syn.write(syn.generate(cfg), path)
    return path


@pytest.mark.parametrize("name", MULTI_RANK)
@pytest.mark.parametrize("options", [{}, {"exact_budget": 1000}, {"exact_budget": 1000, "window_s": (0.0, 0.01)},
                                     {"exact_budget": 1000, "steps": "2:3"}, {"run_budget": 2000}])
def test_grouped_page_is_the_whole_trace_page(name, options):
    trace = load(SAMPLES / name)
    whole = build(trace, **options).html
    for groups in (2, 3):
        assert build_groups(split(trace, groups), **options).html == whole, (groups, options)


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_file_read_group_by_group(four_ranks, tmp_path, share):
    group_records = max(1, int(share * load(four_ranks).num_rows))      # one rank a group, or two
    groups = rank_groups(four_ranks, group_records)
    assert len(groups) > 1                        # several groups, so the fold is exercised
    done = []
    made = write_file(four_ranks, tmp_path / "g.html", group_records=group_records, exact_budget=2000,
                      advance=done.append)
    whole = write(load(four_ranks), tmp_path / "w.html", exact_budget=2000)
    assert (tmp_path / "g.html").read_text() == (tmp_path / "w.html").read_text()
    assert made.records == whole.records == load(four_ranks).num_rows
    assert sum(done) == 2 * made.records          # two passes over every record


def test_exact_records_cut_by_the_budget_in_any_grouping(four_ranks):
    """A budget smaller than one step: the window is cut at the budget's record, found across the groups."""
    trace = load(four_ranks)
    whole = build(trace, exact_budget=1000)
    assert "the first 1,000 records" in whole.detail_note
    grouped = build_groups(split(trace, 4), exact_budget=1000)
    assert (grouped.detail_ns, grouped.detail_note, grouped.html) == (whole.detail_ns, whole.detail_note, whole.html)


def test_task_trace_one_rank_a_group(tmp_path):
    path = SAMPLES / "tiny_2ranks_tasks.parquet"
    made = write_file(path, tmp_path / "t.html", group_records=1)
    assert (tmp_path / "t.html").read_text() == build(load(path)).html
    assert made.records == load(path).num_rows


@pytest.mark.parametrize("seed", range(6))
def test_pyramid_fold_equals_the_pyramid(seed):
    """Random lanes of back-to-back records, cut into random lane groups: the same levels, under tight budgets
    too (where the stop depends on all lanes' runs)."""
    rng = np.random.default_rng(seed)
    lanes = int(rng.integers(2, 9))
    per_lane = rng.integers(0, 400, lanes)
    lane = np.repeat(np.arange(lanes), per_lane)
    dur = rng.integers(1, 5000, len(lane))
    start = np.concatenate([np.cumsum(np.r_[0, d[:-1]]) for d in np.split(dur, np.cumsum(per_lane)[:-1])])
    end, cat = start + dur, rng.integers(0, 4, len(lane))
    t1 = int(end.max()) + 1
    cuts = np.sort(rng.choice(np.arange(1, lanes), size=int(rng.integers(1, lanes)), replace=False))
    for budget in (50, 400, 5000, 1_000_000):
        want = pyramid(lane, start, end, cat, lanes, 0, t1, 4, base_bins=16, budget_runs=budget)
        fold = PyramidFold(len(lane), lanes, 0, t1, 4, base_bins=16, budget_runs=budget)
        for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, lanes]):
            mine = (lane >= lo) & (lane < hi)
            fold.add(lane[mine] - lo, start[mine], end[mine], cat[mine], int(lo), int(hi - lo))
        got = fold.levels()
        assert [lv.bins for lv in got] == [lv.bins for lv in want], budget
        for g, w in zip(got, want):
            for field in ("offsets", "start", "length", "cat"):
                np.testing.assert_array_equal(getattr(g, field), getattr(w, field))


def test_pyramid_fold_wants_lane_groups_in_order():
    fold = PyramidFold(1, 2, 0, 10, 1)
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="expected lane 0"):
        fold.add(one, one, one + 5, one, 1, 1)
