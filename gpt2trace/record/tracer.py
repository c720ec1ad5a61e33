"""The tracer of one rank: the trainer's Observer plus the kernel recorder, flushed to Parquet every step.

Kernels time themselves (inside Numba, CLOCK_MONOTONIC); phases and counters are read here with
time.monotonic_ns(), the same clock. All times in the trace are ns since the trace's origin (rank 0's start;
other ranks are shifted onto it by the clock synchronization of the MPI layer).

A flush turns the window since the previous flush into one Parquet part (see gpt2trace.format.writer). It is on
the training loop's critical path, so it works on whole NumPy columns and integer dictionary codes: no
Python object per record. Measured on a step of the `small` model (~1,000 records) during training:
~0.8 ms to build the table and ~1.1 ms to write the part (the version with np.vectorize, object arrays and
NumPy thread states took ~3.7 ms in all); benchmarks/trace_overhead.py reports it per configuration. Rows of a part are grouped by kind (states, kernels,
phases, MPI calls, counters), each group in (thread, start) order.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpt2trace.format import communicators as comms, schema as S
from gpt2trace.record.recorder import NO_VALUE, KernelRecorder
from gpt2trace.record.thread_states import blocks_of, thread_states
from gpt2trace.format.writer import KIND_CODES, NULL, PartWriter, records_table

# Main-thread states of the phases that are not computation.
_PHASE_STATES = {S.Phase.DATALOAD: S.State.IO, S.Phase.CHECKPOINT: S.State.IO}
FLUSH_PHASE = S.Phase.TRACE_FLUSH  # the tracer's own flush, on the main thread
# Columns some groups lack: their null and the dtype of the schema type.
_FILL = {S.THREAD: (0, np.int32), S.STATE: (NULL, np.int16), S.NAME: (NULL, np.int32), S.STEP: (NULL, np.int32),
         S.LAYER: (NULL, np.int16), S.MICROSTEP: (NULL, np.int16), S.BYTES: (NULL, np.int64),
         S.PEER: (NULL, np.int32), S.SEQ: (NULL, np.int64), S.VALUE: (np.nan, np.float64),
         S.COMMUNICATOR: (NULL, np.int32)}


class Tracer:
    def __init__(self, path: Path, rank: int, nthreads: int, metadata: dict[bytes, bytes],
                 origin_ns: int | None = None):
        self.rank, self.nthreads = rank, nthreads
        self.origin = time.monotonic_ns() if origin_ns is None else origin_ns
        self.recorder = KernelRecorder(nthreads)
        self.schema = S.arrow_schema(metadata)
        self.writer = PartWriter(path, rank, self.schema)
        # OS thread ids -> thread index (main = 0, workers by first appearance), as two sorted lookup arrays.
        self._tids = np.array([threading.get_native_id()], dtype=np.int64)
        self._tid_index = np.zeros(1, dtype=np.int32)
        self._window_start = self.origin
        self._phases: list[tuple[str, int, int, int, int]] = []   # name, start, end, step, microstep
        self._counters: list[tuple[str, int, float, int]] = []    # name, time, value, step
        self._comms: list[tuple] = []   # name, start, end, step, microstep, bytes, peer, seq, communicator, state
        self._communicators: dict[int, comms.Communicator] = {}
        self._names: list[str] = []                                # the `name` dictionary, append-only
        self._name_codes: dict[str, int] = {}
        self._names_array = pa.array([], type=pa.string())
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

    def comm(self, name: str, start_ns: int, end_ns: int, nbytes: int | None, peer: int | None, seq: int | None,
             state: int, communicator: int = comms.WORLD_ID) -> None:
        """One MPI call on the main thread (the sink of gpt2trace.record.traced_comm): a `comm` record, and the main
        thread in `state` meanwhile (an MPI call inside dataload is shown in its MPI state, not I/O)."""
        self._comms.append((name, start_ns, end_ns, self.recorder.step, self.recorder.microstep,
                            NULL if nbytes is None else nbytes, NULL if peer is None else peer,
                            NULL if seq is None else seq, communicator, int(state)))

    def communicator(self, comm: comms.Communicator) -> None:
        """A communicator this rank belongs to (or its new name): every part written from now on lists it in its
        metadata, so a merge, or a recovery after a crash, knows every communicator of the run."""
        if self._communicators.get(comm.id) == comm:
            return
        self._communicators[comm.id] = comm
        meta = dict(self.schema.metadata or {})
        meta.update(comms.to_metadata(self._communicators.values()))
        self.schema = self.schema.with_metadata(meta)
        self.writer.schema = self.schema

    def end_step(self, step: int) -> None:
        self.flush()
        self.recorder.step = NO_VALUE
        self.recorder.microstep = NO_VALUE

    def close(self) -> None:
        self.flush()

    # -- flushing -------------------------------------------------------------------------------------
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
        self._counters = []
        self._comms = []

    @property
    def threads_seen(self) -> int:
        return len(self._tids)

    def _thread_indices(self, tids: np.ndarray) -> np.ndarray:
        """Map OS thread ids to 0..N-1 (NO_VALUE stays NO_VALUE): main thread 0, workers by first appearance."""
        pos = np.minimum(np.searchsorted(self._tids, tids), len(self._tids) - 1)
        known = self._tids[pos] == tids
        if not known[tids >= 0].all():
            self._add_threads(tids[~known & (tids >= 0)])
            return self._thread_indices(tids)
        return np.where(known, self._tid_index[pos], NO_VALUE).astype(np.int32)

    def _add_threads(self, new: np.ndarray) -> None:
        uniq, first = np.unique(new, return_index=True)
        keys = np.concatenate([self._tids, uniq[np.argsort(first)]])
        vals = np.arange(len(keys), dtype=np.int32)
        vals[: len(self._tids)] = self._tid_index
        order = np.argsort(keys)
        self._tids, self._tid_index = keys[order], vals[order]

    def _codes(self, names) -> np.ndarray:
        """Dictionary codes of names, adding the new ones to the trace's `name` dictionary."""
        codes = np.empty(len(names), dtype=np.int32)
        for i, n in enumerate(names):
            c = self._name_codes.get(n)
            if c is None:
                c = self._name_codes[n] = len(self._names)
                self._names.append(n)
            codes[i] = c
        if len(self._names) != len(self._names_array):
            self._names_array = pa.array(self._names, type=pa.string())
        return codes

    def _window_table(self, times: np.ndarray, meta: np.ndarray, window: tuple[int, int]) -> pa.Table:
        index = self._thread_indices(times[:, 1:, 2])
        blocks = blocks_of(times, index)
        nthreads = max(self.nthreads, self.threads_seen)
        ph = sorted(self._phases, key=lambda p: p[1])
        cm = self._comms
        st = thread_states(times, blocks, nthreads, window, _main_overlays(ph, cm))

        kernel_codes = self._codes(self.recorder.kernel_names)
        kmeta = meta[blocks.call]
        korder = np.lexsort((blocks.start, blocks.thread))
        co = self._counters
        phase_arr = np.array([p[1:] for p in ph], dtype=np.int64).reshape(-1, 4)     # start end step microstep
        comm_arr = np.array([c[1:9] for c in cm], dtype=np.int64).reshape(-1, 8)     # start end step micro bytes..
        counter_t = np.array([c[1] for c in co], dtype=np.int64)
        groups = [
            {S.KIND: S.Kind.STATE, S.THREAD: st["thread"], S.START_NS: st["start"], S.END_NS: st["end"],
             S.STATE: st["state"]},
            {S.KIND: S.Kind.KERNEL, S.THREAD: blocks.thread[korder], S.START_NS: blocks.start[korder],
             S.END_NS: blocks.end[korder], S.NAME: kernel_codes[kmeta[korder, 0]], S.STEP: kmeta[korder, 2],
             S.LAYER: kmeta[korder, 1], S.MICROSTEP: kmeta[korder, 3]},
            {S.KIND: S.Kind.PHASE, S.THREAD: 0, S.START_NS: phase_arr[:, 0], S.END_NS: phase_arr[:, 1],
             S.NAME: self._codes([p[0] for p in ph]), S.STEP: phase_arr[:, 2], S.MICROSTEP: phase_arr[:, 3]},
            {S.KIND: S.Kind.COMM, S.THREAD: 0, S.START_NS: comm_arr[:, 0], S.END_NS: comm_arr[:, 1],
             S.NAME: self._codes([c[0] for c in cm]), S.STEP: comm_arr[:, 2], S.MICROSTEP: comm_arr[:, 3],
             S.BYTES: comm_arr[:, 4], S.PEER: comm_arr[:, 5], S.SEQ: comm_arr[:, 6],
             S.COMMUNICATOR: comm_arr[:, 7]},
            {S.KIND: S.Kind.COUNTER, S.THREAD: 0, S.START_NS: counter_t, S.END_NS: counter_t,
             S.NAME: self._codes([c[0] for c in co]), S.STEP: np.array([c[3] for c in co], dtype=np.int64),
             S.VALUE: np.array([c[2] for c in co], dtype=np.float64)},
        ]
        return records_table(self._concat(groups), self._names_array, self.schema)

    def _concat(self, groups: list[dict]) -> dict[str, np.ndarray]:
        """One column per name over all groups; a column a group lacks is null there."""
        sizes = [len(g[S.START_NS]) for g in groups]
        bounds = np.cumsum([0] + sizes)
        n = int(bounds[-1])
        cols = {S.KIND: np.repeat(np.array([KIND_CODES[g[S.KIND]] for g in groups], np.int32), sizes),
                S.RANK: np.full(n, self.rank, np.int32),
                S.START_NS: np.concatenate([g[S.START_NS] for g in groups]) - self.origin,
                S.END_NS: np.concatenate([g[S.END_NS] for g in groups]) - self.origin}
        for name, (null, dtype) in _FILL.items():
            present = [(g[name], a, b) for g, a, b in zip(groups, bounds[:-1], bounds[1:]) if name in g and b > a]
            if present:                     # else left out: a column of nulls (bytes, peer, seq without MPI)
                col = cols[name] = np.full(n, null, dtype)
                for v, a, b in present:
                    col[a:b] = v
        return cols


def _main_overlays(phases: list[tuple], calls: list[tuple]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(start, end, state) of the main thread's states outside parallel regions, sorted by start: the I/O of
    dataload/checkpoint phases, cut around the MPI calls made inside them, and the MPI calls' states."""
    mpi = [(c[1], c[2], c[9]) for c in calls]
    out = list(mpi)
    for name, s, e, _, _ in phases:
        if name not in _PHASE_STATES:
            continue
        cursor = s
        for ms, me, _ in mpi:                 # few per step; sorted, as the calls were made
            if me > cursor and ms < e:
                if ms > cursor:
                    out.append((cursor, ms, _PHASE_STATES[name]))
                cursor = max(cursor, me)
        if e > cursor:
            out.append((cursor, e, _PHASE_STATES[name]))
    if not out:
        return None
    out.sort()
    return tuple(np.array(c, dtype=np.int64) for c in zip(*out))
