"""`analyze` end to end on real traces from the trainer (sample_traces/): 1 thread, 2 threads, 2 MPI ranks.

Hand-built traces check the numbers; these check that real traces give a complete, consistent analysis whose
layout matches how the run was made, and that the MPI-specific parts appear exactly where MPI was used.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.analyze import analyze
from gpt2trace.cli.main import app
from gpt2trace.format.reader import load

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
CASES = {  # file: (ranks, threads per rank)
    "tiny_1thread.parquet": (1, 1),
    "tiny_2threads.parquet": (1, 2),
    "small_2threads.parquet": (1, 2),
    "tiny_2ranks_allreduce.parquet": (2, 1),
    "tiny_2ranks_overlap.parquet": (2, 1),
    "small_2ranks_sp_contiguous.parquet": (2, 1),
    "small_2ranks_sp_interleaved.parquet": (2, 1),
}


@pytest.mark.parametrize("name,layout", CASES.items(), ids=list(CASES))
def test_analysis_of_a_real_trace(name, layout):
    trace = load(SAMPLES / name)
    r = analyze(trace)
    s, p = r["summary"], r["pop"]
    assert (s["ranks"], s["threads_per_rank"]) == layout
    steps = trace.run["train"]["steps"]
    assert s["steps"] == steps - 1 and s["warmup_excluded"]          # step 0 left out as warm-up
    assert 0 < s["mfu"] < 1 and s["tokens_per_s"] > 0
    for key in ("parallel_efficiency", "load_balance", "communication_efficiency"):
        assert 0 < p[key] <= 1 + 1e-9, key
    assert p["parallel_efficiency"] == pytest.approx(p["load_balance"] * p["communication_efficiency"])
    lost = p["lost"]
    assert sum(v for k, v in lost.items() if k != "total" and v is not None) == pytest.approx(lost["total"])
    assert r["findings"] and all(f["text"] for f in r["findings"])
    assert sum(f["lost_fraction"] or 0 for f in r["findings"]) <= lost["total"] + 1e-12
    occ = r["occupancy"]
    assert 0 < occ["mean_occupancy"] <= layout[1]
    calls = {c["name"] for c in r["waits"]["calls"]}
    if layout[0] == 1:
        assert calls == set() and r["root_causes"] == []
        # no MPI: nothing to replay, no serialization or transfer to report
        assert p["ideal_runtime_s"] is None and p["mpi"]["serialization_efficiency"] is None
    else:
        assert "MPI_Allreduce" in calls and r["root_causes"]
        assert {row["scope"] for row in r["imbalance"]} >= {"ranks"}
        m = p["mpi"]
        assert 0 < m["serialization_efficiency"] <= 1 and 0 < m["transfer_efficiency"] <= 1
        assert m["communication_efficiency"] == pytest.approx(m["serialization_efficiency"] *
                                                              m["transfer_efficiency"])
        assert p["ideal_runtime_s"] <= p["runtime_s"] and not r["warnings"]
    if layout[1] == 1:
        # pure MPI (or serial): the thread level is exactly 1, and there are no OpenMP factors
        assert [p["threads"][k] for k in ("parallel_efficiency", "load_balance", "communication_efficiency")] \
            == [1.0, 1.0, 1.0]
        assert p["openmp"] is None
    else:
        # --threads 2: every kernel a parallel region, Python between them on the main thread. Serial code is
        # the largest loss, and the findings say so first.
        omp = p["openmp"]
        for key in ("thread_efficiency", "serial_region_efficiency", "region_efficiency", "region_load_balance",
                    "region_scheduling_efficiency"):
            assert 0 < omp[key] <= 1, key
        assert omp["regions"] >= s["steps"] * 20
        losses = [f for f in r["findings"] if f["lost_fraction"] is not None]
        assert losses[0]["metric"] == "pop.lost.serial_regions"
        assert losses[0]["text"].startswith("Serial code between parallel regions")


def test_overlapped_allreduce_reports_hidden_communication():
    r = analyze(load(SAMPLES / "tiny_2ranks_overlap.parquet"))
    iall = next(c for c in r["waits"]["calls"] if c["name"] == "MPI_Iallreduce")
    # 2 layers + the non-layer bucket per step, on 2 ranks, over the 5 analyzed steps
    assert iall["count"] == 3 * 2 * 5
    assert 0 <= iall["hidden_fraction"] <= 1 and iall["inflight_s"] > 0
    assert "MPI_Scatter" in {c["name"] for c in r["waits"]["calls"]}     # --data-loading scatter


def test_cli_json_on_a_real_mpi_trace():
    out = CliRunner().invoke(app, ["analyze", str(SAMPLES / "tiny_2ranks_allreduce.parquet"), "--json", "-"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.stdout)
    assert d["summary"]["ranks"] == 2 and d["pop"]["mpi"]["parallel_efficiency"] <= 1


def test_a_real_task_trace_reads_as_tasks_in_the_findings():
    # the 2-rank task sample: its thread-level loss is worded for task graphs, the task findings follow it, and no
    # finding calls a kernel's tasks "imbalanced across the threads" (no barrier ends a kernel under tasks)
    r = analyze(load(SAMPLES / "tiny_2ranks_tasks.parquet"))
    assert r["tasks"] is not None and r["tasks"]["totals"]["tasks"] > 0
    texts = [f["text"] for f in r["findings"]]
    thread_level = next(i for i, f in enumerate(r["findings"]) if f["metric"] == "pop.lost.region_scheduling")
    assert texts[thread_level].startswith("Inside the task graphs")
    assert r["findings"][thread_level + 1]["metric"].startswith("tasks.totals.")
    assert not any("across the threads" in t or "parallel regions" in t for t in texts)
    assert not any(f["metric"].startswith("occupancy.per_kernel") for f in r["findings"])


# Keys whose values count or number things: ints (or None) wherever they appear in a result.
INTEGER_KEYS = {"rank", "thread", "layer", "step", "microstep", "block", "task", "count", "calls", "tasks", "waits",
                "messages", "bytes", "peer", "stage", "ranks", "threads"}


def _floats_for_ints(obj, path: str = "") -> list[str]:
    """Where an integer key holds a float (a layer 7.0), as paths into the result."""
    if isinstance(obj, dict):
        return [f"{path}.{k}" for k, v in obj.items() if k in INTEGER_KEYS and isinstance(v, float)] + [
            p for k, v in obj.items() for p in _floats_for_ints(v, f"{path}.{k}")]
    if isinstance(obj, list):
        return [p for v in obj for p in _floats_for_ints(v, path)]
    return []


@pytest.mark.parametrize("name", ["tiny_2ranks_allreduce.parquet", "tiny_2ranks_tasks.parquet",
                                  "small_2ranks_pp2_1f1b.parquet"])
def test_layers_and_counts_are_integers_in_every_table(name):
    """A kernel's layer, a rank, a count... is an int (None where there is none) in every table, also in one that
    holds both ints and Nones: pandas 3 turns a nullable integer column with NAs into floats (a layer 7.0), and a
    column built from ints and Nones is float too."""
    out = analyze(load(SAMPLES / name))
    layers = [r["layer"] for r in out["occupancy"]["per_kernel"]]
    assert None in layers and any(v is not None for v in layers)         # a table holding both, checked below
    assert _floats_for_ints(out) == []
