"""Run under mpiexec by tests/trainer/tasks/test_tasks_mpi.py: `--schedule tasks` with N data-parallel ranks.

Each rank trains the tiny model for STEPS steps on B sequences with the task schedule (gradient reductions as
MPI_Iallreduce communication tasks, AdamW per layer as tasks) at each thread count in THREADS, and with forkjoin
allreduce on the same layout; rank 0 also trains alone on the global batch of N*B sequences (the same tokens). On
every step every rank's parameters must be bit-identical to rank 0's. Prints one JSON line on rank 0: losses, norms
and final parameters' differences against the 1-rank forkjoin run and the N-rank forkjoin run.
"""
from __future__ import annotations

import json

import numpy as np
from mpi4py import MPI

from trainer.config import TrainConfig, model_config
from trainer.data import TokenLoader, synthetic_corpus
from trainer.dp import Local, make_strategy
from trainer.launcher import Launcher
from trainer.model import GPT2
from trainer.params import init_params
from trainer.tasks.launcher import TaskLauncher
from trainer.train import train

STEPS, B, T, TOKENS = 4, 2, 16, 4096
THREADS = (1, 2)
CFG = model_config("tiny")


def run(launcher, comm, rank: int, world: int, batch: int) -> dict:
    tcfg = TrainConfig(batch_size=batch, seq_len=T, steps=STEPS, lr=1e-3, weight_decay=0.1)
    model = GPT2(CFG, init_params(CFG, 7), batch, T, launcher)
    data = TokenLoader(synthetic_corpus(CFG.vocab_size, TOKENS, 7), batch, T, rank=rank, world=world)
    dp = make_strategy("allreduce", model, tcfg, launcher, comm) if comm is not None else Local(model, tcfg, launcher)
    replica = []

    def check(_):
        if comm is not None:
            ref = model.params.copy()
            comm.Bcast(ref, root=0)
            replica.append(float(np.abs(model.params - ref).max()))

    try:
        hist = train(model, data, tcfg, dp, on_step=check)
    finally:
        launcher.close()
    return {"losses": [h.loss for h in hist], "norms": [h.grad_norm for h in hist], "params": model.params,
            "replica_err": comm.allreduce(max(replica), op=MPI.MAX) if comm is not None else 0.0,
            "polls": launcher.runtime.log.polls if isinstance(launcher, TaskLauncher) else None}


def _rel(a, b) -> float:
    return float(np.max(np.abs(np.array(a) - np.array(b)) / np.abs(np.array(b))))


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()
    alone = run(Launcher(1), None, 0, 1, B * world) if rank == 0 else None
    forkjoin = run(Launcher(2), comm, rank, world, B)
    out = {"ranks": world, "cases": {}}
    for threads in THREADS:
        tasks = run(TaskLauncher(threads, 8), comm, rank, world, B)
        if rank == 0:
            out["cases"][str(threads)] = {
                "losses": tasks["losses"], "replica_err": tasks["replica_err"],
                "rel_loss_vs_alone": _rel(tasks["losses"], alone["losses"]),
                "rel_norm_vs_alone": _rel(tasks["norms"], alone["norms"]),
                "param_err_vs_alone": float(np.abs(tasks["params"] - alone["params"]).max()),
                "rel_loss_vs_forkjoin": _rel(tasks["losses"], forkjoin["losses"]),
                "param_err_vs_forkjoin": float(np.abs(tasks["params"] - forkjoin["params"]).max())}
    if rank == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
