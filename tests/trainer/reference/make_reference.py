"""Write the PyTorch reference our Numba GPT-2 is tested against (llm.c's test_gpt2.c idea, for the `tiny` model).

Run by developers, not by the tests (needs torch):

    python tests/trainer/reference/make_reference.py

Writes next to this file:
    tiny_model.bin   the initial weights as an llm.c checkpoint (trainer.checkpoint.write_checkpoint)
    tiny_state.npz   x, y (B, T) int32; logits (B, T, Vp); loss; grad_<name> for the 16 tensors in llm.c's order;
                     losses / losses_no_wd: loss before each of STEPS AdamW steps on the same batch (as
                     test_gpt2.c), with weight decay WEIGHT_DECAY / 0.0; params_after: the flat buffer after the
                     weight-decay run; lr, weight_decay, beta1, beta2, eps, seed, B, T.

The model is nanoGPT's GPT-2 as llm.c computes it: pre-LayerNorm (eps 1e-5), learned position embeddings,
tanh-approximate GELU, causal attention scaled by 1/sqrt(hs), lm_head tied to wte, wte with Vp rows, logits for
all Vp columns but the loss over the first V only. AdamW gets all parameters in one group, so weight decay
applies to every tensor (biases, LayerNorms, padded wte rows), as llm.c's gpt2_update does.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.checkpoint import write_checkpoint
from trainer.config import MODELS, ModelConfig
from trainer.params import PARAM_NAMES, ParamLayout, init_params

OUT_DIR = Path(__file__).resolve().parent
MODEL = "tiny"
B, T = 2, 16
SEED = 1337
STEPS = 10
LR = 1e-3                # larger than test_gpt2.c's 1e-4: the tiny model must move visibly in 10 steps
WEIGHT_DECAY = 0.1
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
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
    """Parameters (or their grads) of `model` in llm.c's flat layout."""
    layout = ParamLayout.for_model(model.cfg)
    flat, views = layout.allocate()
    for name, tensors in model.llmc_tensors().items():
        arrays = [(t.grad if use_grad else t).detach().numpy() for t in tensors]
        views[name][...] = arrays[0] if name in NOT_PER_LAYER else np.stack(arrays)
    return flat


def reference_weights(cfg: ModelConfig, seed: int) -> np.ndarray:
    """init_params, plus random padded wte rows, biases and LayerNorm affines.

    init_params leaves those at 0 or 1, where a mis-indexed bias, a transposed LN weight or an unmasked padded
    logit would go unnoticed; random values make every tensor matter in the comparison.
    """
    flat = init_params(cfg, seed)
    p = ParamLayout.for_model(cfg).views(flat)
    rng = np.random.default_rng(seed + 1)
    p["wte"][cfg.vocab_size:] = rng.normal(0.0, 0.02, p["wte"][cfg.vocab_size:].shape)
    for name in ("qkvb", "attprojb", "fcb", "fcprojb", "ln1b", "ln2b", "lnfb"):
        p[name][...] = rng.normal(0.0, 0.02, p[name].shape)
    for name in ("ln1w", "ln2w", "lnfw"):
        p[name][...] = 1.0 + rng.normal(0.0, 0.1, p[name].shape)
    return flat


def train_losses(cfg: ModelConfig, flat: np.ndarray, x: torch.Tensor, y: torch.Tensor,
                 weight_decay: float) -> tuple[np.ndarray, np.ndarray]:
    """Loss before each of STEPS AdamW updates on the same batch, and the parameters after the last one."""
    model = GPT(cfg)
    load_flat(model, flat)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(BETA1, BETA2), eps=EPS,
                            weight_decay=weight_decay, foreach=False)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=False)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses, dtype=np.float32), to_flat(model, use_grad=False)


def main() -> None:
    torch.manual_seed(SEED)
    cfg = MODELS[MODEL]
    flat = reference_weights(cfg, SEED)
    rng = np.random.default_rng(SEED + 2)
    tokens = rng.integers(0, cfg.vocab_size, size=(B, T + 1)).astype(np.int32)
    x, y = tokens[:, :-1].copy(), tokens[:, 1:].copy()
    xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()

    model = GPT(cfg)
    load_flat(model, flat)
    assert np.array_equal(to_flat(model, use_grad=False), flat), "torch <-> flat mapping is not a round trip"
    logits, loss = model(xt, yt)
    loss.backward()
    grads = ParamLayout.for_model(cfg).views(to_flat(model, use_grad=True))

    losses, params_after = train_losses(cfg, flat, xt, yt, WEIGHT_DECAY)
    losses_no_wd, _ = train_losses(cfg, flat, xt, yt, 0.0)

    write_checkpoint(OUT_DIR / f"{MODEL}_model.bin", cfg, flat)
    np.savez_compressed(
        OUT_DIR / f"{MODEL}_state.npz",
        x=x, y=y, logits=logits.detach().numpy().astype(np.float32), loss=np.float32(loss.item()),
        **{f"grad_{name}": grads[name] for name in PARAM_NAMES},
        losses=losses, losses_no_wd=losses_no_wd, params_after=params_after,
        lr=np.float64(LR), weight_decay=np.float64(WEIGHT_DECAY), beta1=np.float64(BETA1),
        beta2=np.float64(BETA2), eps=np.float64(EPS), seed=np.int64(SEED), B=np.int64(B), T=np.int64(T),
    )
    print(f"loss {loss.item():.6f}; losses (wd={WEIGHT_DECAY}) {np.round(losses, 6).tolist()}")
    print(f"losses (wd=0) {np.round(losses_no_wd, 6).tolist()}")


if __name__ == "__main__":
    main()
