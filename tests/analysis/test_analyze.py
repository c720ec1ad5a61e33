import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze, analyze_many
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.testing import synthetic

KEYS = {
    "summary": {"runtime_s", "steps", "ranks", "threads_per_rank", "step_s_median", "tokens_per_s",
                "achieved_gflops", "mfu"},
    "pop": {"parallel_efficiency", "load_balance", "communication_efficiency", "serialization_efficiency",
            "transfer_efficiency", "mpi", "threads", "openmp", "lost", "useful_total_s", "useful_ideal_max_s",
            "ideal_runtime_s", "replay"},
}


def test_json_keys_and_input_untouched(late_rank):
    before = dict(late_rank.parts)
    copies = {k: t.to_pandas() for k, t in before.items()}
    out = analyze(late_rank)
    json.dumps(out)                                   # plain Python values only
    for key, sub in KEYS.items():
        assert sub <= set(out[key])
    level = {"parallel_efficiency", "load_balance", "communication_efficiency"}
    assert set(out["pop"]["threads"]) == level
    assert set(out["pop"]["mpi"]) == level | {"serialization_efficiency", "transfer_efficiency"}
    assert {"imbalance", "waits", "root_causes", "occupancy", "findings"} <= set(out)
    for kind, table in late_rank.parts.items():
        assert table is before[kind] and table.to_pandas().equals(copies[kind])


def test_several_traces_have_a_scaling_table(late_rank, serial):
    out = analyze_many([late_rank, serial])
    assert len(out["traces"]) == 2
    row = out["scaling"][1]
    assert set(row) >= {"processes", "threads", "speedup", "parallel_efficiency", "load_balance",
                        "communication_efficiency", "computation_scalability", "global_efficiency"}
    assert out["scaling"][0]["speedup"] == 1.0


configs = st.builds(
    synthetic.SyntheticConfig,
    ranks=st.integers(1, 3), threads=st.integers(1, 4), steps=st.integers(1, 3), layers=st.integers(1, 2),
    seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.5), allreduce=st.booleans(),
    serial_ns=st.integers(0, 300_000), metadata=st.booleans(),
    slow_thread=st.one_of(st.none(), st.tuples(st.just(0), st.just(0), st.floats(1.0, 3.0))),
)


@settings(max_examples=25, deadline=None)
@given(configs)
def test_properties_on_random_traces(cfg):
    trace = Trace.from_table(synthetic.generate(cfg))
    assert check_states(trace) == []                   # the generator writes valid partitions
    out = analyze(trace)
    occ = out["occupancy"]
    for row in occ["per_rank"]:
        assert 0 <= row["mean_occupancy"] <= cfg.threads + 1e-9
        assert 0 <= row["serial_fraction"] <= 1
    for series in occ["timeline"]["ranks"].values():
        assert all(-1e-9 <= v <= cfg.threads + 1e-9 for v in series)
    per_rank_levels = {}
    for row in occ["levels"]:
        per_rank_levels[row["rank"]] = per_rank_levels.get(row["rank"], 0) + row["seconds"]
    assert np.allclose(list(per_rank_levels.values()), out["pop"]["runtime_s"])
    for row in occ["per_kernel"]:
        assert 0 < row["mean_occupancy"] <= cfg.threads + 1e-9
    for row in out["imbalance"]:
        assert row["imbalance"] >= 1 - 1e-9 and row["lost_s"] > 0
    assert out["summary"]["mfu"] is None or 0 < out["summary"]["mfu"]
    if out["waits"]["total_wait_s"] > 0:
        assert sum(r["share"] for r in out["root_causes"]) == pytest.approx(1.0)
