"""The training state in one process: gathered from the optimizer, written, loaded into a fresh run, which then
continues bit for bit; when the training loop saves. (Every --dp-sync layout under mpiexec:
tests/gpt2trace/run/test_resume.py.)"""
from __future__ import annotations

import numpy as np
import pytest

from trainer.checkpoint import read_checkpoint_crc, write_checkpoint
from trainer.config import MODELS, TrainConfig
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import Local
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.parallel.grid import RankGrid
from trainer.params import init_params
from trainer.state_file import Fingerprint, check_pair, read_state_header, state_path, write_state
from trainer.train import save_due, train
from trainer.training_state import gather_state, held_range, load_state

TINY = MODELS["tiny"]
B, T = 2, 16


def _tcfg(steps: int) -> TrainConfig:
    return TrainConfig(batch_size=B, seq_len=T, steps=steps, lr=1e-3, weight_decay=0.1, grad_accum=2, seed=3)


def _model(params: np.ndarray) -> tuple[GPT2, Local, TokenLoader]:
    launcher = Launcher(2)
    model = GPT2(TINY, params, B, T, launcher)
    return model, Local(model, _tcfg(4), launcher), TokenLoader(synthetic_corpus(TINY.vocab_size, 4096, 3), B, T)


class _Saver:
    """The checkpoint hook as the runner's, writing the pair with the trainer's functions alone."""
    every, nbytes = 2, 0

    def __init__(self, model, dp, path):
        self.model, self.dp, self.path, self.saved = model, dp, path, []

    def save(self, next_step: int) -> None:
        state = gather_state(self.model, self.dp, RankGrid.single(), next_step)
        crc = write_checkpoint(self.path, state.model, state.params)
        write_state(state_path(self.path), state.m, state.v, state.t, state.next_step, crc,
                    Fingerprint.of(TINY, _tcfg(4), 1, None), {})
        self.saved.append(next_step)


def test_a_run_resumed_from_its_state_continues_bit_for_bit(tmp_path):
    model, dp, data = _model(init_params(TINY, 3))
    whole = [m.loss for m in train(model, data, _tcfg(4), dp)]
    whole_params, whole_m = model.params.copy(), dp.opt.m.copy()

    model, dp, data = _model(init_params(TINY, 3))
    saver = _Saver(model, dp, tmp_path / "ck.bin")
    first = [m.loss for m in train(model, data, _tcfg(2), dp, checkpoint=saver)]
    assert saver.saved == [2]                              # after step 1: the 2nd and the last

    cfg, params, crc = read_checkpoint_crc(tmp_path / "ck.bin")
    saved = read_state_header(state_path(tmp_path / "ck.bin"))
    check_pair(tmp_path / "ck.bin", cfg, crc, saved)
    model, dp, data = _model(params)
    load_state(saved, dp)
    assert dp.opt.t == saved.t == 2 and saved.next_step == 2
    rest = train(model, data, _tcfg(4), dp, start_step=saved.next_step)
    assert [m.step for m in rest] == [2, 3]
    assert first + [m.loss for m in rest] == whole         # == : bit for bit
    np.testing.assert_array_equal(model.params, whole_params)
    np.testing.assert_array_equal(dp.opt.m, whole_m)


def test_without_its_state_the_resumed_run_differs(tmp_path):
    # the same weights with fresh moments (what --init-from does) do not continue the run: the state matters
    model, dp, data = _model(init_params(TINY, 3))
    whole = [m.loss for m in train(model, data, _tcfg(4), dp)]
    model, dp, data = _model(init_params(TINY, 3))
    train(model, data, _tcfg(2), dp)
    model, dp, data = _model(model.params.copy())
    assert [m.loss for m in train(model, data, _tcfg(4), dp, start_step=2)] != whole[2:]


def test_one_process_holds_every_moment():
    model, dp, _ = _model(init_params(TINY, 3))
    assert held_range(dp) == (0, model.layout.size)
    state = gather_state(model, dp, RankGrid.single(), 5)
    assert state.m is dp.opt.m and state.v is dp.opt.v and state.params is model.params   # no copies
    assert (state.t, state.next_step, state.model) == (0, 5, TINY)


# (step counted from 0, every, total steps, saves?)
DUE = [(0, 0, 3, False), (2, 0, 3, True),                   # only the last without --save-every
       (1, 2, 5, True), (2, 2, 5, False), (3, 2, 5, True), (4, 2, 5, True),  # every 2nd and the last
       (0, 1, 3, True), (5, 3, 6, True)]


@pytest.mark.parametrize("step,every,steps,due", DUE)
def test_saves_after_every_kth_step_and_the_last(step, every, steps, due):
    assert save_due(step, every, steps) is due
