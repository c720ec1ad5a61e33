"""A plain PyTorch GPT-2 identical to ours (llm.c's), for the reference state (make_reference.py, beside it) and
the speed anchor (benchmarks/step_time.py).

Developer tool, kept out of the package: it imports torch, which the package does not depend on
(`pip install torch==2.13.0`).
nanoGPT's GPT-2 as llm.c computes it: pre-LayerNorm (eps 1e-5), learned position embeddings, tanh-approximate
GELU, causal attention scaled by 1/sqrt(hs), lm_head tied to wte, wte with Vp rows, logits for all Vp columns
but the loss over the first V only.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.config import ModelConfig
from trainer.params import ParamLayout

NOT_PER_LAYER = ("wte", "wpe", "lnfw", "lnfb")     # the other 12 llm.c tensors stack one slice per layer


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        C = cfg.n_embd
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(C, 3 * C)     # weight (3C, C) = llm.c qkvw[l]: rows q, then k, then v
        self.c_proj = nn.Linear(C, C)         # weight (C, C) = attprojw[l]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        Bx, Tx, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(Bx, Tx, self.n_head, hs).transpose(1, 2) for t in (q, k, v))   # (B, NH, T, hs)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))                          # (B, NH, T, T)
        causal = torch.ones(Tx, Tx, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(Bx, Tx, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        C = cfg.n_embd
        self.c_fc = nn.Linear(C, 4 * C)       # weight (4C, C) = fcw[l]
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * C, C)     # weight (C, 4C) = fcprojw[l]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.padded_vocab_size, cfg.n_embd)   # (Vp, C)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.n_embd)         # (maxT, C)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.padded_vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight                          # tied: one Parameter, grads summed

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        Tx = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(Tx))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))                            # (B, T, Vp)
        V = self.cfg.vocab_size
        loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.reshape(-1))   # padded columns excluded
        return logits, loss

    def llmc_tensors(self) -> dict[str, list[torch.Tensor]]:
        """llm.c name -> the torch tensors it stacks (one per layer for per-layer names)."""
        per_layer = {
            "ln1w": lambda b: b.ln_1.weight, "ln1b": lambda b: b.ln_1.bias,
            "qkvw": lambda b: b.attn.c_attn.weight, "qkvb": lambda b: b.attn.c_attn.bias,
            "attprojw": lambda b: b.attn.c_proj.weight, "attprojb": lambda b: b.attn.c_proj.bias,
            "ln2w": lambda b: b.ln_2.weight, "ln2b": lambda b: b.ln_2.bias,
            "fcw": lambda b: b.mlp.c_fc.weight, "fcb": lambda b: b.mlp.c_fc.bias,
            "fcprojw": lambda b: b.mlp.c_proj.weight, "fcprojb": lambda b: b.mlp.c_proj.bias,
        }
        out = {"wte": [self.wte.weight], "wpe": [self.wpe.weight],
               "lnfw": [self.ln_f.weight], "lnfb": [self.ln_f.bias]}
        out.update({name: [get(b) for b in self.h] for name, get in per_layer.items()})
        return out


def load_flat(model: GPT, flat: np.ndarray) -> None:
    views = ParamLayout.for_model(model.cfg).views(flat)
    with torch.no_grad():
        for name, tensors in model.llmc_tensors().items():
            sources = [views[name]] if name in NOT_PER_LAYER else list(views[name])
            for t, src in zip(tensors, sources, strict=True):
                assert tuple(t.shape) == src.shape, (name, tuple(t.shape), src.shape)
                t.copy_(torch.from_numpy(src.copy()))


def to_flat(model: GPT, use_grad: bool) -> np.ndarray:
    """Parameters (or their grads) of `model` as our flat buffer (trainer.params' in-memory layout)."""
    layout = ParamLayout.for_model(model.cfg)
    flat, views = layout.allocate()
    for name, tensors in model.llmc_tensors().items():
        arrays = [(t.grad if use_grad else t).detach().numpy() for t in tensors]
        views[name][...] = arrays[0] if name in NOT_PER_LAYER else np.stack(arrays)
    return flat
