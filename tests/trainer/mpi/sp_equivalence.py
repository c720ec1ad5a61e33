"""Run under mpiexec by tests/trainer/test_sp.py: sequence parallelism against a 1-rank run on the global batch.

argv: threads per rank. For every case (S, split, sp-reduce, dp-sync, grad_accum, data loading) the N ranks form
N/S data-parallel groups of S-rank sequence groups and train the tiny model for STEPS steps, each group on its
B sequences of T tokens, each rank on T/S positions of them. Rank 0 also trains the same model alone on the
global batch (N/S * B whole sequences: TokenLoader's shards concatenated). Checked on every step: the loss and
the gradient norm equal the 1-rank ones within RTOL (see test_sp.py), and every rank's parameters are
bit-identical to rank 0's. Last, a step that overflows (a huge final layernorm weight): every rank must name the
kernel where NaN/inf first appears, re-running the step alone (no exchange with ranks that are not re-running).
Prints one JSON line on rank 0.
"""
from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from trainer.config import DataLoading, DPSync, ParallelConfig, SPReduce, SPSplit, TrainConfig, model_config
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import Local, ScatterLoader, make_strategy, uses_grad_bucket
from trainer.errors import NonFiniteError
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.parallel.grid import RankGrid
from trainer.parallel.sequence import SequenceShard, make_sequence
from trainer.parallel.split import SequenceSplit, scatter_shares
from trainer.params import init_params
from trainer.train import train

STEPS, B, T = 4, 2, 16
TOKENS = 4096


def tcfg(grad_accum: int) -> TrainConfig:
    return TrainConfig(batch_size=B, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1, grad_accum=grad_accum)


def reference(global_batch: int, grad_accum: int, threads: int) -> tuple[list, list]:
    cfg = model_config("tiny")
    launcher = Launcher(threads)
    model = GPT2(cfg, init_params(cfg, 7), global_batch, T, launcher)
    data = TokenLoader(synthetic_corpus(cfg.vocab_size, TOKENS, 7), global_batch, T)
    t = TrainConfig(**{**tcfg(grad_accum).__dict__, "batch_size": global_batch})
    hist = train(model, data, t, Local(model, t, launcher))
    return [h.loss for h in hist], [h.grad_norm for h in hist]


def sequence_parallel(par: ParallelConfig, grad_accum: int, comm) -> tuple[list, list, float]:
    cfg = model_config("tiny")
    launcher = Launcher(par.threads)
    grid = RankGrid.build(par, comm)
    split = SequenceSplit(T, par.sp, par.sp_split)
    seq = make_sequence(split, grid, B, cfg, launcher, par.sp_reduce)
    model = GPT2(cfg, init_params(cfg, 7), B, T, launcher, seq=seq,
                 grad_bucket=uses_grad_bucket(par.dp_sync, grid.grad_comm))
    groups = grid.degree("dp")
    if par.data_loading == DataLoading.scatter:
        tokens = synthetic_corpus(cfg.vocab_size, TOKENS, 7) if grid.rank == 0 else None
        root = TokenLoader(tokens, B * groups, T) if grid.rank == 0 else None
        data = ScatterLoader(comm, root, B, split.local_len, scatter_shares(grid, split, B))
    else:
        whole = TokenLoader(synthetic_corpus(cfg.vocab_size, TOKENS, 7), B, T, rank=grid.coords["dp"], world=groups)
        data = SequenceShard(whole, split.positions(grid.coords["sp"]))
    dp = make_strategy(par.dp_sync, model, tcfg(grad_accum), launcher, grid.grad_comm)
    param_err = []

    def check(_):
        ref = model.params.copy()
        comm.Bcast(ref, root=0)
        param_err.append(float(np.abs(model.params - ref).max()))

    hist = train(model, data, tcfg(grad_accum), dp, on_step=check)
    return [h.loss for h in hist], [h.grad_norm for h in hist], max(param_err)


def overflow_blame(comm, threads: int) -> str:
    """The error a sequence-parallel step that overflows gives on this rank."""
    cfg = model_config("tiny")
    par = ParallelConfig(threads=threads, ranks=comm.Get_size(), rank=comm.Get_rank(), sp=2,
                         sp_split=SPSplit.interleaved)
    launcher = Launcher(threads)
    grid = RankGrid.build(par, comm)
    split = SequenceSplit(T, 2, par.sp_split)
    model = GPT2(cfg, init_params(cfg, 7), B, T, launcher,
                 seq=make_sequence(split, grid, B, cfg, launcher, par.sp_reduce))
    model.p["lnfw"][...] = 3e38          # near float32's max: the final layernorm overflows on every rank
    whole = TokenLoader(synthetic_corpus(cfg.vocab_size, TOKENS, 7), B, T, rank=grid.coords["dp"],
                        world=grid.degree("dp"))
    data = SequenceShard(whole, split.positions(grid.coords["sp"]))
    try:
        train(model, data, tcfg(1), make_strategy(par.dp_sync, model, tcfg(1), launcher, grid.grad_comm))
    except NonFiniteError as e:
        return str(e)
    return "no error"


def cases(world: int) -> list[dict]:
    out = []
    for sp in (2, 4):
        if world % sp:
            continue
        for split in SPSplit:
            for reduce in SPReduce:
                out.append(dict(sp=sp, sp_split=split, sp_reduce=reduce))
    # every gradient strategy, accumulation and the scatter loader once, on the smallest sequence group
    base = dict(sp=2, sp_split=SPSplit.interleaved, sp_reduce=SPReduce.reduce)
    out += [dict(base, dp_sync=s) for s in DPSync if s != DPSync.allreduce]
    out += [dict(base, grad_accum=2, dp_sync=DPSync.overlap), dict(base, data_loading=DataLoading.scatter)]
    return out


def name(case: dict) -> str:
    return " ".join(f"{k}={v.value if hasattr(v, 'value') else v}" for k, v in case.items())


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    threads = int(sys.argv[1])
    out = {"ranks": world, "cases": {}}
    refs = {}
    for case in cases(world):
        case = dict(case)
        grad_accum = case.pop("grad_accum", 1)
        par = ParallelConfig(threads=threads, ranks=world, rank=rank, **case)
        key = (world // par.sp * B, grad_accum)
        if rank == 0 and key not in refs:
            refs[key] = reference(*key, threads)
        losses, norms, param_err = sequence_parallel(par, grad_accum, comm)
        worst_param = comm.allreduce(param_err, op=MPI.MAX)
        if rank == 0:
            ref_loss, ref_norm = refs[key]
            rel = float(np.max(np.abs(np.array(losses) - ref_loss) / np.abs(ref_loss)))
            rel_norm = float(np.max(np.abs(np.array(norms) - ref_norm) / np.abs(ref_norm)))
            out["cases"][name(dict(case, grad_accum=grad_accum))] = {
                "losses": losses, "reference": ref_loss, "max_rel_loss_err": rel, "max_rel_norm_err": rel_norm,
                "max_param_diff_across_ranks": worst_param}
    out["overflow"] = comm.gather(overflow_blame(comm, threads), root=0)
    if rank == 0:
        print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
