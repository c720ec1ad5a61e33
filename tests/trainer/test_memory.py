"""The memory estimate is what the model allocates (hand-checked on the tiny model), plus MPI's temporary in the
gradient sync and the measured per-process baseline; a run that cannot fit is refused with the estimate and what
is available."""
from __future__ import annotations

import pytest

import trainer.memory as memory
from trainer.config import DPSync, model_config
from trainer.errors import TrainerError
from trainer.memory import (
    MIB,
    PROCESS_BASELINE,
    SHARED_LIBRARIES,
    MemoryEstimate,
    check_fits,
    check_room,
    estimate,
    sync_bytes,
)
from trainer.parallel.stages import plan
from trainer.parallel.tensor import TensorShard
from trainer.params import ParamLayout

TINY = model_config("tiny")      # L=2 NH=4 C=32 V=200 (Vp=256) maxT=32: 34,688 parameters
TINY4 = model_config("tiny", n_layer=4)     # 9,280 outside the layers + 4 x 12,704 = 60,096 parameters


def test_the_tiny_models_estimate_by_hand():
    # B=2 T=16: BT=32. Activations (float32 elements), per layer: ln1 1,024 + mean 32 + rstd 32, qkv 3,072,
    #   atty 1,024, preatt and att 2,048 each (B NH T T), attproj and residual2 1,024 each, ln2 1,024 + 32 + 32,
    #   fch and fch_gelu 4,096 each, fcproj and residual3 1,024 each = 22,656, x 2 layers = 45,312; outside the
    #   layers: encoded 1,024, lnf 1,024 + 32 + 32, logits and probs 8,192 each (BT x Vp), losses 32 = 18,528
    #   -> 63,840
    # one layer's activation gradients: BT x 17C = 17,408; scratch: dresidual, dlnf 1,024 each, dlogits 8,192,
    #   dpreatt, datt 2,048 each -> 14,336
    # -> (63,840 + 17,408 + 14,336) x 4 bytes = 382,336; parameters 34,688 x 4 = 138,752, and with gradients
    #   and both AdamW moments x 4 = 555,008
    # one process, no MPI: nothing in the sync, no whole model kept beside a stage
    assert estimate(TINY, 2, 16) == MemoryEstimate(parameters=138_752, training=555_008, activations=382_336,
                                                   sync=0, initial=0, baseline=PROCESS_BASELINE,
                                                   shared=SHARED_LIBRARIES)


@pytest.mark.parametrize("B,T", [(2, 16), (3, 7)])
def test_the_estimate_is_what_the_model_allocates(B, T):
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.params import init_params
    model = GPT2(TINY, init_params(TINY, 1), B, T, Launcher(1))
    assert estimate(TINY, B, T).activations == model.activation_bytes


def test_the_sequence_parallel_estimate_by_hand():
    # --sp 2 at B=2 T=16: a rank holds 8 positions (BT = 16). Against the whole-sequence B=2 T=16 above: every
    # token-local buffer halves; qkv keeps the group's 2 x 16 rows (3,072 per layer); preatt, att, dpreatt, datt
    # are (2, 4, 8, 16) = 1,024 each instead of 2,048. Per layer 22,656 - (22,656 - 3,072 - 4,096) / 2
    # - 2 x 1,024 = 12,864, x 2 = 25,728; outside the layers 18,528 / 2 = 9,264 -> 34,992. Layer gradients
    # 17,408 / 2 = 8,704; scratch 512 + 512 + 4,096 + 1,024 + 1,024 = 7,168. The dK/dV exchange: the group's
    # 32 rows x 2C = 2,048, and with reduce-scatter this rank's 16 rows x 2C = 1,024 more.
    # -> (34,992 + 8,704 + 7,168 + 2,048) x 4 = 211,648 bytes; + 4,096 with reduce-scatter
    assert estimate(TINY, 2, 16, 2).activations == 211_648
    assert estimate(TINY, 2, 16, 2, own_rows=True).activations == 211_648 + 4_096


@pytest.mark.parametrize("S,own_rows", [(2, False), (4, True)])
def test_the_sequence_parallel_estimate_is_what_a_rank_allocates(S, own_rows):
    from trainer.config import SPReduce
    from trainer.launcher import Launcher
    from trainer.model import GPT2
    from trainer.parallel.sequence import SequenceParallel
    from trainer.parallel.split import SequenceSplit
    from trainer.params import init_params

    class OneGroup:      # SequenceParallel only asks a communicator for its size when it is built
        def Get_size(self):
            return S

    seq = SequenceParallel(SequenceSplit(16, S), 0, 2, TINY, Launcher(1), OneGroup(),
                           SPReduce.reduce_scatter if own_rows else SPReduce.allreduce)
    model = GPT2(TINY, init_params(TINY, 1), 2, 16, Launcher(1), seq=seq)
    assert estimate(TINY, 2, 16, S, own_rows).activations == model.activation_bytes + seq.nbytes


def test_a_rank_counts_its_process_baseline_and_a_node_the_libraries_once():
    # the buffers of tiny at B=2 T=16 are 937,344 bytes (above); a rank's peak adds its own baseline and the
    # libraries it maps; 8 ranks on a node map the same libraries: counted once
    need = estimate(TINY, 2, 16)
    assert need.model == 937_344
    assert need.process == 937_344 + PROCESS_BASELINE
    assert need.total == 937_344 + PROCESS_BASELINE + SHARED_LIBRARIES
    assert need.on_node(8) == 8 * (937_344 + PROCESS_BASELINE) + SHARED_LIBRARIES
    # measured on this project's machine (benchmarks/memory_estimate.py): a tiny rank peaks at 276-312 MiB, of
    # which ~130-155 MiB its own and ~133-157 MiB libraries; the estimate of a rank must be within 25% of that
    assert 0.75 * 276 * MIB <= need.total <= 1.25 * 312 * MIB


def test_tiny_ranks_that_fit_only_without_the_baseline_are_refused():
    # tiny at B=4 T=32: 2,280,960 bytes of buffers a rank. 21 GiB held 9,000 of them when only the buffers were
    # counted (19.1 GiB); with the baseline each takes ~137 MiB, and the libraries once, so ~155 fit
    need, have = estimate(TINY, 4, 32), 21 << 30
    assert need.model == 2_280_960 and 9_000 * need.model < have
    with pytest.raises(TrainerError, match="the run needs about 9000 ranks x "):
        check_room(need, have, 9_000, 4, 32)
    most = (have - SHARED_LIBRARIES) // need.process
    assert 100 < most < 200
    assert check_room(need, have, most, 4, 32) is need
    with pytest.raises(TrainerError):
        check_room(need, have, most + 1, 4, 32)


def test_the_refusal_names_each_part_it_counted():
    # 2 ranks x (555,008 + 382,336 + 69,376 + 100 MiB) = 2 x 105,864,320 bytes, + 50 MiB of libraries =
    # 264,157,440 bytes (251.9 MiB) > 200 MiB; 105,864,320 bytes = 101.0 MiB, 69,376 bytes = 67.8 KiB
    need = MemoryEstimate(parameters=138_752, training=555_008, activations=382_336, sync=69_376,
                          baseline=100 * MIB, shared=50 * MIB)
    assert need.on_node(2) == 264_157_440
    with pytest.raises(TrainerError) as err:
        check_room(need, 200 * MIB, 2, 2, 16)
    assert str(err.value) == ("the run needs about 2 ranks x 101.0 MiB (parameters, gradients and AdamW moments "
                              "542.0 KiB, activations at B=2 T=16 373.4 KiB, MPI's gradient-sync temporary 67.8 KiB, "
                              "per-process baseline 100.0 MiB) + 50.0 MiB of shared libraries, but this machine has "
                              "200.0 MiB available; lower -B/--batch-size, -T/--seq-len, the model size or the ranks "
                              "on this node")
    # one process: no "ranks x", no temporary of a sync it does not make
    alone = MemoryEstimate(parameters=138_752, training=555_008, activations=382_336, baseline=100 * MIB,
                           shared=50 * MIB)
    with pytest.raises(TrainerError) as err:
        check_room(alone, 100 * MIB, 1, 2, 16)
    assert str(err.value) == ("the run needs about 100.9 MiB (parameters, gradients and AdamW moments 542.0 KiB, "
                              "activations at B=2 T=16 373.4 KiB, per-process baseline 100.0 MiB) + 50.0 MiB of "
                              "shared libraries, but this machine has 100.0 MiB available; lower -B/--batch-size, "
                              "-T/--seq-len or the model size")
    assert check_room(alone, None, 10**6, 2, 16) is alone        # the available memory unknown: nothing refused


def test_check_fits_counts_the_node_against_the_available_memory(monkeypatch):
    need = estimate(TINY, 2, 16, dp_sync=DPSync.allreduce, grad_ranks=2)
    monkeypatch.setattr(memory, "available_bytes", lambda: need.on_node(2))
    assert check_fits(TINY, 2, 16, processes=2, grad_ranks=2) == need
    monkeypatch.setattr(memory, "available_bytes", lambda: need.on_node(2) - 1)
    with pytest.raises(TrainerError, match="the run needs about 2 ranks x "):
        check_fits(TINY, 2, 16, processes=2, grad_ranks=2)


@pytest.mark.parametrize("sync,ranks,expected", [
    # tiny's 34,688 gradients are 138,752 bytes; its bucket's larger part is one layer, 12,704 floats (the
    # 9,280 outside the layers are fewer). MPICH 5.0.2, measured (benchmarks/memory_estimate.py):
    (DPSync.allreduce, 1, 0),                   # one rank: no sync
    (DPSync.allreduce, 2, 69_376),              # half the buffer over a power of two of ranks
    (DPSync.allreduce, 8, 69_376),
    (DPSync.allreduce, 3, 138_752),             # the whole buffer otherwise
    (DPSync.overlap, 4, 69_376),                # the per-layer MPI_Iallreduce, all in flight: the same
    (DPSync.reduce_bcast, 2, 208_128),          # MPI_Reduce: 1.5 buffers on the ranks but the root
    (DPSync.zero1, 4, 69_376),                  # MPI_Reduce_scatter: 2/N of the buffer
    (DPSync.zero2, 2, 50_816),                  # 2/N of 12,704 x 4 bytes
])
def test_the_gradient_syncs_mpi_temporary_by_hand(sync, ranks, expected):
    assert sync_bytes(ParamLayout.for_model(TINY), sync, ranks) == expected
    assert estimate(TINY, 2, 16, dp_sync=sync, grad_ranks=ranks).sync == expected


def test_a_stage_or_a_shard_counts_the_whole_models_parameters_it_was_taken_from():
    # every rank builds the whole model's 60,096 parameters and the run keeps them beside its stage (measured:
    # d12 --tp 2 peaks 475 MiB, 4 x P, above its own buffers): 240,384 bytes
    assert estimate(TINY4, 2, 16).initial == 0
    assert estimate(TINY4, 2, 16, stage=plan(TINY4, 16, 2)[1]).initial == 240_384
    assert estimate(TINY4, 2, 16, tp=TensorShard(2, 0)).initial == 240_384


def test_absurd_sizes_are_estimated_not_overflowed():
    # -B 100000000 at T=16: the logits alone are 1.6e9 x 256 floats; Python ints, so no int64 wrap-around
    big = estimate(TINY, 100_000_000, 16)
    assert big.activations > 4 * 100_000_000 * 16 * 256 * 2 and big.total > 1 << 40     # over a TiB
