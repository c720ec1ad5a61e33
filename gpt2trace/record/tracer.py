"""The tracer of one rank: the trainer's Observer plus the kernel recorder, written to parts as it goes.

Kernels time themselves (inside Numba, CLOCK_MONOTONIC); phases and counters are read here with
time.monotonic_ns(), the same clock. All times in the trace are ns since the trace's origin (rank 0's start;
other ranks are shifted onto it by the clock synchronization of the MPI layer).

Windows and parts. The records since the last cut form the open window. At the end of the first step that ends
`flush_every_s` (1 s by default, gpt2trace.run.runner.TraceConfig) or more after the last cut, the window is
closed and written, on the loop's own thread, as one part: its raw buffers (gpt2trace.format.raw_window: the
kernels' calls as they wrote them into the recorder's log, the phases, MPI calls and counters) handed as they are
to one os.writev (gpt2trace.format.raw_part), as Extrae writes its buffers to .mpit files. The merge builds the
records from them (as mpi2prv does), so during the run nothing is done per record and nothing is encoded. A cut
of the `small` model's 1 s window (~6,500 calls, ~0.5 MB) costs the loop ~3 ms inside the training steps on this
project's 2-vCPU VMs, where its Python, NumPy and file-system code run cold after the kernels (an Arrow IPC
encoding of the same window took ~5 ms more there); no writer thread competes with the kernels' threads for the
cores and the GIL.

What a kill loses. A SIGKILL at time t loses only the open window: less than `flush_every_s` + one step of
completed steps, plus the step in progress (the parts on disk are whole and hold whole steps).
`flush_every_s=0` writes every step's part before the next step starts (the loss is then only the step in
progress). Ends other than a kill (`close`): a finished run keeps everything; a run stopped by an error keeps
every whole step and drops the step it was in. After a failed write (a full disk) nothing more is written, so
the parts on disk stay a contiguous run of whole steps.

Memory. At every phase end of a sampled step the main thread also records the process's resident memory
(`rss_bytes` counter, gpt2trace.record.resident) with the phase's step and micro-batch, so a trace shows how much
each rank holds after each forward, backward or optimizer step. A step is sampled when it begins `memory_every_s`
or more after the last sampled one began (the first step always; 0: every step): a sample is one read of
/proc/self/statm, 1.5-3 us alone but ~20 us measured inside a training step on this project's 2-vCPU VMs, which
at every phase end of every step was ~0.4% of the `small` model's step. A sampled step keeps every phase end, so
its micro-batches' peaks (a GPipe stage's) are all there; a checkpoint's phase, rare, is always sampled.

Each step's end is recorded as a `trace_flush` phase on the main thread, in the next window: the tracer's own
time on the loop (the bookkeeping at a step's end, and the part's write at a cut).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

from gpt2trace.format import communicators as comms
from gpt2trace.format import raw_part
from gpt2trace.format import schema as S
from gpt2trace.format.parts import NULL
from gpt2trace.format.raw_window import (
    COMM_FIELDS,
    COUNTER_FIELDS,
    PHASE_FIELDS,
    TASK_FIELDS,
    RawWindow,
    Rows,
    TaskBuffers,
)
from gpt2trace.format.writer import PartWriter
from gpt2trace.record.recorder import NO_VALUE, KernelRecorder
from gpt2trace.record.resident import ResidentMemory

FLUSH_PHASE = S.Phase.TRACE_FLUSH  # the tracer's own time at each step end, on the main thread
RSS_COUNTER = S.Counter.RSS_BYTES  # the tracer's own counter: resident memory at each phase end


class _Phase:
    """The context of one `Tracer.phase`: a class, where a generator-based context manager costs ~1 us more on the
    training loop (a step has 6 or more phases)."""
    __slots__ = ("_tracer", "_name", "_nbytes", "_t0")

    def __init__(self, tracer: Tracer, name: str, nbytes: int | None):
        self._tracer, self._name, self._nbytes = tracer, name, nbytes

    def __enter__(self) -> None:
        self._t0 = time.monotonic_ns()

    def __exit__(self, *exc) -> None:
        # The row appended here, not by a method of the tracer and of its rows: inside a training step, right
        # after the kernels, each Python call costs ~1 us.
        t1 = time.monotonic_ns()
        tracer, nbytes = self._tracer, self._nbytes
        rec, phases = tracer.recorder, tracer._phases
        phases.names.append(self._name)
        phases.ints += (self._t0, t1, rec.step, rec.microstep, NULL if nbytes is None else nbytes)
        if tracer._rss is not None and (tracer._sampling or nbytes is not None):    # a checkpoint: always
            tracer._counters.add(RSS_COUNTER, (t1, rec.step, rec.microstep), float(tracer._rss.bytes()))


class _StepEnd(NamedTuple):
    """Where the open window stood when a step ended: its records up to here are whole steps. (A named tuple: made
    at every step end, where a frozen dataclass costs ~1 us more.)"""
    t_ns: int
    calls: int
    phases: int
    counters: int
    comms: int
    tasks: int
    step: int


class Tracer:
    def __init__(self, path: Path, rank: int, nthreads: int, metadata: dict[bytes, bytes], *, flush_every_s: float,
                 memory_every_s: float = 0.0, origin_ns: int | None = None):
        self.rank, self.nthreads = rank, nthreads
        self.origin = time.monotonic_ns() if origin_ns is None else origin_ns
        self.flush_every_ns = int(flush_every_s * 1e9)
        self.recorder = KernelRecorder(nthreads)
        self._metadata = dict(S.arrow_schema(metadata).metadata)     # the trace's, its version stamped
        self._metadata_json = raw_part.metadata_json(self._metadata)     # as every part's header holds it
        self.writer = PartWriter(path, rank)
        self._main_tid = threading.get_ident()      # the loop's thread: thread 0 of the rank
        self._window_start = self.origin
        self._phases = Rows(len(PHASE_FIELDS))
        self._counters = Rows(len(COUNTER_FIELDS))                # and each one's value
        self._rss = ResidentMemory.open()
        self.memory_every_ns = int(memory_every_s * 1e9)
        self._sampled_ns: int | None = None           # when the last step that sampled memory began
        self._sampling = True                         # this step samples memory at its phase ends (none begun: yes)
        self._comms = Rows(len(COMM_FIELDS))
        self._tasks: list[tuple] = []                 # (task log, step, microstep) of each graph run
        self._communicators: dict[int, comms.Communicator] = {}
        self._last_end: _StepEnd | None = None                     # of the open window
        self._first_step: int | None = None                        # the first step ending in the open window
        self.steps_written: tuple[int, int] | None = None          # first and last step on disk
        self.cut_ns = 0                     # the loop's time spent writing parts (benchmarks/trace_overhead.py)
        self._error: BaseException | None = None    # a part could not be written: nothing more is

    # -- the trainer's Observer -------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        self.recorder.mark(step, 0)
        if self._rss is not None:
            t = time.monotonic_ns()
            self._sampling = self._sampled_ns is None or t - self._sampled_ns >= self.memory_every_ns
            if self._sampling:
                self._sampled_ns = t

    def microstep(self, micro: int) -> None:
        self.recorder.mark(self.recorder.step, micro)

    def phase(self, name: str, nbytes: int | None = None) -> _Phase:
        """A `phase` record around the block, and the resident memory at its end; `nbytes` goes to its `bytes`
        column (a checkpoint's files)."""
        return _Phase(self, name, nbytes)

    def counter(self, name: str, value: float) -> None:
        counters = self._counters
        counters.names.append(name)
        counters.ints += (time.monotonic_ns(), self.recorder.step, NO_VALUE)
        counters.floats.append(float(value))

    def comm(self, name: str, start_ns: int, end_ns: int, nbytes: int | None, peer: int | None, seq: int | None,
             state: int, communicator: int = comms.WORLD_ID, tag: int | None = None) -> None:
        """One MPI call on the main thread (the sink of gpt2trace.record.traced_comm): a `comm` record, and the main
        thread in `state` meanwhile (an MPI call inside dataload is shown in its MPI state, not I/O). `tag`: a
        point-to-point message's tag."""
        self._comms.add(name, (start_ns, end_ns, self.recorder.step, self.recorder.microstep,
                               NULL if nbytes is None else nbytes, NULL if peer is None else peer,
                               NULL if seq is None else seq, communicator, int(state), NULL if tag is None else tag))

    def communicator(self, comm: comms.Communicator) -> None:
        """A communicator this rank belongs to (or its new name): every part written from now on lists it in its
        metadata, so a merge, or a recovery after a crash, knows every communicator of the run."""
        if self._communicators.get(comm.id) == comm:
            return
        self._communicators[comm.id] = comm
        self._metadata.update(comms.to_metadata(self._communicators.values()))
        self._metadata_json = raw_part.metadata_json(self._metadata)     # in every part from the next one

    def tasks(self, log) -> None:
        """The tasks one run of a task graph executed (trainer.tasks' TaskLog), in this step and micro-batch."""
        self._tasks.append((log, self.recorder.step, self.recorder.microstep))

    def end_step(self, step: int) -> None:
        """The step's records are complete: mark the boundary, and close the window when it is time. A part that
        cannot be written (an OutputError: a full disk) is raised here, on the loop's thread."""
        t = time.monotonic_ns()
        self._last_end = _StepEnd(t, self.recorder.n, len(self._phases.names), len(self._counters.names),
                                  len(self._comms.names), len(self._tasks), step)
        if self._first_step is None:
            self._first_step = step
        if t - self._window_start >= self.flush_every_ns:
            self._cut(t, self._last_end)
        # In the next window, as the time between steps it is.
        self._phases.names.append(FLUSH_PHASE)
        self._phases.ints += (t, time.monotonic_ns(), NO_VALUE, NO_VALUE, NULL)
        self.recorder.mark(NO_VALUE, NO_VALUE)

    def close(self, whole_run: bool = True) -> None:
        """Write the open window; raise the failure of a part's write, if any (then nothing more was written).

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
            if self._rss is not None:
                self._rss.close()
                self._rss = None
        if self._error is not None:        # a part's write failed earlier: the run's end says so
            raise self._error

    # -- windows --------------------------------------------------------------------------------------
    def _cut(self, end_ns: int, upto: _StepEnd | None) -> None:
        """Write the window [start, end_ns) as the next part: everything, or only what precedes `upto`. After a
        failed write, each cut raises that failure again and writes nothing."""
        t0 = time.monotonic_ns()
        window, steps = self._close_window(end_ns, upto)
        if self._error is not None:
            raise self._error
        try:
            self.writer.write_raw(raw_part.buffers(window, self._metadata_json))
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self.cut_ns += time.monotonic_ns() - t0
        if steps is not None:
            first = steps[0] if self.steps_written is None else self.steps_written[0]
            self.steps_written = (first, steps[1])

    def _close_window(self, end_ns: int, upto: _StepEnd | None) -> tuple[RawWindow, tuple[int, int] | None]:
        """The open window [start, end_ns) as it is written (everything, or only what precedes `upto`), and the
        first and last step that ended in it; the next window opens at `end_ns`."""
        if upto is None:
            times, calls = self.recorder.take()
            kept = (None, None, None, None)
            last = self._last_end.step if self._last_end is not None else None
        else:
            times, calls = self.recorder.take(upto.calls)
            kept = (upto.phases, upto.counters, upto.comms, upto.tasks)
            last = upto.step
        phase_names, phases, _ = self._phases.take(kept[0])
        counter_names, counters, values = self._counters.take(kept[1])
        comm_names, comms, _ = self._comms.take(kept[2])
        tasks = self._tasks[: kept[3]]
        steps = (self._first_step, last) if self._first_step is not None and last is not None else None
        window = RawWindow(self.rank, self._window_start, end_ns, self.origin, self.nthreads, self._main_tid,
                           times, calls.keys, calls.marks,
                           list(self.recorder.kernel_names), phase_names, phases, comm_names, comms, counter_names,
                           counters, values, _task_buffers(tasks))
        self._window_start = end_ns
        self._tasks = []
        self._last_end, self._first_step = None, None
        return window, steps


def _task_buffers(runs: list[tuple]) -> TaskBuffers | None:
    """The task logs of a window's graph runs as one set of buffers (a few NumPy concatenations per window)."""
    if not runs:
        return None
    rows, names, offsets, preds, idle, graphs = [], [], [np.zeros(1, np.int64)], [], [], []
    npreds = 0                       # predecessors of the earlier logs: where this log's lists start
    for log, step, micro in runs:
        n = len(log.task)
        cols = {"task": log.task, "kernel": np.asarray(log.kernel, np.int64) + len(names), "layer": log.layer,
                "block": log.block, "tid": log.tid, "pick": log.pick_ns, "start": log.start_ns, "end": log.end_ns,
                "done": log.done_ns, "step": np.full(n, step), "microstep": np.full(n, micro)}
        rows.append(np.stack([np.asarray(cols[f], np.int64) for f in TASK_FIELDS], axis=1))
        names.extend(log.names)
        offsets.append(np.asarray(log.pred_offsets[1:], np.int64) + npreds)
        preds.append(np.asarray(log.preds, np.int64))
        npreds += len(preds[-1])
        wait = np.asarray(log.idle, np.int64).reshape(-1, 3)
        idle.append(wait)
        begin = [log.pick_ns.min()] if n else []
        finish = [log.done_ns.max()] if n else []
        if len(wait):
            begin.append(wait[:, 1].min())
            finish.append(wait[:, 2].max())
        if begin:
            graphs.append((min(begin), max(finish)))
    return TaskBuffers(np.concatenate(rows), names, np.concatenate(offsets), np.concatenate(preds),
                       np.concatenate(idle), np.array(graphs, np.int64).reshape(-1, 2))
