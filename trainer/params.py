"""One flat float32 buffer for all parameters, carved into named views (llm.c's layout and order).

Gradients and the AdamW moments use the same layout, so a gradient sync is one collective on one buffer
and a checkpoint is the buffer written as is.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.config import ModelConfig

# llm.c's order: the checkpoint file stores the 16 tensors in exactly this sequence.
PARAM_NAMES = (
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
)


def param_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    Vp, C, L, maxT = cfg.padded_vocab_size, cfg.n_embd, cfg.n_layer, cfg.max_seq_len
    return {
        "wte": (Vp, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
        "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


@dataclass(frozen=True)
class ParamLayout:
    """Offsets of each named tensor inside the flat buffer."""
    shapes: dict[str, tuple[int, ...]]
    offsets: dict[str, int]
    size: int

    @classmethod
    def for_model(cls, cfg: ModelConfig) -> "ParamLayout":
        shapes = param_shapes(cfg)
        offsets, pos = {}, 0
        for name in PARAM_NAMES:
            offsets[name] = pos
            pos += int(np.prod(shapes[name]))
        return cls(shapes, offsets, pos)

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Named, writable views into `flat` (no copies)."""
        if flat.shape != (self.size,) or flat.dtype != np.float32:
            raise ValueError(f"flat buffer must be float32[{self.size}], got {flat.dtype}{list(flat.shape)}")
        out = {}
        for name in PARAM_NAMES:
            n = int(np.prod(self.shapes[name]))
            out[name] = flat[self.offsets[name]:self.offsets[name] + n].reshape(self.shapes[name])
        return out

    def allocate(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        flat = np.zeros(self.size, dtype=np.float32)
        return flat, self.views(flat)


def init_params(cfg: ModelConfig, seed: int) -> np.ndarray:
    """GPT-2 initialisation (nanoGPT/llm.c): N(0, 0.02), residual projections scaled by 1/sqrt(2L), LN = (1, 0).

    The padded vocabulary rows of wte stay zero: they never produce a logit that enters the loss.
    """
    layout = ParamLayout.for_model(cfg)
    flat, p = layout.allocate()
    rng = np.random.default_rng(seed)
    std, proj_std = 0.02, 0.02 / np.sqrt(2 * cfg.n_layer)
    for name in ("wpe", "qkvw", "fcw"):
        p[name][...] = rng.normal(0.0, std, p[name].shape)
    p["wte"][: cfg.vocab_size] = rng.normal(0.0, std, (cfg.vocab_size, cfg.n_embd))
    for name in ("attprojw", "fcprojw"):
        p[name][...] = rng.normal(0.0, proj_std, p[name].shape)
    for name in ("ln1w", "ln2w", "lnfw"):
        p[name][...] = 1.0
    return flat
