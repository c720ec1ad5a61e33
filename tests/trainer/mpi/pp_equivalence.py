"""Run under mpiexec by tests/trainer/test_pp.py: pipeline parallelism against a 1-rank run on the global batch.

argv: threads per rank. For every case (stages P, schedule, micro-batches M, recompute, dp-sync, sp) the N ranks form
N/(P*S) pipelines and train a 4-layer tiny model for STEPS steps, each pipeline on its B sequences per micro-batch.
Rank 0 also trains the same model alone on the global batch (N/(P*S) * B sequences, M micro-steps). Checked: every
step's loss and gradient norm against the 1-rank ones; the stages' parameters gathered on rank 0 (what --save
writes) against the 1-rank model's; every data-parallel replica's stage bit-identical to the first pipeline's; and
a recompute case's losses bit-identical to the same run without recompute. Prints one JSON line on rank 0.
"""
from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from trainer.config import DPSync, ParallelConfig, PPSchedule, TrainConfig, model_config
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import Local, make_strategy
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.parallel.grid import DP, RankGrid
from trainer.parallel.pipeline import build_stage
from trainer.parallel.sequence import SequenceShard, make_sequence
from trainer.parallel.split import SequenceSplit
from trainer.params import init_params
from trainer.train import train
from trainer.training_state import gather_model

STEPS, B, T = 3, 2, 16
TOKENS = 8192
CFG = model_config("tiny", n_layer=4)


def tcfg(grad_accum: int, batch: int = B) -> TrainConfig:
    return TrainConfig(batch_size=batch, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1, grad_accum=grad_accum)


def reference(global_batch: int, grad_accum: int, threads: int):
    launcher = Launcher(threads)
    model = GPT2(CFG, init_params(CFG, 7), global_batch, T, launcher)
    data = TokenLoader(synthetic_corpus(CFG.vocab_size, TOKENS, 7), global_batch, T)
    t = tcfg(grad_accum, global_batch)
    hist = train(model, data, t, Local(model, t, launcher))
    return [h.loss for h in hist], [h.grad_norm for h in hist], model.params.copy()


def pipelined(par: ParallelConfig, grad_accum: int, comm):
    launcher = Launcher(par.threads)
    grid = RankGrid.build(par, comm)
    split = SequenceSplit(T, par.sp, par.sp_split)
    seq = make_sequence(split, grid, B, CFG, launcher, par.sp_reduce)
    t = tcfg(grad_accum)
    model, pipeline = build_stage(CFG, init_params(CFG, 7), par, t, grid, seq, launcher)
    whole = TokenLoader(synthetic_corpus(CFG.vocab_size, TOKENS, 7), B, T, rank=grid.coords[DP],
                        world=grid.degree(DP))
    data = whole if par.sp == 1 else SequenceShard(whole, split.positions(grid.coords["sp"]))
    dp = make_strategy(par.dp_sync, model, t, launcher, grid.grad_comm)
    hist = train(model, data, t, dp, pipeline=pipeline)
    # replicas: the first pipeline's stage against every other pipeline's same stage
    replica = grid.comm(DP) if grid.degree(DP) > 1 else None
    replica_err = 0.0
    if replica is not None:
        ref = model.params.copy()
        replica.Bcast(ref, root=0)
        replica_err = float(np.abs(model.params - ref).max())
    replica_err = comm.allreduce(replica_err, op=MPI.MAX)
    gathered = None
    if grid.coords[DP] == 0 and grid.coords["sp"] == 0:
        gathered = gather_model(model.params, model, grid, pipeline.stages)
    return [h.loss for h in hist], [h.grad_norm for h in hist], replica_err, gathered


def cases(world: int) -> list[dict]:
    out = []
    if world == 2:
        for schedule in PPSchedule:
            for m in (1, 2, 4, 8):
                out.append(dict(pp=2, pp_schedule=schedule, grad_accum=m))
        out += [dict(pp=2, pp_schedule=s, grad_accum=4, recompute=True) for s in PPSchedule]
    else:
        for schedule in PPSchedule:
            for m in (1, 4, 8):
                out.append(dict(pp=4, pp_schedule=schedule, grad_accum=m))
        out.append(dict(pp=4, pp_schedule=PPSchedule.onef1b, grad_accum=8, recompute=True))
        out.append(dict(pp=4, pp_schedule=PPSchedule.gpipe, grad_accum=2, recompute=True))
        # two pipelines of two stages: every gradient strategy inside the data-parallel groups
        for sync in DPSync:
            out.append(dict(pp=2, pp_schedule=PPSchedule.onef1b, grad_accum=4, dp_sync=sync))
        out.append(dict(pp=2, pp_schedule=PPSchedule.gpipe, grad_accum=2, recompute=True, dp_sync=DPSync.zero1))
        out.append(dict(pp=2, pp_schedule=PPSchedule.onef1b, grad_accum=2, pp_layers=(3, 1)))
        out.append(dict(pp=2, pp_schedule=PPSchedule.onef1b, grad_accum=4, sp=2))    # sp x pp
    return out


def name(case: dict) -> str:
    return " ".join(f"{k}={v.value if hasattr(v, 'value') else v}" for k, v in case.items())


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    threads = int(sys.argv[1])
    results, refs = {}, {}
    for case in cases(world):
        case = dict(case)
        m = case.pop("grad_accum")
        par = ParallelConfig(threads=threads, ranks=world, rank=rank, **case)
        pipelines = world // (par.pp * par.sp)
        losses, norms, replica_err, gathered = pipelined(par, m, comm)
        if rank == 0:
            key = (pipelines, m)
            if key not in refs:
                refs[key] = reference(B * pipelines, m, threads)
            ref_losses, ref_norms, ref_params = refs[key]
            results[name(dict(case, grad_accum=m))] = {
                "losses": losses, "reference": ref_losses,
                "max_rel_loss_err": max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)),
                "max_rel_norm_err": max(abs(a - b) / abs(b) for a, b in zip(norms, ref_norms)),
                "max_param_diff_across_replicas": replica_err,
                "max_abs_param_err": float(np.abs(gathered - ref_params).max()),
                "max_abs_param": float(np.abs(ref_params).max()),
            }
    if rank == 0:
        print(json.dumps({"cases": results}))


if __name__ == "__main__":
    main()
