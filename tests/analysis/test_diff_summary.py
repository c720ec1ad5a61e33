"""`summarize`, diff's light path, against `analyze(explain=False)`, the path diff took before: the parts diff reads
are equal value for value, and so is the whole diff, on every sample trace, on sample pairs of different layouts
or schedules, and on synthetic traces (imbalanced ranks and threads, one thread, no MPI, a step window)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from analysis.analyze import analyze
from analysis.diff import diff
from analysis.diff_summary import summarize
from gpt2trace.format.reader import Trace, load
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SAMPLE_FILES = sorted(p.name for p in SAMPLES.glob("*.parquet"))
BASE = syn.SyntheticConfig(ranks=4, threads=3, steps=4, layers=2, seed=3)
SYNTHETIC = {
    "balanced": BASE,
    "late rank, slow thread, serial work": replace(BASE, late_rank=(1, 1.4), slow_thread=(2, 2, 1.3),
                                                   serial_ns=50_000),
    "one thread per rank": replace(BASE, threads=1, late_rank=(3, 1.2)),
    "one rank without MPI": replace(BASE, ranks=1, allreduce=False),
    "no metadata": replace(BASE, metadata=False, seed=5),
}
PAIRS = [("small_2ranks_sp_contiguous.parquet", "small_2ranks_sp_interleaved.parquet"),
         ("small_2ranks_pp2_gpipe.parquet", "small_2ranks_pp2_1f1b.parquet"),
         ("tiny_2threads.parquet", "tiny_2ranks_allreduce.parquet"),
         ("small_2ranks_tp2.parquet", "small_8ranks_3d.parquet")]


def same_parts(light: dict, full: dict) -> None:
    """What diff reads: equal in both (per-kernel rows compared by kernel and layer: analyze sorts them by
    synchronization time, which summarize does not compute)."""
    for key in ("trace", "summary", "pop", "parallel", "pipeline"):
        assert light[key] == full[key], key
    assert light["waits"]["calls"] == full["waits"]["calls"]
    assert light["states"]["totals"] == full["states"]["totals"]

    def by_kernel(rows):
        return sorted(({k: r[k] for k in ("kernel", "layer", "wall_s")} for r in rows),
                      key=lambda r: (r["kernel"], r["layer"] is not None, r["layer"] or 0))
    assert by_kernel(light["occupancy"]["per_kernel"]) == by_kernel(full["occupancy"]["per_kernel"])
    ranks_rows = [{k: v for k, v in r.items() if k != "cause"} for r in full["imbalance"]
                  if r["scope"] == "ranks" and r["layer"] is None]
    assert light["imbalance"] == ranks_rows


def same_diff(a: Trace, b: Trace, steps: str | None = None) -> dict:
    light = diff(summarize(a, steps), summarize(b, steps))
    full = diff(analyze(a, steps, explain=False), analyze(b, steps, explain=False))
    assert json.dumps(light) == json.dumps(full)          # the same numbers to the last bit, the same sentences
    return light


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_sample_traces(name):
    trace = load(SAMPLES / name)
    same_parts(summarize(trace), analyze(trace, explain=False))
    same_diff(trace, trace)


@pytest.mark.parametrize("a, b", PAIRS, ids=[f"{a} vs {b}" for a, b in PAIRS])
def test_sample_pairs(a, b):
    result = same_diff(load(SAMPLES / a), load(SAMPLES / b))
    assert any(r["change_s"] != 0 for r in result["changes"])       # two different runs: something changed


@pytest.mark.parametrize("label", SYNTHETIC)
def test_synthetic(label):
    trace = Trace.from_table(syn.generate(SYNTHETIC[label]))
    same_parts(summarize(trace), analyze(trace, explain=False))
    same_parts(summarize(trace, "2:4"), analyze(trace, "2:4", explain=False))


def test_synthetic_pair_imbalance_moves():
    """A late rank in B only: the kernels' imbalance across ranks moves, in both paths alike."""
    a = Trace.from_table(syn.generate(BASE))
    b = Trace.from_table(syn.generate(replace(BASE, late_rank=(1, 1.5))))
    result = same_diff(a, b)
    moved = [r for r in result["changes"] if r["category"] == "kernel" and r["imbalance_b"] is not None
             and r["imbalance_a"] is not None and r["imbalance_b"] - r["imbalance_a"] > 0.05]
    assert moved                     # rank 1's blocks 1.5x longer: max/mean of 4 ranks about 1.5 / 1.125 = 1.33
