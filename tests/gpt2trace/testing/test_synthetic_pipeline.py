"""Synthetic pipeline traces: the schedules as the papers give them, the trace invariants of real traces, matched
messages, and the timing contract (a stage computes a micro-batch only after its neighbour sent it)."""
from __future__ import annotations

import numpy as np
import pytest

from gpt2trace.format.reader import Trace, check_states
from gpt2trace.format.schema import MICROSTEP, NAME, PEER, RANK, START_NS, STEP, Kind, Phase
from gpt2trace.testing import synthetic_pipeline as sp
from gpt2trace.testing.invariants import check_messages, check_ranks, records


def ops(text: str) -> list[tuple[str, int]]:
    return [(t[0], int(t[1:])) for t in text.split()]


@pytest.mark.parametrize("stage, stages, micro, kind, first, want", [
    # 1F1B (PipeDream-Flush): stage k warms up with min(P-k-1, M) forwards, then one forward one backward
    (0, 4, 8, sp.ONE_F_ONE_B, True, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7"),
    (2, 4, 8, sp.ONE_F_ONE_B, True, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7"),
    (3, 4, 8, sp.ONE_F_ONE_B, True, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"),
    (0, 4, 2, sp.ONE_F_ONE_B, True, "F0 F1 B0 B1"),                   # fewer micro-batches than warm-up slots
    (0, 2, 3, sp.GPIPE, True, "F0 F1 F2 B0 B1 B2"),                    # Megatron's order: B0 first
    (1, 2, 3, sp.GPIPE, False, "F0 F1 F2 B2 B1 B0"),
])
def test_schedules(stage, stages, micro, kind, first, want):
    assert sp.schedule(stage, stages, micro, kind, first) == ops(want)


def test_stages_split_the_layers_and_the_model_ends():
    assert [list(sp.stage_layers(k, 2, 5)) for k in range(2)] == [[0, 1, 2], [3, 4]]
    cfg = sp.PipelineConfig(stages=3, layers=3)
    kernels = [sp.stage_kernels(cfg, k) for k in range(3)]
    assert kernels[0][0][0] == ("encoder_forward", -1) and kernels[0][2][-1] == ("encoder_backward", -1)
    assert kernels[2][0][-1] == ("crossentropy_forward", -1) and kernels[2][2][0] == ("crossentropy_backward", -1)
    assert {lay for _, lay in kernels[1][0]} == {1}                 # the middle stage: its layer only
    assert kernels[1][1] == kernels[1][0]                           # recompute: the layer's forward again


CONFIGS = [
    sp.PipelineConfig(stages=2, micro_batches=4),
    sp.PipelineConfig(stages=4, pipelines=2, micro_batches=8, threads=2, recompute=True),
    sp.PipelineConfig(stages=4, micro_batches=1, schedule=sp.GPIPE, backward_first=False, slow_stage=(2, 1.7)),
    sp.PipelineConfig(stages=1, pipelines=2, micro_batches=2),      # no pipeline: data parallelism only
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"P{c.stages}xD{c.pipelines}_M{c.micro_batches}_{c.schedule}")
def test_traces_pass_the_invariants(cfg):
    trace = Trace.from_table(sp.generate(cfg))
    assert check_states(trace) == []
    check_ranks(trace, cfg.threads, cfg.layers, cfg.micro_batches)     # states partition every thread's span, ...
    check_messages(trace)                                                # every Isend has its Recv on the peer
    ph = trace.records(Kind.PHASE).to_pandas()
    per_rank_step = ph[ph[NAME] == Phase.FORWARD].groupby([RANK, STEP]).size()
    assert (per_rank_step == cfg.micro_batches).all() and len(per_rank_step) == cfg.ranks * cfg.steps


def test_communicators_follow_the_grid():
    cfg = sp.PipelineConfig(stages=4, pipelines=2)
    table = {c.name: [] for c in sp.communicator_table(cfg)}
    for c in sp.communicator_table(cfg):
        table[c.name].append(c.ranks)
    # rank = stage x D + pipeline: pipeline 0 is ranks 0, 2, 4, 6 in stage order
    assert table == {"world": [tuple(range(8))], "pp": [(0, 2, 4, 6), (1, 3, 5, 7)],
                     "dp": [(0, 1), (2, 3), (4, 5), (6, 7)], "embed": [(0, 6), (1, 7)]}


def test_a_stage_computes_a_micro_batch_after_its_neighbour_sent_it():
    cfg = sp.PipelineConfig(stages=3, micro_batches=3, steps=2)
    trace = Trace.from_table(sp.generate(cfg))
    comm = records(trace, Kind.COMM)
    kern = records(trace, Kind.KERNEL)
    sends = comm[comm[NAME] == sp.ISEND]
    for (rank, step, micro), sent in sends.groupby([RANK, STEP, MICROSTEP]):
        peer = int(sent[PEER].iloc[0])
        forward = peer > rank                       # one pipeline: rank = stage
        theirs = kern[(kern[RANK] == peer) & (kern[STEP] == step) & (kern[MICROSTEP] == micro)
                      & kern[NAME].str.endswith("_forward" if forward else "_backward")]
        # the receiver's kernels for that micro-batch start once the message arrived: send start + transfer
        assert theirs[START_NS].min() >= sent[START_NS].iloc[0] + cfg.transfer_ns


def test_no_noise_every_step_of_a_rank_repeats_itself():
    # The stages are tied at each step's end (embedding sync), so steps after the first repeat exactly: tests can
    # work out one step by hand.
    trace = Trace.from_table(sp.generate(sp.PipelineConfig(stages=2, micro_batches=2, steps=3)))
    ph = records(trace, Kind.PHASE)
    mine = ph[ph[RANK] == 0]
    starts = [mine[mine[STEP] == s][START_NS].to_numpy() for s in range(3)]
    assert np.array_equal(starts[2] - starts[2][0], starts[1] - starts[1][0])


def test_config_refuses_what_no_pipeline_is():
    with pytest.raises(ValueError, match="schedule"):
        sp.PipelineConfig(schedule="interleaved")
    with pytest.raises(ValueError, match="cannot fill"):
        sp.PipelineConfig(stages=4, layers=2)
