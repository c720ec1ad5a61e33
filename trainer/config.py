"""Frozen run configurations, built once by the CLI and passed explicitly.

Shape legend used across the trainer (as in llm.c):
B batch, T time (sequence), C channels, V vocab, Vp padded vocab, L layers, NH heads, hs = C // NH.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, replace
from enum import Enum

from trainer.errors import ConfigError


def pad_vocab(vocab_size: int, multiple: int = 128) -> int:
    """llm.c pads V to a multiple of 128 so the lm-head matmul tiles well (50257 -> 50304)."""
    return (vocab_size + multiple - 1) // multiple * multiple


def _check_int(name: str, value: int, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
        raise ConfigError(name, value, f"must be an integer >= {least}")


def _check_float(name: str, value: float, least: float) -> None:
    # `not value >= least` is also true for NaN, which would otherwise pass every comparison unnoticed.
    if not (math.isfinite(value) and value >= least):
        raise ConfigError(name, value, f"must be a finite number >= {least:g}")


@dataclass(frozen=True)
class ModelConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50257
    max_seq_len: int = 1024

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len"):
            _check_int(name, getattr(self, name), 1)
        if self.vocab_size < 2:
            raise ConfigError("vocab_size", self.vocab_size, "a language model needs at least 2 tokens")
        if self.n_embd % self.n_head:
            raise ConfigError("n_head", self.n_head, f"must divide n_embd ({self.n_embd}): heads split the channels")

    @property
    def padded_vocab_size(self) -> int:
        return pad_vocab(self.vocab_size)

    @property
    def head_size(self) -> int:
        return self.n_embd // self.n_head


# The GPT-2 family (llm.c's dNN names: depth) plus small ones for tests and the demo.
MODELS: dict[str, ModelConfig] = {
    "d12": ModelConfig(12, 12, 768),     # 124M
    "d24": ModelConfig(24, 16, 1024),    # 350M
    "d36": ModelConfig(36, 20, 1280),    # 774M
    "d48": ModelConfig(48, 25, 1600),    # 1558M
    # demo: a real GPT-2 shape, small enough to learn the default corpus in a minute on 2 cores
    "small": ModelConfig(n_layer=4, n_head=4, n_embd=128, vocab_size=512, max_seq_len=128),
    # tiny: for tests; vocab 200 pads to 256 so the padded-logit masking is exercised
    "tiny": ModelConfig(n_layer=2, n_head=4, n_embd=32, vocab_size=200, max_seq_len=32),
}


def model_config(name: str, **overrides: int | None) -> ModelConfig:
    """A named config with explicit --n-layer/... overrides applied (None means keep)."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    return replace(MODELS[name], **changes)


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = 4          # B: sequences per micro-step (per rank)
    seq_len: int = 64            # T
    steps: int = 40
    lr: float = 3e-4
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    grad_accum: int = 1          # micro-steps per optimizer step
    seed: int = 1337

    def __post_init__(self) -> None:
        for name in ("batch_size", "seq_len", "grad_accum"):
            _check_int(name, getattr(self, name), 1)
        _check_int("steps", self.steps, 0)
        _check_int("seed", self.seed, 0)    # NumPy's generators take non-negative seeds only
        for name in ("lr", "weight_decay"):
            _check_float(name, getattr(self, name), 0.0)
        for name in ("beta1", "beta2"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value < 1.0):
                raise ConfigError(name, value, "must be in [0, 1)")
        if not (math.isfinite(self.eps) and self.eps > 0):
            raise ConfigError("eps", self.eps, "must be a positive number")


class DPSync(str, Enum):
    """How data-parallel ranks combine gradients (trainer.dp holds the strategies)."""
    allreduce = "allreduce"
    reduce_bcast = "reduce-bcast"
    overlap = "overlap"
    zero1 = "zero1"
    zero2 = "zero2"


class DataLoading(str, Enum):
    """Who reads the data: each rank its shard (local), or rank 0 for everyone (scatter)."""
    local = "local"
    scatter = "scatter"


class SPSplit(str, Enum):
    """Which positions of each sequence a rank of a sequence group holds (trainer.parallel.split)."""
    contiguous = "contiguous"      # rank r: [r*T/S, (r+1)*T/S)
    interleaved = "interleaved"    # rank r: positions t with t mod S == r


class SPReduce(str, Enum):
    """How a sequence group sums the key/value gradients after attention backward (trainer.parallel.sequence)."""
    allreduce = "allreduce"            # one MPI_Allreduce of the whole group's dK, dV (the study's)
    reduce = "reduce"                  # S rooted MPI_Reduces, root i over the ranks that attend to its tokens
    reduce_scatter = "reduce-scatter"  # one MPI_Reduce_scatter_block: each rank receives only its own rows


class PPSchedule(str, Enum):
    """The order of a pipeline stage's micro-batch passes (trainer.parallel.schedule)."""
    gpipe = "gpipe"     # every forward, then every backward (GPipe): M micro-batches of activations held
    onef1b = "1f1b"     # warm-up forwards, one forward / one backward, cool-down (PipeDream-Flush): at most P held


class Schedule(str, Enum):
    """How a rank's kernels run on its threads (docs/parallel.md)."""
    forkjoin = "forkjoin"   # each kernel a parallel loop over its threads, a barrier after it (Numba prange)
    tasks = "tasks"         # kernels cut into block tasks with data dependencies, no barrier (trainer.tasks)


# Rows per task of --schedule tasks (trainer.tasks.tiling), measured (docs/parallel.md, "Task-based dataflow").
DEFAULT_TASK_BLOCK = 64


@dataclass(frozen=True)
class ParallelConfig:
    threads: int = 1             # Numba threads per rank (our only intra-rank parallelism; BLAS runs on 1)
    ranks: int = 1               # MPI processes: ranks // (tp * sp * pp) data-parallel groups
    rank: int = 0
    dp_sync: DPSync = DPSync.allreduce
    data_loading: DataLoading = DataLoading.local
    sp: int = 1                  # ranks per sequence group (sequence parallelism); 1: whole sequences per rank
    sp_split: SPSplit = SPSplit.contiguous
    sp_reduce: SPReduce = SPReduce.allreduce
    pp: int = 1                  # pipeline stages (pipeline parallelism); 1: every rank holds all layers
    pp_schedule: PPSchedule = PPSchedule.onef1b
    pp_layers: tuple[int, ...] | None = None   # layers per stage; None: balanced by compute (trainer.parallel.stages)
    recompute: bool = False      # activation checkpointing: keep each layer's input, recompute it in backward
    tp: int = 1                  # ranks per tensor-parallel group (Megatron's split of every block); 1: whole blocks
    schedule: Schedule = Schedule.forkjoin
    task_block: int = DEFAULT_TASK_BLOCK    # rows per task under schedule tasks

    def __post_init__(self) -> None:
        _check_int("threads", self.threads, 1)
        _check_int("ranks", self.ranks, 1)
        if not 0 <= self.rank < self.ranks:
            raise ConfigError("rank", self.rank, f"must be in [0, {self.ranks})")
        _check_int("tp", self.tp, 1)
        if self.ranks % self.tp:
            raise ConfigError("tp", self.tp, f"must divide the {self.ranks} ranks: each tensor-parallel group needs "
                                             f"exactly {self.tp} ranks; use a multiple of {self.tp} ranks")
        _check_int("sp", self.sp, 1)
        if self.ranks % self.sp:
            raise ConfigError("sp", self.sp, f"must divide the {self.ranks} ranks: each sequence group needs exactly "
                                             f"{self.sp} ranks; use a multiple of {self.sp} ranks")
        if self.ranks % (self.tp * self.sp):
            raise ConfigError("sp", self.sp, f"times --tp {self.tp} must divide the {self.ranks} ranks")
        _check_int("pp", self.pp, 1)
        if self.ranks % (self.tp * self.sp * self.pp):
            raise ConfigError("pp", self.pp, f"times --tp {self.tp} --sp {self.sp} must divide the {self.ranks} ranks: "
                                             f"each pipeline needs exactly {self.tp * self.sp * self.pp} ranks")
        if self.pp_layers is not None:
            if len(self.pp_layers) != self.pp:
                raise ConfigError("pp_layers", ",".join(map(str, self.pp_layers)),
                                  f"must list one layer count per stage ({self.pp} stages)")
            for n in self.pp_layers:
                _check_int("pp_layers", n, 1)
        if self.pp > 1 and self.data_loading == DataLoading.scatter:
            raise ConfigError("data_loading", self.data_loading.value,
                              "scatter is not supported with pipeline parallelism; use local (each pipeline's "
                              "first and last stage read their data-parallel shard)")
        _check_int("task_block", self.task_block, 1)
        if self.schedule == Schedule.tasks:
            others = [f"--{name} {n}" for name, n in (("tp", self.tp), ("sp", self.sp), ("pp", self.pp)) if n > 1]
            if others or self.recompute:
                raise ConfigError("schedule", self.schedule.value, "runs data parallelism only (--ranks); drop "
                                  + (" ".join(others) or "--recompute") + " or use --schedule forkjoin")
            if self.ranks > 1 and self.dp_sync != DPSync.allreduce:
                raise ConfigError("schedule", self.schedule.value, "reduces gradients layer by layer with "
                                  f"MPI_Iallreduce tasks: use --dp-sync allreduce (not {self.dp_sync.value}) or "
                                  "--schedule forkjoin")
        if self.tp > 1 and self.data_loading == DataLoading.scatter:
            raise ConfigError("data_loading", self.data_loading.value,
                              "scatter is not supported with tensor parallelism; use local (the ranks of a "
                              "tensor-parallel group read the same data-parallel shard)")
