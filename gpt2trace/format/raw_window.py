"""A window of the tracer's raw buffers, and how the merge decodes it into raw events.

Extrae's tracing library writes its buffers as they are (.mpit files) and leaves building the trace to mpi2prv.
So does the tracer: at a cut, on the training loop's own thread, it writes the kernel calls it recorded (times as
the kernels read them, thread ids as pthread ids), the calls' keys and the marks where step and microstep changed,
and the lists of phases, counters and MPI calls: a `RawWindow`, which `pieces` lays out as the kernels' times, the
other integer buffers one after the other, the counters' values and the names joined (the file it becomes:
gpt2trace.format.raw_part). That needs no writer thread beside the kernels' threads. The merge (`RankDecoder`)
turns a rank's raw parts, in order, into the part layout of gpt2trace.format.parts (one row per kernel call with
its blocks, phases, MPI calls, counters), from which `parts.complete` builds the kernel records and the thread
states. Raw parts of earlier versions, Arrow IPC files of one row (the same four pieces as list columns, or a
column per buffer), decode alike (`RankDecoder.part`).

A call's key is its kernel's id << LAYER_BITS plus its layer (-1: none), as the kernel wrote it
(trainer.kernels.launch keeps the same layout, a test holds the two equal); the thread index of a block is 0 for
the thread that ran the loop (its id is in the part) and 1, 2, ... for the others in the order they first appear on
the rank, which is why a rank's parts are decoded in order.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import chain

import numpy as np
import pyarrow as pa

from gpt2trace.format import schema as S
from gpt2trace.format.parts import (
    BLOCKS,
    KERNEL_CALL,
    KIND_CODES,
    NULL,
    PART_KINDS,
    TASK_GRAPH,
    TASK_IDLE,
    PartWindow,
    part_layout,
    records_table,
    with_window,
)

LAYER_BITS = 32
NO_VALUE = -1
META_RAW = b"gpt2trace.raw_window"     # JSON: rank, window, origin, threads, the loop thread's id
# The buffers, in this order: name -> (dtype, values per row).
PHASE_FIELDS = ("start", "end", "step", "microstep", "bytes")
COMM_FIELDS = ("start", "end", "step", "microstep", "bytes", "peer", "seq", "communicator", "state", "tag")
COUNTER_FIELDS = ("time", "step", "microstep")
# An executed task of a task graph: its id, its kernel (a code into `task_names`), layer, block, the thread id
# that ran it, when it was taken from the ready queue, its body, when its successors were released.
TASK_FIELDS = ("task", "kernel", "layer", "block", "tid", "pick", "start", "end", "done", "step", "microstep")
# What a part's integer buffers and names hold, in order (`pieces`).
INT_BUFFERS = ("keys", "marks", "phases", "comms", "counters", "tasks", "task_pred_offsets", "task_preds",
               "task_idle", "task_graphs")
NAME_GROUPS = ("kernel_names", "phase_names", "comm_names", "counter_names", "task_names")
NAME_SEP = "\x00"
_NO_TASKS = [np.zeros(0, np.int64)] * 5
# The buffers as parts of earlier versions hold them, a column each: name -> type.
_BUFFERS = {"times": pa.int64(), "keys": pa.int64(), "marks": pa.int64(), "kernel_names": pa.string(),
            "phases": pa.int64(), "phase_names": pa.string(), "comms": pa.int64(), "comm_names": pa.string(),
            "counters": pa.int64(), "counter_values": pa.float64(), "counter_names": pa.string(),
            "tasks": pa.int64(), "task_names": pa.string(), "task_pred_offsets": pa.int64(),
            "task_preds": pa.int64(), "task_idle": pa.int64(), "task_graphs": pa.int64()}
# Columns some groups lack: their null and the dtype of the schema type.
_FILL = {S.THREAD: (0, np.int32), S.STATE: (NULL, np.int16), S.NAME: (NULL, np.int32), S.STEP: (NULL, np.int32),
         S.LAYER: (NULL, np.int16), S.MICROSTEP: (NULL, np.int16), S.BYTES: (NULL, np.int64),
         S.PEER: (NULL, np.int32), S.SEQ: (NULL, np.int64), S.VALUE: (np.nan, np.float64),
         S.COMMUNICATOR: (NULL, np.int32), S.TAG: (NULL, np.int32), BLOCKS: (NULL, np.int64),
         S.TASK: (NULL, np.int64), S.BLOCK: (NULL, np.int32)}


class Rows:
    """Records of one kind as the loop appends them: a name each, and `width` int64 fields each, plus a float each
    for counters, in flat lists. A row costs the loop ~70 ns (a list's extend by a tuple), where an array.array's
    extend walks the tuple item by item (~700 ns); a cut turns the lists into NumPy arrays (~25 ns a field, a few
    hundred rows a window)."""
    __slots__ = ("names", "ints", "floats", "width")

    def __init__(self, width: int):
        self.width = width
        self.clear()

    def clear(self) -> None:
        self.names: list[str] = []
        self.ints: list[int] = []
        self.floats: list[float] = []

    def __len__(self) -> int:
        return len(self.names)

    def add(self, name: str, fields: tuple[int, ...], value: float | None = None) -> None:
        self.names.append(name)
        self.ints += fields
        if value is not None:
            self.floats.append(value)

    def take(self, upto: int | None = None) -> tuple[list[str], np.ndarray, np.ndarray]:
        """The first `upto` rows (all by default): names, (n, width) int64, (n,) float64 (empty without floats);
        the buffers restart empty (rows after `upto` are dropped: a step cut short)."""
        n = len(self.names) if upto is None else min(upto, len(self.names))
        names = self.names[:n]
        ints = np.fromiter(self.ints, np.int64, n * self.width).reshape(n, self.width)
        floats = np.fromiter(self.floats, np.float64, min(n, len(self.floats)))
        self.clear()
        return names, ints, floats


@dataclass(frozen=True)
class RawWindow:
    """One closed window of a rank, as recorded: absolute CLOCK_MONOTONIC times (ns), not yet shifted to the origin.

    `times` (n, threads + 1, 3): per kernel call its region (enter, exit, -) and per block (start, end, pthread id;
    id -1: not run); `keys` (n,) its kernel and layer; `marks` (m, 3): (first call, step, microstep) where those
    changed, the first at call 0; `kernel_names` by kernel id. `phases`, `comms`, `counters`: (name, *fields) tuples
    as names and (n, fields) int64 rows in PHASE_FIELDS, COMM_FIELDS and COUNTER_FIELDS order (`Rows.take`), the
    counters' values beside them, NO_VALUE where a field has none.
    """
    rank: int
    start_ns: int
    end_ns: int
    origin_ns: int
    threads: int
    main_tid: int
    times: np.ndarray
    keys: np.ndarray
    marks: np.ndarray
    kernel_names: list[str]
    phase_names: list[str]
    phases: np.ndarray
    comm_names: list[str]
    comms: np.ndarray
    counter_names: list[str]
    counters: np.ndarray
    counter_values: np.ndarray
    tasks: TaskBuffers | None = None


@dataclass(frozen=True)
class TaskBuffers:
    """The task graphs run in a window (absolute times): `tasks` (n, len(TASK_FIELDS)), `names` the kernel names
    its `kernel` codes index, the predecessors of task i (ids) at `preds[pred_offsets[i]:pred_offsets[i + 1]]`,
    `idle` (k, 3) rows (thread id, start, end) of a thread waiting with no ready task, `graphs` (g, 2) the span
    of each graph run (first task taken or wait begun, last task's successors released)."""
    tasks: np.ndarray
    names: list[str]
    pred_offsets: np.ndarray
    preds: np.ndarray
    idle: np.ndarray
    graphs: np.ndarray


def pieces(w: RawWindow) -> tuple[dict, list[np.ndarray], str]:
    """What a part holds of the window beside `times` and `counter_values`: its numbers and its buffers' lengths
    (`info`), the other integer buffers flat in INT_BUFFERS order (views, not copies), and the names of every group
    as one string, NAME_SEP between names (`unpack` takes them apart)."""
    t = w.tasks
    ints = [w.keys, w.marks, w.phases, w.comms, w.counters]
    ints += _NO_TASKS if t is None else [t.tasks, t.pred_offsets, t.preds, t.idle, t.graphs]
    flat = [np.ascontiguousarray(a, np.int64).reshape(-1) for a in ints]
    names = [w.kernel_names, w.phase_names, w.comm_names, w.counter_names, [] if t is None else t.names]
    text = NAME_SEP.join(chain.from_iterable(names))
    if text.count(NAME_SEP) != max(0, sum(map(len, names)) - 1):
        raise ValueError("a kernel, phase, MPI call or counter name holds a NUL character")
    info = {"rank": w.rank, "start_ns": w.start_ns, "end_ns": w.end_ns, "origin_ns": w.origin_ns,
            "threads": w.threads, "main_tid": w.main_tid, "ints": [len(a) for a in flat],
            "names": [len(n) for n in names]}
    return info, flat, text


def unpack(info: dict, times: np.ndarray, flat: np.ndarray, counter_values: np.ndarray,
           text: str) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """The buffers by name, as `pieces` put them together; ValueError when they do not match their lengths."""
    lengths = [int(n) for n in info["ints"]]
    if len(lengths) != len(INT_BUFFERS) or sum(lengths) != len(flat):
        raise ValueError("its integer buffers and their lengths do not match")
    ints = {"times": times, "counter_values": counter_values}
    ints.update(zip(INT_BUFFERS, np.split(flat, np.cumsum(lengths)[:-1])))
    counts = [int(n) for n in info["names"]]
    names = text.split(NAME_SEP) if sum(counts) else []
    if len(counts) != len(NAME_GROUPS) or len(names) != sum(counts):
        raise ValueError("its names and their counts do not match")
    ends = np.cumsum(counts)
    return ints, {g: names[e - n:e] for g, n, e in zip(NAME_GROUPS, counts, ends)}


def _decoded(table: pa.Table, info: dict) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """A raw part of earlier versions (an Arrow IPC file of one row) as its buffers by name: four list columns
    (`times`, `ints`, `counter_values`, `names`: `pieces` as columns), or one column per buffer."""
    def values(name: str) -> pa.Array:              # the one row's list
        return table.column(name).combine_chunks().flatten()

    if "ints" not in table.column_names:
        buf = {name: values(name) for name in _BUFFERS}
        ints = {name: buf[name].to_numpy(zero_copy_only=False) for name, typ in _BUFFERS.items()
                if typ != pa.string()}
        return ints, {name: buf[name].to_pylist() for name, typ in _BUFFERS.items() if typ == pa.string()}
    return unpack(info, *(values(c).to_numpy(zero_copy_only=False) for c in ("times", "ints", "counter_values")),
                  table.column("names")[0].as_py())


def is_raw(schema: pa.Schema) -> bool:
    return META_RAW in (schema.metadata or {})


def call_meta(keys: np.ndarray, marks: np.ndarray) -> np.ndarray:
    """(n, 4) int32: kernel id, layer, step, microstep of each call, from the calls' keys and the step marks."""
    n = len(keys)
    meta = np.empty((n, 4), dtype=np.int32)
    k = np.asarray(keys, dtype=np.int64).reshape(n) + 1
    meta[:, 0] = k >> LAYER_BITS
    meta[:, 1] = (k & ((1 << LAYER_BITS) - 1)) - 1
    if n:
        marks = np.asarray(marks, dtype=np.int64).reshape(-1, 3)
        marks = marks[marks[:, 0] < n]
        counts = np.diff(np.append(marks[:, 0], n))
        meta[:, 2] = np.repeat(marks[:, 1], counts)
        meta[:, 3] = np.repeat(marks[:, 2], counts)
    return meta


class RankDecoder:
    """Decodes one rank's raw parts, in the order they were written, into the part layout (gpt2trace.format.parts).
    Holds what spans parts: the thread numbering."""

    def __init__(self):
        self._tids: np.ndarray | None = None       # sorted thread ids
        self._tid_index = np.zeros(0, dtype=np.int32)

    def part(self, table: pa.Table) -> pa.Table:
        """A raw part of an earlier version (an Arrow IPC file, gpt2trace.format.raw_part reads the others)."""
        info = json.loads(table.schema.metadata[META_RAW])
        trace_meta = {k: v for k, v in table.schema.metadata.items() if k != META_RAW}
        return self.window(info, *_decoded(table, info), trace_meta)

    def window(self, info: dict, ints: dict[str, np.ndarray], strs: dict[str, list[str]],
               trace_meta: dict[bytes, bytes]) -> pa.Table:
        """One window's buffers by name (`unpack`) in the part layout, with the trace's metadata."""
        threads, origin = int(info["threads"]), int(info["origin_ns"])
        if self._tids is None:
            self._tids = np.array([int(info["main_tid"])], dtype=np.int64)
            self._tid_index = np.zeros(1, dtype=np.int32)
        times = ints["times"].reshape(-1, threads + 1, 3)
        keys = ints["keys"]
        if len(keys) != len(times):
            raise ValueError(f"its kernel calls ({len(keys)}) and their times ({len(times)}) do not match")
        meta = call_meta(keys, ints["marks"])
        index = self._thread_indices(times[:, 1:, 2])
        tasks = ints["tasks"].reshape(-1, len(TASK_FIELDS))
        task = {f: tasks[:, i] for i, f in enumerate(TASK_FIELDS)}
        idle = ints["task_idle"].reshape(-1, 3)
        task_thread = self._thread_indices(task["tid"])
        idle_thread = self._thread_indices(idle[:, 0])
        window = PartWindow(int(info["rank"]), int(info["start_ns"]) - origin, int(info["end_ns"]) - origin,
                            max(threads, len(self._tids)))
        names = list(strs["kernel_names"])
        codes: dict[str, int] = {n: i for i, n in enumerate(names)}

        def code(values: list[str]) -> np.ndarray:
            for v in values:
                if v not in codes:
                    codes[v] = len(names)
                    names.append(v)
            return np.array([codes[v] for v in values], dtype=np.int32)

        phase = ints["phases"].reshape(-1, len(PHASE_FIELDS))
        phase_names = strs["phase_names"]
        order = np.argsort(phase[:, 0], kind="stable")
        phase, phase_names = phase[order], [phase_names[i] for i in order]
        comm = ints["comms"].reshape(-1, len(COMM_FIELDS))
        counter = ints["counters"].reshape(-1, len(COUNTER_FIELDS))
        if meta[:, 0].size and meta[:, 0].max() >= len(strs["kernel_names"]):
            raise ValueError("a kernel call names a kernel the part does not list")
        blocks = times[:, 1:, :] - origin             # (start, end, tid) -> (start, end, thread index)
        blocks[:, :, 2] = index
        blocks[index < 0] = NULL                      # a block not run keeps a reused slot's old times
        groups = [
            {S.KIND: KERNEL_CALL, S.START_NS: times[:, 0, 0], S.END_NS: times[:, 0, 1], S.NAME: meta[:, 0],
             S.STEP: meta[:, 2], S.LAYER: meta[:, 1], S.MICROSTEP: meta[:, 3],
             BLOCKS: blocks.reshape(len(times), 3 * threads)},
            {S.KIND: S.Kind.PHASE, S.START_NS: phase[:, 0], S.END_NS: phase[:, 1], S.NAME: code(phase_names),
             S.STEP: phase[:, 2], S.MICROSTEP: phase[:, 3], S.BYTES: phase[:, 4]},
            {S.KIND: S.Kind.COMM, S.START_NS: comm[:, 0], S.END_NS: comm[:, 1], S.NAME: code(strs["comm_names"]),
             S.STEP: comm[:, 2], S.MICROSTEP: comm[:, 3], S.BYTES: comm[:, 4], S.PEER: comm[:, 5],
             S.SEQ: comm[:, 6], S.COMMUNICATOR: comm[:, 7], S.STATE: comm[:, 8], S.TAG: comm[:, 9]},
            {S.KIND: S.Kind.COUNTER, S.START_NS: counter[:, 0], S.END_NS: counter[:, 0],
             S.NAME: code(strs["counter_names"]), S.STEP: counter[:, 1], S.MICROSTEP: counter[:, 2],
             S.VALUE: ints["counter_values"]},
        ]
        if len(tasks) or len(idle):
            offsets = ints["task_pred_offsets"]
            if len(offsets) != len(tasks) + 1 or (len(tasks) and task["kernel"].max() >= len(strs["task_names"])):
                raise ValueError("its tasks, their predecessors and their kernel names do not match")
            graphs = ints["task_graphs"].reshape(-1, 2)
            groups += [
                {S.KIND: S.Kind.TASK, S.THREAD: task_thread, S.START_NS: task["start"], S.END_NS: task["end"],
                 S.NAME: code(strs["task_names"])[task["kernel"]] if len(tasks) else np.zeros(0, np.int32),
                 S.STEP: task["step"], S.LAYER: task["layer"], S.MICROSTEP: task["microstep"],
                 S.TASK: task["task"], S.BLOCK: task["block"], S.PREDS: (offsets, ints["task_preds"])},
                {S.KIND: TASK_IDLE, S.THREAD: idle_thread, S.START_NS: idle[:, 1], S.END_NS: idle[:, 2]},
                {S.KIND: TASK_GRAPH, S.START_NS: graphs[:, 0], S.END_NS: graphs[:, 1]},
            ]
        layout = part_layout(S.arrow_schema(trace_meta), threads)
        columns = _concat(groups, window.rank, origin)
        return records_table(columns, pa.array(names, pa.string()), with_window(layout, window), kinds=PART_KINDS)

    def _thread_indices(self, tids: np.ndarray) -> np.ndarray:
        """Thread ids -> 0..N-1 (NO_VALUE stays NO_VALUE): the loop's thread 0, the others by first appearance."""
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


def _concat(groups: list[dict], rank: int, origin: int) -> dict[str, np.ndarray]:
    """One column per name over all groups; a column a group lacks is null there; times shifted to the origin."""
    sizes = [len(g[S.START_NS]) for g in groups]
    bounds = np.cumsum([0] + sizes)
    n = int(bounds[-1])
    cols = {S.KIND: np.repeat(np.array([KIND_CODES[g[S.KIND]] for g in groups], np.int32), sizes),
            S.RANK: np.full(n, rank, np.int32),
            S.START_NS: np.concatenate([g[S.START_NS] for g in groups]).astype(np.int64) - origin,
            S.END_NS: np.concatenate([g[S.END_NS] for g in groups]).astype(np.int64) - origin}
    preds = [(g[S.PREDS], a, b) for g, a, b in zip(groups, bounds[:-1], bounds[1:]) if S.PREDS in g]
    if preds:                       # one list a task, null elsewhere
        (offsets, values), a, b = preds[0]
        full = np.full(n + 1, offsets[0], np.int64)
        full[a: b + 1] = offsets
        full[b + 1:] = offsets[-1]
        valid = np.zeros(n, bool)
        valid[a:b] = True
        cols[S.PREDS] = (full - offsets[0], values[offsets[0]: offsets[-1]], valid)
    for name, (null, dtype) in _FILL.items():
        present = [(g[name], a, b) for g, a, b in zip(groups, bounds[:-1], bounds[1:]) if name in g and b > a]
        if present or name == S.THREAD:
            col = cols[name] = np.full((n, *np.shape(present[0][0])[1:]) if present else n, null, dtype)
            for v, a, b in present:
                col[a:b] = v
    return cols
