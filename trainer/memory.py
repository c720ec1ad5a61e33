"""What a model replica allocates, known before allocating it: the activation shapes and a memory estimate.

The shape tables here are the ones trainer.model carves its buffers from, so the estimate is the allocation,
not a guess: parameters, gradients and both AdamW moments (4 x P float32, less under ZeRO: training_bytes), every
layer's activations, one layer of activation gradients and the scratch buffers, and under sequence parallelism
the dK/dV exchange buffers (trainer.parallel.sequence). With S ranks per sequence a rank holds T/S positions: its
buffers have B*T/S rows, except the layer's qkv, which holds the whole group's rows, and attention's scores,
(T/S) x T. Imports nothing heavy (no Numba): the CLI checks a run with it before anything is built.

Beyond the model's buffers a rank holds what was measured, not derived (benchmarks/memory_estimate.py): MPI's
temporary inside the gradient sync (sync_bytes), the whole model's parameters its pipeline stage or tensor shard
was taken from, and a process baseline: the interpreter, NumPy, Numba and its loaded kernels, pyarrow, mpi4py and
MPICH, the tracer, the built-in corpus (PROCESS_BASELINE, private to each process) and the libraries' code mapped
from files (SHARED_LIBRARIES, in every rank's resident memory but in the node's memory once). Counting only the
buffers, 21 GiB took ~9,900 `tiny` ranks (2.2 MiB each at -B 4); each holds ~137 MiB of its own, so ~155 fit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.config import DPSync, ModelConfig
from trainer.errors import TrainerError
from trainer.parallel.stages import Stage
from trainer.parallel.tensor import WHOLE, TensorShard
from trainer.params import ParamLayout

FLOAT32 = 4
MIB = 1 << 20

# A rank process's memory besides its model's buffers, measured with benchmarks/memory_estimate.py on 2026-12-02
# (AMD EPYC VM, 2 vCPUs, 24 GiB; Python 3.11.7, NumPy 2.4.6, Numba 0.68.1, pyarrow 26.0.1, mpi4py 4.1.2, MPICH 5.0.2):
# `gpt2trace run --model tiny|small|d12 --ranks 1|2|8 -B 1 -T 16 --steps 2`, each rank's peak resident memory
# (VmHWM) split by /proc/PID/smaps_rollup into its own (anonymous) memory and pages mapped from files.
# PROCESS_BASELINE: the peak less the file pages and the estimate's model part, 129-131 MiB on the ranks that do
# not merge the trace, 135-154 MiB on rank 0 (or the one process), whose merge of the parts after the last step
# grows with the trace (not counted: +125 MiB for 300 steps of `small`, 306,627 records). It holds the
# interpreter's heap and modules, Numba's kernels as LLVM loaded them, the sgemm peak's and the built-in corpus'
# arrays, the tracer's log, MPICH's state; threads add nothing measurable (1 vs 16). SHARED_LIBRARIES: the file
# pages, 146-157 MiB in an MPI rank (133 with one rank, which loads no MPICH): libLLVM, OpenBLAS, Arrow, MPICH,
# CPython's extension modules, the same pages in every rank (the check's node total is at or above the ranks' summed
# Pss in every row: by 1-5% for d12 and at 8 ranks, by up to 29% at 2 ranks of small). Other versions of these
# libraries move both: the benchmark prints them as measured.
PROCESS_BASELINE = 135 * MIB
SHARED_LIBRARIES = 150 * MIB


def layer_activation_shapes(cfg: ModelConfig, B: int, T: int, T_all: int, L: int,
                            tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """Forward activations of L layers (leading dimension), each kept for its backward; of a tensor-parallel rank's
    heads (a = C/tp channels) and MLP columns (f = 4C/tp)."""
    C, NH, BT = cfg.n_embd, tp.heads(cfg), B * T
    a, f = tp.attn(cfg), tp.ffn(cfg)
    return {
        "ln1": (L, BT, C), "ln1_mean": (L, BT), "ln1_rstd": (L, BT),
        "qkv": (L, B * T_all, 3 * a), "atty": (L, BT, a),
        "preatt": (L, B, NH, T, T_all), "att": (L, B, NH, T, T_all),
        "attproj": (L, BT, C), "residual2": (L, BT, C),
        "ln2": (L, BT, C), "ln2_mean": (L, BT), "ln2_rstd": (L, BT),
        "fch": (L, BT, f), "fch_gelu": (L, BT, f), "fcproj": (L, BT, C), "residual3": (L, BT, C),
    }


def head_activation_shapes(cfg: ModelConfig, B: int, T: int, tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """The final LayerNorm's, the lm head's and the loss's activations (the last pipeline stage's); a
    tensor-parallel rank holds its vocabulary slice of the logits, and each row's maximum and (sum of exps, target
    logit) for the vocabulary-parallel cross-entropy's reductions."""
    C, Vs, BT = cfg.n_embd, tp.vocab(cfg), B * T
    vocab_parallel = {"ce_max": (BT,), "ce_stats": (BT, 2)} if tp.degree > 1 else {}
    return {"lnf": (BT, C), "lnf_mean": (BT,), "lnf_rstd": (BT,), "logits": (BT, Vs), "probs": (BT, Vs),
            "losses": (BT,), **vocab_parallel}


def activation_shapes(cfg: ModelConfig, B: int, T: int, T_all: int | None = None,
                      stage: Stage | None = None, tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """Forward activations of every layer of the stage (backward needs them all) for one micro-batch; T positions
    per sequence on this rank, of T_all (default T) in the whole sequence. `encoded` is the stage's input: the
    embedding on the first stage, the activation received from the previous stage on the others."""
    stage = stage or Stage.whole(cfg)
    T_all = T if T_all is None else T_all
    return {"encoded": (B * T, cfg.n_embd), **layer_activation_shapes(cfg, B, T, T_all, stage.n_layer, tp),
            **(head_activation_shapes(cfg, B, T, tp) if stage.is_last else {})}


def kept_shapes(cfg: ModelConfig, B: int, T: int, stage: Stage | None = None) -> dict[str, tuple[int, ...]]:
    """With --recompute, what one micro-batch keeps from forward to backward: each layer's input (the stage input
    and every layer's output), so backward can recompute the layer (Megatron's full activation checkpointing)."""
    stage = stage or Stage.whole(cfg)
    return {"encoded": (B * T, cfg.n_embd), "residual3": (stage.n_layer, B * T, cfg.n_embd)}


def work_shapes(cfg: ModelConfig, B: int, T: int, T_all: int | None = None,
                stage: Stage | None = None, tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """With --recompute, one layer's activations (and the head's on the last stage), shared by every micro-batch:
    forward computes each layer into it and keeps only the output; backward recomputes the layer into it."""
    stage = stage or Stage.whole(cfg)
    T_all = T if T_all is None else T_all
    layer = layer_activation_shapes(cfg, B, T, T_all, 1, tp)
    del layer["residual3"]      # a layer's output goes to the micro-batch's kept residual3
    return {**layer, **(head_activation_shapes(cfg, B, T, tp) if stage.is_last else {})}


def layer_grad_shapes(cfg: ModelConfig, B: int, T: int, tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """Gradients of one layer's activations, reused layer after layer as backward walks down."""
    C, BT, a, f = cfg.n_embd, B * T, tp.attn(cfg), tp.ffn(cfg)
    return {
        "dres2": (BT, C), "dfcproj": (BT, C), "dfch_gelu": (BT, f), "dfch": (BT, f),
        "dln2": (BT, C), "dattproj": (BT, C), "datty": (BT, a), "dqkv": (BT, 3 * a), "dln1": (BT, C),
    }


def scratch_shapes(cfg: ModelConfig, B: int, T: int, T_all: int | None = None,
                   stage: Stage | None = None, tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """Buffers outside the layers: the residual stream's gradient, final LayerNorm's and the logits' gradients
    (last stage only), attention scratch (overwritten per call)."""
    C, NH, Vs, BT = cfg.n_embd, tp.heads(cfg), tp.vocab(cfg), B * T
    T_all = T if T_all is None else T_all
    head = {"dlnf": (BT, C), "dlogits": (BT, Vs)} if (stage or Stage.whole(cfg)).is_last else {}
    return {"dresidual": (BT, C), **head, "dpreatt": (B, NH, T, T_all), "datt": (B, NH, T, T_all)}


def exchange_shapes(cfg: ModelConfig, B: int, T: int, S: int, own_rows: bool,
                    tp: TensorShard = WHOLE) -> dict[str, tuple[int, ...]]:
    """Sequence parallelism's dK/dV buffers (none for S = 1): the group's, B*T rows of [dk | dv] (of this
    tensor-parallel rank's heads), and with `own_rows` (reduce-scatter) a separate one for this rank's B*T/S rows."""
    if S == 1:
        return {}
    a = tp.attn(cfg)
    return {"dkv": (B * T, 2 * a), **({"dkv_own": (B * T // S, 2 * a)} if own_rows else {})}


def elements(shapes: dict[str, tuple[int, ...]]) -> int:
    # Python ints: an absurd size (-B 100000000) must be reported, not overflow int64.
    return sum(math.prod(s) for s in shapes.values())


@dataclass(frozen=True)
class MemoryEstimate:
    parameters: int     # bytes of the parameters alone
    training: int       # bytes of parameters, gradients and both AdamW moments
    activations: int    # bytes of activations, one layer of their gradients and scratch
    sync: int = 0       # bytes MPI allocates inside the gradient sync (sync_bytes): on every rank at once
    initial: int = 0    # bytes of the whole model's parameters this rank's stage or shard was taken from
    baseline: int = PROCESS_BASELINE    # bytes each process holds besides all of the above
    shared: int = SHARED_LIBRARIES      # bytes of libraries in every rank's resident memory, once in the node's

    @property
    def model(self) -> int:
        """What the model and the run's layout decide: the buffers, MPI's temporary, the initial parameters."""
        return self.training + self.activations + self.sync + self.initial

    @property
    def process(self) -> int:
        """What one more process on the node takes: its model and the process baseline."""
        return self.model + self.baseline

    @property
    def total(self) -> int:
        """One rank's peak resident memory, its libraries included (what its VmHWM shows)."""
        return self.process + self.shared

    def on_node(self, processes: int) -> int:
        """`processes` ranks on one node: each its own, the libraries once."""
        return processes * self.process + self.shared


def training_bytes(layout: ParamLayout, dp_sync: DPSync = DPSync.allreduce, grad_ranks: int = 1) -> int:
    """Parameters, gradients and AdamW moments of the rank that holds the most of them, under `dp_sync` over the
    `grad_ranks` ranks that share these parameters (trainer.dp). With one rank, or a strategy that keeps whole
    moments somewhere (reduce-bcast's root), 4 buffers of P. ZeRO-1: the parameters, the whole gradient buffer,
    the summed gradients' shard and the moments' shards; ZeRO-2 holds a one-layer gradient bucket (the non-layer
    tensors and one layer: ParamLayout.bucket_size) instead of the whole buffer. A shard is at most ceil(P/N)
    (trainer.dp.shard_bounds)."""
    P = layout.size
    if grad_ranks == 1 or dp_sync not in (DPSync.zero1, DPSync.zero2):
        return FLOAT32 * 4 * P
    shard = -(-P // grad_ranks)
    grads = layout.bucket_size if dp_sync == DPSync.zero2 else P
    return FLOAT32 * (P + grads + shard + 2 * shard)


def sync_bytes(layout: ParamLayout, dp_sync: DPSync = DPSync.allreduce, grad_ranks: int = 1) -> int:
    """The largest temporary MPI allocates on a rank inside the gradient sync over `grad_ranks` ranks, freed when
    the call returns but held by every rank at once. Measured with MPICH 5.0.2 (benchmarks/memory_estimate.py's
    MPI table: a 95 MiB buffer at 2, 3, 4 and 8 ranks): MPI_Allreduce and MPI_Iallreduce in place (allreduce,
    overlap) half the buffer over a power of two of ranks, the whole buffer over others; MPI_Reduce (reduce-bcast)
    1.5 buffers on every rank but the root; MPI_Reduce_scatter 2/N of what it reduces (zero1: the gradient buffer;
    zero2: the bucket's larger part, the non-layer tensors or one layer); MPI_Bcast and MPI_Allgatherv of the
    parameters nothing."""
    if grad_ranks == 1:
        return 0
    grads = FLOAT32 * layout.size
    if dp_sync == DPSync.reduce_bcast:
        return 3 * grads // 2
    if dp_sync == DPSync.zero1:
        return 2 * grads // grad_ranks
    if dp_sync == DPSync.zero2:
        return 2 * FLOAT32 * max(layout.layer_start, layout.layer_stride) // grad_ranks
    return grads // 2 if grad_ranks & (grad_ranks - 1) == 0 else grads


def micro_batch_slots(stage: Stage, schedule: str, micro_batches: int) -> int:
    """Micro-batches whose activations a stage holds at once: one without pipelining, all M under GPipe, at most
    P - stage under 1F1B (its warm-up forwards plus the one in flight), the bound PipeDream-Flush is built for."""
    if stage.count == 1:
        return 1
    return micro_batches if schedule == "gpipe" else min(stage.count - stage.index, micro_batches)


def estimate(cfg: ModelConfig, B: int, T: int, S: int = 1, own_rows: bool = False, stage: Stage | None = None,
             slots: int = 1, recompute: bool = False, tp: TensorShard = WHOLE, dp_sync: DPSync = DPSync.allreduce,
             grad_ranks: int = 1) -> MemoryEstimate:
    """One rank's memory; S ranks per sequence (`own_rows`: the reduce-scatter's extra buffer), the pipeline
    `stage` it holds, `slots` micro-batches of activations held at once, kept whole or (`recompute`) as layer
    inputs plus one layer's work buffers, its tensor-parallel shard `tp`; `dp_sync` over `grad_ranks` ranks
    (training_bytes, sync_bytes). A rank of a stage or a shard also holds the whole model's parameters: every rank
    builds them (trainer.params.init_params, or reads a checkpoint's) and gpt2trace.run.runner keeps them for the
    run after build_stage took its part (measured: d12 --tp 2 peaks 475 MiB above its own buffers)."""
    stage = stage or Stage.whole(cfg)
    layout = ParamLayout.for_stage(cfg, stage, tp)
    params = FLOAT32 * layout.size
    Tl = T // S
    per_slot = kept_shapes(cfg, B, Tl, stage) if recompute else activation_shapes(cfg, B, Tl, T, stage, tp)
    shared = elements(work_shapes(cfg, B, Tl, T, stage, tp)) if recompute else 0
    acts = FLOAT32 * (slots * elements(per_slot) + shared + elements(layer_grad_shapes(cfg, B, Tl, tp))
                      + elements(scratch_shapes(cfg, B, Tl, T, stage, tp))
                      + elements(exchange_shapes(cfg, B, T, S, own_rows, tp)))
    whole = FLOAT32 * ParamLayout.for_model(cfg).size if stage.count > 1 or tp.degree > 1 else 0
    return MemoryEstimate(params, training_bytes(layout, dp_sync, grad_ranks), acts,
                          sync_bytes(layout, dp_sync, grad_ranks), whole)


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
               own_rows: bool = False, stage: Stage | None = None, slots: int = 1,
               recompute: bool = False, tp: TensorShard = WHOLE, dp_sync: DPSync = DPSync.allreduce,
               grad_ranks: int = 1) -> MemoryEstimate:
    """The estimate, or a TrainerError when `processes` ranks of it on this node (MemoryEstimate.on_node) do not
    fit in the available memory (with pipelining, `stage` should be the stage that needs the most). In a rank's
    own check the ranks already hold part of their baseline (their imports), which the available memory no
    longer includes: counted twice there, at most ~70 MiB a rank."""
    need = estimate(cfg, B, T, S, own_rows, stage, slots, recompute, tp, dp_sync, grad_ranks)
    return check_room(need, available_bytes(), processes, B, T)


def check_room(need: MemoryEstimate, have: int | None, processes: int, B: int, T: int) -> MemoryEstimate:
    """`need`, or a TrainerError naming its parts when `processes` ranks of it take more than `have` bytes (None:
    unknown, nothing is refused); B and T are named in the message."""
    if have is None or need.on_node(processes) <= have:
        return need
    each = f"{processes} ranks x " if processes > 1 else ""
    parts = {"parameters, gradients and AdamW moments": need.training, f"activations at B={B} T={T}": need.activations,
             "MPI's gradient-sync temporary": need.sync, "the whole model's initial parameters": need.initial,
             "per-process baseline": need.baseline}
    listed = ", ".join(f"{what} {gib(n)}" for what, n in parts.items() if n)
    lower = ("-B/--batch-size, -T/--seq-len, the model size or the ranks on this node" if processes > 1
             else "-B/--batch-size, -T/--seq-len or the model size")
    raise TrainerError(f"the run needs about {each}{gib(need.process)} ({listed}) + {gib(need.shared)} of shared "
                       f"libraries, but this machine has {gib(have)} available; lower {lower}")
