"""A traced run again, with settings changed: the configuration a trace stores (`runner.run_config_json`, metadata
`gpt2trace.run`) read back into a RunConfig, settings replaced by name, ready for `runner.run`.

Settings are named as the parameters of `gpt2trace run` are: `dp_sync`, `batch_size`, `ranks`, ... (the rows of
gpt2trace.run.options that allow `rerun`) and take text as typed on a command line (`overlap`, `8`, `3,3,3,1`,
`true`), read by the row's parser. `model` names a model
(its sizes replace the stored ones; size settings given beside it apply on top); `data synthetic` is the built-in
corpus, `init_from none` starts from random weights, `emulate_network none` drops an emulated network. What a
rerun never repeats: the checkpoints, metrics and resumption of the original (`save`, `save_every`, `resume`,
`metrics_json`); the trace goes where the caller says.

Errors: RerunError for a trace that cannot be rerun (no run configuration: an imported or synthetic trace; a run
resumed from a checkpoint), ConfigError naming the setting for a bad name or value (the configs' own checks name
their field), both one line.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import fields, replace
from enum import Enum
from pathlib import Path

from gpt2trace.format.errors import TraceError
from gpt2trace.format.network import Network
from gpt2trace.format.reader import check_file
from gpt2trace.format.schema import META_RUN
from gpt2trace.run.options import NOT_REPEATED, RERUN_SETTINGS, RUN_OPTIONS, SYNTHETIC, RunOption
from gpt2trace.run.runner import RunConfig, TraceConfig
from trainer.config import MODELS, ModelConfig, ParallelConfig, TrainConfig
from trainer.errors import ConfigError, TrainerError

# The settings a rerun may change (setting -> its RunOption), and those it does not repeat: gpt2trace.run.options.
SETTINGS = RERUN_SETTINGS


class RerunError(TrainerError):
    """A trace whose run cannot be repeated; the message is one line naming the file."""


def stored_run(path: str | os.PathLike) -> dict:
    """The run configuration a Parquet trace stores (its metadata only is read). TraceError for a file that is not
    a trace; RerunError for a trace without one, a synthetic trace, or a resumed run."""
    import pyarrow as pa

    from gpt2trace.format.reader import open_parquet
    path = Path(path)
    check_file(path)
    try:
        meta = open_parquet(path).schema_arrow.metadata or {}
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"{path}: not a Parquet trace ({str(exc).splitlines()[0] if str(exc) else exc})") from None
    try:
        run = json.loads(meta[META_RUN]) if meta.get(META_RUN) else None
    except ValueError:
        raise TraceError(f"{path}: metadata {META_RUN.decode()} is not valid JSON") from None
    return check_stored(run, path)


def check_stored(run: dict | None, path: str | os.PathLike) -> dict:
    """`run` (a trace's run metadata) if a run can be repeated from it, else a RerunError naming `path`."""
    if not isinstance(run, dict) or not all(isinstance(run.get(k), dict) for k in ("model", "train", "parallel")):
        raise RerunError(f"{path}: holds no run configuration (metadata {META_RUN.decode()}): only a trace written "
                         "by `gpt2trace run`, or exported from one with its .gpt2trace.json, can be run again")
    if run.get("synthetic"):
        raise RerunError(f"{path}: is a synthetic trace (gpt2trace.testing.synthetic), not the trace of a run")
    if run.get("resume") or run["train"].get("start_step"):
        raise RerunError(f"{path}: its run continued the checkpoint {run.get('resume')} from step "
                         f"{run['train'].get('start_step')}; rerun repeats runs that start at step 0")
    return run


def rerun_config(run: dict, changes: Mapping[str, str], trace: Path | None) -> RunConfig:
    """The RunConfig of the stored `run` (see `stored_run`) with `changes` (setting -> text) made, tracing to
    `trace`. ConfigError (its field: the setting or the config field that refused the value) when a name or value
    does not fit."""
    model = {f.name: run["model"][f.name] for f in fields(ModelConfig)}
    train = {f.name: run["train"][f.name] for f in fields(TrainConfig) if f.name in run["train"]}
    stored_par = run["parallel"]
    parallel = {f.name: stored_par[f.name] for f in fields(ParallelConfig) if f.name in stored_par}
    parallel["rank"] = 0
    if parallel.get("pp_layers") is not None:
        parallel["pp_layers"] = tuple(parallel["pp_layers"])
    for option in RUN_OPTIONS:                  # JSON stored an enum's value
        if option.part == "parallel" and issubclass(option.kind, Enum) and option.field in parallel:
            parallel[option.field] = option.kind(parallel[option.field])
    tracing = {name: run.get("trace", {}).get(name, getattr(TraceConfig, name))
               for name in ("flush_every_s", "memory_every_s")}
    data = None if run.get("data") in (None, SYNTHETIC) else Path(run["data"])
    top = {"data": data, "init_from": Path(run["init_from"]) if run.get("init_from") else None,
           "network": _stored_network(run.get("network"))}
    parts = {"model": model, "train": train, "parallel": parallel, "trace": tracing, "run": top}
    if "model" in changes:                      # a named model first: sizes given beside it apply on top
        name = changes["model"]
        if name not in MODELS:
            raise ConfigError("model", name, "must be " + SETTINGS["model"].must_be())
        model.update({f.name: getattr(MODELS[name], f.name) for f in fields(ModelConfig)})
    for name, text in changes.items():
        if name == "model":
            continue
        if name not in SETTINGS:
            known = ", ".join(sorted(SETTINGS))
            why = "a rerun writes only its trace" if name in NOT_REPEATED else f"settings: {known}"
            raise ConfigError(name, text, f"is not a setting a rerun can change ({why})")
        option: RunOption = SETTINGS[name]
        try:
            parts[option.part][option.field] = option.from_text(text)
        except ConfigError:
            raise
        except (ValueError, KeyError):
            raise ConfigError(name, text, f"must be {option.must_be()}") from None
    resized = [name for name in changes if name in SETTINGS and SETTINGS[name].part == "model"]
    if top["init_from"] is not None and resized:
        raise ConfigError(resized[0], changes[resized[0]], f"the model comes from the checkpoint {top['init_from']} "
                          "the run started from; add init-from=none to train this one from random weights")
    cfg = RunConfig(ModelConfig(**model), TrainConfig(**train), ParallelConfig(**parallel),
                    TraceConfig(trace, **tracing), **top)
    from trainer.parallel.split import SequenceSplit
    SequenceSplit(cfg.train.seq_len, cfg.parallel.sp, cfg.parallel.sp_split)     # T must be a multiple of sp
    return cfg


def for_rank(cfg: RunConfig, rank: int, ranks: int) -> RunConfig:
    """`cfg` as rank `rank` of a job of `ranks` processes runs it."""
    return replace(cfg, parallel=replace(cfg.parallel, rank=rank, ranks=ranks))


def _stored_network(net: dict | None):
    """The emulated cluster a run stored (`Cluster.as_json`), or None."""
    if not net:
        return None
    from gpt2trace.record.network import Cluster
    return Cluster(int(net["nodes"]), Network(float(net["link_bytes_per_s"]), float(net["latency_s"]) * 1e9,
                                              rooted=net.get("rooted", "flat")))
