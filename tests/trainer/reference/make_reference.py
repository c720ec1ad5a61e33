"""Write the PyTorch reference our Numba GPT-2 is tested against (llm.c's test_gpt2.c idea, for the `tiny` model).

Run by developers, not by the tests (needs torch):

    python tests/trainer/reference/make_reference.py

Writes next to this file:
    tiny_model.bin   the initial weights as an llm.c checkpoint (trainer.checkpoint.write_checkpoint)
    tiny_state.npz   x, y (B, T) int32; logits (B, T, Vp); loss; grad_<name> for the 16 tensors in llm.c's order;
                     losses / losses_no_wd: loss before each of STEPS AdamW steps on the same batch (as
                     test_gpt2.c), with weight decay WEIGHT_DECAY / 0.0; params_after: the flat buffer after the
                     weight-decay run, in llm.c's tensor order (as a checkpoint stores it); lr, weight_decay,
                     beta1, beta2, eps, seed, B, T.

The model is nanoGPT's GPT-2 as llm.c computes it: pre-LayerNorm (eps 1e-5), learned position embeddings,
tanh-approximate GELU, causal attention scaled by 1/sqrt(hs), lm_head tied to wte, wte with Vp rows, logits for
all Vp columns but the loss over the first V only. AdamW gets all parameters in one group, so weight decay
applies to every tensor (biases, LayerNorms, padded wte rows), as llm.c's gpt2_update does.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_reference import GPT, load_flat, to_flat  # beside this script, whose folder is on sys.path

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
        losses=losses, losses_no_wd=losses_no_wd, params_after=ParamLayout.for_model(cfg).to_llmc(params_after),
        lr=np.float64(LR), weight_decay=np.float64(WEIGHT_DECAY), beta1=np.float64(BETA1),
        beta2=np.float64(BETA2), eps=np.float64(EPS), seed=np.int64(SEED), B=np.int64(B), T=np.int64(T),
    )
    print(f"loss {loss.item():.6f}; losses (wd={WEIGHT_DECAY}) {np.round(losses, 6).tolist()}")
    print(f"losses (wd=0) {np.round(losses_no_wd, 6).tolist()}")


if __name__ == "__main__":
    main()
