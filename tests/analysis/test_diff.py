"""The diff of two runs: hand-built traces with hand-computed changes and sentences, runs of different layouts
(2 ranks with MPI against 1 rank without), a run without steps, and the sample pairs (contiguous against
interleaved sequence split, GPipe against 1F1B)."""
from __future__ import annotations

from pathlib import Path

import pytest

from analysis.analyze import analyze
from analysis.diff import DiffError, diff
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
RUN, GROUP = State.RUNNING, State.GROUP_COMMUNICATION


def two_ranks(kernel_s: tuple[float, float], step_s: float) -> Trace:
    """2 ranks, 2 steps of `step_s`: matmul_forward (layer 0) for kernel_s[rank], then an MPI_Allreduce that
    every rank leaves at the step's end."""
    recs = []
    for step in (0, 1):
        t = step * step_s
        for rank, k in enumerate(kernel_s):
            recs += [syn.state(rank, 0, t, t + k, RUN), syn.state(rank, 0, t + k, t + step_s, GROUP),
                     syn.kernel(rank, 0, t, t + k, "matmul_forward", step, 0),
                     syn.phase(rank, t, t + k, "forward", step), syn.phase(rank, t + k, t + step_s, "grad_sync", step),
                     syn.comm(rank, t + k, t + step_s, "MPI_Allreduce", seq=step, nbytes=8, step=step)]
    return Trace.from_table(syn.from_records(recs))


def one_rank(kernel_s: float) -> Trace:
    recs = []
    for step in (0, 1):
        t = step * kernel_s
        recs += [syn.state(0, 0, t, t + kernel_s, RUN), syn.kernel(0, 0, t, t + kernel_s, "matmul_forward", step, 0),
                 syn.phase(0, t, t + kernel_s, "forward", step)]
    return Trace.from_table(syn.from_records(recs))


def test_imbalanced_against_balanced_hand_checked():
    # A: rank 0 computes 4 s, rank 1 8 s, the allreduce ends at 10 s (rank 0 waits 4 s). B: both 6 s, allreduce 1 s.
    a = analyze(two_ranks((4, 8), 10), steps="0:2")
    b = analyze(two_ranks((6, 6), 7), steps="0:2")
    d = diff(a, b)
    assert d["step_s"] == pytest.approx({"a": 10, "b": 7, "speedup": 10 / 7})
    rows = {(r["category"], r["name"], r["layer"], r["group"]): r for r in d["changes"]}

    def per_step(key):
        return [rows[key]["a_s"], rows[key]["b_s"], rows[key]["change_s"]]
    # per step and rank: the allreduce (6 + 2) / 2 = 4 s -> 1 s; its waits (4 + 0) / 2 = 2 s -> 0
    assert per_step(("mpi", "MPI_Allreduce", None, "world")) == pytest.approx([4, 1, -3])
    assert per_step(("mpi_wait", "MPI_Allreduce", None, "world")) == pytest.approx([2, 0, -2])
    # matmul_forward (4 + 8) / 2 = 6 s both times, but max/mean 8/6 -> 1
    assert per_step(("kernel", "matmul_forward", None, None)) == pytest.approx([6, 6, 0])
    assert per_step(("kernel_layer", "matmul_forward", 0, None)) == pytest.approx([6, 6, 0])
    assert [rows[("kernel", "matmul_forward", None, None)][k] for k in ("imbalance_a", "imbalance_b")] == \
        pytest.approx([8 / 6, 1.0])
    assert per_step(("phase", "grad_sync", None, None)) == pytest.approx([4, 1, -3])
    assert per_step(("state", "Group Communication", None, None)) == pytest.approx([4, 1, -3])
    assert per_step(("state", "Running", None, None)) == pytest.approx([6, 6, 0])
    impact = [abs(r["change_s"]) for r in d["changes"]]
    assert impact == sorted(impact, reverse=True)
    pop = {(p["level"], p["factor"]): p for p in d["pop"]}
    # load balance: mean useful / max useful = 6 / 8 -> 1; parallel efficiency 6 / 10 -> 6 / 7
    assert [pop[("all", "load_balance")][k] for k in ("a", "b", "change")] == pytest.approx([0.75, 1, 0.25])
    assert pop[("all", "parallel_efficiency")]["change"] == pytest.approx(6 / 7 - 0.6)
    assert d["sentences"] == [
        "B is 1.43x faster per step (10,000 -> 7,000 ms median step)",
        "Waits: MPI_Allreduce in the world communicator -2,000 ms/step (2,000 -> 0)",
        "Imbalance across ranks (max/mean): matmul_forward 1.33 -> 1.00",
        "POP: parallel efficiency 60.0% -> 85.7% (the factor that moved most)"]


def test_different_layouts_two_ranks_with_mpi_against_one_without():
    # B: one rank computing 6 s a step, no MPI: the allreduce and its waits go to 0, the layout line says so
    d = diff(analyze(two_ranks((4, 8), 10), steps="0:2"), analyze(one_rank(6), steps="0:2"))
    assert d["sentences"][:2] == ["B is 1.67x faster per step (10,000 -> 6,000 ms median step)",
                                  "Layout: ranks 2 -> 1"]
    rows = {(r["category"], r["name"], r["group"]): r for r in d["changes"]}
    assert [rows[("mpi", "MPI_Allreduce", "world")][k] for k in ("a_s", "b_s")] == pytest.approx([4, 0])
    # one rank: no imbalance across ranks to compare
    kern = rows[("kernel", "matmul_forward", None)]
    assert kern["imbalance_b"] is None and kern["change_s"] == pytest.approx(0)
    assert d["layout"] == {"ranks": [2, 1]}
    back = diff(analyze(one_rank(6), steps="0:2"), analyze(two_ranks((4, 8), 10), steps="0:2"))
    assert back["sentences"][0] == "B is 1.67x slower per step (6,000 -> 10,000 ms median step)"


def test_a_run_without_steps_is_refused():
    recs = [syn.state(0, 0, 0, 4, RUN), syn.kernel(0, 0, 0, 4, "matmul_forward", None, 0)]
    no_steps = analyze(Trace.from_table(syn.from_records(recs)))
    with pytest.raises(DiffError, match="^A .* has no analyzed step"):
        diff(no_steps, analyze(one_rank(6), steps="0:2"))


@pytest.fixture(scope="module")
def samples() -> dict[str, dict]:
    names = ("small_2ranks_sp_contiguous", "small_2ranks_sp_interleaved", "small_2ranks_pp2_gpipe",
             "small_2ranks_pp2_1f1b")
    return {n: analyze(load(SAMPLES / f"{n}.parquet")) for n in names}


def test_contiguous_against_interleaved_sequence_split(samples):
    d = diff(samples["small_2ranks_sp_contiguous"], samples["small_2ranks_sp_interleaved"])
    lines = d["sentences"]
    # measured on the samples: 72.0 -> 64.2 ms median step; the sequence group's allreduce waits 8.7 -> 0.3 ms and
    # attention's max/mean across the 2 ranks 1.38-1.39 -> 1.00-1.01 (the causal imbalance the split removes)
    assert lines[0].startswith("B is 1.1") and " faster per step (72 -> 64.2 ms" in lines[0]
    assert lines[1] == "Layout: sp_split contiguous -> interleaved"
    assert lines[2].startswith("Waits: MPI_Allreduce in the sequence group -8.")
    assert lines[3].startswith("Imbalance across ranks (max/mean): attention_")
    assert "attention_forward 1.38 -> 1.00" in lines[3] and "attention_backward 1.39 -> 1.01" in lines[3]
    assert lines[-1] == "POP: load balance 79.9% -> 99.8% (the factor that moved most)"
    waits = [r for r in d["changes"] if r["category"] == "mpi_wait"]
    assert waits[0]["group"] == "sp" and waits[0]["change_s"] < -0.005


def test_gpipe_against_1f1b(samples):
    d = diff(samples["small_2ranks_pp2_gpipe"], samples["small_2ranks_pp2_1f1b"])
    lines = d["sentences"]
    # measured: 65.8 -> 67.9 ms median step, bubble 24.9% -> 24.2% with 4 micro-batches: the schedules differ in
    # memory, not in time, at M = 4 on 2 stages
    assert lines[0] == "B is 1.03x slower per step (65.8 -> 67.9 ms median step)"
    assert lines[1] == "Layout: pp_schedule gpipe -> 1f1b"
    assert "Pipeline bubble: 24.9% (gpipe, M=4) -> 24.2% (1f1b, M=4)" in lines
    assert d["layout"] == {"pp_schedule": ["gpipe", "1f1b"]}


@pytest.mark.parametrize("a,b", [("small_2ranks_sp_contiguous", "small_2ranks_sp_interleaved"),
                                 ("small_2ranks_pp2_gpipe", "small_2ranks_pp2_1f1b")])
def test_diff_compares_nothing_that_analyze_explain_false_leaves_out(a, b):
    # `gpt2trace diff` analyzes with explain=False (no critical path, delay costs or communication matrix: 30% of
    # analyze's time on 1 M records): the comparison is the same as from the whole analyses
    traces = [load(SAMPLES / f"{name}.parquet") for name in (a, b)]
    lean = [analyze(t, explain=False) for t in traces]
    assert all(r["critical_path"] is None and r["comm_matrix"] is None and r["delay_costs"] is None
               and r["root_causes"] == [] for r in lean)
    assert diff(*lean) == diff(*[analyze(t) for t in traces])


def with_run(trace: Trace, run: dict) -> Trace:
    """`trace` with `run` as its run metadata (the model, the parallel settings)."""
    import json

    from gpt2trace.format import schema
    table = trace.table
    meta = {**(table.schema.metadata or {}), schema.META_RUN: json.dumps(run).encode()}
    return Trace.from_table(table.replace_schema_metadata(meta))


MODEL = {"n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 200, "max_seq_len": 32}


def test_different_models_come_first():
    # B: 3 layers and 64 channels against A's 2 and 32; the rest of the model the same
    a = with_run(one_rank(6), {"model": MODEL, "train": {"batch_size": 1, "seq_len": 32}})
    b = with_run(one_rank(6), {"model": {**MODEL, "n_layer": 3, "n_embd": 64},
                               "train": {"batch_size": 1, "seq_len": 32}})
    d = diff(analyze(a, steps="0:2"), analyze(b, steps="0:2"))
    assert d["models"] == {"n_layer": [2, 3], "n_embd": [32, 64]}
    assert d["sentences"][0] == ("A and B ran different models (n_layer 2 -> 3, n_embd 32 -> 64): their times per "
                                 "step are of different work")
    assert d["sentences"][1].startswith("B runs at A's speed per step")
    same = diff(analyze(a, steps="0:2"), analyze(a, steps="0:2"))
    assert same["models"] == {} and same["sentences"][0].startswith("B runs at A's speed")


def test_recompute_recorded_or_not_is_on_or_off():
    # A records no recompute (a trace of an older run): off, as B's explicit False; B2 recomputes
    par = {"ranks": 1, "threads": 1}
    a = analyze(with_run(one_rank(6), {"parallel": par}), steps="0:2")
    b = analyze(with_run(one_rank(6), {"parallel": {**par, "recompute": False}}), steps="0:2")
    assert diff(a, b)["layout"] == {} and not any("recompute" in s for s in diff(b, a)["sentences"])
    b2 = analyze(with_run(one_rank(6), {"parallel": {**par, "recompute": True}}), steps="0:2")
    d = diff(a, b2)
    assert d["layout"] == {"recompute": [False, True]}
    assert "Layout: recompute off -> on" in d["sentences"]
