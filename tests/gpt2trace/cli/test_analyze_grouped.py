"""`gpt2trace analyze` group of ranks by group of ranks (--group-records), and over the processes of a real
`mpiexec -n K` job: the same JSON as the whole trace analyzed by one process; errors said once, by process 0."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt2trace.cli.grouped import plan, shares
from gpt2trace.format.reader import rank_records
from gpt2trace.run.mpiexec import find_mpiexec

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
MULTI_RANK = ["small_8ranks_3d.parquet", "tiny_2ranks_overlap.parquet", "small_2ranks_pp2_1f1b.parquet"]
ANALYZE = [sys.executable, "-m", "gpt2trace", "analyze"]


def _analyze(trace: Path, out: Path, *extra: str, processes: int = 1) -> dict:
    cmd = [*ANALYZE, str(trace), "--json", str(out), *extra]
    if processes > 1:
        cmd = [find_mpiexec(), "-n", str(processes), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict[str, dict]:
    """Each multi-rank sample analyzed whole by one process (its records fit one group)."""
    tmp = tmp_path_factory.mktemp("whole")
    return {name: _analyze(SAMPLES / name, tmp / f"{name}.json") for name in MULTI_RANK}


def test_plan_loads_small_traces_whole_and_splits_big_ones():
    path = SAMPLES / "small_8ranks_3d.parquet"
    counts = rank_records(path)
    assert plan(path) is None                                   # fits one group, one process
    [groups] = plan(path, group_records=max(counts.values()))
    assert [r for g in groups for r in g] == sorted(counts) and len(groups) > 1
    assert all(sum(counts[r] for r in g) <= max(counts.values()) for g in groups)
    blocks = plan(path, processes=3)
    assert len(blocks) == 3 and all(blocks)                    # every process gets groups
    assert [r for b in blocks for g in b for r in g] == sorted(counts)
    assert plan(SAMPLES / "missing.prv") is None                # other formats: imported whole


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=40), st.integers(1, 8))
def test_shares_are_consecutive_and_even_as_whole_ranks_allow(records, processes):
    counts = dict(enumerate(records))
    blocks = shares(counts, processes)
    assert len(blocks) == processes and [r for b in blocks for r in b] == list(counts)
    assert sum(1 for b in blocks if b) == min(len(counts), processes)
    # each cut is the rank boundary nearest its share of the running sum (or moved to leave a rank per block)
    ideal = sum(records) / processes
    if len(counts) >= processes and sum(records):
        assert max(sum(b.values()) for b in blocks) <= ideal + 2 * max(records)


@pytest.mark.parametrize("name", MULTI_RANK)
def test_groups_of_ranks_give_the_whole_result(name, whole, tmp_path):
    grouped = _analyze(SAMPLES / name, tmp_path / "g.json", "--group-records", "1000")
    assert grouped == whole[name]


@pytest.mark.parametrize("processes", [2, 3])
@pytest.mark.parametrize("name", MULTI_RANK[:2])
def test_mpiexec_gives_the_one_process_result(name, processes, whole, tmp_path):
    assert _analyze(SAMPLES / name, tmp_path / "m.json", processes=processes) == whole[name]


def test_mpiexec_task_trace(tmp_path):
    trace = SAMPLES / "tiny_2ranks_tasks.parquet"
    one = _analyze(trace, tmp_path / "one.json")
    assert _analyze(trace, tmp_path / "two.json", processes=2) == one


def test_mpiexec_error_is_one_line_from_process_0(tmp_path):
    out = tmp_path / "m.json"
    r = subprocess.run([find_mpiexec(), "-n", "2", *ANALYZE, str(SAMPLES / "tiny_2ranks_overlap.parquet"),
                        "--steps", "500:600", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "--steps" in lines[0], r.stderr
    assert not out.exists()


def test_mpiexec_tables_printed_once(tmp_path):
    r = subprocess.run([find_mpiexec(), "-n", "2", *ANALYZE, str(SAMPLES / "tiny_2ranks_overlap.parquet")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("POP efficiencies") == 1


@pytest.mark.parametrize("cores,prefetch", [(1, False), (2, True)])
def test_the_next_group_loads_ahead_only_with_a_core_to_spare(cores, prefetch, monkeypatch):
    import analysis.analyze
    from gpt2trace.cli.grouped import Processes, analyze_file

    asked = []
    real = analysis.analyze.analyze_groups

    def spy(*args, **kwargs):
        asked.append(kwargs["prefetch"])
        return real(*args, **kwargs)
    monkeypatch.setattr(analysis.analyze, "analyze_groups", spy)
    path = SAMPLES / "small_8ranks_3d.parquet"
    result, _ = analyze_file(path, Processes(cores=cores), None, 10, None,
                             group_records=max(rank_records(path).values()))
    assert asked == [prefetch] and result["summary"]
    assert Processes().cores == len(os.sched_getaffinity(0))
