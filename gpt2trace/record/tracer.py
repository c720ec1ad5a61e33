"""The tracer of one rank: the trainer's Observer plus the kernel recorder, written to parts as it goes.

Kernels time themselves (inside Numba, CLOCK_MONOTONIC); phases and counters are read here with
time.monotonic_ns(), the same clock. All times in the trace are ns since the trace's origin (rank 0's start;
other ranks are shifted onto it by the clock synchronization of the MPI layer).

Windows and parts. The records since the last cut form the open window. At the end of the first step that ends
`flush_every_s` (0.5 s by default, gpt2trace.run.runner.TraceConfig) or more after the last cut, the window is
closed and handed to the writer thread (gpt2trace.record.writer_thread), which builds its table of raw events and
writes it as one part (gpt2trace.format.parts: one row per kernel call with its region and blocks, phases, MPI
calls, counters; the merge builds the kernel records and the thread states from them). So a part always holds
whole steps, and the training loop pays only the hand-over (a copy of the recorder's slots, ~30 us) instead of
building and writing a part every step; the writer, on another thread but on the cores the kernels use, handles
~110 rows a step of the `small` model instead of the ~1,030 records of its trace.

What a kill loses. A SIGKILL at time t loses the open window and, if its write had not finished, the window
being written (the writer takes a window only when the previous one is on disk): less than 2 x `flush_every_s`
+ two steps of completed steps, plus the step in progress; usually only the open window, a part's write taking
~3 ms. `flush_every_s=0` writes every step's part before the next step starts (the loss is then only the
step in progress), at ~0.75 ms a step on the loop's critical path. Ends other than a kill (`close`): a finished
run keeps everything; a run stopped by an error keeps every whole step and drops the step it was in.

Memory. At every phase end the main thread also records the process's resident memory (`rss_bytes` counter,
gpt2trace.record.resident: one pread, ~1.4 us) with the phase's step and micro-batch, so a trace shows how much
each rank holds after each forward, backward or optimizer step.

Each step's end is recorded as a `trace_flush` phase on the main thread, in the next window: the tracer's own
time on the loop (the bookkeeping at a step's end, the hand-over at a cut, a wait when the writer lags behind).
Rows of a part are grouped by kind (kernel calls in call order, phases by start, MPI calls as they were made,
counters).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpt2trace.format import communicators as comms
from gpt2trace.format import schema as S
from gpt2trace.format.parts import (
    BLOCKS,
    KERNEL_CALL,
    KIND_CODES,
    NULL,
    PART_KINDS,
    PartWindow,
    part_layout,
    records_table,
    with_window,
)
from gpt2trace.format.writer import PartWriter
from gpt2trace.record.recorder import NO_VALUE, Calls, KernelRecorder, call_meta
from gpt2trace.record.resident import ResidentMemory
from gpt2trace.record.writer_thread import WriterThread

FLUSH_PHASE = S.Phase.TRACE_FLUSH  # the tracer's own time at each step end, on the main thread
RSS_COUNTER = S.Counter.RSS_BYTES  # the tracer's own counter: resident memory at each phase end
# Columns some groups lack: their null and the dtype of the schema type.
_FILL = {S.THREAD: (0, np.int32), S.STATE: (NULL, np.int16), S.NAME: (NULL, np.int32), S.STEP: (NULL, np.int32),
         S.LAYER: (NULL, np.int16), S.MICROSTEP: (NULL, np.int16), S.BYTES: (NULL, np.int64),
         S.PEER: (NULL, np.int32), S.SEQ: (NULL, np.int64), S.VALUE: (np.nan, np.float64),
         S.COMMUNICATOR: (NULL, np.int32), S.TAG: (NULL, np.int32), BLOCKS: (NULL, np.int64)}


class _Phase:
    """The context of one `Tracer.phase`: a class, where a generator-based context manager costs ~1 us more on the
    training loop (a step has 6 or more phases)."""
    __slots__ = ("_tracer", "_name", "_nbytes", "_t0")

    def __init__(self, tracer: Tracer, name: str, nbytes: int | None):
        self._tracer, self._name, self._nbytes = tracer, name, nbytes

    def __enter__(self) -> None:
        self._t0 = time.monotonic_ns()

    def __exit__(self, *exc) -> None:
        self._tracer._phase_ended(self._name, self._t0, self._nbytes)


@dataclass(frozen=True)
class _StepEnd:
    """Where the open window stood when a step ended: its records up to here are whole steps."""
    t_ns: int
    calls: int
    phases: int
    counters: int
    comms: int
    step: int


@dataclass(frozen=True)
class Window:
    """A closed window [start_ns, end_ns) as the writer thread receives it."""
    start_ns: int
    end_ns: int
    times: np.ndarray
    calls: Calls
    phases: list
    counters: list
    comms: list
    steps: tuple[int, int] | None     # the first and last step that ended in it


class Tracer:
    def __init__(self, path: Path, rank: int, nthreads: int, metadata: dict[bytes, bytes], *, flush_every_s: float,
                 origin_ns: int | None = None):
        self.rank, self.nthreads = rank, nthreads
        self.origin = time.monotonic_ns() if origin_ns is None else origin_ns
        self.flush_every_ns = int(flush_every_s * 1e9)
        self.recorder = KernelRecorder(nthreads)
        self.schema = S.arrow_schema(metadata)
        self.writer = PartWriter(path, rank)
        self._layout = (self.schema, part_layout(self.schema, nthreads))     # for the schema it was made of
        # Thread ids (pthread ids, as the kernels read them) -> thread index (main = 0, workers by first appearance),
        # as two sorted lookup arrays.
        # Used by the writer thread only, which sees the windows in order.
        self._tids = np.array([threading.get_ident()], dtype=np.int64)
        self._tid_index = np.zeros(1, dtype=np.int32)
        self._window_start = self.origin
        self._phases: list[tuple[str, int, int, int, int, int]] = []   # name, start, end, step, microstep, bytes
        self._counters: list[tuple[str, int, float, int, int]] = []    # name, time, value, step, microstep
        self._rss = ResidentMemory.open()
        # name, start, end, step, microstep, bytes, peer, seq, communicator, state, tag
        self._comms: list[tuple] = []
        self._communicators: dict[int, comms.Communicator] = {}
        self._last_end: _StepEnd | None = None                     # of the open window
        self._first_step: int | None = None                        # the first step ending in the open window
        self._names: list[str] = []                                # the `name` dictionary, append-only
        self._name_codes: dict[str, int] = {}
        self._names_array = pa.array([], type=pa.string())
        self.records = 0                                           # rows written to parts so far
        self.steps_written: tuple[int, int] | None = None          # first and last step on disk
        self._thread = WriterThread(self._write)

    # -- the trainer's Observer -------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.recorder.step = step
        self.recorder.microstep = 0

    def microstep(self, micro: int) -> None:
        self.recorder.microstep = micro

    def phase(self, name: str, nbytes: int | None = None) -> _Phase:
        """A `phase` record around the block, and the resident memory at its end; `nbytes` goes to its `bytes`
        column (a checkpoint's files)."""
        return _Phase(self, name, nbytes)

    def _phase_ended(self, name: str, t0: int, nbytes: int | None) -> None:
        t1 = time.monotonic_ns()
        step, micro = self.recorder.step, self.recorder.microstep
        self._phases.append((name, t0, t1, step, micro, NULL if nbytes is None else nbytes))
        if self._rss is not None:
            self._counters.append((RSS_COUNTER, t1, float(self._rss.bytes()), step, micro))

    def counter(self, name: str, value: float) -> None:
        self._counters.append((name, time.monotonic_ns(), float(value), self.recorder.step, NO_VALUE))

    def comm(self, name: str, start_ns: int, end_ns: int, nbytes: int | None, peer: int | None, seq: int | None,
             state: int, communicator: int = comms.WORLD_ID, tag: int | None = None) -> None:
        """One MPI call on the main thread (the sink of gpt2trace.record.traced_comm): a `comm` record, and the main
        thread in `state` meanwhile (an MPI call inside dataload is shown in its MPI state, not I/O). `tag`: a
        point-to-point message's tag."""
        self._comms.append((name, start_ns, end_ns, self.recorder.step, self.recorder.microstep,
                            NULL if nbytes is None else nbytes, NULL if peer is None else peer,
                            NULL if seq is None else seq, communicator, int(state), NULL if tag is None else tag))

    def communicator(self, comm: comms.Communicator) -> None:
        """A communicator this rank belongs to (or its new name): every part written from now on lists it in its
        metadata, so a merge, or a recovery after a crash, knows every communicator of the run."""
        if self._communicators.get(comm.id) == comm:
            return
        self._communicators[comm.id] = comm
        meta = dict(self.schema.metadata or {})
        meta.update(comms.to_metadata(self._communicators.values()))
        self.schema = self.schema.with_metadata(meta)     # read by the writer thread for its next part

    def end_step(self, step: int) -> None:
        """The step's records are complete: mark the boundary, and close the window when it is time. Raises
        the writer thread's failure (an OutputError: a full disk), if any, here on the loop's thread."""
        t = time.monotonic_ns()
        self._thread.check()
        self._last_end = _StepEnd(t, self.recorder.n, len(self._phases), len(self._counters), len(self._comms), step)
        if self._first_step is None:
            self._first_step = step
        if t - self._window_start >= self.flush_every_ns:
            self._cut(t, self._last_end)
            if self.flush_every_ns == 0:
                self._thread.wait()
                self._thread.check()
        # In the next window, as the time between steps it is.
        self._phases.append((FLUSH_PHASE, t, time.monotonic_ns(), NO_VALUE, NO_VALUE, NULL))
        self.recorder.step = NO_VALUE
        self.recorder.microstep = NO_VALUE

    def close(self, whole_run: bool = True) -> None:
        """Write the open window and wait for the writer thread to finish.

        `whole_run`: the run ended normally (or at a step boundary): everything is kept. Otherwise the run was
        stopped inside a step (an error, a second interrupt): the window ends at the last step end, and the
        step in progress is dropped, so the trace holds only whole steps."""
        try:
            if whole_run:
                self._cut(time.monotonic_ns(), None)
            elif self._last_end is not None:
                self._cut(self._last_end.t_ns, self._last_end)
            else:
                self.recorder.take(0)
        finally:
            self._thread.close()
            if self._rss is not None:
                self._rss.close()
        self._thread.check()

    @property
    def writer_busy_ns(self) -> int:
        """Time the writer thread spent building and writing parts."""
        return self._thread.busy_ns

    @property
    def writer_cpu_ns(self) -> int:
        """CPU time the writer thread spent building and writing parts."""
        return self._thread.cpu_ns

    # -- windows --------------------------------------------------------------------------------------
    def _cut(self, end_ns: int, upto: _StepEnd | None) -> None:
        """Hand the window [start, end_ns) to the writer thread: everything, or only what precedes `upto`."""
        if upto is None:
            times, calls = self.recorder.take()
            phases, counters, comms = self._phases, self._counters, self._comms
            last = self._last_end.step if self._last_end is not None else None
        else:
            times, calls = self.recorder.take(upto.calls)
            phases, counters, comms = (self._phases[: upto.phases], self._counters[: upto.counters],
                                       self._comms[: upto.comms])
            last = upto.step
        steps = (self._first_step, last) if self._first_step is not None and last is not None else None
        self._thread.submit(Window(self._window_start, end_ns, times, calls, phases, counters, comms, steps))
        self._window_start = end_ns
        self._phases, self._counters, self._comms = [], [], []
        self._last_end, self._first_step = None, None

    def _write(self, window: Window) -> None:
        """On the writer thread: the window's table, written as the next part."""
        table = self._window_table(window)
        self.writer.write(table)
        self.records += table.num_rows
        if window.steps is not None:
            first = window.steps[0] if self.steps_written is None else self.steps_written[0]
            self.steps_written = (first, window.steps[1])

    @property
    def threads_seen(self) -> int:
        return len(self._tids)

    def _thread_indices(self, tids: np.ndarray) -> np.ndarray:
        """Map thread ids to 0..N-1 (NO_VALUE stays NO_VALUE): main thread 0, workers by first appearance."""
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

    def _codes(self, names: list[str]) -> np.ndarray:
        """Dictionary codes of names, adding the new ones to the trace's `name` dictionary."""
        known = self._name_codes
        new = [n for n in dict.fromkeys(names) if n not in known]
        for n in new:
            known[n] = len(self._names)
            self._names.append(n)
        if new:
            self._names_array = pa.array(self._names, type=pa.string())
        return np.array([known[n] for n in names], dtype=np.int32).reshape(len(names))

    def _window_table(self, w: Window) -> pa.Table:
        """The window's part: raw events (gpt2trace.format.parts); the merge builds the kernel records and the
        states from them."""
        times, meta = w.times, call_meta(w.calls)
        index = self._thread_indices(times[:, 1:, 2])
        window = PartWindow(self.rank, w.start_ns - self.origin, w.end_ns - self.origin,
                            max(self.nthreads, self.threads_seen))
        ph = sorted(w.phases, key=lambda p: p[1])
        cm = w.comms
        # A copy: the loop's thread may add a kernel name meanwhile (names only grow; the codes in this window
        # are all below the length read here).
        kernel_codes = self._codes(list(self.recorder.kernel_names))
        co = w.counters
        phase_arr = np.array([p[1:] for p in ph], dtype=np.int64).reshape(-1, 5)     # start end step micro bytes
        # start end step microstep bytes peer seq communicator state tag
        comm_arr = np.array([c[1:] for c in cm], dtype=np.int64).reshape(-1, 10)
        counter_t = np.array([c[1] for c in co], dtype=np.int64)
        calls = {S.KIND: KERNEL_CALL, S.THREAD: 0, S.START_NS: times[:, 0, 0], S.END_NS: times[:, 0, 1],
                 S.NAME: kernel_codes[meta[:, 0]], S.STEP: meta[:, 2], S.LAYER: meta[:, 1], S.MICROSTEP: meta[:, 3]}
        blocks = times[:, 1:, :] - self.origin           # (start, end, tid) -> (start, end, thread index)
        blocks[:, :, 2] = index
        blocks[index < 0] = NULL                          # a block not run keeps a reused slot's old times
        calls[BLOCKS] = blocks.reshape(len(times), 3 * self.nthreads)
        groups = [
            calls,
            {S.KIND: S.Kind.PHASE, S.THREAD: 0, S.START_NS: phase_arr[:, 0], S.END_NS: phase_arr[:, 1],
             S.NAME: self._codes([p[0] for p in ph]), S.STEP: phase_arr[:, 2], S.MICROSTEP: phase_arr[:, 3],
             S.BYTES: phase_arr[:, 4]},
            {S.KIND: S.Kind.COMM, S.THREAD: 0, S.START_NS: comm_arr[:, 0], S.END_NS: comm_arr[:, 1],
             S.NAME: self._codes([c[0] for c in cm]), S.STEP: comm_arr[:, 2], S.MICROSTEP: comm_arr[:, 3],
             S.BYTES: comm_arr[:, 4], S.PEER: comm_arr[:, 5], S.SEQ: comm_arr[:, 6],
             S.COMMUNICATOR: comm_arr[:, 7], S.STATE: comm_arr[:, 8], S.TAG: comm_arr[:, 9]},
            {S.KIND: S.Kind.COUNTER, S.THREAD: 0, S.START_NS: counter_t, S.END_NS: counter_t,
             S.NAME: self._codes([c[0] for c in co]), S.STEP: np.array([c[3] for c in co], dtype=np.int64),
             S.MICROSTEP: np.array([c[4] for c in co], dtype=np.int64),
             S.VALUE: np.array([c[2] for c in co], dtype=np.float64)},
        ]
        schema, layout = self._layout
        if schema is not self.schema:                     # a communicator was added since
            schema = self.schema
            self._layout = schema, (layout := part_layout(schema, self.nthreads))
        return records_table(self._concat(groups), self._names_array, with_window(layout, window), kinds=PART_KINDS)

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
                col = cols[name] = np.full((n, *np.shape(present[0][0])[1:]), null, dtype)
                for v, a, b in present:
                    col[a:b] = v
        return cols

