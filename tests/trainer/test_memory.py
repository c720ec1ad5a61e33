"""The memory estimate is what the model allocates (hand-checked on the tiny model), and a run that cannot fit
is refused with the estimate and what is available."""
from __future__ import annotations

import pytest

import trainer.memory as memory
from trainer.config import model_config
from trainer.errors import TrainerError
from trainer.memory import MemoryEstimate, check_fits, estimate

TINY = model_config("tiny")      # L=2 NH=4 C=32 V=200 (Vp=256) maxT=32: 34,688 parameters


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
    assert estimate(TINY, 2, 16) == MemoryEstimate(parameters=138_752, training=555_008, activations=382_336)


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


def test_a_run_that_does_not_fit_is_refused_with_the_estimate(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 1 << 20)        # 1 MiB available
    assert check_fits(TINY, 2, 16).total == 937_344                         # 915.4 KiB fits in 1 MiB
    with pytest.raises(TrainerError) as err:
        check_fits(TINY, 2, 16, processes=2)                                # two ranks on this node do not
    assert str(err.value) == ("the run needs about 2 ranks x 915.4 KiB (parameters, gradients and AdamW moments "
                              "542.0 KiB, activations at B=2 T=16 373.4 KiB) but this machine has 1.0 MiB "
                              "available; lower -B/--batch-size, -T/--seq-len or the model size")


def test_absurd_sizes_are_estimated_not_overflowed():
    # -B 100000000 at T=16: the logits alone are 1.6e9 x 256 floats; Python ints, so no int64 wrap-around
    big = estimate(TINY, 100_000_000, 16)
    assert big.activations > 4 * 100_000_000 * 16 * 256 * 2 and big.total > 1 << 40     # over a TiB
