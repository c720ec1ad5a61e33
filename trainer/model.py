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
from trainer.kernels.crossentropy import (
    crossentropy_backward,
    crossentropy_exps,
    crossentropy_finish,
    crossentropy_forward,
    crossentropy_max,
)
from trainer.kernels.encoder import encoder_backward, encoder_forward
from trainer.kernels.gelu import gelu_backward, gelu_forward
from trainer.kernels.layernorm import layernorm_backward, layernorm_forward
from trainer.kernels.matmul import matmul_backward, matmul_forward
from trainer.kernels.residual import residual_backward, residual_forward
from trainer.kernels.zero import zero_fill
from trainer.launcher import Launcher
from trainer.memory import (
    activation_shapes,
    elements,
    kept_shapes,
    layer_activation_shapes,
    layer_grad_shapes,
    scratch_shapes,
    work_shapes,
)
from trainer.parallel.sequence import WholeSequence
from trainer.parallel.stages import Stage
from trainer.parallel.tensor import WholeTensor
from trainer.params import ParamLayout

NO_LAYER = -1  # layer id of kernels outside the transformer blocks (encoder, final LN, lm head, loss)


def _carve(flat: np.ndarray, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    out, pos = {}, 0
    for name, shape in shapes.items():
        n = int(np.prod(shape))
        out[name] = flat[pos:pos + n].reshape(shape)
        pos += n
    return out


class Buffers:
    """Named float32 arrays carved from one allocation; the shapes are trainer.memory's, so its estimate is
    exactly what the model allocates."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.flat = np.zeros(elements(shapes), dtype=np.float32)
        self.a = _carve(self.flat, shapes)

    @property
    def nbytes(self) -> int:
        return self.flat.nbytes




class GPT2:
    """Parameters, gradients and activations of one model replica, or of one pipeline stage of it; forward and
    backward over a (B, T) micro-batch.

    `seq` (trainer.parallel.sequence) is this rank's share of each sequence; by default all of it. self.T is the
    positions per sequence this rank holds (T/S under sequence parallelism), self.seq_len the whole T.
    `stage` (trainer.parallel.stages) is the contiguous layers this rank holds, with the embeddings on the first
    stage and the final LayerNorm, tied head and loss on the last; by default the whole model. A stage that is not
    the first takes its input in `stage_input(slot)` (received from the previous stage); one that is not the last
    leaves its output in `stage_output(slot)` and takes the gradient of it in `output_grad` before backward, and
    backward leaves the gradient of its input in `input_grad`.
    `slots` micro-batches can be between their forward and their backward at once (a pipeline schedule's bound);
    each has its own activations. With `recompute`, a slot keeps only each layer's input, and backward recomputes
    the layer into one shared layer of work buffers before differentiating it. With `grad_bucket`, the gradients
    of all layers share one layer's memory (ParamLayout.allocate_bucket): `after_layer` must take each layer's out
    and zero it (ZeRO-2, trainer.dp.Zero2).
    `tp` (trainer.parallel.tensor) is this rank's tensor-parallel shard and its group's reductions: the rank holds
    its heads, MLP columns and vocabulary rows of every tensor, and the model calls the group's all-reduces where
    Megatron's f and g operators sit; by default whole tensors.
    """

    def __init__(self, cfg: ModelConfig, params: np.ndarray, B: int, T: int, run: Launcher,
                 seq: WholeSequence | None = None, stage: Stage | None = None, slots: int = 1,
                 recompute: bool = False, tp=None, grad_bucket: bool = False):
        if T > cfg.max_seq_len:
            raise ValueError(f"sequence length T={T} exceeds the model's max_seq_len={cfg.max_seq_len}")
        self.seq = seq if seq is not None else WholeSequence(T)
        if self.seq.seq_len != T:
            raise ValueError(f"the sequence split is for T={self.seq.seq_len}, the model for T={T}")
        self.cfg, self.B, self.T, self.seq_len, self.run = cfg, B, self.seq.local_len, T, run
        self.stage = stage if stage is not None else Stage.whole(cfg)
        self.tp = tp if tp is not None else WholeTensor()
        sh = self.tp.shard
        sh.check(cfg)
        self.n_head = sh.heads(cfg)                   # this rank's attention heads
        self.v0 = sh.vocab_start(cfg)                 # this rank's first vocabulary row
        self.layout = ParamLayout.for_stage(cfg, self.stage, sh)
        self.params = params
        self.p = self.layout.views(params)
        self.grads, self.gp = self.layout.allocate_bucket() if grad_bucket else self.layout.allocate()
        Tl, st = self.T, self.stage
        kept = kept_shapes(cfg, B, Tl, st) if recompute else activation_shapes(cfg, B, Tl, T, st, sh)
        self.slots = [Buffers(kept) for _ in range(slots)]
        self.layer_acts = tuple(layer_activation_shapes(cfg, B, Tl, T, 1))   # names of one layer's activations
        self.work = Buffers(work_shapes(cfg, B, Tl, T, st, sh)) if recompute else None
        self.layer_grads = Buffers(layer_grad_shapes(cfg, B, Tl, sh))     # one layer's, zeroed before each layer
        self.g = self.layer_grads.a
        self.scratch = Buffers(scratch_shapes(cfg, B, Tl, T, st, sh))
        self.dresidual = self.scratch.a["dresidual"]   # gradient of the residual stream
        self.no_bias = np.zeros(1, dtype=np.float32)
        self.inputs: list[np.ndarray | None] = [None] * slots    # each slot's tokens (first stage)
        self.targets: list[np.ndarray | None] = [None] * slots   # and targets (last stage)
        for b in self.slots + ([self.work] if self.work is not None else []):
            if "preatt" in b.a:
                run.may_hold_inf.append(b.a["preatt"])

    @property
    def activation_bytes(self) -> int:
        return sum(b.nbytes for b in self.slots + [self.work, self.layer_grads, self.scratch] if b is not None)

    # -- what a pipeline stage exchanges -----------------------------------------------------------------
    def stage_input(self, slot: int = 0) -> np.ndarray:
        return self.slots[slot].a["encoded"]

    def stage_output(self, slot: int = 0) -> np.ndarray:
        return self.slots[slot].a["residual3"][self.stage.n_layer - 1]

    @property
    def output_grad(self) -> np.ndarray:
        return self.dresidual

    @property
    def input_grad(self) -> np.ndarray:
        return self.dresidual

    # -- forward ------------------------------------------------------------------------------------------
    def _layer_acts(self, slot: int, l: int) -> dict[str, np.ndarray]:
        """Layer l's activations for the micro-batch in `slot`: its own, or with --recompute the shared work
        buffers with the output going to the slot's kept residual3."""
        kept = self.slots[slot].a
        if self.work is None:
            return {name: kept[name][l] for name in self.layer_acts}
        w = self.work.a
        return {**{name: w[name][0] for name in self.layer_acts if name != "residual3"},
                "residual3": kept["residual3"][l]}

    def _head_acts(self, slot: int) -> dict[str, np.ndarray]:
        return (self.work if self.work is not None else self.slots[slot]).a

    def forward(self, inputs: np.ndarray | None, targets: np.ndarray | None, slot: int = 0) -> float | None:
        """Mean loss over the micro-batch (None on a stage without the loss); inputs/targets int32 (B, T) (this
        rank's positions; inputs used on the first stage, targets on the last). Keeps what backward needs."""
        p, run, seq, st = self.p, self.run, self.seq, self.stage
        kept = self.slots[slot].a
        if st.is_first:
            self.inputs[slot] = np.ascontiguousarray(inputs, dtype=np.int32).reshape(-1)    # (BT,)
            run(encoder_forward, NO_LAYER, kept["encoded"], self.inputs[slot], p["wte"], p["wpe"], seq.qpos, self.v0,
                self.tp.shard.adds_bias)
            self.tp.allreduce(kept["encoded"])      # each rank looked up the tokens of its vocabulary rows
        residual = kept["encoded"]
        for l in range(st.n_layer):
            la = self._layer_acts(slot, l)
            self._layer_forward(l, la, residual)
            residual = la["residual3"]
        if not st.is_last:
            return None
        self.targets[slot] = np.ascontiguousarray(targets, dtype=np.int32).reshape(-1)      # (BT,)
        return self._head_forward(slot, residual)

    def _layer_forward(self, l: int, la: dict[str, np.ndarray], residual: np.ndarray) -> None:
        p, run, seq, tp = self.p, self.run, self.seq, self.tp
        B, NH, gl = self.B, self.n_head, self.stage.first_layer + l     # gl: the model's layer, for traces
        bias = tp.shard.adds_bias     # row-parallel: one rank adds the bias to the partial sums
        run(layernorm_forward, gl, la["ln1"], la["ln1_mean"], la["ln1_rstd"], residual, p["ln1w"][l], p["ln1b"][l])
        qkv = seq.local_rows(la["qkv"])   # this rank's rows of the layer's qkv
        run(matmul_forward, gl, qkv, la["ln1"], p["qkvw"][l], p["qkvb"][l], True)
        seq.gather_qkv(la["qkv"])
        run(attention_forward, gl, la["atty"], la["preatt"], la["att"], qkv, la["qkv"], seq.qpos, seq.kpos, B, NH)
        run(matmul_forward, gl, la["attproj"], la["atty"], p["attprojw"][l], p["attprojb"][l], bias)
        tp.allreduce(la["attproj"])         # Megatron's g: the row-parallel partial sums made whole
        run(residual_forward, gl, la["residual2"], residual, la["attproj"])
        run(layernorm_forward, gl, la["ln2"], la["ln2_mean"], la["ln2_rstd"], la["residual2"], p["ln2w"][l],
            p["ln2b"][l])
        run(matmul_forward, gl, la["fch"], la["ln2"], p["fcw"][l], p["fcb"][l], True)
        run(gelu_forward, gl, la["fch_gelu"], la["fch"])
        run(matmul_forward, gl, la["fcproj"], la["fch_gelu"], p["fcprojw"][l], p["fcprojb"][l], bias)
        tp.allreduce(la["fcproj"])
        run(residual_forward, gl, la["residual3"], la["residual2"], la["fcproj"])

    def _head_forward(self, slot: int, residual: np.ndarray) -> float:
        p, run, h = self.p, self.run, self._head_acts(slot)
        run(layernorm_forward, NO_LAYER, h["lnf"], h["lnf_mean"], h["lnf_rstd"], residual, p["lnfw"], p["lnfb"])
        run(matmul_forward, NO_LAYER, h["logits"], h["lnf"], p["wte"], self.no_bias, False)
        V, targets = self.cfg.vocab_size, self.targets[slot]
        if self.tp.shard.degree == 1:
            run(crossentropy_forward, NO_LAYER, h["losses"], h["probs"], h["logits"], targets, V)
        else:   # vocabulary-parallel: the group agrees on each row's maximum, then on its sum of exps
            run(crossentropy_max, NO_LAYER, h["ce_max"], h["logits"], self.v0, V)
            self.tp.allreduce_max(h["ce_max"])
            run(crossentropy_exps, NO_LAYER, h["ce_stats"], h["probs"], h["logits"], h["ce_max"], targets, self.v0, V)
            self.tp.allreduce(h["ce_stats"])
            run(crossentropy_finish, NO_LAYER, h["losses"], h["probs"], h["ce_stats"], targets, V)
        run.taskwait()      # the loss is read here: under --schedule tasks, the forward's tasks must be done
        return float(h["losses"].mean(dtype=np.float64))

    def zero_grad(self) -> None:
        self.run(zero_fill, NO_LAYER, self.grads)

    def backward(self, loss_scale: float, after_layer: Callable[[GPT2, int], None] | None = None,
                 slot: int = 0) -> None:
        """Accumulate d(loss_scale * sum of per-token losses) into self.grads (call zero_grad first).

        loss_scale = 1 / (B * T * grad_accum) gives the gradient of the mean loss over an optimizer step. On a
        stage without the loss, `output_grad` must hold the gradient of the stage's output; on a stage without the
        embedding, `input_grad` then holds the gradient of its input. `after_layer(model, l)` is called as soon as
        layer l's (this stage's index) parameter gradients are final (overlapped sync).
        """
        cfg, p, gp, run, seq, st = self.cfg, self.p, self.gp, self.run, self.seq, self.stage
        g, kept, sc = self.g, self.slots[slot].a, self.scratch.a
        B, NH, L, tp = self.B, self.n_head, st.n_layer, self.tp
        dres = self.dresidual  # d(output of the current layer), flows down the residual stream
        if st.is_last:
            h = self._head_acts(slot)
            if self.work is not None:
                self._head_forward(slot, kept["residual3"][L - 1])
            run(crossentropy_backward, NO_LAYER, sc["dlogits"], h["probs"], self.targets[slot],
                np.float32(loss_scale), cfg.vocab_size, self.v0)
            run(zero_fill, NO_LAYER, sc["dlnf"])
            run(matmul_backward, NO_LAYER, sc["dlnf"], gp["wte"], self.no_bias, sc["dlogits"], h["lnf"], p["wte"],
                False)
            tp.allreduce(sc["dlnf"])           # the vocabulary slices' partial input gradients
            run(zero_fill, NO_LAYER, dres)
            run(layernorm_backward, NO_LAYER, dres, gp["lnfw"], gp["lnfb"], sc["dlnf"], kept["residual3"][L - 1],
                p["lnfw"], h["lnf_mean"], h["lnf_rstd"])
        for l in reversed(range(L)):
            gl = st.first_layer + l
            residual = kept["encoded"] if l == 0 else kept["residual3"][l - 1]
            la = self._layer_acts(slot, l)
            if self.work is not None:
                self._layer_forward(l, la, residual)    # recompute the layer from its kept input
            run(zero_fill, gl, self.layer_grads.flat)
            # residual3 = residual2 + fcproj
            run(residual_backward, gl, g["dres2"], g["dfcproj"], dres)
            run(matmul_backward, gl, g["dfch_gelu"], gp["fcprojw"][l], gp["fcprojb"][l], g["dfcproj"],
                la["fch_gelu"], p["fcprojw"][l], True)
            run(gelu_backward, gl, g["dfch"], la["fch"], g["dfch_gelu"])
            run(matmul_backward, gl, g["dln2"], gp["fcw"][l], gp["fcb"][l], g["dfch"], la["ln2"], p["fcw"][l], True)
            tp.allreduce(g["dln2"])            # Megatron's f in backward: the column-parallel input gradient
            run(layernorm_backward, gl, g["dres2"], gp["ln2w"][l], gp["ln2b"][l], g["dln2"], la["residual2"],
                p["ln2w"][l], la["ln2_mean"], la["ln2_rstd"])
            # residual2 = residual + attproj: dres becomes d(residual), the layer below's output
            run(zero_fill, gl, dres)
            run(residual_backward, gl, dres, g["dattproj"], g["dres2"])
            run(matmul_backward, gl, g["datty"], gp["attprojw"][l], gp["attprojb"][l], g["dattproj"], la["atty"],
                p["attprojw"][l], True)
            dkv, dkoff = seq.kv_grads(gl, g["dqkv"])
            run(attention_backward, gl, g["dqkv"], dkv, sc["dpreatt"], sc["datt"], g["datty"],
                seq.local_rows(la["qkv"]), la["qkv"], la["att"], seq.qpos, seq.kpos, B, NH, dkoff)
            seq.finish_kv_grads(gl, g["dqkv"])
            run(matmul_backward, gl, g["dln1"], gp["qkvw"][l], gp["qkvb"][l], g["dqkv"], la["ln1"], p["qkvw"][l],
                True)
            tp.allreduce(g["dln1"])
            run(layernorm_backward, gl, dres, gp["ln1w"][l], gp["ln1b"][l], g["dln1"], residual, p["ln1w"][l],
                la["ln1_mean"], la["ln1_rstd"])
            if after_layer is not None:
                after_layer(self, l)
        if st.is_first:
            run(encoder_backward, NO_LAYER, gp["wte"], gp["wpe"], dres, self.inputs[slot], seq.qpos, self.v0)
