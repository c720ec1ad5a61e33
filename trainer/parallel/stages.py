"""Pipeline stages: which contiguous layers each stage holds, and what else it holds.

Stage 0 holds the embeddings (wte, wpe), the last stage the final LayerNorm, the tied lm head (its own copy of wte,
whose gradient is summed with stage 0's, as Megatron-LM does) and the loss. Layers are split so that the stages'
compute is as even as it can be with whole layers: the last stage's lm head costs Vp*C multiply-adds per token, as
much as several layers of a small model (d12: 38.6M vs 7.1M per layer), so it gets fewer layers. Costs are
forward multiply-adds per token: a layer 12*C^2 (qkv 3C^2, projection C^2, MLP 8C^2) plus causal attention ~T*C,
the head Vp*C; the split minimises the largest stage (`--pp-layers` overrides it).
"""
from __future__ import annotations

from dataclasses import dataclass

from trainer.config import ModelConfig
from trainer.errors import ConfigError


@dataclass(frozen=True)
class Stage:
    """Stage `index` of `count`: layers [first_layer, first_layer + n_layer) of the model."""
    index: int = 0
    count: int = 1
    first_layer: int = 0
    n_layer: int = 0

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.count - 1

    @property
    def layers(self) -> range:
        return range(self.first_layer, self.first_layer + self.n_layer)

    @classmethod
    def whole(cls, cfg: ModelConfig) -> Stage:
        return cls(0, 1, 0, cfg.n_layer)


def layer_cost(cfg: ModelConfig, T: int) -> int:
    return 12 * cfg.n_embd ** 2 + T * cfg.n_embd


def head_cost(cfg: ModelConfig) -> int:
    return cfg.padded_vocab_size * cfg.n_embd


def balanced_layers(cfg: ModelConfig, T: int, stages: int) -> tuple[int, ...]:
    """Layers per stage (each >= 1) minimising the most expensive stage, the head counted on the last one; ties go
    to the split with the most even layer counts earlier (so equal costs give equal counts)."""
    L = cfg.n_layer
    if stages > L:
        raise ConfigError("pp", stages, f"exceeds the model's {L} layers: every stage needs at least one layer")
    layer, head = layer_cost(cfg, T), head_cost(cfg)
    best: tuple[int, tuple[int, ...]] | None = None

    def splits(left: int, parts: int):
        if parts == 1:
            yield (left,)
            return
        for n in range(1, left - parts + 2):
            for rest in splits(left - n, parts - 1):
                yield (n,) + rest

    # Contiguous splits of <= 48 layers into <= 48 stages: few enough to search, but not all at once for deep ones.
    if _count(L, stages) <= 200_000:
        for split in splits(L, stages):
            cost = max(max(split[:-1] or (0,)) * layer, split[-1] * layer + head)
            key = (cost, max(split) - min(split))
            if best is None or key < best[0]:
                best = (key, split)
        return best[1]
    # Too many to search: equal layers, the remainder on the first stages.
    q, r = divmod(L, stages)
    return tuple(q + (i < r) for i in range(stages))


def _count(n: int, k: int) -> int:
    from math import comb
    return comb(n - 1, k - 1)


def plan(cfg: ModelConfig, T: int, stages: int, layers: tuple[int, ...] | None = None) -> list[Stage]:
    """Every stage of a `stages`-deep pipeline; `layers` (--pp-layers) must sum to the model's layers."""
    if layers is None:
        layers = balanced_layers(cfg, T, stages)
    elif sum(layers) != cfg.n_layer:
        raise ConfigError("pp_layers", ",".join(map(str, layers)),
                          f"must add up to the model's {cfg.n_layer} layers (they add up to {sum(layers)})")
    out, first = [], 0
    for i, n in enumerate(layers):
        out.append(Stage(i, stages, first, n))
        first += n
    return out
