"""gpt2trace.run.options: the one declaration of every run option. The command Typer builds from it, the configs
its rows set, the state file's fingerprint (what --resume must match) and layout record, and the RunConfig the
options describe, each held against the table."""
from __future__ import annotations

import inspect
from dataclasses import fields
from enum import Enum
from pathlib import Path

import pytest
import typer

from gpt2trace.cli.run import run as run_command
from gpt2trace.run.options import (
    BY_NAME,
    NOT_REPEATED,
    OPTIONS,
    RERUN_SETTINGS,
    RUN_OPTIONS,
    Resume,
    run_config,
    saved_by,
)
from gpt2trace.run.runner import RunConfig, TraceConfig
from trainer.config import ModelConfig, ParallelConfig, PPSchedule, TrainConfig
from trainer.cpu import cores_available
from trainer.errors import ConfigError
from trainer.state_file import Fingerprint

PARTS = {"model": ModelConfig, "train": TrainConfig, "parallel": ParallelConfig, "trace": TraceConfig,
         "run": RunConfig}
# What the fingerprint holds that no option sets: derived from options (the global batch, the token file's size)
# or fixed by the trainer (AdamW's betas and eps, while no option sets them).
NOT_AN_OPTION = {"global_batch", "data_bytes", "beta1", "beta2", "eps"}


def _command():
    app = typer.Typer(add_completion=False)
    app.command()(run_command)
    return typer.main.get_command(app)


def test_the_command_typer_builds_has_every_row_with_its_flags_and_default():
    params = {p.name: p for p in _command().params if p.name != "help"}
    assert list(params) == [o.name for o in RUN_OPTIONS]                  # the table's order is the help's
    for o in RUN_OPTIONS:
        p = params[o.name]
        assert (tuple(p.opts), p.help) == (o.flags, o.help), o.name
        default = p.default.value if isinstance(o.default, Enum) else p.default   # Click holds an enum's value
        assert default == (o.default.value if isinstance(o.default, Enum) else o.default), o.name
    assert list(inspect.signature(run_command).parameters)[0] == "ctx"


@pytest.mark.parametrize("option", [o for o in RUN_OPTIONS if o.sets], ids=lambda o: o.name)
def test_each_row_sets_a_field_of_its_config(option):
    assert option.field in {f.name for f in fields(PARTS[option.part])}
    assert OPTIONS[option.field] == OPTIONS[option.name] == option.spelled      # messages name the option


def test_what_resume_must_match_is_the_state_files_fingerprint():
    matched = {o.field for o in RUN_OPTIONS if o.resume == Resume.match and o.sets}
    held = {f.name for f in fields(Fingerprint)}
    assert matched <= held                          # every option declared to match is compared
    assert held - matched <= NOT_AN_OPTION          # and the fingerprint compares no option the table leaves free


def test_the_state_file_records_the_layout_options():
    cfg = run_config({"threads": 2, "ranks": 2, "pp": 2, "pp_schedule": PPSchedule.gpipe, "model": "tiny"})
    assert saved_by(cfg) == {"batch_size": 4, "threads": 2, "ranks": 2, "dp_sync": "allreduce",
                             "data_loading": "local", "sp": 1, "pp": 2, "pp_schedule": "gpipe"}


def test_rerun_may_change_every_option_but_the_outputs_and_resumption():
    assert set(NOT_REPEATED) == {"save", "save_every", "resume", "metrics_json", "trace", "no_trace"}
    assert set(RERUN_SETTINGS) | set(NOT_REPEATED) == set(BY_NAME)


@pytest.mark.parametrize("name,text,value", [
    ("batch_size", "8", 8), ("lr", "3e-4", 3e-4), ("dp_sync", "zero1", "zero1"), ("recompute", "on", True),
    ("pp_layers", "3,1", (3, 1)), ("pp_layers", "none", None), ("data", "synthetic", None),
    ("data", "t.bin", Path("t.bin")), ("init_from", "none", None), ("emulate_network", "none", None),
])
def test_a_setting_reads_the_text_typed_after_set(name, text, value):
    got = RERUN_SETTINGS[name].from_text(text)
    assert (got.value if isinstance(got, Enum) else got) == value


def test_a_setting_that_does_not_parse_says_what_it_must_be():
    with pytest.raises(ValueError):
        RERUN_SETTINGS["steps"].from_text("many")
    assert RERUN_SETTINGS["steps"].must_be() == "an integer"
    assert RERUN_SETTINGS["sp_split"].must_be() == "one of contiguous, interleaved"
    with pytest.raises(ConfigError) as caught:
        RERUN_SETTINGS["pp_layers"].from_text("3,x")
    assert caught.value.field == "pp_layers"


def test_the_defaults_make_the_demo_run():
    cfg = run_config({})
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.train.seq_len, cfg.train.steps, cfg.train.lr) == \
        (4, 128, 64, 60, 1e-3)                      # small; T 64; 60 steps at 1e-3 (not TrainConfig's own defaults)
    assert cfg.trace.path == Path("trace.parquet") and cfg.network is None and cfg.parallel.pp_layers is None
    assert cfg.parallel.threads == max(1, cores_available())     # one rank: every core


def test_the_options_as_the_command_receives_them_become_the_config():
    cfg = run_config({"threads": 1, "ranks": 2, "model": "tiny", "n_layer": 3, "pp": 2, "pp_layers": "2,1",
                      "emulate_network": "nodes=2,link=10Gb/s,latency=5us", "no_trace": True,
                      "flush_every": 0.0}, rank=1)
    assert (cfg.model.n_layer, cfg.model.n_embd) == (3, 32)       # tiny, one layer more
    assert cfg.train.seq_len == 32                                  # -T defaults to tiny's context, 32 < 64
    assert (cfg.parallel.rank, cfg.parallel.pp_layers) == (1, (2, 1))
    assert cfg.network.nodes == 2 and cfg.trace.path is None and cfg.trace.flush_every_s == 0
