"""Run under mpiexec by tests/trainer/test_dp.py: every --dp-sync strategy against a 1-rank run.

argv: the suite. `strategies` (default): for each strategy, N ranks train the tiny model for STEPS steps on B
sequences each; rank 0 also trains the same model alone on the global batch of N*B sequences (the same tokens:
TokenLoader's world=N shards concatenate to the world=1 batch). `zero2`: ZeRO-2 (and ZeRO-1 beside it) in the
layouts where its per-layer reduce-scatters meet something else: gradient accumulation, pipeline stages (the
tied embedding's sum, stages without non-layer tensors) and sequence groups (the gradient communicator spans sp),
on a 4-layer tiny model, each against a 1-rank run on the same global batch.
Checked on every step: the N-rank loss and gradient norm equal the 1-rank ones within RTOL (the norm matters:
AdamW is blind to a gradient's scale, so a missing 1/N would leave the losses right), and every rank's parameters
are bit-identical to rank 0's (to the same stage's on the other replicas with pipelining); in the zero2 suite
also the parameters after the last step against the 1-rank model's, and the bytes a rank allocated for
parameters, gradients and moments against trainer.memory's estimate. Prints one JSON line on rank 0.
"""
from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from trainer.config import DPSync, ParallelConfig, PPSchedule, TrainConfig, model_config
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import Local, ScatterLoader, make_strategy, uses_grad_bucket
from trainer.launcher import Launcher
from trainer.memory import training_bytes
from trainer.model import GPT2
from trainer.parallel.grid import DP, SP, RankGrid
from trainer.parallel.pipeline import build_stage
from trainer.parallel.sequence import SequenceShard, make_sequence
from trainer.parallel.split import SequenceSplit
from trainer.params import init_params
from trainer.train import train
from trainer.training_state import gather_model

STEPS, B, T = 4, 2, 16
TOKENS = 4096
# Float32 sums in another order (N partial gradients then a sum, vs one BLAS sum over N*B rows) differ by a
# few ulp; AdamW's first steps amplify that to ~1e-6 relative on the loss. 1e-5 leaves a margin; a wrong
# scale (missing 1/N) or a stale bucket shows up as 1e-2 or more.
RTOL = 1e-5
CFG4 = model_config("tiny", n_layer=4)


def run(strategy: str | None, comm, rank: int, world: int, batch: int,
        loading: str = "local") -> tuple[list, list, list[float]]:
    cfg = model_config("tiny")
    tcfg = TrainConfig(batch_size=batch, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1)
    launcher = Launcher(2)
    model = GPT2(cfg, init_params(cfg, 7), batch, T, launcher, grad_bucket=uses_grad_bucket(strategy, comm))
    if loading == "scatter":  # rank 0 alone reads (N*B sequences) and scatters
        tokens = synthetic_corpus(cfg.vocab_size, TOKENS, 7) if rank == 0 else None
        data = ScatterLoader(comm, TokenLoader(tokens, batch * world, T) if rank == 0 else None, batch, T)
    else:
        data = TokenLoader(synthetic_corpus(cfg.vocab_size, TOKENS, 7), batch, T, rank=rank, world=world)
    dp = make_strategy(strategy, model, tcfg, launcher, comm) if comm is not None else Local(model, tcfg, launcher)
    param_err = []

    def check(_):
        if comm is None:
            return
        ref = model.params.copy()
        comm.Bcast(ref, root=0)
        param_err.append(float(np.abs(model.params - ref).max()))

    hist = train(model, data, tcfg, dp, on_step=check)
    return [h.loss for h in hist], [h.grad_norm for h in hist], param_err


def strategies(comm) -> dict:
    rank, world = comm.Get_rank(), comm.Get_size()
    out = {"ranks": world, "strategies": {}}
    ref_loss, ref_norm, _ = run(None, None, 0, 1, B * world) if rank == 0 else (None, None, None)
    cases = [(s.value, "local") for s in DPSync] + [(DPSync.allreduce.value, "scatter")]
    for strategy, loading in cases:
        losses, norms, param_err = run(strategy, comm, rank, world, B, loading)
        worst_param = comm.allreduce(max(param_err), op=MPI.MAX)
        if rank == 0:
            rel = float(np.max(np.abs(np.array(losses) - ref_loss) / np.abs(ref_loss)))
            rel_norm = float(np.max(np.abs(np.array(norms) - ref_norm) / np.abs(ref_norm)))
            out["strategies"][strategy if loading == "local" else f"{strategy}+scatter"] = {
                "losses": losses, "reference": ref_loss, "max_rel_loss_err": rel, "max_rel_norm_err": rel_norm,
                "max_param_diff_across_ranks": worst_param,
                "ok": rel <= RTOL and rel_norm <= RTOL and worst_param == 0.0}
    return out


# -- the zero2 suite: any layout, through the rank grid as `gpt2trace run` builds it --------------------------
def tcfg(grad_accum: int, batch: int = B) -> TrainConfig:
    return TrainConfig(batch_size=batch, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1, grad_accum=grad_accum)


def reference(global_batch: int, grad_accum: int):
    launcher = Launcher(1)
    model = GPT2(CFG4, init_params(CFG4, 7), global_batch, T, launcher)
    data = TokenLoader(synthetic_corpus(CFG4.vocab_size, TOKENS, 7), global_batch, T)
    t = tcfg(grad_accum, global_batch)
    hist = train(model, data, t, Local(model, t, launcher))
    return [h.loss for h in hist], [h.grad_norm for h in hist], model.params.copy()


def layout_run(par: ParallelConfig, grad_accum: int, comm) -> dict:
    """One layout's run: this rank's losses and norms; on rank 0 the whole model's final parameters; the largest
    replica difference and estimate mismatch over all ranks."""
    launcher = Launcher(par.threads)
    grid = RankGrid.build(par, comm)
    split = SequenceSplit(T, par.sp, par.sp_split)
    seq = make_sequence(split, grid, B, CFG4, launcher, par.sp_reduce)
    t = tcfg(grad_accum)
    model, pipeline = build_stage(CFG4, init_params(CFG4, 7), par, t, grid, seq, launcher)
    whole = TokenLoader(synthetic_corpus(CFG4.vocab_size, TOKENS, 7), B, T, rank=grid.coords[DP],
                        world=grid.degree(DP))
    data = whole if par.sp == 1 else SequenceShard(whole, split.positions(grid.coords[SP]))
    dp = make_strategy(par.dp_sync, model, t, launcher, grid.grad_comm)
    replica_err = []

    def check(_):      # every rank that holds the same parameters: the gradient communicator
        ref = model.params.copy()
        grid.grad_comm.Bcast(ref, root=0)
        replica_err.append(float(np.abs(model.params - ref).max()))

    hist = train(model, data, t, dp, on_step=check, pipeline=pipeline)
    # what this rank allocated for parameters, gradients (the model's and the shard's) and AdamW moments; the
    # estimate is that of the rank with the largest shard, so compare the group's largest
    held = model.params.nbytes + model.grads.nbytes + dp.shard_grads.nbytes + dp.opt.m.nbytes + dp.opt.v.nbytes
    largest = grid.grad_comm.allreduce(held, op=MPI.MAX)
    estimated = training_bytes(model.layout, par.dp_sync, grid.grad_comm.Get_size())
    params = model.params
    if pipeline is not None and grid.coords[DP] == 0 and grid.coords[SP] == 0:
        params = gather_model(model.params, model, grid, pipeline.stages)
    return {"losses": [h.loss for h in hist], "norms": [h.grad_norm for h in hist], "params": params,
            "replica_err": comm.allreduce(max(replica_err), op=MPI.MAX),
            "estimate_err": comm.allreduce(abs(largest - estimated), op=MPI.MAX),
            "gradient_bytes": comm.allreduce(model.grads.nbytes + dp.shard_grads.nbytes, op=MPI.MAX)}


def zero2_cases(world: int) -> list[dict]:
    out = [dict(grad_accum=1), dict(grad_accum=2), dict(sp=2, grad_accum=2)]
    if world == 4:
        out += [dict(pp=2, grad_accum=2), dict(pp=2, grad_accum=4, pp_schedule=PPSchedule.gpipe),
                dict(sp=2, pp=2, grad_accum=2)]      # dp = 1: the gradient communicator is the sequence group
    return [dict(c, dp_sync=s) for c in out for s in (DPSync.zero1, DPSync.zero2)]


def name(case: dict) -> str:
    return " ".join(f"{k}={v.value if hasattr(v, 'value') else v}" for k, v in case.items())


def zero2(comm) -> dict:
    rank, world = comm.Get_rank(), comm.Get_size()
    out, refs = {"ranks": world, "cases": {}}, {}
    for case in zero2_cases(world):
        case = dict(case)
        m = case.pop("grad_accum")
        par = ParallelConfig(threads=1, ranks=world, rank=rank, **case)
        r = layout_run(par, m, comm)
        if rank == 0:
            key = (B * world // (par.sp * par.pp), m)
            if key not in refs:
                refs[key] = reference(*key)
            ref_losses, ref_norms, ref_params = refs[key]
            out["cases"][name(dict(case, grad_accum=m))] = {
                "losses": r["losses"], "reference": ref_losses,
                "max_rel_loss_err": max(abs(a - b) / abs(b) for a, b in zip(r["losses"], ref_losses)),
                "max_rel_norm_err": max(abs(a - b) / abs(b) for a, b in zip(r["norms"], ref_norms)),
                "max_param_diff_across_replicas": r["replica_err"],
                "max_abs_param_err": float(np.abs(r["params"] - ref_params).max()),
                "estimate_err_bytes": r["estimate_err"], "gradient_bytes": r["gradient_bytes"]}
    return out


def main() -> None:
    comm = MPI.COMM_WORLD
    suite = sys.argv[1] if len(sys.argv) > 1 else "strategies"
    out = strategies(comm) if suite == "strategies" else zero2(comm)
    if comm.Get_rank() == 0:
        print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
