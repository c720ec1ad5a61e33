"""The tracer of one rank: the trainer's Observer plus the kernel recorder, flushed to Parquet every step.

Kernels time themselves (inside Numba, CLOCK_MONOTONIC); phases and counters are read here with
time.monotonic_ns(), the same clock. All times in the trace are ns since the trace's origin (rank 0's start;
other ranks are shifted onto it by the clock synchronization of the MPI layer).
"""
from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from gpt2trace import schema as S
from gpt2trace.recorder import NO_VALUE, KernelRecorder
from gpt2trace.states import blocks_of, thread_states
from gpt2trace.tracefile import PartWriter, records_table

# Main-thread states of the phases that are not computation.
_PHASE_STATES = {"dataload": S.State.IO, "checkpoint": S.State.IO}
FLUSH_PHASE = "trace_flush"


class Tracer:
    def __init__(self, path: Path, rank: int, nthreads: int, metadata: dict[bytes, bytes],
                 origin_ns: int | None = None):
        self.rank, self.nthreads = rank, nthreads
        self.origin = time.monotonic_ns() if origin_ns is None else origin_ns
        self.recorder = KernelRecorder(nthreads)
        self.schema = S.arrow_schema(metadata)
        self.writer = PartWriter(path, rank, self.schema)
        self._main_tid = threading.get_native_id()
        self._thread_index = {self._main_tid: 0}
        self._window_start = self.origin
        self._phases: list[tuple[str, int, int, int, int]] = []   # name, start, end, step, microstep
        self._counters: list[tuple[str, int, float, int]] = []    # name, time, value, step
        self._mpi: list[tuple] = []                                # filled by the MPI layer (comm records)
        self.records = 0

    # -- the trainer's Observer -------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.recorder.step = step
        self.recorder.microstep = 0

    def microstep(self, micro: int) -> None:
        self.recorder.microstep = micro

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        t0 = time.monotonic_ns()
        try:
            yield
        finally:
            self._phases.append((name, t0, time.monotonic_ns(), self.recorder.step, self.recorder.microstep))

    def counter(self, name: str, value: float) -> None:
        self._counters.append((name, time.monotonic_ns(), float(value), self.recorder.step))

    def end_step(self, step: int) -> None:
        self.flush()
        self.recorder.step = NO_VALUE
        self.recorder.microstep = NO_VALUE

    def close(self) -> None:
        self.flush()

    # -- flushing -------------------------------------------------------------------------------------
    def _thread_indices(self, tids: np.ndarray) -> np.ndarray:
        """Map OS thread ids to 0..N-1: the main thread is 0, workers numbered in order of first appearance."""
        for tid in np.unique(tids[tids >= 0]):
            if int(tid) not in self._thread_index:
                self._thread_index[int(tid)] = len(self._thread_index)
        lookup = np.vectorize(lambda t: self._thread_index.get(int(t), NO_VALUE), otypes=[np.int32])
        return lookup(tids) if tids.size else tids.astype(np.int32)

    def flush(self) -> None:
        t_flush = time.monotonic_ns()
        window = (self._window_start, t_flush)
        times, meta = self.recorder.take()
        table = self._window_table(times, meta, window)
        self.writer.write(table)
        self.records += table.num_rows
        self._window_start = t_flush
        # The flush itself is part of the next window, shown as a phase so analyses can tell it apart.
        self._phases = [(FLUSH_PHASE, t_flush, time.monotonic_ns(), NO_VALUE, NO_VALUE)]

    def _window_table(self, times: np.ndarray, meta: np.ndarray, window: tuple[int, int]):
        o = self.origin
        index = self._thread_indices(times[:, 1:, 2])
        blocks = blocks_of(times, index)
        nthreads = max(self.nthreads, len(self._thread_index))
        io = [(s, e, _PHASE_STATES[n]) for n, s, e, _, _ in self._phases if n in _PHASE_STATES]
        overlays = tuple(np.array(c, dtype=np.int64) for c in zip(*io)) if io else None
        st = thread_states(times, blocks, nthreads, window, overlays)
        ph, co = self._phases, self._counters
        self._counters = []
        names = np.array(self.recorder.kernel_names + [""], dtype=object)
        kcall = blocks.call
        # Four groups of rows, concatenated column by column; -1 marks a null (see records_table).
        groups = [
            dict(kind=S.Kind.STATE, thread=st["thread"], start=st["start"], end=st["end"], state=st["state"]),
            dict(kind=S.Kind.KERNEL, thread=blocks.thread, start=blocks.start, end=blocks.end,
                 name=names[meta[kcall, 0]], step=meta[kcall, 2], layer=meta[kcall, 1], microstep=meta[kcall, 3]),
            dict(kind=S.Kind.PHASE, thread=0, start=[p[1] for p in ph], end=[p[2] for p in ph],
                 name=[p[0] for p in ph], step=[p[3] for p in ph], microstep=[p[4] for p in ph]),
            dict(kind=S.Kind.COUNTER, thread=0, start=[c[1] for c in co], end=[c[1] for c in co],
                 name=[c[0] for c in co], step=[c[3] for c in co], value=[c[2] for c in co]),
        ]
        cols = {c: [] for c in (S.KIND, S.THREAD, S.START_NS, S.END_NS, S.STATE, S.NAME, S.STEP, S.LAYER,
                                S.MICROSTEP, S.VALUE)}
        for g in groups:
            n = len(g["start"])
            cols[S.KIND].append(np.full(n, g["kind"], dtype=object))
            cols[S.THREAD].append(np.broadcast_to(np.asarray(g["thread"], dtype=np.int32), (n,)))
            cols[S.START_NS].append(np.asarray(g["start"], dtype=np.int64) - o)
            cols[S.END_NS].append(np.asarray(g["end"], dtype=np.int64) - o)
            cols[S.NAME].append(np.asarray(g["name"], dtype=object) if "name" in g else np.full(n, None, object))
            cols[S.VALUE].append(np.asarray(g["value"], dtype=np.float64) if "value" in g else np.full(n, np.nan))
            for c in (S.STATE, S.STEP, S.LAYER, S.MICROSTEP):
                cols[c].append(np.asarray(g[c], dtype=np.int64) if c in g else np.full(n, NO_VALUE, np.int64))
        merged = {c: np.concatenate(v) for c, v in cols.items()}
        merged[S.RANK] = np.full(len(merged[S.KIND]), self.rank, dtype=np.int32)
        order = np.argsort(merged[S.START_NS], kind="stable")
        is_counter = merged[S.KIND][order] == S.Kind.COUNTER
        return records_table({k: v[order] for k, v in merged.items()}, self.schema,
                             nulls={c: NO_VALUE for c in (S.STATE, S.STEP, S.LAYER, S.MICROSTEP)},
                             value_mask=~is_counter)


