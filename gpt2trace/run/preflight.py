"""What a run checks before it builds anything, so a bad option costs a second, not a training run.

- every input (--init-from, --data, --resume and its state file) is an existing file; a token file's header and
  size are right, it holds one global batch and its token ids are below the model's vocabulary;
- every output (--trace, --save and its state file, --metrics-json) may be written: not one of the inputs or
  another output, not a directory, its folder exists and is writable (gpt2trace.format.outputs). `--save X
  --resume X` is allowed: continuing a run in place is the usual way (llm.c, Megatron), and both files are
  replaced atomically, after everything was read from them;
- resuming: --resume excludes --init-from; the state file's magic, version, size and fingerprint match the run
  (trainer.state_file: one line naming the differing settings); --steps (the total) is not below its steps;
  --save-every needs --save;
- the trace's parts folder: one left by an earlier run that holds no finished part is removed (it cannot block
  anything); one with parts is refused, since those are an earlier run's steps to `recover`;
- the model: from --init-from's or --resume's header when given; T within its context; the built-in corpus
  needs 8 tokens;
- memory: parameters, gradients, AdamW moments, activations, MPI's gradient-sync temporary and the measured
  per-process baseline of every process on this node, and their shared libraries once, against the memory
  available (trainer.memory), instead of dying in an allocation.
Errors are trainer.errors.TrainerError (ConfigError names the config field) or OutputError, one line each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from gpt2trace.format.errors import OutputError
from gpt2trace.format.outputs import check_output, same_file
from gpt2trace.format.writer import clear_unfinished, parts_dir
from trainer.config import ModelConfig, SPReduce
from trainer.errors import ConfigError, TrainerError
from trainer.state_file import Fingerprint, ResumeMismatch, check_same_model, read_state_header, state_path

# The options that name each file, as the CLI spells them (the messages name them).
INPUT_OPTIONS = {"init_from": "--init-from", "data": "--data", "resume": "--resume"}
OUTPUT_OPTIONS = {"trace": "--trace", "save": "--save", "metrics_json": "--metrics-json"}
SAVED_STATE = "--save's state file"


@dataclass(frozen=True)
class Checked:
    """What `check_run` found, for the run it checked: the model it trains and its pipeline stages (the split is
    made here, once per process; gpt2trace.run.runner builds the stage from it)."""
    model: ModelConfig
    stages: tuple       # trainer.parallel.stages.Stage, in stage order


def model_of(cfg) -> ModelConfig:
    """The model a run trains: the --resume or --init-from checkpoint's (header only) or the configured one."""
    start = cfg.resume if cfg.resume is not None else cfg.init_from
    if start is None:
        return cfg.model
    from trainer.checkpoint import read_checkpoint_config
    return read_checkpoint_config(start)


def fingerprint_of(cfg, model: ModelConfig) -> Fingerprint:
    """What a state file written by this run records, and what resuming compares (trainer.state_file)."""
    from trainer.parallel.grid import GridLayout
    return Fingerprint.of(model, cfg.train, GridLayout.from_config(cfg.parallel).degree("dp"), cfg.data)


def check_run(cfg, processes_here: int = 1, first_rank: bool = True) -> Checked:
    """Everything above for a `gpt2trace.run.runner.RunConfig` of `processes_here` processes on this node; returns
    the model it will train and its stages. Only the first rank touches the parts folder (the others may run the
    same checks at the same time)."""
    check_options(cfg)
    check_inputs(cfg)
    check_outputs(cfg)
    if first_rank and cfg.trace.path is not None:
        check_old_parts(cfg.trace.path)
    model = model_of(cfg)
    check_model(cfg, model)
    if cfg.resume is not None:
        check_resume(cfg, model)
    if cfg.data is not None:
        check_data(cfg, model)
    from trainer.memory import check_fits, estimate, micro_batch_slots
    from trainer.parallel.grid import GRAD_DIMS, GridLayout
    from trainer.parallel.stages import plan
    from trainer.parallel.tensor import TensorShard
    par, B, T = cfg.parallel, cfg.train.batch_size, cfg.train.seq_len
    own_rows = par.sp_reduce == SPReduce.reduce_scatter
    stages = tuple(plan(model, T, par.pp, par.pp_layers))     # its own errors (too many stages, sums)
    tp = TensorShard(par.tp)                            # every shard of a group is the same size
    tp.check(model)
    grid = GridLayout.from_config(par)
    sync = dict(dp_sync=par.dp_sync, grad_ranks=math.prod(grid.degree(d) for d in GRAD_DIMS))

    def need(stage):
        slots = micro_batch_slots(stage, par.pp_schedule.value, cfg.train.grad_accum)
        return stage, slots, estimate(model, B, T, par.sp, own_rows, stage, slots, par.recompute, tp=tp, **sync).total

    stage, slots, _ = max((need(s) for s in stages), key=lambda x: x[2])   # every rank is checked for the largest
    check_fits(model, B, T, processes_here, par.sp, own_rows=own_rows, stage=stage, slots=slots,
               recompute=par.recompute, tp=tp, **sync)
    return Checked(model, stages)


def check_options(cfg) -> None:
    """Options that exclude or need each other."""
    if cfg.resume is not None and cfg.init_from is not None:
        raise TrainerError(f"--resume {cfg.resume} and --init-from {cfg.init_from}: --resume continues a saved run "
                           "(weights and optimizer state), --init-from starts a new one from weights; give one")
    if cfg.save_every and cfg.save is None:
        raise TrainerError(f"--save-every {cfg.save_every} needs --save PATH, where the checkpoints go")
    if cfg.network is not None:
        if cfg.parallel.ranks < 2:
            raise TrainerError("--emulate-network needs --ranks 2 or more: one rank sends no messages")
        if cfg.trace.path is None:
            raise TrainerError("--emulate-network works in the traced MPI layer: drop --no-trace")


def check_inputs(cfg) -> None:
    for name, option in INPUT_OPTIONS.items():
        path = getattr(cfg, name)
        if path is not None and not Path(path).is_file():
            what = "is a directory" if Path(path).is_dir() else "does not exist"
            raise TrainerError(f"{option} {path} {what}; give the path of a file")
    if cfg.resume is not None and not state_path(cfg.resume).is_file():
        raise TrainerError(f"--resume {cfg.resume}: its optimizer state {state_path(cfg.resume)} does not exist; "
                           "resume from a checkpoint written by `gpt2trace run --save` (or start a new run from the "
                           "weights alone with --init-from)")


def check_outputs(cfg) -> None:
    resumed = [cfg.resume, state_path(cfg.resume)] if cfg.resume is not None else []
    inputs = [cfg.init_from, cfg.data, *resumed]
    outputs = {name: getattr(cfg, name) if name != "trace" else cfg.trace.path for name in OUTPUT_OPTIONS}
    given = [(OUTPUT_OPTIONS[name], Path(p)) for name, p in outputs.items() if p is not None]
    if cfg.save is not None:
        given.append((SAVED_STATE, state_path(cfg.save)))
    in_place = cfg.resume is not None and cfg.save is not None and _same(Path(cfg.save), Path(cfg.resume))
    for i, (option, path) in enumerate(given):
        for other, other_path in given[i + 1:]:
            if _same(path, other_path):
                raise OutputError(f"{option} {path} and {other} {other_path} name the same file; give each its own")
        saving = option in (OUTPUT_OPTIONS["save"], SAVED_STATE)
        # --save X --resume X continues in place: X is read whole before it is replaced (atomically)
        check_output(path, inputs=[p for p in inputs if not (in_place and saving and p in resumed)], option=option)


def _same(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve() or same_file(a, b)


def check_resume(cfg, model: ModelConfig) -> None:
    """The state file beside --resume belongs to its model and to a run with this run's settings; --steps (the
    total) reaches at least its steps."""
    saved = read_state_header(state_path(cfg.resume))
    check_same_model(cfg.resume, model, saved)
    differences = saved.fingerprint.differences(fingerprint_of(cfg, cfg.model))
    if differences:
        raise ResumeMismatch(cfg.resume, differences)
    if cfg.train.steps < saved.next_step:
        raise ConfigError("steps", cfg.train.steps, f"is the total step count, and --resume {cfg.resume} holds "
                                                    f"{saved.next_step} steps already; give --steps "
                                                    f"{saved.next_step} or more")


def check_old_parts(trace: Path) -> None:
    clear_unfinished(trace)
    if parts_dir(trace).exists():
        raise OutputError(f"{parts_dir(trace)} holds the parts of an earlier run that did not finish; run "
                          f"`gpt2trace recover {trace}` to keep them, or delete that folder")


def check_model(cfg, model: ModelConfig) -> None:
    T = cfg.train.seq_len
    if T > model.max_seq_len:
        where = f" of {cfg.init_from}" if cfg.init_from is not None else ""
        raise ConfigError("seq_len", T, f"exceeds the model's context (max_seq_len {model.max_seq_len}{where}); "
                          "lower it")
    if cfg.data is None:
        from trainer.data import GROUP_SIZE, SYNTHETIC_MIN_VOCAB
        if model.vocab_size < SYNTHETIC_MIN_VOCAB:
            raise ConfigError("vocab_size", model.vocab_size,
                              f"the built-in corpus needs at least {SYNTHETIC_MIN_VOCAB} tokens (2 groups of "
                              f"{GROUP_SIZE}); raise it or train on a token file")


def check_data(cfg, model: ModelConfig) -> None:
    """--data as trainer.data's loader checks it, named as the user gave it: its header and size, tokens enough for
    one global batch (every data-parallel group's B x T, + 1), and every id below the model's vocabulary (a min and
    a max over the memmap: 0.02 s for 100M tokens in the page cache)."""
    from trainer.data import TokenLoader, read_tokens
    from trainer.parallel.grid import GridLayout
    groups = GridLayout.from_config(cfg.parallel).degree("dp")
    TokenLoader(read_tokens(cfg.data), cfg.train.batch_size, cfg.train.seq_len, world=groups,
                vocab_size=model.vocab_size, name=cfg.data)
