"""GPT-2 forward and backward, llm.c's `gpt2_forward` / `gpt2_backward` read top to bottom.

Shapes: B batch, T time, C channels, L layers, NH heads, V vocab, Vp padded vocab; BT = B * T.
Under sequence parallelism (trainer/parallel/sequence.py) a rank holds Tl = T/S positions of each sequence: every
buffer has B*Tl rows, except the layer's qkv, which holds the whole sequence group's rows for attention.
Activations are kept for every layer (backward needs them); activation gradients need only one layer's worth,
reused layer after layer as backward walks down, plus two buffers for the residual stream's gradient.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from trainer.config import ModelConfig
from trainer.kernels.attention import attention_backward, attention_forward
from trainer.kernels.crossentropy import crossentropy_backward, crossentropy_forward
from trainer.kernels.encoder import encoder_backward, encoder_forward
from trainer.kernels.gelu import gelu_backward, gelu_forward
from trainer.kernels.layernorm import layernorm_backward, layernorm_forward
from trainer.kernels.matmul import matmul_backward, matmul_forward
from trainer.kernels.residual import residual_backward, residual_forward
from trainer.kernels.zero import zero_fill
from trainer.launcher import Launcher
from trainer.memory import activation_shapes, elements, layer_grad_shapes, scratch_shapes
from trainer.parallel.sequence import WholeSequence
from trainer.params import ParamLayout

NO_LAYER = -1  # layer id of kernels outside the transformer blocks (encoder, final LN, lm head, loss)


def _carve(flat: np.ndarray, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    out, pos = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        out[name] = flat[pos:pos + n].reshape(shape)
        pos += n
    return out


class Activations:
    """Forward activations (every layer) and one layer of activation gradients, each in one allocation; the
    shapes are trainer.memory's, so its estimate is exactly what this allocates."""

    def __init__(self, cfg: ModelConfig, B: int, T: int, T_all: int | None = None):
        # T: positions per sequence on this rank; T_all: in the whole sequence (the keys attention sees)
        acts, layer_grads = activation_shapes(cfg, B, T, T_all), layer_grad_shapes(cfg, B, T)
        self.flat = np.zeros(elements(acts), dtype=np.float32)
        self.a = _carve(self.flat, acts)
        # Gradients of one layer's activations; zeroed together before each layer's backward (kernels +=).
        self.layer_flat = np.zeros(elements(layer_grads), dtype=np.float32)
        self.g = _carve(self.layer_flat, layer_grads)
        scratch = {name: np.zeros(shape, dtype=np.float32)
                   for name, shape in scratch_shapes(cfg, B, T, T_all).items()}
        self.dresidual = scratch["dresidual"]   # gradient of the residual stream
        self.dlnf = scratch["dlnf"]
        self.dlogits = scratch["dlogits"]
        self.dpreatt = scratch["dpreatt"]       # attention scratch, overwritten per call
        self.datt = scratch["datt"]
        self.no_bias = np.zeros(1, dtype=np.float32)

    @property
    def nbytes(self) -> int:
        return sum(x.nbytes for x in (self.flat, self.layer_flat, self.dresidual, self.dlnf, self.dlogits,
                                      self.dpreatt, self.datt))


class GPT2:
    """Parameters, gradients and activations of one model replica; forward/backward over a (B, T) batch.

    `seq` (trainer.parallel.sequence) is this rank's share of each sequence; by default all of it. self.T is the
    positions per sequence this rank holds (T/S under sequence parallelism), self.seq_len the whole T.
    """

    def __init__(self, cfg: ModelConfig, params: np.ndarray, B: int, T: int, run: Launcher,
                 seq: WholeSequence | None = None):
        if T > cfg.max_seq_len:
            raise ValueError(f"sequence length T={T} exceeds the model's max_seq_len={cfg.max_seq_len}")
        self.seq = seq if seq is not None else WholeSequence(T)
        if self.seq.seq_len != T:
            raise ValueError(f"the sequence split is for T={self.seq.seq_len}, the model for T={T}")
        self.cfg, self.B, self.T, self.seq_len, self.run = cfg, B, self.seq.local_len, T, run
        self.layout = ParamLayout.for_model(cfg)
        self.params = params
        self.p = self.layout.views(params)
        self.grads, self.gp = self.layout.allocate()
        self.acts = Activations(cfg, B, self.T, T)
        run.may_hold_inf.append(self.acts.a["preatt"])

    def forward(self, inputs: np.ndarray, targets: np.ndarray) -> float:
        """Mean loss over the batch; inputs/targets int32 (B, T) (this rank's positions). Keeps every activation
        for backward."""
        cfg, p, a, run, seq = self.cfg, self.p, self.acts.a, self.run, self.seq
        B, NH = self.B, cfg.n_head
        self.inputs = np.ascontiguousarray(inputs, dtype=np.int32).reshape(-1)    # (BT,)
        self.targets = np.ascontiguousarray(targets, dtype=np.int32).reshape(-1)  # (BT,)
        run(encoder_forward, NO_LAYER, a["encoded"], self.inputs, p["wte"], p["wpe"], seq.qpos)
        residual = a["encoded"]
        for l in range(cfg.n_layer):
            run(layernorm_forward, l, a["ln1"][l], a["ln1_mean"][l], a["ln1_rstd"][l], residual,
                p["ln1w"][l], p["ln1b"][l])
            qkv = seq.local_rows(a["qkv"][l])   # this rank's rows of the layer's qkv
            run(matmul_forward, l, qkv, a["ln1"][l], p["qkvw"][l], p["qkvb"][l], True)
            seq.gather_qkv(a["qkv"][l])
            run(attention_forward, l, a["atty"][l], a["preatt"][l], a["att"][l], qkv, a["qkv"][l], seq.qpos,
                seq.kpos, B, NH)
            run(matmul_forward, l, a["attproj"][l], a["atty"][l], p["attprojw"][l], p["attprojb"][l], True)
            run(residual_forward, l, a["residual2"][l], residual, a["attproj"][l])
            run(layernorm_forward, l, a["ln2"][l], a["ln2_mean"][l], a["ln2_rstd"][l], a["residual2"][l],
                p["ln2w"][l], p["ln2b"][l])
            run(matmul_forward, l, a["fch"][l], a["ln2"][l], p["fcw"][l], p["fcb"][l], True)
            run(gelu_forward, l, a["fch_gelu"][l], a["fch"][l])
            run(matmul_forward, l, a["fcproj"][l], a["fch_gelu"][l], p["fcprojw"][l], p["fcprojb"][l], True)
            run(residual_forward, l, a["residual3"][l], a["residual2"][l], a["fcproj"][l])
            residual = a["residual3"][l]
        run(layernorm_forward, NO_LAYER, a["lnf"], a["lnf_mean"], a["lnf_rstd"], residual, p["lnfw"], p["lnfb"])
        run(matmul_forward, NO_LAYER, a["logits"], a["lnf"], p["wte"], self.acts.no_bias, False)
        run(crossentropy_forward, NO_LAYER, a["losses"], a["probs"], a["logits"], self.targets, cfg.vocab_size)
        return float(a["losses"].mean(dtype=np.float64))

    def zero_grad(self) -> None:
        self.run(zero_fill, NO_LAYER, self.grads)

    def backward(self, loss_scale: float, after_layer: Callable[[GPT2, int], None] | None = None) -> None:
        """Accumulate d(loss_scale * sum of per-token losses) into self.grads (call zero_grad first).

        loss_scale = 1 / (B * T * grad_accum) gives the gradient of the mean loss over an optimizer step.
        `after_layer(model, l)` is called as soon as layer l's parameter gradients are final (overlapped sync).
        """
        cfg, p, gp, a, run, seq = self.cfg, self.p, self.gp, self.acts.a, self.run, self.seq
        acts, g = self.acts, self.acts.g
        B, NH, L = self.B, cfg.n_head, cfg.n_layer
        run(crossentropy_backward, NO_LAYER, acts.dlogits, a["probs"], self.targets, np.float32(loss_scale),
            cfg.vocab_size)
        run(zero_fill, NO_LAYER, acts.dlnf)
        run(matmul_backward, NO_LAYER, acts.dlnf, gp["wte"], acts.no_bias, acts.dlogits, a["lnf"], p["wte"],
            False)
        dres = acts.dresidual  # d(output of the current layer), flows down the residual stream
        run(zero_fill, NO_LAYER, dres)
        run(layernorm_backward, NO_LAYER, dres, gp["lnfw"], gp["lnfb"], acts.dlnf, a["residual3"][L - 1],
            p["lnfw"], a["lnf_mean"], a["lnf_rstd"])
        for l in reversed(range(L)):
            residual = a["encoded"] if l == 0 else a["residual3"][l - 1]
            run(zero_fill, l, acts.layer_flat)
            # residual3 = residual2 + fcproj
            run(residual_backward, l, g["dres2"], g["dfcproj"], dres)
            run(matmul_backward, l, g["dfch_gelu"], gp["fcprojw"][l], gp["fcprojb"][l], g["dfcproj"],
                a["fch_gelu"][l], p["fcprojw"][l], True)
            run(gelu_backward, l, g["dfch"], a["fch"][l], g["dfch_gelu"])
            run(matmul_backward, l, g["dln2"], gp["fcw"][l], gp["fcb"][l], g["dfch"], a["ln2"][l], p["fcw"][l],
                True)
            run(layernorm_backward, l, g["dres2"], gp["ln2w"][l], gp["ln2b"][l], g["dln2"], a["residual2"][l],
                p["ln2w"][l], a["ln2_mean"][l], a["ln2_rstd"][l])
            # residual2 = residual + attproj: dres becomes d(residual), the layer below's output
            run(zero_fill, l, dres)
            run(residual_backward, l, dres, g["dattproj"], g["dres2"])
            run(matmul_backward, l, g["datty"], gp["attprojw"][l], gp["attprojb"][l], g["dattproj"],
                a["atty"][l], p["attprojw"][l], True)
            dkv, dkoff = seq.kv_grads(l, g["dqkv"])
            run(attention_backward, l, g["dqkv"], dkv, acts.dpreatt, acts.datt, g["datty"],
                seq.local_rows(a["qkv"][l]), a["qkv"][l], a["att"][l], seq.qpos, seq.kpos, B, NH, dkoff)
            seq.finish_kv_grads(l, g["dqkv"])
            run(matmul_backward, l, g["dln1"], gp["qkvw"][l], gp["qkvb"][l], g["dqkv"], a["ln1"][l],
                p["qkvw"][l], True)
            run(layernorm_backward, l, dres, gp["ln1w"][l], gp["ln1b"][l], g["dln1"], residual, p["ln1w"][l],
                a["ln1_mean"][l], a["ln1_rstd"][l])
            if after_layer is not None:
                after_layer(self, l)
        run(encoder_backward, NO_LAYER, gp["wte"], gp["wpe"], dres, self.inputs, seq.qpos)
