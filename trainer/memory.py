"""What a model replica allocates, known before allocating it: the activation shapes and a memory estimate.

The shape tables here are the ones trainer.model carves its buffers from, so the estimate is the allocation,
not a guess: parameters, gradients and both AdamW moments (4 x P float32), every layer's activations, one layer
of activation gradients and the scratch buffers, and under sequence parallelism the dK/dV exchange buffers
(trainer.parallel.sequence). With S ranks per sequence a rank holds T/S positions: its buffers have B*T/S rows,
except the layer's qkv, which holds the whole group's rows, and attention's scores, (T/S) x T. Imports nothing
heavy (no Numba): the CLI checks a run with it before anything is built.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.config import ModelConfig
from trainer.errors import TrainerError
from trainer.params import param_shapes

FLOAT32 = 4


def activation_shapes(cfg: ModelConfig, B: int, T: int, T_all: int | None = None) -> dict[str, tuple[int, ...]]:
    """Forward activations of every layer (backward needs them all); T positions per sequence on this rank, of
    T_all (default T) in the whole sequence."""
    L, C, NH, Vp, BT = cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.padded_vocab_size, B * T
    T_all = T if T_all is None else T_all
    return {
        "encoded": (BT, C),
        "ln1": (L, BT, C), "ln1_mean": (L, BT), "ln1_rstd": (L, BT),
        "qkv": (L, B * T_all, 3 * C), "atty": (L, BT, C),
        "preatt": (L, B, NH, T, T_all), "att": (L, B, NH, T, T_all),
        "attproj": (L, BT, C), "residual2": (L, BT, C),
        "ln2": (L, BT, C), "ln2_mean": (L, BT), "ln2_rstd": (L, BT),
        "fch": (L, BT, 4 * C), "fch_gelu": (L, BT, 4 * C), "fcproj": (L, BT, C), "residual3": (L, BT, C),
        "lnf": (BT, C), "lnf_mean": (BT,), "lnf_rstd": (BT,),
        "logits": (BT, Vp), "probs": (BT, Vp), "losses": (BT,),
    }


def layer_grad_shapes(cfg: ModelConfig, B: int, T: int) -> dict[str, tuple[int, ...]]:
    """Gradients of one layer's activations, reused layer after layer as backward walks down."""
    C, BT = cfg.n_embd, B * T
    return {
        "dres2": (BT, C), "dfcproj": (BT, C), "dfch_gelu": (BT, 4 * C), "dfch": (BT, 4 * C),
        "dln2": (BT, C), "dattproj": (BT, C), "datty": (BT, C), "dqkv": (BT, 3 * C), "dln1": (BT, C),
    }


def scratch_shapes(cfg: ModelConfig, B: int, T: int, T_all: int | None = None) -> dict[str, tuple[int, ...]]:
    """Buffers outside the layers: the residual stream's gradient, final LayerNorm's and the logits' gradients,
    attention scratch (overwritten per call)."""
    C, NH, Vp, BT = cfg.n_embd, cfg.n_head, cfg.padded_vocab_size, B * T
    T_all = T if T_all is None else T_all
    return {"dresidual": (BT, C), "dlnf": (BT, C), "dlogits": (BT, Vp), "dpreatt": (B, NH, T, T_all),
            "datt": (B, NH, T, T_all)}


def exchange_shapes(cfg: ModelConfig, B: int, T: int, S: int, own_rows: bool) -> dict[str, tuple[int, ...]]:
    """Sequence parallelism's dK/dV buffers (none for S = 1): the group's, B*T rows of [dk | dv], and with
    `own_rows` (reduce-scatter) a separate one for this rank's B*T/S rows."""
    if S == 1:
        return {}
    C = cfg.n_embd
    return {"dkv": (B * T, 2 * C), **({"dkv_own": (B * T // S, 2 * C)} if own_rows else {})}


def elements(shapes: dict[str, tuple[int, ...]]) -> int:
    # Python ints: an absurd size (-B 100000000) must be reported, not overflow int64.
    return sum(math.prod(s) for s in shapes.values())


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: int     # bytes of the parameters alone
    training: int       # bytes of parameters, gradients and both AdamW moments
    activations: int    # bytes of activations, one layer of their gradients and scratch

    @property
    def total(self) -> int:
        return self.training + self.activations


def estimate(cfg: ModelConfig, B: int, T: int, S: int = 1, own_rows: bool = False) -> MemoryEstimate:
    """One rank's memory; S ranks per sequence (`own_rows`: the reduce-scatter's extra buffer)."""
    params = FLOAT32 * elements(param_shapes(cfg))
    Tl = T // S
    acts = FLOAT32 * (elements(activation_shapes(cfg, B, Tl, T)) + elements(layer_grad_shapes(cfg, B, Tl))
                      + elements(scratch_shapes(cfg, B, Tl, T)) + elements(exchange_shapes(cfg, B, T, S, own_rows)))
    return MemoryEstimate(params, 4 * params, acts)


def available_bytes() -> int | None:
    """Memory this process can still get: the kernel's MemAvailable, lowered to the cgroup's limit (a container,
    a Slurm job) when there is one. None when neither can be read."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        if limit != "max":
            with open("/sys/fs/cgroup/memory.current") as f:
                found.append(int(limit) - int(f.read()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def gib(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 1024:,.1f} KiB"


def check_fits(cfg: ModelConfig, B: int, T: int, processes: int = 1, S: int = 1,
               own_rows: bool = False) -> MemoryEstimate:
    """The estimate, or a TrainerError when `processes` replicas of it do not fit in the available memory."""
    need = estimate(cfg, B, T, S, own_rows)
    have = available_bytes()
    if have is not None and processes * need.total > have:
        each = f"{processes} ranks x " if processes > 1 else ""
        raise TrainerError(
            f"the run needs about {each}{gib(need.total)} (parameters, gradients and AdamW moments "
            f"{gib(need.training)}, activations at B={B} T={T} {gib(need.activations)}) but this machine has "
            f"{gib(have)} available; lower -B/--batch-size, -T/--seq-len or the model size")
    return need
