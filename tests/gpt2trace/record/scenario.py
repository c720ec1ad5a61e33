"""A fixed recording, driven through the Tracer as the training loop and the kernels drive it, on a fake clock:
every record of its merged trace is the same on every machine and every run.

It exercises what the states are built from: regions with and without a main-thread block, a thread running two
blocks of one region, blocks outside their region (clock noise between cores), a block not run, a worker that
appears only in the second window, I/O phases with MPI calls inside (dataload, checkpoint), MPI calls outside
phases, two micro-batches, windows cut by time, a step cut short, two ranks merged with a drift correction.

`python -m tests.gpt2trace.record.scenario OUT.parquet` writes its merged trace (how
tests/gpt2trace/record/data/scenario_reference.parquet was made).
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

from gpt2trace.format import schema as S
from gpt2trace.format.writer import merge_parts
from gpt2trace.record import tracer as tracer_module
from gpt2trace.record.tracer import Tracer

ORIGIN = 1_000_000_000
WORKER, OTHER = 900_001, 900_002         # fake thread ids of two workers (the main thread's is the real one)
NOT_RUN = -1                             # a block the kernel did not run
DRIFT = {1: (2e-4, -5_000)}              # rank 1's clock runs fast by 0.02%, from 5 us before the origin


class FakeClock:
    """Stands in for the tracer's `time` module: monotonic_ns() returns what the scenario set."""

    def __init__(self):
        self.now = ORIGIN

    def monotonic_ns(self) -> int:
        return self.now


def _kernel(tr: Tracer, name: str, layer: int, enter: int, exit_: int, *blocks: tuple[int, int, int]) -> None:
    """A kernel call as the launcher and the Numba kernel make it (times relative to the origin)."""
    slot = tr.recorder.slot(tr.recorder.kernel_key(name) + layer)
    slot[0, :2] = ORIGIN + enter, ORIGIN + exit_
    for t, (s, e, tid) in enumerate(blocks):
        slot[1 + t] = ORIGIN + s, ORIGIN + e, tid


def _phase(tr: Tracer, clock: FakeClock, name: str, start: int, end: int, body=None, nbytes: int | None = None):
    clock.now = ORIGIN + start
    with tr.phase(name, nbytes):
        if body is not None:
            body()
        clock.now = ORIGIN + end


def _step(tr: Tracer, clock: FakeClock, step: int, t: int, main: int, *, last_window: bool = False) -> None:
    """One step of two micro-batches starting at t (relative ns), 10 us long."""
    tr.begin_step(step)
    other = OTHER if last_window else WORKER          # a third thread shows up in the second window
    _phase(tr, clock, "dataload", t, t + 400,
           lambda: tr.comm("MPI_Bcast", ORIGIN + t + 100, ORIGIN + t + 250, 4096, 0, step, S.State.GROUP_COMMUNICATION))
    _phase(tr, clock, "forward", t + 500, t + 3000, lambda: (
        _kernel(tr, "matmul_forward", 0, t + 600, t + 1200, (t + 610, t + 1100, main), (t + 620, t + 1190, WORKER)),
        # the main thread runs no block; the worker runs two, listed out of time order
        _kernel(tr, "gelu_forward", 0, t + 1300, t + 2000, (t + 1650, t + 1900, WORKER), (t + 1310, t + 1600, WORKER)),
        # clock noise: the worker's block starts before the region and ends after it
        _kernel(tr, "layernorm_forward", 1, t + 2100, t + 2500, (t + 2090, t + 2510, other),
                (t + 2105, t + 2400, main)),
        _kernel(tr, "residual_forward", 1, t + 2600, t + 2900, (t + 2610, t + 2800, main), (0, 0, NOT_RUN))))
    tr.microstep(1)
    _phase(tr, clock, "backward", t + 3100, t + 6000, lambda: (
        _kernel(tr, "matmul_backward", 0, t + 3200, t + 5000, (t + 3200, t + 4900, main), (t + 3300, t + 4999, WORKER)),
        tr.comm("MPI_Irecv", ORIGIN + t + 5100, ORIGIN + t + 5150, 64, 1, None, S.State.IMMEDIATE_RECEIVE, tag=3)))
    _phase(tr, clock, "grad_sync", t + 6100, t + 7000, lambda: (
        tr.comm("MPI_Wait", ORIGIN + t + 6200, ORIGIN + t + 6300, None, None, None, S.State.WAIT_WAITALL),
        tr.comm("MPI_Allreduce", ORIGIN + t + 6400, ORIGIN + t + 6900, 1 << 20, None, 2 * step,
                S.State.GROUP_COMMUNICATION)))
    _phase(tr, clock, "optimizer", t + 7100, t + 8000, lambda: _kernel(
        tr, "adamw", -1, t + 7200, t + 7900, (t + 7200, t + 7500, main), (t + 7250, t + 7800, WORKER)))
    clock.now = ORIGIN + t + 8100
    tr.counter("loss", 3.0 - 0.25 * step)
    tr.counter("tokens", 256)
    if step == 1:                                      # a checkpoint, gathering shards inside its I/O
        _phase(tr, clock, "checkpoint", t + 8200, t + 9500, lambda: tr.comm(
            "MPI_Gather", ORIGIN + t + 8300, ORIGIN + t + 8800, 1024, 0, 2 * step + 1, S.State.GROUP_COMMUNICATION),
            nbytes=123_456)
    # an MPI call outside every phase
    tr.comm("MPI_Send", ORIGIN + t + 9600, ORIGIN + t + 9700, 8, 1, None, S.State.BLOCKING_SEND, tag=0)
    clock.now = ORIGIN + t + 9800
    tr.end_step(step)


def record(path: Path, rank: int) -> None:
    """Steps 0-5 on `rank`, 10 us each: windows cut at the first step end 20 us or more after the last cut (steps
    0-1, 2-3), then step 5 cut short by an error: the last window ends with step 4, step 5 is dropped."""
    clock = FakeClock()
    saved, tracer_module.time = tracer_module.time, clock
    try:
        tr = Tracer(path, rank, 2, {S.META_RUN: b'{"model": {"name": "scenario"}}'}, flush_every_s=20e-6,
                    origin_ns=ORIGIN)
        if tr._rss is not None:                        # resident memory differs from run to run
            tr._rss.close()
            tr._rss = None
        main = threading.get_ident()
        for step in range(5):
            _step(tr, clock, step, 200 + 10_000 * step, main, last_window=step >= 3)
        t = 200 + 10_000 * 5
        tr.begin_step(5)                               # cut short after its first kernel
        _phase(tr, clock, "forward", t + 500, t + 1500, lambda: _kernel(
            tr, "matmul_forward", 0, t + 600, t + 1200, (t + 610, t + 1100, main), (t + 620, t + 1190, WORKER)))
        tr.close(whole_run=False)
    finally:
        tracer_module.time = saved


def merged_scenario(path: Path) -> Path:
    """Both ranks recorded into `path`'s parts and merged (rank 1 drift-corrected)."""
    for rank in (0, 1):
        record(path, rank)
    return merge_parts(path, drift=DRIFT).path


if __name__ == "__main__":
    merged_scenario(Path(sys.argv[1]))
