"""Run under mpiexec by tests/trainer/test_dp.py: every --dp-sync strategy against a 1-rank run.

For each strategy: N ranks train the tiny model for STEPS steps on B sequences each; rank 0 also trains the
same model alone on the global batch of N*B sequences (the same tokens: TokenLoader's world=N shards
concatenate to the world=1 batch). Checked on every step: the N-rank loss and gradient norm equal the 1-rank
ones within RTOL (the norm matters: AdamW is blind to a gradient's scale, so a missing 1/N would leave the losses
right), and every rank's parameters are bit-identical to rank 0's. Prints one JSON line on rank 0.
"""
from __future__ import annotations

import json
import sys

import numpy as np
from mpi4py import MPI

from trainer.config import TrainConfig, model_config
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import DPSync, Local, ScatterLoader, make_strategy
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.params import init_params
from trainer.train import train

STEPS, B, T = 4, 2, 16
# Float32 sums in another order (N partial gradients then a sum, vs one BLAS sum over N*B rows) differ by a
# few ulp; AdamW's first steps amplify that to ~1e-6 relative on the loss. 1e-5 leaves a margin; a wrong
# scale (missing 1/N) or a stale bucket shows up as 1e-2 or more.
RTOL = 1e-5


def run(strategy: str | None, comm, rank: int, world: int, batch: int,
        loading: str = "local") -> tuple[list, list, list[float]]:
    cfg = model_config("tiny")
    tcfg = TrainConfig(batch_size=batch, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1)
    launcher = Launcher(2)
    model = GPT2(cfg, init_params(cfg, 7), batch, T, launcher)
    if loading == "scatter":  # rank 0 alone reads (N*B sequences) and scatters
        tokens = synthetic_corpus(cfg.vocab_size, 4096, 7) if rank == 0 else None
        data = ScatterLoader(comm, TokenLoader(tokens, batch * world, T) if rank == 0 else None, batch, T)
    else:
        data = TokenLoader(synthetic_corpus(cfg.vocab_size, 4096, 7), batch, T, rank=rank, world=world)
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


def main() -> None:
    comm = MPI.COMM_WORLD
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
    if rank == 0:
        print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
