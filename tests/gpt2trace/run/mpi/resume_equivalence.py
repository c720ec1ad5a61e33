"""Run under `mpiexec -n 2` by tests/gpt2trace/run/test_resume.py: a run stopped after a save and resumed
equals the uninterrupted run, for every data-parallel layout, through the `run` Python API on COMM_WORLD.

argv: the folder to write into. For each case (dp-sync, sp, grad_accum), three runs of the tiny model:
  full     STEPS steps in one go, saving at the end                     -> CASE/full.bin (+ .state)
  first    STEPS/2 steps with --save-every STEPS/2                       -> CASE/run.bin
  resumed  --resume CASE/run.bin --save CASE/run.bin, to STEPS in all    -> CASE/run.bin replaced in place
The zero1 case is traced (CASE/first.parquet, CASE/resumed.parquet: every rank's checkpoint phase and the gather).
Then runs that resume on another layout, within float tolerance only: the allreduce case's first half resumed
with zero1, the zero1 case's with zero2, and the zero1 case's first half resumed by one rank alone on B=2x2 (the
same global batch).
Prints one JSON line on rank 0: every run's losses, by case.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from mpi4py import MPI

from gpt2trace.run.runner import RunConfig, TraceConfig, prepare_process, run
from trainer.config import DPSync, ParallelConfig, TrainConfig, model_config

STEPS, B, T = 6, 2, 16
CASES = {  # name: (dp-sync, sp, grad_accum, pp)
    "allreduce": (DPSync.allreduce, 1, 1, 1),
    "reduce-bcast": (DPSync.reduce_bcast, 1, 1, 1),
    "overlap": (DPSync.overlap, 1, 2, 1),
    "zero1": (DPSync.zero1, 1, 2, 1),
    "zero2": (DPSync.zero2, 1, 2, 1),            # the same shards as zero1, gradients reduced during backward
    "sp2": (DPSync.allreduce, 2, 1, 1),
    "pp2": (DPSync.allreduce, 1, 4, 2),          # two pipeline stages: the state gathered from both
}
TRACED = "zero1"


def config(comm, layout: tuple, steps: int, save: Path, save_every: int = 0, resume: Path | None = None,
           trace: Path | None = None, ranks: int = 2, batch: int = B) -> RunConfig:
    """The tiny model's run; `layout` is (dp-sync, sp, grad_accum, pp)."""
    dp_sync, sp, grad_accum, pp = layout
    train = TrainConfig(batch_size=batch, seq_len=T, steps=steps, lr=1e-3, weight_decay=0.1, grad_accum=grad_accum,
                        seed=7)
    par = ParallelConfig(threads=1, ranks=ranks, rank=comm.Get_rank() if ranks > 1 else 0, dp_sync=dp_sync, sp=sp,
                         pp=pp)
    return RunConfig(model_config("tiny"), train, par, TraceConfig(trace, flush_every_s=0.0), save=save,
                     save_every=save_every, resume=resume)


def losses(cfg: RunConfig, comm) -> list[float]:
    return [m.loss for m in run(cfg, comm=comm if cfg.parallel.ranks > 1 else None).history]


def main() -> None:
    comm = MPI.COMM_WORLD
    root = Path(sys.argv[1])
    prepare_process(1)
    out = {}
    for name, layout in CASES.items():
        folder = root / name
        if comm.Get_rank() == 0:
            folder.mkdir()
        comm.Barrier()
        traced = name == TRACED

        full = losses(config(comm, layout, STEPS, folder / "full.bin"), comm)
        first = losses(config(comm, layout, STEPS // 2, folder / "run.bin", save_every=STEPS // 2,
                           trace=folder / "first.parquet" if traced else None), comm)
        if comm.Get_rank() == 0:        # the first half's checkpoint, kept for the runs on another layout
            for f in ("run.bin", "run.bin.state"):
                shutil.copy(folder / f, folder / f.replace("run", "half"))
        comm.Barrier()
        resumed = losses(config(comm, layout, STEPS, folder / "run.bin", resume=folder / "run.bin",
                             trace=folder / "resumed.parquet" if traced else None), comm)
        out[name] = {"full": full, "first": first, "resumed": resumed}

    # another layout: allreduce's first half resumed with zero1 (2 ranks)
    folder = root / "allreduce"
    out["allreduce->zero1"] = losses(config(comm, (DPSync.zero1, 1, 1, 1), STEPS, folder / "other.bin",
                                            resume=folder / "half.bin"), comm)
    # zero1's first half resumed with zero2 (2 ranks, the same shards)
    folder = root / "zero1"
    out["zero1->zero2"] = losses(config(comm, CASES["zero2"], STEPS, folder / "other.bin",
                                        resume=folder / "half.bin"), comm)
    # and zero1's first half resumed by one rank on the whole global batch (B=4), while rank 1 waits
    if comm.Get_rank() == 0:
        out["zero1->1 rank"] = losses(config(comm, (DPSync.allreduce, 1, 2, 1), STEPS, folder / "one.bin",
                                             resume=folder / "half.bin", ranks=1, batch=2 * B), None)
        # the pipeline's state (stages gathered into one model) resumed by one rank holding every layer
        folder = root / "pp2"
        out["pp2->1 rank"] = losses(config(comm, (DPSync.allreduce, 1, 4, 1), STEPS, folder / "one.bin",
                                           resume=folder / "half.bin", ranks=1), None)
    comm.Barrier()
    if comm.Get_rank() == 0:
        print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
