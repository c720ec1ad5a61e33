"""The frozen configs refuse values out of range with a ConfigError naming the field (the CLI maps the field to
its option: tests/gpt2trace/cli/test_cli_run.py), including the values that pass a careless `<= 0` check: NaN,
infinities, booleans and non-integers."""
from __future__ import annotations

import math

import pytest

from trainer.config import ModelConfig, ParallelConfig, TrainConfig, model_config
from trainer.errors import ConfigError

TINY = model_config("tiny")

# (config class, keyword arguments, field named, words of the requirement)
BAD = [
    (ModelConfig, {"n_layer": 0}, "n_layer", "integer >= 1"),
    (ModelConfig, {"n_layer": 2.5}, "n_layer", "integer >= 1"),
    (ModelConfig, {"n_layer": True}, "n_layer", "integer >= 1"),
    (ModelConfig, {"vocab_size": 1}, "vocab_size", "at least 2 tokens"),
    (ModelConfig, {"n_head": 5}, "n_head", "must divide n_embd (768)"),
    (TrainConfig, {"batch_size": 0}, "batch_size", "integer >= 1"),
    (TrainConfig, {"steps": -1}, "steps", "integer >= 0"),
    (TrainConfig, {"seed": -1}, "seed", "integer >= 0"),
    (TrainConfig, {"lr": math.nan}, "lr", "finite number >= 0"),
    (TrainConfig, {"lr": math.inf}, "lr", "finite number >= 0"),
    (TrainConfig, {"weight_decay": -0.1}, "weight_decay", "finite number >= 0"),
    (TrainConfig, {"beta1": 1.0}, "beta1", "in [0, 1)"),
    (TrainConfig, {"beta2": math.nan}, "beta2", "in [0, 1)"),
    (TrainConfig, {"eps": 0.0}, "eps", "positive"),
    (ParallelConfig, {"threads": 0}, "threads", "integer >= 1"),
    (ParallelConfig, {"ranks": 2, "rank": 2}, "rank", "in [0, 2)"),
]


@pytest.mark.parametrize("cls,kwargs,field,words", BAD, ids=[f"{c.__name__}-{next(iter(k))}={list(k.values())[-1]}"
                                                            for c, k, _, _ in BAD])
def test_a_value_out_of_range_names_its_field(cls, kwargs, field, words):
    with pytest.raises(ConfigError) as err:
        cls(**kwargs)
    assert err.value.field == field and words in err.value.requirement
    assert isinstance(err.value, ValueError)         # callers that catch ValueError still do


def test_the_named_models_and_the_defaults_are_valid():
    # each named config builds (its own checks pass), with the sizes the README lists
    assert (TINY.n_layer, TINY.n_head, TINY.n_embd, TINY.vocab_size, TINY.max_seq_len) == (2, 4, 32, 200, 32)
    assert model_config("d12", n_layer=3).n_layer == 3
    TrainConfig(lr=0.0, weight_decay=0.0, steps=0, seed=0)     # the edges are allowed
    ParallelConfig(threads=64, ranks=2, rank=1)
