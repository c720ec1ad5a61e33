"""One flat float32 buffer for all parameters, carved into named views with llm.c's names and shapes.

Gradients and the AdamW moments use the same layout, so a gradient sync is one collective on one buffer
and a checkpoint is the buffer written as is.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from trainer.config import ModelConfig
from trainer.parallel.stages import Stage
from trainer.parallel.tensor import WHOLE, TensorShard

# llm.c's order: the checkpoint file stores the 16 tensors in exactly this sequence.
PARAM_NAMES = (
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb",
)


def param_shapes(cfg: ModelConfig, tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """llm.c's tensors, or a tensor-parallel rank's shards of them (trainer.parallel.tensor)."""
    C, L, maxT = cfg.n_embd, cfg.n_layer, cfg.max_seq_len
    Vs, a, f = tp.vocab(cfg), tp.attn(cfg), tp.ffn(cfg)
    return {
        "wte": (Vs, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * a, C), "qkvb": (L, 3 * a),
        "attprojw": (L, C, a), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, f, C), "fcb": (L, f),
        "fcprojw": (L, C, f), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


# In memory, tensors are grouped by layer: [wte, wpe, lnfw, lnfb | layer 0's 12 tensors | layer 1's | ...], so
# each layer's gradients are one contiguous range (one nonblocking allreduce per layer, no packing) while every
# name still has one view of llm.c's shape (the per-layer ones strided by the layer block). Checkpoints keep
# llm.c's order; to_llmc/from_llmc convert.
NON_LAYER = ("wte", "wpe", "lnfw", "lnfb")
PER_LAYER = tuple(n for n in PARAM_NAMES if n not in NON_LAYER)


def stage_tensors(stage: Stage) -> tuple[str, ...]:
    """The non-layer tensors a pipeline stage holds: the embeddings on the first, the final LayerNorm and the tied
    head (a copy of wte) on the last; all four without pipelining."""
    return tuple(n for n in NON_LAYER if (n in ("wte", "wpe") and stage.is_first)
                 or (n in ("wte", "lnfw", "lnfb") and stage.is_last))


@dataclass(frozen=True)
class ParamLayout:
    """Where each named tensor lives in the flat buffer (in memory: layer-major, see above)."""
    shapes: dict[str, tuple[int, ...]]   # the tensors held, in llm.c's order
    offsets: dict[str, int]          # first element of the tensor (of its layer-0 slice for per-layer tensors)
    n_layer: int
    layer_start: int                 # elements before layer 0's block: the non-layer tensors
    layer_stride: int                # elements per layer block
    size: int
    first_layer: int = 0             # the model's index of this buffer's layer 0 (a pipeline stage's first layer)
    tp: TensorShard = WHOLE          # the tensor-parallel shard of each tensor held

    @classmethod
    def for_model(cls, cfg: ModelConfig) -> ParamLayout:
        return cls.for_stage(cfg, Stage.whole(cfg))

    @classmethod
    def for_stage(cls, cfg: ModelConfig, stage: Stage, tp: TensorShard = WHOLE) -> ParamLayout:
        """The tensors of one pipeline stage: its layers and the non-layer tensors it holds (stage_tensors), of
        tensor-parallel shard `tp`."""
        full = param_shapes(cfg, tp)
        held = stage_tensors(stage)
        shapes = {n: (full[n] if n in NON_LAYER else (stage.n_layer,) + full[n][1:])
                  for n in PARAM_NAMES if n in held or n in PER_LAYER}
        offsets, pos = {}, 0
        for name in held:
            offsets[name] = pos
            pos += int(np.prod(shapes[name]))
        layer_start, inner = pos, 0
        for name in PER_LAYER:
            offsets[name] = layer_start + inner
            inner += int(np.prod(shapes[name][1:]))
        return cls(shapes, offsets, stage.n_layer, layer_start, inner, layer_start + inner * stage.n_layer,
                   stage.first_layer, tp)

    def ranges(self, names) -> tuple[tuple[int, int], ...]:
        """The [lo, hi) ranges of the flat buffer the named tensors occupy (every layer's), sorted and merged."""
        spans = []
        for name in names:
            if name not in self.shapes:
                continue
            n = int(np.prod(self.shapes[name] if name in NON_LAYER else self.shapes[name][1:]))
            layers = [0] if name in NON_LAYER else range(self.n_layer)
            spans += [(self.offsets[name] + k * self.layer_stride, self.offsets[name] + k * self.layer_stride + n)
                      for k in layers]
        merged: list[tuple[int, int]] = []
        for lo, hi in sorted(spans):
            if merged and lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        return tuple(merged)

    def layer_range(self, layer: int) -> tuple[int, int]:
        """[lo, hi) of layer `layer`'s 12 tensors in the flat buffer."""
        lo = self.layer_start + layer * self.layer_stride
        return lo, lo + self.layer_stride

    @property
    def bucket_size(self) -> int:
        """Elements of a one-layer gradient bucket (allocate_bucket): the non-layer tensors and one layer block."""
        return self.layer_start + self.layer_stride

    def views(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Named, writable views into `flat` (no copies); per-layer tensors are (L, ...) strided views."""
        return self._views(flat, self.size, self.layer_stride)

    def _views(self, flat: np.ndarray, size: int, layer_stride: int) -> dict[str, np.ndarray]:
        if flat.shape != (size,) or flat.dtype != np.float32:
            raise ValueError(f"flat buffer must be float32[{size}], got {flat.dtype}{list(flat.shape)}")
        out = {}
        item = flat.itemsize
        for name in self.shapes:
            shape, off = self.shapes[name], self.offsets[name]
            if name in NON_LAYER:
                out[name] = flat[off:off + int(np.prod(shape))].reshape(shape)
            else:
                inner = shape[1:]
                strides = (layer_stride * item,) + tuple(int(np.prod(inner[i + 1:])) * item
                                                        for i in range(len(inner)))
                out[name] = as_strided(flat[off:], shape=shape, strides=strides, writeable=True)
        return out

    def allocate(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        flat = np.zeros(self.size, dtype=np.float32)
        return flat, self.views(flat)

    def allocate_bucket(self) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A gradient buffer of bucket_size elements: the non-layer tensors as in `allocate`, and ONE layer block
        that every layer's views share (layer stride 0: gp["fcw"][l] is the same memory for every l). Backward
        walks down the layers one at a time, so one block is enough if its gradients are taken out and the block
        zeroed after each layer: ZeRO-2 (trainer.dp.Zero2) reduce-scatters it there. Element i of the block is
        element layer_range(l)[0] + i of the full buffer while layer l is in it."""
        flat = np.zeros(self.bucket_size, dtype=np.float32)
        return flat, self._views(flat, self.bucket_size, 0)

    def from_llmc(self, llmc: np.ndarray) -> np.ndarray:
        """Our flat buffer from one in llm.c's order (a checkpoint's body)."""
        flat, views = self.allocate()
        pos = 0
        for name in self.shapes:
            n = int(np.prod(self.shapes[name]))
            views[name][...] = llmc[pos:pos + n].reshape(self.shapes[name])
            pos += n
        return flat

    def to_llmc(self, flat: np.ndarray) -> np.ndarray:
        """`flat` rearranged into llm.c's order (what a checkpoint stores)."""
        views = self.views(flat)
        return np.concatenate([views[name].reshape(-1) for name in self.shapes])

    def _index(self, name: str, cfg: ModelConfig) -> tuple:
        """Where this layout's tensor `name` sits in the whole model's tensor: its layers, its shard."""
        layers = () if name in NON_LAYER else (slice(self.first_layer, self.first_layer + self.n_layer),)
        return layers + self.tp.index_of(name, cfg)

    def take(self, whole: ParamLayout, flat: np.ndarray, cfg: ModelConfig | None = None) -> np.ndarray:
        """This stage's part, of this tensor-parallel shard (a new buffer in this layout), of `flat`, a buffer in the
        whole model's layout (`cfg`: the model's, needed for a tensor-parallel shard)."""
        mine, out = self.allocate()
        src = whole.views(flat)
        for name, view in out.items():
            index = self._index(name, cfg)
            view[...] = src[name][index] if index else src[name]
        return mine

    def put(self, whole: ParamLayout, flat: np.ndarray, into: np.ndarray, cfg: ModelConfig | None = None) -> None:
        """Copy `flat` (this stage's buffer, of this shard) into its place in `into`, a buffer in the whole model's
        layout."""
        dst = whole.views(into)
        for name, view in self.views(flat).items():
            index = self._index(name, cfg)
            if index:
                dst[name][index] = view
            else:
                dst[name][...] = view


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
