"""A traced run again, with settings changed: the configuration a trace stores (`runner.run_config_json`, metadata
`gpt2trace.run`) read back into a RunConfig, settings replaced by name, ready for `runner.run`.

Settings are named as the parameters of `gpt2trace run` (gpt2trace/cli/run.py) are: `dp_sync`, `batch_size`,
`ranks`, ... and take text as typed on a command line (`overlap`, `8`, `3,3,3,1`, `true`). `model` names a model
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
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from enum import Enum
from pathlib import Path

from gpt2trace.format.errors import TraceError
from gpt2trace.format.network import Network
from gpt2trace.format.reader import check_file
from gpt2trace.format.schema import META_RUN
from gpt2trace.run.runner import RunConfig, TraceConfig
from trainer.config import (
    MODELS,
    DataLoading,
    DPSync,
    ModelConfig,
    ParallelConfig,
    PPSchedule,
    Schedule,
    SPReduce,
    SPSplit,
    TrainConfig,
)
from trainer.errors import ConfigError, TrainerError

SYNTHETIC, NONE = "synthetic", "none"
NOT_REPEATED = ("save", "save_every", "resume", "metrics_json", "trace", "no_trace")


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


def _enum(kind: type[Enum]) -> Callable[[str], Enum]:
    return lambda text: kind(text)


def _layers(text: str) -> tuple[int, ...] | None:
    return None if text.strip().lower() in ("", NONE) else tuple(int(x) for x in text.split(","))


def _flag(text: str) -> bool:
    words = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False, "off": False}
    return words[text.strip().lower()]


def _path_or(word: str) -> Callable[[str], Path | None]:
    return lambda text: None if text.strip().lower() == word else Path(text)


def _network(text: str):
    """An emulated cluster (gpt2trace.record.network.parse: a ConfigError naming emulate_network), or None."""
    from gpt2trace.record.network import parse
    return None if text.strip().lower() == NONE else parse(text)


# setting -> (the part of the RunConfig it sets, the field there, the parser of its text, what the text must be)
_INT, _NUMBER = (int, "an integer"), (float, "a number")
SETTINGS: dict[str, tuple[str, str, Callable, str]] = {
    **{name: ("model", name, *_INT) for name in ("n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len")},
    **{name: ("train", name, *_INT) for name in ("batch_size", "seq_len", "steps", "grad_accum", "seed")},
    **{name: ("train", name, *_NUMBER) for name in ("lr", "weight_decay")},
    **{name: ("parallel", name, *_INT) for name in ("threads", "ranks", "tp", "sp", "pp", "task_block")},
    "schedule": ("parallel", "schedule", _enum(Schedule), "one of " + ", ".join(e.value for e in Schedule)),
    "model": ("model", "", str, "a model name (" + ", ".join(MODELS) + ")"),
    "dp_sync": ("parallel", "dp_sync", _enum(DPSync), "one of " + ", ".join(e.value for e in DPSync)),
    "data_loading": ("parallel", "data_loading", _enum(DataLoading),
                     "one of " + ", ".join(e.value for e in DataLoading)),
    "sp_split": ("parallel", "sp_split", _enum(SPSplit), "one of " + ", ".join(e.value for e in SPSplit)),
    "sp_reduce": ("parallel", "sp_reduce", _enum(SPReduce), "one of " + ", ".join(e.value for e in SPReduce)),
    "pp_schedule": ("parallel", "pp_schedule", _enum(PPSchedule), "one of " + ", ".join(e.value for e in PPSchedule)),
    "pp_layers": ("parallel", "pp_layers", _layers, "layer counts separated by commas, e.g. 3,3,3,1, or none"),
    "recompute": ("parallel", "recompute", _flag, "true or false"),
    "flush_every": ("trace", "flush_every_s", float, "a number of seconds"),
    "memory_every": ("trace", "memory_every_s", float, "a number of seconds"),
    "emulate_network": ("run", "network", _network, 'a network, e.g. "nodes=5,link=10Gb/s,latency=5us", or none'),
    "data": ("run", "data", _path_or(SYNTHETIC), f"a token file, or {SYNTHETIC} (the built-in corpus)"),
    "init_from": ("run", "init_from", _path_or(NONE), f"a checkpoint, or {NONE} (random weights)"),
}


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
    for name, kind in (("dp_sync", DPSync), ("data_loading", DataLoading), ("sp_split", SPSplit),
                       ("sp_reduce", SPReduce), ("pp_schedule", PPSchedule), ("schedule", Schedule)):
        if name in parallel:
            parallel[name] = kind(parallel[name])
    tracing = {name: run.get("trace", {}).get(name, getattr(TraceConfig, name))
               for name in ("flush_every_s", "memory_every_s")}
    data = None if run.get("data") in (None, SYNTHETIC) else Path(run["data"])
    top = {"data": data, "init_from": Path(run["init_from"]) if run.get("init_from") else None,
           "network": _stored_network(run.get("network"))}
    parts = {"model": model, "train": train, "parallel": parallel, "trace": tracing, "run": top}
    if "model" in changes:                      # a named model first: sizes given beside it apply on top
        name = changes["model"]
        if name not in MODELS:
            raise ConfigError("model", name, "must be " + SETTINGS["model"][3])
        model.update({f.name: getattr(MODELS[name], f.name) for f in fields(ModelConfig)})
    for name, text in changes.items():
        if name == "model":
            continue
        if name not in SETTINGS:
            known = ", ".join(sorted(SETTINGS))
            why = "a rerun writes only its trace" if name in NOT_REPEATED else f"settings: {known}"
            raise ConfigError(name, text, f"is not a setting a rerun can change ({why})")
        part, field, parse, what = SETTINGS[name]
        try:
            parts[part][field] = parse(text)
        except ConfigError:
            raise
        except (ValueError, KeyError):
            raise ConfigError(name, text, f"must be {what}") from None
    resized = [name for name in changes if SETTINGS.get(name, ("",))[0] == "model"]
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
