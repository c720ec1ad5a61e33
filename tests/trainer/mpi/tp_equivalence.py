"""Run under mpiexec by tests/trainer/test_tp.py: tensor parallelism, alone and with data, pipeline and sequence
parallelism, against a 1-rank run on the global batch.

argv: threads per rank. For every case the N ranks form the grid (tp, sp, pp, dp) and train a 4-layer tiny model
(4 heads, vocabulary 200 padded to 256) for STEPS steps, each data-parallel replica on its B sequences per
micro-batch. Rank 0 also trains the same model alone on the global batch (dp * B sequences, M micro-steps). Checked:
every step's loss and gradient norm against the 1-rank ones; the shards of every (stage, tensor-parallel rank),
assembled on rank 0 in the whole model's layout, against the 1-rank model's parameters; every data-parallel
replica bit-identical to the first; the tensors every tensor-parallel rank holds whole (LayerNorms, row-parallel
biases, wpe) bit-identical across the group. Prints one JSON line on rank 0.
"""
from __future__ import annotations

import itertools
import json
import sys

import numpy as np
from mpi4py import MPI

from trainer.config import DPSync, ParallelConfig, TrainConfig, model_config
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import Local, make_strategy
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.parallel.grid import DP, SP, RankGrid
from trainer.parallel.pipeline import build_stage
from trainer.parallel.sequence import SequenceShard, make_sequence
from trainer.parallel.split import SequenceSplit
from trainer.parallel.tensor import SHARDED, make_tensor
from trainer.params import ParamLayout, init_params
from trainer.train import train

STEPS, B, T, M = 3, 2, 16, 2
TOKENS = 8192
CFG = model_config("tiny", n_layer=4)


def tcfg(batch: int = B) -> TrainConfig:
    return TrainConfig(batch_size=batch, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1, grad_accum=M)


def reference(global_batch: int, threads: int):
    launcher = Launcher(threads)
    model = GPT2(CFG, init_params(CFG, 7), global_batch, T, launcher)
    data = TokenLoader(synthetic_corpus(CFG.vocab_size, TOKENS, 7), global_batch, T)
    t = tcfg(global_batch)
    hist = train(model, data, t, Local(model, t, launcher))
    return [h.loss for h in hist], [h.grad_norm for h in hist], model.params.copy()


def parallel(par: ParallelConfig, comm):
    launcher = Launcher(par.threads)
    grid = RankGrid.build(par, comm)
    tensor = make_tensor(grid)
    split = SequenceSplit(T, par.sp, par.sp_split)
    seq = make_sequence(split, grid, B, CFG, launcher, par.sp_reduce, tensor.shard)
    t = tcfg()
    model, pipeline = build_stage(CFG, init_params(CFG, 7), par, t, grid, seq, launcher, tensor)
    whole = TokenLoader(synthetic_corpus(CFG.vocab_size, TOKENS, 7), B, T, rank=grid.coords[DP],
                        world=grid.degree(DP))
    data = whole if par.sp == 1 else SequenceShard(whole, split.positions(grid.coords[SP]))
    dp = make_strategy(par.dp_sync, model, t, launcher, grid.grad_comm)
    hist = train(model, data, t, dp, pipeline=pipeline)
    replica_err = 0.0
    for dim in (DP, SP):        # data-parallel replicas hold the same shard: identical
        if grid.degree(dim) > 1:
            ref = model.params.copy()
            (grid.comm(dim) or grid.world).Bcast(ref, root=0)    # a dimension spanning every rank is the world
            replica_err = max(replica_err, float(np.abs(model.params - ref).max()))
    replicated_err = 0.0
    if tensor.comm is not None:  # every tensor-parallel rank's copy of the unsplit tensors: identical
        mine = np.concatenate([model.params[lo:hi] for lo, hi in
                               model.layout.ranges([n for n in model.layout.shapes if n not in SHARDED])])
        ref = mine.copy()
        tensor.comm.Bcast(ref, root=0)
        replicated_err = float(np.abs(mine - ref).max())
    replica_err = comm.allreduce(replica_err, op=MPI.MAX)
    replicated_err = comm.allreduce(replicated_err, op=MPI.MAX)
    # every (stage, tensor-parallel rank)'s shard, put together on rank 0 in the whole model's layout
    holder = grid.coords[DP] == 0 and grid.coords[SP] == 0
    pieces = comm.gather((model.stage, model.tp.shard, model.params.copy()) if holder else None, root=0)
    gathered = None
    if comm.Get_rank() == 0:
        whole_layout = ParamLayout.for_model(CFG)
        gathered = np.full(whole_layout.size, np.nan, dtype=np.float32)
        for piece in pieces:
            if piece is not None:
                stage, shard, flat = piece
                ParamLayout.for_stage(CFG, stage, shard).put(whole_layout, flat, gathered, CFG)
    return [h.loss for h in hist], [h.grad_norm for h in hist], replica_err, replicated_err, gathered


def cases(world: int) -> list[dict]:
    """Every (tp, sp, pp, dp) of product `world` the tiny model allows (tp divides its 4 heads, pp its 4 layers, sp
    its 16 positions); at 2 and 4 ranks only tp >= 2 (the tp = 1 layouts are the dp, sp and pp scripts' cases).
    ZeRO-1 and ZeRO-2 in the data-parallel groups of the layouts that have them."""
    out = []
    for tp, sp, pp in itertools.product((1, 2, 4), (1, 2, 4), (1, 2, 4)):
        if world % (tp * sp * pp) or (tp == 1 and world < 8):
            continue
        dp = world // (tp * sp * pp)
        out.append(dict(tp=tp, sp=sp, pp=pp))
        if dp > 1 or sp > 1:
            out += [dict(tp=tp, sp=sp, pp=pp, dp_sync=sync) for sync in (DPSync.zero1, DPSync.zero2)]
    return out


def name(case: dict) -> str:
    return " ".join(f"{k}={v.value if hasattr(v, 'value') else v}" for k, v in case.items())


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    threads = int(sys.argv[1])
    only = sys.argv[2].split(";") if len(sys.argv) > 2 else None
    results, refs = {}, {}
    for case in cases(world):
        if only is not None and name(case) not in only:
            continue
        par = ParallelConfig(threads=threads, ranks=world, rank=rank, **case)
        replicas = world // (par.tp * par.sp * par.pp)
        losses, norms, replica_err, replicated_err, gathered = parallel(par, comm)
        if rank == 0:
            if replicas not in refs:
                refs[replicas] = reference(B * replicas, threads)
            ref_losses, ref_norms, ref_params = refs[replicas]
            results[name(case)] = {
                "losses": losses, "reference": ref_losses,
                "max_rel_loss_err": max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)),
                "max_rel_norm_err": max(abs(a - b) / abs(b) for a, b in zip(norms, ref_norms)),
                "max_param_diff_across_replicas": replica_err,
                "max_param_diff_across_tp_copies": replicated_err,
                "max_abs_param_err": float(np.abs(gathered - ref_params).max()),
                "max_abs_param": float(np.abs(ref_params).max()),
            }
    if rank == 0:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
