"""Regenerate the sample traces: small real traces from the trainer, written through the runner API.

    python sample_traces/make_samples.py                 # all of them
    python sample_traces/make_samples.py NAME.parquet    # only those named

Each is a `gpt2trace run` on the built-in synthetic corpus (seed 1337); timings differ from run to run and
machine to machine, the structure (records per step, threads, steps, counters) does not. They sample the
resident memory in every step (`--memory-every 0`): a few steps of milliseconds would otherwise sample only the
first. Tests check them with the same invariants as fresh traces (tests/gpt2trace/format/test_sample_traces.py).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MAX_BYTES = 2_000_000

# file name: (model, threads, steps, batch_size, seq_len, grad_accum)
SAMPLES = {
    "tiny_1thread.parquet": ("tiny", 1, 10, 4, 32, 1),
    "tiny_2threads.parquet": ("tiny", 2, 10, 4, 32, 1),
    "tiny_2threads_accum2.parquet": ("tiny", 2, 6, 4, 32, 2),
    "small_2threads.parquet": ("small", 2, 20, 4, 64, 1),
}
# data-parallel samples, made with `gpt2trace run --ranks 2` (mpiexec): file name -> extra options
MPI_SAMPLES = {
    "tiny_2ranks_allreduce.parquet": ["--dp-sync", "allreduce"],
    "tiny_2ranks_overlap.parquet": ["--dp-sync", "overlap", "--data-loading", "scatter"],
}
MPI_COMMON = ["--model", "tiny", "-B", "4", "-T", "32", "--steps", "6", "--ranks", "2", "--threads", "1"]
# sequence-parallel samples (`--sp 2` on 2 ranks): a model whose attention dominates the step (T=1024 on C=64), so
# the contiguous split's imbalance is the trace's largest effect, as in the GPT-2 porting study
SP_COMMON = ["--model", "small", "--n-embd", "64", "--n-head", "2", "--max-seq-len", "1024", "-T", "1024", "-B", "1",
             "--steps", "12", "--ranks", "2", "--sp", "2", "--threads", "1"]
SP_SAMPLES = {
    "small_2ranks_sp_contiguous.parquet": SP_COMMON + ["--sp-split", "contiguous"],
    "small_2ranks_sp_interleaved.parquet": SP_COMMON + ["--sp-split", "interleaved"],
}
# pipeline samples (`--pp 2` on 2 ranks, 4 micro-batches per step): the demo model's 4 layers as 2 + 2
PP_COMMON = ["--model", "small", "-B", "4", "-T", "64", "--steps", "8", "--ranks", "2", "--pp", "2", "--grad-accum",
             "4", "--threads", "1"]
PP_SAMPLES = {
    "small_2ranks_pp2_1f1b.parquet": PP_COMMON + ["--pp-schedule", "1f1b"],
    "small_2ranks_pp2_gpipe.parquet": PP_COMMON + ["--pp-schedule", "gpipe"],
}

# tensor-parallel samples: the demo model's every layer split over 2 ranks; and a 3D run of 8 ranks (oversubscribed):
# 2 data-parallel replicas (ZeRO-1) of a 2-stage pipeline whose stages are 2-rank tensor-parallel groups
TP_SAMPLES = {
    "small_2ranks_tp2.parquet": ["--model", "small", "-B", "4", "-T", "64", "--steps", "8", "--ranks", "2", "--tp", "2",
                                 "--threads", "1"],
    "small_8ranks_3d.parquet": ["--model", "small", "-B", "2", "-T", "64", "--steps", "6", "--ranks", "8", "--tp", "2",
                                "--pp", "2", "--grad-accum", "4", "--dp-sync", "zero1", "--threads", "1"],
}

# task-based samples (--schedule tasks): the demo model on 2 threads; 2 ranks x 2 threads with the gradient
# reductions as MPI_Iallreduce tasks
TASK_SAMPLES = {
    "small_2threads_tasks.parquet": ["--model", "small", "-B", "4", "-T", "64", "--steps", "8", "--threads", "2",
                                     "--schedule", "tasks"],
    "tiny_2ranks_tasks.parquet": ["--model", "tiny", "-B", "4", "-T", "32", "--steps", "6", "--ranks", "2",
                                  "--threads", "2", "--dp-sync", "allreduce", "--schedule", "tasks"],
}


def make(name: str, model: str, threads: int, steps: int, batch_size: int, seq_len: int, grad_accum: int) -> int:
    from gpt2trace.run.runner import RunConfig, TraceConfig, prepare_process, run
    prepare_process(threads)
    from trainer.config import ParallelConfig, TrainConfig, model_config

    cfg = RunConfig(model_config(model), TrainConfig(batch_size=batch_size, seq_len=seq_len, steps=steps, lr=1e-3,
                                                     grad_accum=grad_accum),
                    ParallelConfig(threads=threads), TraceConfig(Path(name), memory_every_s=0.0))
    result = run(cfg)
    size = Path(name).stat().st_size
    if size > MAX_BYTES:
        raise SystemExit(f"{name}: {size:,} bytes is over the {MAX_BYTES:,}-byte budget of a sample trace")
    return result.trace_records


def make_mpi(name: str, options: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "gpt2trace", "run", *options, "--memory-every", "0", "--trace", name],
                   check=True, stdout=subprocess.DEVNULL)
    if Path(name).stat().st_size > MAX_BYTES:
        raise SystemExit(f"{name} is over the {MAX_BYTES:,}-byte budget of a sample trace")


def main(names: list[str]) -> None:
    os.chdir(HERE)   # relative paths: the run metadata records "tiny_1thread.parquet", not this machine's path
    mpi = {**{n: MPI_COMMON + o for n, o in MPI_SAMPLES.items()}, **SP_SAMPLES, **PP_SAMPLES, **TP_SAMPLES,
           **TASK_SAMPLES}
    unknown = set(names) - set(SAMPLES) - set(mpi)
    if unknown:
        raise SystemExit(f"no sample named {', '.join(sorted(unknown))}; the samples are "
                         f"{', '.join([*SAMPLES, *mpi])}")
    for name, spec in SAMPLES.items():
        if not names or name in names:
            records = make(name, *spec)
            print(f"{name}: {records:,} records, {Path(name).stat().st_size / 1e3:.0f} kB")
    for name, options in mpi.items():
        if not names or name in names:
            make_mpi(name, options)
            print(f"{name}: {Path(name).stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main(sys.argv[1:])
