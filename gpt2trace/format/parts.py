"""The raw events of a part, and how the merge completes them into trace records.

The raw events of one window of time on one rank (what gpt2trace.format.raw_window decodes a part the tracer wrote
into; parts of the previous version held them as they are): one row per kernel call, phases, counters and MPI
calls, and in a task-based run the tasks and the runtime's waits. The kernel records (one per block, one per task)
and the thread states (four of five records of a trace) are built by the merge, part by part, with
gpt2trace.format.thread_states and gpt2trace.format.task_states, as Extrae's mpi2prv builds the Paraver states.

Beyond the trace's columns (gpt2trace.format.schema), the raw events have
- records of kind `kernel_call` (KERNEL_CALL): one per kernel call, in call order, on the main thread: `start_ns`
  and `end_ns` are its parallel region (fork to join), `name`, `step`, `layer`, `microstep` those of its kernel
  records;
- a `blocks` column (BLOCKS), a fixed-size list of 3 values per block of a call: block k's start and end as the
  thread that ran it read them, and that thread's index, at 3k, 3k + 1, 3k + 2; -1 (all three) for a block that was
  not run, and for every block of the other records;
- on `comm` records, `state`: the main thread's state during the call (a trace holds it as a state record);
- records of kind `task_idle` (TASK_IDLE: a runtime thread waiting with no ready task) and `task_graph`
  (TASK_GRAPH: the span of one run of a task graph, thread 0), from which the task window's states are painted;
  `task` records are the trace's own;
- in its schema's metadata (PartWindow): the rank, the window [start_ns, end_ns) the states must partition and the
  number of threads they are built for.
A part without that metadata comes from an earlier version, which wrote the states itself: it is merged as it is.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from gpt2trace.format import schema as S
from gpt2trace.format.mpi_calls import is_mpi

KERNEL_CALL = "kernel_call"
TASK_IDLE = "task_idle"      # a thread of the task runtime waiting with no ready task: Idle in the trace
TASK_GRAPH = "task_graph"    # the span of one run of a task graph (thread 0): its threads' states are the runtime's
BLOCKS = "blocks"
PART_KINDS = (*S.Kind.ALL, KERNEL_CALL, TASK_IDLE, TASK_GRAPH)   # a trace's kinds keep their codes in a part
_PART_ONLY = (KERNEL_CALL, TASK_IDLE, TASK_GRAPH)
KIND_CODES = {k: i for i, k in enumerate(PART_KINDS)}
NULL = -1  # in the integer columns handed to `records_table`: no value
_TRACE_KINDS = pa.array(S.Kind.ALL, type=pa.string())
_KIND_DICTIONARIES = {S.Kind.ALL: _TRACE_KINDS, PART_KINDS: pa.array(PART_KINDS, type=pa.string())}
_NEVER_NULL = (S.RANK, S.THREAD, S.START_NS, S.END_NS)
_META_WINDOW = b"gpt2trace.part_window"


@dataclass(frozen=True)
class PartWindow:
    """The span a part's records cover on its rank (ns since the trace's origin) and the thread count its states
    are built for (the threads the rank had run by the end of the window)."""
    rank: int
    start_ns: int
    end_ns: int
    threads: int

    @classmethod
    def of(cls, schema: pa.Schema) -> PartWindow | None:
        """The window of a part's schema; None for a part of an earlier version (states included)."""
        raw = (schema.metadata or {}).get(_META_WINDOW)
        if raw is None:
            return None
        try:
            return cls(**{k: int(v) for k, v in json.loads(raw).items()})
        except (ValueError, TypeError) as exc:
            raise ValueError(f"its window metadata is damaged ({exc})") from None


def part_layout(schema: pa.Schema, blocks: int) -> pa.Schema:
    """A part's columns: the trace's, then `blocks` (for `blocks` blocks per kernel call); the trace's metadata."""
    return schema.append(pa.field(BLOCKS, pa.list_(pa.int64(), 3 * blocks)))


def with_window(layout: pa.Schema, window: PartWindow) -> pa.Schema:
    """The schema of one part: its layout and its window."""
    window_json = json.dumps({"rank": window.rank, "start_ns": window.start_ns, "end_ns": window.end_ns,
                              "threads": window.threads})
    return layout.with_metadata({**(layout.metadata or {}), _META_WINDOW: window_json.encode()})


def trace_metadata(metadata: dict[bytes, bytes]) -> dict[bytes, bytes]:
    """A part's metadata without what only a part has."""
    return {k: v for k, v in metadata.items() if k != _META_WINDOW}


def records_table(columns: dict[str, np.ndarray], names: pa.Array, schema: pa.Schema,
                  kinds: tuple[str, ...] = S.Kind.ALL) -> pa.Table:
    """A table in `schema`'s layout built straight from NumPy columns (no Python object per record).

    `kind` holds codes into `kinds` (`KIND_CODES`: a part's kinds, PART_KINDS, extend a trace's), `name` codes into
    `names` (a string array); in those and in the other integer columns NULL (-1) is a null, in `value` NaN is.
    A fixed-size list column is an (n, size) array, without nulls; a list column (`preds`) is a tuple (offsets
    (n + 1,), values, valid (n,)). Missing columns are null.
    """
    n = len(columns[S.KIND])
    kind_dictionary = _KIND_DICTIONARIES.get(kinds) or pa.array(kinds, type=pa.string())
    arrays = []
    for field in schema:
        col = columns.get(field.name)
        if col is None:
            arrays.append(pa.nulls(n, type=field.type))
        elif field.name == S.KIND:
            arrays.append(pa.DictionaryArray.from_arrays(_array(col.astype(np.int32, copy=False), None),
                                                         kind_dictionary, safe=False))
        elif field.name == S.NAME:
            codes = col.astype(np.int32, copy=False)
            arrays.append(pa.DictionaryArray.from_arrays(_array(codes, codes < 0), names, safe=False))
        elif field.name == S.VALUE:
            arrays.append(_array(col.astype(np.float64, copy=False), np.isnan(col)))
        elif pa.types.is_list(field.type):
            offsets, values, valid = col
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32, copy=False)),
                                                   pa.array(values, type=field.type.value_type),
                                                   mask=pa.array(~valid)))
        elif pa.types.is_fixed_size_list(field.type):
            values = _array(col.astype(field.type.value_type.to_pandas_dtype(), copy=False).reshape(-1), None)
            arrays.append(pa.FixedSizeListArray.from_arrays(values, type=field.type))
        else:
            values = col.astype(field.type.to_pandas_dtype(), copy=False)
            arrays.append(_array(values, None if field.name in _NEVER_NULL else values == NULL))
    return pa.Table.from_arrays(arrays, schema=schema)


def _array(values: np.ndarray, is_null: np.ndarray | None) -> pa.Array:
    """An Arrow array of a NumPy array, null where `is_null`."""
    if is_null is not None and not is_null.any():
        is_null = None
    return pa.array(values, mask=is_null)


def complete(part: pa.Table) -> pa.Table:
    """A part's trace records, in the order a trace's writer has always made them: its window's thread states in
    (thread, start) order, its kernel records in (thread, start) order, then its phases, MPI calls and counters as
    they are (without the MPI calls' states); in the trace's columns, with the part's metadata but the window.
    A part of an earlier version is returned as it is. Raises ValueError for a part whose calls, blocks or window
    do not fit together."""
    window = PartWindow.of(part.schema)
    if window is None:
        return part
    # Numba loads here, when a part is merged, not when the trace format is imported.
    from gpt2trace.format.thread_states import blocks_of, main_overlays, thread_states

    codes = _kind_codes(part.column(S.KIND).combine_chunks())
    is_call = codes == KIND_CODES[KERNEL_CALL]
    calls = part.filter(pa.array(is_call))
    enter, exit_ = calls.column(S.START_NS).to_numpy(), calls.column(S.END_NS).to_numpy()
    spans = calls.column(BLOCKS).combine_chunks()
    if spans.null_count or spans.type.list_size % 3:
        raise ValueError(f"its `{BLOCKS}` column is not 3 values per block of every kernel call")
    spans = spans.flatten().to_numpy().reshape(len(enter), spans.type.list_size // 3, 3)
    blocks = blocks_of(enter, exit_, spans[:, :, 0], spans[:, :, 1], spans[:, :, 2])
    names = part.column(S.NAME).combine_chunks()
    states = thread_states(enter, exit_, blocks, window.threads, (window.start_ns, window.end_ns),
                           main_overlays(*_phases_and_calls(part, codes, names)))

    schema = pa.schema([f for f in part.schema if f.name in S.FIELDS], metadata=trace_metadata(part.schema.metadata))
    n = len(states["thread"])
    state_records = records_table({S.KIND: np.full(n, KIND_CODES[S.Kind.STATE], np.int32),
                                   S.RANK: np.full(n, window.rank, np.int32), S.THREAD: states["thread"],
                                   S.START_NS: states["start"], S.END_NS: states["end"], S.STATE: states["state"]},
                                  names.dictionary, schema)
    # (thread, start) order: a thread's blocks come in call order, which is their start order (each block is
    # clipped into its call's region, and a call's region starts after the previous one ended)
    order = np.argsort(blocks.thread, kind="stable")
    of_block = blocks.call[order]
    kernel = {S.KIND: np.full(len(order), KIND_CODES[S.Kind.KERNEL], np.int32),
              S.RANK: np.full(len(order), window.rank, np.int32), S.THREAD: blocks.thread[order],
              S.START_NS: blocks.start[order], S.END_NS: blocks.end[order],
              S.NAME: calls.column(S.NAME).combine_chunks().indices.fill_null(NULL).to_numpy()[of_block]}
    for col in (S.STEP, S.LAYER, S.MICROSTEP):
        kernel[col] = calls.column(col).fill_null(NULL).to_numpy()[of_block]
    kernel_records = records_table(kernel, names.dictionary, schema)
    tables = [state_records, kernel_records]
    if (codes == KIND_CODES[S.Kind.TASK]).any() or (codes == KIND_CODES[TASK_GRAPH]).any():
        state_records, task_kernels = _task_window(part, codes, schema, states, window)
        tables = [state_records, kernel_records, task_kernels]

    keep = ~np.isin(codes, [KIND_CODES[k] for k in _PART_ONLY])
    others = part.filter(pa.array(keep)).select(list(schema.names))
    others = others.set_column(others.schema.get_field_index(S.KIND), S.KIND, pa.DictionaryArray.from_arrays(
        pa.array(codes[keep], pa.int32()), _TRACE_KINDS))
    others = others.set_column(others.schema.get_field_index(S.STATE), S.STATE,
                               pa.nulls(others.num_rows, S.FIELDS[S.STATE]))
    return pa.concat_tables([*tables, others.cast(schema)])


def _task_window(part: pa.Table, codes: np.ndarray, schema: pa.Schema, states: dict[str, np.ndarray],
                 window: PartWindow) -> tuple[pa.Table, pa.Table]:
    """A task-based window: its states repainted inside the task graphs' spans (gpt2trace.format.task_states),
    and a kernel record for each computing task's body (so kernel analyses see task traces as they see fork-join
    ones)."""
    from gpt2trace.format.task_states import Intervals, paint_graphs

    def rows(kind: str) -> dict[str, np.ndarray]:
        at = np.flatnonzero(codes == KIND_CODES[kind])
        return {c: part.column(c).take(pa.array(at)).to_numpy(zero_copy_only=False)
                for c in (S.THREAD, S.START_NS, S.END_NS)} | {"at": at}

    task, idle, graph, comm = rows(S.Kind.TASK), rows(TASK_IDLE), rows(TASK_GRAPH), rows(S.Kind.COMM)
    comm_state = part.column(S.STATE).take(pa.array(comm["at"])).fill_null(int(S.State.RUNNING)).to_numpy()

    def layer(r: dict, state) -> Intervals:
        return Intervals(r[S.THREAD], r[S.START_NS], r[S.END_NS], np.broadcast_to(np.asarray(state), len(r["at"])))

    painted = paint_graphs(states, (graph[S.START_NS], graph[S.END_NS]),
                           [layer(idle, int(S.State.IDLE)), layer(task, int(S.State.RUNNING)),
                            layer(comm, comm_state)], window.threads)
    n = len(painted["thread"])
    state_records = records_table({S.KIND: np.full(n, KIND_CODES[S.Kind.STATE], np.int32),
                                   S.RANK: np.full(n, window.rank, np.int32), S.THREAD: painted["thread"],
                                   S.START_NS: painted["start"], S.END_NS: painted["end"],
                                   S.STATE: painted["state"]}, part.column(S.NAME).combine_chunks().dictionary, schema)
    # a communication task's body is its MPI call, a `comm` record already; the others' are kernel records
    names = part.column(S.NAME).take(pa.array(task["at"])).cast(pa.string()).to_pylist()
    compute = task["at"][[not is_mpi(n or "") for n in names]]
    bodies = part.take(pa.array(compute, pa.int64())).select([S.RANK, S.THREAD, S.START_NS, S.END_NS, S.NAME, S.STEP,
                                                     S.LAYER, S.MICROSTEP])
    kernel = pa.table({f.name: bodies.column(f.name) if f.name in bodies.column_names else
                       pa.nulls(bodies.num_rows, f.type) for f in schema}, schema=schema.remove_metadata())
    kernel = kernel.set_column(0, S.KIND, pa.DictionaryArray.from_arrays(
        pa.array(np.full(kernel.num_rows, KIND_CODES[S.Kind.KERNEL], np.int32)), _TRACE_KINDS))
    return state_records, kernel.cast(schema)


def _kind_codes(kind: pa.DictionaryArray) -> np.ndarray:
    """Each record's kind as a code into PART_KINDS, whatever the part's dictionary."""
    remap = np.array([KIND_CODES.get(k, NULL) for k in kind.dictionary.to_pylist()] + [NULL], np.int32)
    codes = remap[kind.indices.fill_null(len(kind.dictionary)).to_numpy()]
    if (codes == NULL).any():
        raise ValueError(f"records of a kind a part cannot hold (kinds are {', '.join(PART_KINDS)})")
    return codes


def _phases_and_calls(part: pa.Table, codes: np.ndarray, names: pa.DictionaryArray) -> tuple[list, list]:
    """What `main_overlays` takes: the phases (name, start, end) and the MPI calls (start, end, the main thread's
    state), in part order (phases by start, calls as they were made)."""
    start, end = part.column(S.START_NS).to_numpy(), part.column(S.END_NS).to_numpy()
    comm = np.flatnonzero(codes == KIND_CODES[S.Kind.COMM])
    state = part.column(S.STATE).fill_null(int(S.State.RUNNING)).to_numpy()
    calls = list(zip(start[comm].tolist(), end[comm].tolist(), state[comm].tolist()))
    phase = np.flatnonzero(codes == KIND_CODES[S.Kind.PHASE])
    dictionary = names.dictionary.to_pylist()
    name_codes = names.indices.fill_null(NULL).to_numpy()[phase].tolist()
    phases = [(dictionary[c], s, e) for c, s, e in zip(name_codes, start[phase].tolist(), end[phase].tolist())
              if c != NULL]
    return phases, calls
