"""The run options, declared once: `RUN_OPTIONS`, one `RunOption` per option of `gpt2trace run`.

From this table come `gpt2trace run`'s parameters (gpt2trace/cli/run.py builds its signature from it), the
settings `gpt2trace rerun --set` may change (gpt2trace.run.rerun), the option named in a message about a config
field (`OPTIONS`), what the state file records of the layout that wrote it (`saved_by`), and the RunConfig the
options describe (`run_config`). A new option is one row; a new config field behind it is one field more
(trainer.config, or TraceConfig/RunConfig in gpt2trace.run.config), read where it is used.

What `--resume` must match is the state file's `trainer.state_file.Fingerprint` (a file format, in the trainer's
layer): the rows say which options it holds (`Resume.match`), and tests/gpt2trace/run/test_options.py holds the
two equal.

Light on purpose: the CLI imports it to build its help, before Numba, NumPy or pyarrow may load.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from gpt2trace.run.config import DEFAULT_TRACE, RunConfig, TraceConfig
from trainer.config import (
    DEFAULT_TASK_BLOCK,
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

DEFAULT_MODEL = "small"
DEFAULT_T = 64
SYNTHETIC, NONE = "synthetic", "none"


class Resume(str, Enum):
    """What `--resume` does with an option whose value differs from the saved run's."""
    match = "match"     # refuses it (the state file's Fingerprint holds it)
    layout = "layout"   # takes it; the state file records the saved value (`saved_by`) and resuming says it changed
    free = "free"       # takes it (outputs, --steps, tracing)


@dataclass(frozen=True)
class RunOption:
    """One option of `gpt2trace run`: its command-line declaration, the config field it sets, and what `rerun`
    and `--resume` do with it."""
    name: str                       # the parameter, and the setting `rerun --set` names (batch_size)
    flags: tuple[str, ...]          # as typed: ("--batch-size", "-B")
    kind: type                      # what Typer parses: int, float, str, bool, Path or a str Enum
    default: Any = None             # None for an option that is absent unless given
    help: str | None = None
    sets: str | None = None         # "part.field" of the RunConfig it sets (part: model/train/parallel/trace/run);
                                    # None: `run_config` reads it itself
    parse: Callable[[str], Any] | None = None   # text -> the field's value: `rerun --set`, and a `str` option
    what: str | None = None         # what a `rerun --set` text must be (default: from `kind`)
    rerun: bool = True              # `rerun --set` may change it
    resume: Resume = Resume.free
    show_default: bool | None = None    # None: Typer's (shown unless the default is None)

    @property
    def part(self) -> str:
        return self.sets.split(".")[0] if self.sets else ""

    @property
    def field(self) -> str:
        return self.sets.split(".")[1] if self.sets else ""

    @property
    def spelled(self) -> str:
        """As messages name it: `-B/--batch-size`, `--lr`."""
        return "/".join(sorted(self.flags, key=len))

    def from_text(self, text: str) -> Any:
        """The value of the text typed after `rerun --set NAME=` (ValueError or KeyError when it does not parse;
        ConfigError from a parser that names the option itself)."""
        if self.parse is not None:
            return self.parse(text)
        if self.kind is bool:
            return _flag(text)
        return self.kind(text)

    def must_be(self) -> str:
        if self.what is not None:
            return self.what
        if issubclass(self.kind, Enum):
            return "one of " + ", ".join(e.value for e in self.kind)
        return {int: "an integer", float: "a number", bool: "true or false"}.get(self.kind, "a value")


def _layers(text: str) -> tuple[int, ...] | None:
    """--pp-layers "3,3,3,1" -> (3, 3, 3, 1); `none`: balanced by compute."""
    if text.strip().lower() in ("", NONE):
        return None
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError("pp_layers", text, "must be layer counts separated by commas, e.g. 3,3,3,1") from None


def _flag(text: str) -> bool:
    words = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False, "off": False}
    return words[text.strip().lower()]


def _path_or(word: str) -> Callable[[str], Path | None]:
    return lambda text: None if text.strip().lower() == word else Path(text)


def _network(text: str):
    """An emulated cluster (gpt2trace.record.network.parse: a ConfigError naming emulate_network), or None."""
    from gpt2trace.record.network import parse
    return None if text.strip().lower() == NONE else parse(text)


def _size(name: str) -> RunOption:
    return RunOption(name, ("--" + name.replace("_", "-"),), int, sets=f"model.{name}", show_default=False,
                     resume=Resume.match)


_MODEL_HELP = "GPT-2 config by name: d12 (124M), d24, d36, d48, small (the default, the demo), tiny (tests)."

# In the order `gpt2trace run --help` lists them.
RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption("model", ("--model",), str, help=_MODEL_HELP, show_default=False,
              what="a model name (" + ", ".join(MODELS) + ")", resume=Resume.match),
    RunOption("init_from", ("--init-from",), Path, sets="run.init_from", parse=_path_or(NONE),
              what=f"a checkpoint, or {NONE} (random weights)",
              help="llm.c checkpoint to start from; it sets the model (so --model and the size options are "
                   "refused)."),
    RunOption("data", ("--data",), Path, sets="run.data", parse=_path_or(SYNTHETIC), resume=Resume.match,
              what=f"a token file, or {SYNTHETIC} (the built-in corpus)",
              help="llm.c token file (.bin); default: the built-in synthetic corpus."),
    RunOption("batch_size", ("--batch-size", "-B"), int, 4, sets="train.batch_size", resume=Resume.layout,
              help="Sequences per micro-step, per rank (>= 1)."),
    RunOption("seq_len", ("--seq-len", "-T"), int, sets="train.seq_len", show_default=False, resume=Resume.match,
              help=f"Tokens per sequence (default: {DEFAULT_T}, or the model's context if shorter)."),
    RunOption("steps", ("--steps",), int, 60, sets="train.steps",
              help="Optimizer steps in all (>= 0), a resumed run's saved steps included."),
    RunOption("lr", ("--lr",), float, 1e-3, sets="train.lr", resume=Resume.match,
              help="AdamW learning rate (constant, finite, >= 0)."),
    RunOption("weight_decay", ("--weight-decay",), float, 0.0, sets="train.weight_decay", resume=Resume.match,
              help="AdamW weight decay (>= 0)."),
    RunOption("grad_accum", ("--grad-accum",), int, 1, sets="train.grad_accum", resume=Resume.match,
              help="Micro-steps per optimizer step (>= 1)."),
    RunOption("threads", ("--threads",), int, sets="parallel.threads", show_default=False, resume=Resume.layout,
              help="Numba threads per rank (default: the cores available, shared among the ranks; more than the "
                   "cores works, with a warning)."),
    RunOption("ranks", ("--ranks",), int, 1, sets="parallel.ranks", resume=Resume.layout,
              help="MPI ranks (data parallel); starts mpiexec itself unless already inside MPI."),
    RunOption("dp_sync", ("--dp-sync",), DPSync, DPSync.allreduce, sets="parallel.dp_sync", resume=Resume.layout,
              help="How ranks combine gradients: allreduce; reduce-bcast (AdamW on rank 0); overlap (one "
                   "nonblocking allreduce per layer); zero1 (ZeRO-1: reduce-scatter, AdamW moments sharded); "
                   "zero2 (ZeRO-2: also the gradients sharded, reduce-scattered layer by layer during backward)."),
    RunOption("data_loading", ("--data-loading",), DataLoading, DataLoading.local, sets="parallel.data_loading",
              resume=Resume.layout,
              help="local: each rank reads its shard; scatter: rank 0 reads and scatters."),
    RunOption("tp", ("--tp",), int, 1, sets="parallel.tp",
              help="Tensor parallelism (Megatron-LM): ranks per tensor-parallel group, each holding 1/tp of every "
                   "layer's heads and MLP columns and of the vocabulary; adjacent ranks (tp must divide --ranks, "
                   "the heads and the padded vocabulary)."),
    RunOption("sp", ("--sp",), int, 1, sets="parallel.sp", resume=Resume.layout,
              help="Sequence parallelism: ranks per sequence group, each holding T/sp positions of every sequence; "
                   "--ranks/sp data-parallel groups (sp must divide --ranks and -T)."),
    RunOption("sp_split", ("--sp-split",), SPSplit, SPSplit.contiguous, sets="parallel.sp_split",
              help="Positions per rank: contiguous blocks, or interleaved (t mod sp)."),
    RunOption("sp_reduce", ("--sp-reduce",), SPReduce, SPReduce.allreduce, sets="parallel.sp_reduce",
              help="How a sequence group sums key/value gradients after attention backward."),
    RunOption("pp", ("--pp",), int, 1, sets="parallel.pp", resume=Resume.layout,
              help="Pipeline parallelism: stages per pipeline, each holding a contiguous range of layers; "
                   "--ranks/(sp*pp) data-parallel pipelines. --grad-accum sets the micro-batches per step."),
    RunOption("pp_schedule", ("--pp-schedule",), PPSchedule, PPSchedule.onef1b, sets="parallel.pp_schedule",
              resume=Resume.layout,
              help="gpipe: all forwards, then all backwards; 1f1b: one forward, one backward (activations of at "
                   "most pp micro-batches held)."),
    RunOption("pp_layers", ("--pp-layers",), str, sets="parallel.pp_layers", parse=_layers, show_default=False,
              what="layer counts separated by commas, e.g. 3,3,3,1, or none",
              help="Layers per stage, e.g. 3,3,3,1 (default: balanced by compute, the lm head counted on the last "
                   "stage)."),
    RunOption("emulate_network", ("--emulate-network",), str, sets="run.network", parse=_network,
              show_default=False, what='a network, e.g. "nodes=5,link=10Gb/s,latency=5us", or none',
              help='Emulate a cluster: "nodes=5,link=10Gb/s,latency=5us": ranks in blocks on the nodes, every MPI '
                   "call held for what that network adds (docs/parallel.md)."),
    RunOption("recompute", ("--recompute",), bool, False, sets="parallel.recompute",
              help="Activation checkpointing: keep each layer's input in forward, recompute the layer in "
                   "backward."),
    RunOption("schedule", ("--schedule",), Schedule, Schedule.forkjoin, sets="parallel.schedule",
              help="How kernels run on a rank's threads: forkjoin (a parallel loop per kernel, a barrier after "
                   "each); tasks (OmpSs-2 style: kernels cut into block tasks with data dependencies, no barrier; "
                   "gradient reductions are MPI_Iallreduce tasks; data parallelism only)."),
    RunOption("task_block", ("--task-block",), int, DEFAULT_TASK_BLOCK, sets="parallel.task_block",
              help="--schedule tasks: rows (tokens) per task of the row-split kernels; weight-gradient kernels get "
                   "as many feature blocks."),
    RunOption("seed", ("--seed",), int, 1337, sets="train.seed", resume=Resume.match,
              help="Seed for initialization and the synthetic corpus (>= 0)."),
    RunOption("save", ("--save",), Path, sets="run.save", rerun=False,
              help="Write an llm.c checkpoint at the end, and the AdamW state beside it (PATH.state) for --resume."),
    RunOption("save_every", ("--save-every",), int, 0, sets="run.save_every", rerun=False,
              help="Also save after every K-th step (needs --save; each save replaces the last). 0: only at the "
                   "end."),
    RunOption("resume", ("--resume",), Path, sets="run.resume", rerun=False,
              help="Continue the run saved in this checkpoint (and its .state) bit for bit, from its next step to "
                   "--steps (the total); same settings as the saved run."),
    RunOption("metrics_json", ("--metrics-json",), Path, sets="run.metrics_json", rerun=False,
              help="Per-step JSON lines: step, loss, ms, tokens_per_s."),
    RunOption("trace", ("--trace",), Path, DEFAULT_TRACE, rerun=False,
              help="Where the trace goes (an existing trace there is replaced when the run ends)."),
    RunOption("no_trace", ("--no-trace",), bool, False, rerun=False, help="Switch tracing off entirely."),
    RunOption("flush_every", ("--flush-every",), float, TraceConfig.flush_every_s, sets="trace.flush_every_s",
              what="a number of seconds",
              help="Seconds between the trace parts written during the run: a kill loses at most about this much "
                   "plus a step. 0: write every step before the next starts."),
    RunOption("memory_every", ("--memory-every",), float, TraceConfig.memory_every_s, sets="trace.memory_every_s",
              what="a number of seconds",
              help="Seconds between the steps whose phase ends sample the resident memory (each sample is a system "
                   "call). 0: every step."),
    *(_size(name) for name in ("n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len")),
)

BY_NAME: dict[str, RunOption] = {o.name: o for o in RUN_OPTIONS}
# A config field (trainer.errors.ConfigError names it) or an option's own name -> the option, as messages spell it.
OPTIONS: dict[str, str] = {**{o.name: o.spelled for o in RUN_OPTIONS},
                           **{o.field: o.spelled for o in RUN_OPTIONS if o.sets}}
# The settings `rerun --set` may change, and the options a rerun does not repeat (it writes its trace only).
RERUN_SETTINGS: dict[str, RunOption] = {o.name: o for o in RUN_OPTIONS if o.rerun}
NOT_REPEATED: tuple[str, ...] = tuple(o.name for o in RUN_OPTIONS if not o.rerun)
SIZE_OPTIONS: tuple[RunOption, ...] = tuple(o for o in RUN_OPTIONS if o.part == "model")


def saved_by(cfg: RunConfig) -> dict:
    """The layout of the run that writes a state file (`Resume.layout`: informative, another layout may resume)."""
    out = {}
    for o in RUN_OPTIONS:
        if o.resume == Resume.layout:
            value = getattr(getattr(cfg, o.part), o.field)
            out[o.name] = value.value if isinstance(value, Enum) else value
    return out


def run_config(values: Mapping[str, Any], rank: int = 0) -> RunConfig:
    """The RunConfig the options describe: `values` maps an option's name to its value as `gpt2trace run`
    receives it (a missing one takes its default). The model: --init-from's or --resume's checkpoint header, else
    --model with the size options applied; -T defaults to DEFAULT_T or the model's context, --threads to the cores
    available shared among the ranks. TrainerError (ConfigError naming the field) for a value out of range."""
    values = {o.name: values.get(o.name, o.default) for o in RUN_OPTIONS}
    parts: dict[str, dict[str, Any]] = {"model": {}, "train": {}, "parallel": {"rank": rank}, "trace": {}, "run": {}}
    for o in RUN_OPTIONS:
        value = values[o.name]
        if o.sets is None or (o.part == "model" and value is None):
            continue
        if o.parse is not None and isinstance(value, str):
            value = o.parse(value)
        parts[o.part][o.field] = value
    par = parts["parallel"]
    if par["threads"] is None:
        from trainer.cpu import cores_available
        par["threads"] = max(1, cores_available() // max(par["ranks"], 1))
    model = _model(values["model"], values["init_from"], values["resume"], parts["model"])
    train = parts["train"]
    if train["seq_len"] is None:
        train["seq_len"] = min(DEFAULT_T, model.max_seq_len)
    cfg = RunConfig(model, TrainConfig(**train), ParallelConfig(**parts["parallel"]),
                    TraceConfig(None if values["no_trace"] else values["trace"], **parts["trace"]), **parts["run"])
    from trainer.parallel.split import SequenceSplit
    SequenceSplit(cfg.train.seq_len, cfg.parallel.sp, cfg.parallel.sp_split)        # -T must be a multiple of --sp
    return cfg


def _model(name: str | None, init_from: Path | None, resume: Path | None, sizes: dict[str, int]) -> ModelConfig:
    from dataclasses import replace

    from trainer.config import model_config
    if resume is not None and name is None and init_from is None:
        # the saved run's model, the size options given applied to it: the fingerprint compares them with the saved
        # run's and names the one that differs (not the default model's sizes, nor a -T fitted to them)
        from trainer.checkpoint import read_checkpoint_config
        return replace(read_checkpoint_config(resume), **sizes)
    if init_from is not None and resume is None:
        from trainer.checkpoint import read_checkpoint_config
        mcfg = read_checkpoint_config(init_from)
        if name is not None or sizes:
            dropped = "/".join(["--model"] * (name is not None) + [o.spelled for o in SIZE_OPTIONS if o.field in sizes])
            raise TrainerError(
                f"--init-from {init_from} sets the model (L={mcfg.n_layer} NH={mcfg.n_head} C={mcfg.n_embd} "
                f"V={mcfg.vocab_size}, context {mcfg.max_seq_len}); drop {dropped}")
        return mcfg
    try:
        return model_config(name or DEFAULT_MODEL, **sizes)
    except KeyError as exc:
        raise TrainerError(str(exc).strip("'\"")) from None
