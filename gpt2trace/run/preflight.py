"""What a run checks before it builds anything, so a bad option costs a second, not a training run.

- every input (--init-from, --data) is an existing file, and a token file's header and size are right;
- every output (--trace, --save, --metrics-json) may be written: not one of the inputs or another output, not a
  directory, its folder exists and is writable (gpt2trace.format.outputs);
- the trace's parts folder: one left by an earlier run that holds no finished part is removed (it cannot block
  anything); one with parts is refused, since those are an earlier run's steps to `recover`;
- the model: from --init-from's header when given; T within its context; the built-in corpus needs 8 tokens;
- memory: parameters, gradients, AdamW moments and activations of every process on this node against the
  memory available (trainer.memory), instead of dying in an allocation.
Errors are trainer.errors.TrainerError (ConfigError names the config field) or OutputError, one line each.
"""
from __future__ import annotations

from pathlib import Path

from gpt2trace.format.errors import OutputError
from gpt2trace.format.outputs import check_output, same_file
from gpt2trace.format.writer import clear_unfinished, parts_dir
from trainer.config import ModelConfig, SPReduce
from trainer.errors import ConfigError, TrainerError

# The options that name each file, as the CLI spells them (the messages name them).
INPUT_OPTIONS = {"init_from": "--init-from", "data": "--data"}
OUTPUT_OPTIONS = {"trace": "--trace", "save": "--save", "metrics_json": "--metrics-json"}


def model_of(cfg) -> ModelConfig:
    """The model a run trains: the --init-from checkpoint's (header only) or the configured one."""
    if cfg.init_from is None:
        return cfg.model
    from trainer.checkpoint import read_checkpoint_config
    return read_checkpoint_config(cfg.init_from)


def check_run(cfg, processes_here: int = 1, first_rank: bool = True) -> ModelConfig:
    """Everything above for a `gpt2trace.run.runner.RunConfig`; returns the model it will train. Only the first
    rank touches the parts folder (the others may run the same checks at the same time)."""
    check_inputs(cfg)
    check_outputs(cfg)
    if first_rank and cfg.trace.path is not None:
        check_old_parts(cfg.trace.path)
    model = model_of(cfg)
    check_model(cfg, model)
    if cfg.data is not None:
        from trainer.data import read_tokens
        read_tokens(cfg.data)        # header and size (the token ids are checked against V when loading)
    from trainer.memory import check_fits, estimate, micro_batch_slots
    from trainer.parallel.stages import plan
    par, B, T = cfg.parallel, cfg.train.batch_size, cfg.train.seq_len
    own_rows = par.sp_reduce == SPReduce.reduce_scatter
    stages = plan(model, T, par.pp, par.pp_layers)     # the stage split's own errors (too many stages, sums)

    def need(stage):
        slots = micro_batch_slots(stage, par.pp_schedule.value, cfg.train.grad_accum)
        return stage, slots, estimate(model, B, T, par.sp, own_rows, stage, slots, par.recompute).total

    stage, slots, _ = max((need(s) for s in stages), key=lambda x: x[2])   # every rank is checked for the largest
    check_fits(model, B, T, processes_here, par.sp, own_rows=own_rows, stage=stage, slots=slots,
               recompute=par.recompute)
    return model


def check_inputs(cfg) -> None:
    for name, option in INPUT_OPTIONS.items():
        path = getattr(cfg, name)
        if path is not None and not Path(path).is_file():
            what = "is a directory" if Path(path).is_dir() else "does not exist"
            raise TrainerError(f"{option} {path} {what}; give the path of a file")


def check_outputs(cfg) -> None:
    inputs = [cfg.init_from, cfg.data]
    outputs = {name: getattr(cfg, name) if name != "trace" else cfg.trace.path for name in OUTPUT_OPTIONS}
    given = [(OUTPUT_OPTIONS[name], Path(p)) for name, p in outputs.items() if p is not None]
    for i, (option, path) in enumerate(given):
        for other, other_path in given[i + 1:]:
            if path.resolve() == other_path.resolve() or same_file(path, other_path):
                raise OutputError(f"{option} {path} and {other} {other_path} name the same file; give each its own")
        check_output(path, inputs=inputs, option=option)


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
