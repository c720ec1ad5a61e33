"""Frozen run configurations, built once by the CLI and passed explicitly.

Shape legend used across the trainer (as in llm.c):
B batch, T time (sequence), C channels, V vocab, Vp padded vocab, L layers, NH heads, hs = C // NH.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


def pad_vocab(vocab_size: int, multiple: int = 128) -> int:
    """llm.c pads V to a multiple of 128 so the lm-head matmul tiles well (50257 -> 50304)."""
    return (vocab_size + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class ModelConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50257
    max_seq_len: int = 1024

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_head", "n_embd", "vocab_size", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd ({self.n_embd}) must be a multiple of n_head ({self.n_head})")

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
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


class DPSync(str, Enum):
    """How data-parallel ranks combine gradients (trainer.dp holds the strategies)."""
    allreduce = "allreduce"
    reduce_bcast = "reduce-bcast"
    overlap = "overlap"
    zero1 = "zero1"


class DataLoading(str, Enum):
    """Who reads the data: each rank its shard (local), or rank 0 for everyone (scatter)."""
    local = "local"
    scatter = "scatter"


class SPSplit(str, Enum):
    """Which positions of each sequence a rank of a sequence group holds (trainer.parallel.sequence)."""
    contiguous = "contiguous"      # rank r: [r*T/S, (r+1)*T/S)
    interleaved = "interleaved"    # rank r: positions t with t mod S == r


class SPReduce(str, Enum):
    """How a sequence group sums the key/value gradients after attention backward."""
    allreduce = "allreduce"            # one MPI_Allreduce of the whole group's dK, dV (the study's)
    reduce = "reduce"                  # S rooted MPI_Reduces, root i over the ranks that attend to its tokens
    reduce_scatter = "reduce-scatter"  # one MPI_Reduce_scatter_block: each rank receives only its own rows


@dataclass(frozen=True)
class ParallelConfig:
    threads: int = 1             # Numba threads per rank (our only intra-rank parallelism; BLAS runs on 1)
    ranks: int = 1               # MPI processes: ranks // sp data-parallel groups of sp ranks each
    rank: int = 0
    dp_sync: DPSync = DPSync.allreduce
    data_loading: DataLoading = DataLoading.local
    sp: int = 1                  # ranks per sequence group (sequence parallelism); 1: whole sequences per rank
    sp_split: SPSplit = SPSplit.contiguous
    sp_reduce: SPReduce = SPReduce.allreduce

    def __post_init__(self) -> None:
        if self.sp < 1:
            raise ValueError(f"--sp must be >= 1, got {self.sp}")
        if self.ranks % self.sp:
            raise ValueError(f"--sp {self.sp} does not divide --ranks {self.ranks}: each sequence group needs "
                             f"exactly {self.sp} ranks; use a multiple of {self.sp} ranks")
