"""The trace format: the single source of truth for columns, kinds, Paraver state ids and the version.

One Parquet file, one row per record. Everything else imports these names; docs/trace-format.md explains them.
"""
from __future__ import annotations

import json
from enum import IntEnum

import pyarrow as pa

# 2 added the `communicator` column and META_COMMUNICATORS; 3 added the `tag` column (point-to-point MPI tags).
# 4 added the `task` kind and the `task`, `block` and `preds` columns (task-based runs: the task graph).
# Older traces are still read: version 1's MPI calls all ran on the world communicator, versions 1 and 2 read
# with a null tag, versions 1 to 3 have no tasks (every run before 4 was fork-join).
SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)
META_VERSION = b"gpt2trace.schema_version"
META_RUN = b"gpt2trace.run"            # JSON: model, training, parallel layout, trace options
META_MACHINE = b"gpt2trace.machine"    # JSON: CPU, cores, threading layer, BLAS + kernel, MPI, versions
META_PEAK = b"gpt2trace.sgemm_peak"    # JSON: measured sgemm GFLOP/s per core and for the run's threads
META_CLOCK = b"gpt2trace.clock"        # JSON: clock source and per-rank offset estimates with error bounds
# JSON {"communicators": [{"id", "name", "ranks"}, ...]}: every communicator the `communicator` column names
# (gpt2trace/format/communicators.py)
META_COMMUNICATORS = b"gpt2trace.communicators"
# JSON list of strings: what an import from another tool's format did beyond a plain translation (its notes)
META_IMPORT_NOTES = b"gpt2trace.import_notes"

# Column names (units in the names).
KIND, RANK, THREAD, START_NS, END_NS, STATE, NAME = "kind", "rank", "thread", "start_ns", "end_ns", "state", "name"
STEP, LAYER, MICROSTEP, BYTES, PEER, SEQ, VALUE = "step", "layer", "microstep", "bytes", "peer", "seq", "value"
COMMUNICATOR, TAG = "communicator", "tag"
TASK, BLOCK, PREDS = "task", "block", "preds"

REQUIRED = (KIND, RANK, THREAD, START_NS, END_NS, STATE, NAME)
OPTIONAL = (STEP, LAYER, MICROSTEP, BYTES, PEER, SEQ, VALUE, COMMUNICATOR, TAG, TASK, BLOCK, PREDS)

_DICT_STR = pa.dictionary(pa.int32(), pa.string())
FIELDS = {
    KIND: _DICT_STR, RANK: pa.int32(), THREAD: pa.int32(), START_NS: pa.int64(), END_NS: pa.int64(),
    STATE: pa.int16(), NAME: _DICT_STR,
    STEP: pa.int32(), LAYER: pa.int16(), MICROSTEP: pa.int16(), BYTES: pa.int64(), PEER: pa.int32(),
    SEQ: pa.int64(), VALUE: pa.float64(), COMMUNICATOR: pa.int32(), TAG: pa.int32(),
    # the list's item named as Parquet names it ("element"), so a table read back has exactly these types
    TASK: pa.int64(), BLOCK: pa.int32(), PREDS: pa.list_(pa.field("element", pa.int64())),
}
# The columns whose values are lists (NumPy-built tables and pandas conversions treat them apart).
LIST_COLUMNS = (PREDS,)


class Kind:
    STATE = "state"       # a thread's Paraver state over [start_ns, end_ns)
    KERNEL = "kernel"     # one thread's block of one kernel invocation
    PHASE = "phase"       # a rank's phase of a step: forward, backward, grad_sync, optimizer, dataload, ...
    COMM = "comm"         # one MPI call on one thread
    COUNTER = "counter"   # a value at an instant (end_ns == start_ns): loss, lr, grad_norm, tokens
    # one executed task of a task-based run on one thread: its body, `name` its kernel (or MPI call), `task` its id
    # (unique on its rank), `block` the block of the kernel call it computed, `preds` the ids of the tasks of its
    # rank it depended on
    TASK = "task"

    ALL = ("state", "kernel", "phase", "comm", "counter", "task")


class Schedule:
    """How a run executed its kernels: the run metadata's `parallel.schedule` (absent in older traces:
    fork-join)."""
    FORKJOIN, TASKS = "forkjoin", "tasks"
    ALL = (FORKJOIN, TASKS)


def schedule(run: dict | None) -> str:
    """A run's schedule from its run metadata; fork-join where the trace does not say."""
    return ((run or {}).get("parallel") or {}).get("schedule") or Schedule.FORKJOIN


class State(IntEnum):
    """Paraver's state ids (Extrae's STATES block), with its names."""
    IDLE = 0
    RUNNING = 1
    NOT_CREATED = 2
    WAITING_A_MESSAGE = 3
    BLOCKING_SEND = 4
    SYNCHRONIZATION = 5
    TEST_PROBE = 6
    SCHEDULING_FORK_JOIN = 7
    WAIT_WAITALL = 8
    BLOCKED = 9
    IMMEDIATE_SEND = 10
    IMMEDIATE_RECEIVE = 11
    IO = 12
    GROUP_COMMUNICATION = 13
    TRACING_DISABLED = 14
    OTHERS = 15
    SEND_RECEIVE = 16


STATE_NAMES = {
    State.IDLE: "Idle", State.RUNNING: "Running", State.NOT_CREATED: "Not created",
    State.WAITING_A_MESSAGE: "Waiting a message", State.BLOCKING_SEND: "Blocking Send",
    State.SYNCHRONIZATION: "Synchronization", State.TEST_PROBE: "Test/Probe",
    State.SCHEDULING_FORK_JOIN: "Scheduling and Fork/Join", State.WAIT_WAITALL: "Wait/WaitAll",
    State.BLOCKED: "Blocked", State.IMMEDIATE_SEND: "Immediate Send",
    State.IMMEDIATE_RECEIVE: "Immediate Receive", State.IO: "I/O",
    State.GROUP_COMMUNICATION: "Group Communication", State.TRACING_DISABLED: "Tracing Disabled",
    State.OTHERS: "Others", State.SEND_RECEIVE: "Send Receive",
}

# Paraver's default STATES_COLOR (the .pcf Extrae writes), by state id: exports and reports draw states in these.
STATE_COLORS = {
    State.IDLE: (117, 195, 255), State.RUNNING: (0, 0, 255), State.NOT_CREATED: (255, 255, 255),
    State.WAITING_A_MESSAGE: (255, 0, 0), State.BLOCKING_SEND: (255, 0, 174), State.SYNCHRONIZATION: (179, 0, 0),
    State.TEST_PROBE: (0, 255, 0), State.SCHEDULING_FORK_JOIN: (255, 255, 0), State.WAIT_WAITALL: (235, 0, 0),
    State.BLOCKED: (0, 162, 0), State.IMMEDIATE_SEND: (255, 0, 255), State.IMMEDIATE_RECEIVE: (100, 100, 177),
    State.IO: (172, 174, 41), State.GROUP_COMMUNICATION: (255, 144, 26), State.TRACING_DISABLED: (2, 255, 177),
    State.OTHERS: (192, 224, 0), State.SEND_RECEIVE: (66, 66, 66),
}

# States a thread spends inside MPI (POP's "time outside MPI" excludes these).
MPI_STATES = (State.WAITING_A_MESSAGE, State.BLOCKING_SEND, State.WAIT_WAITALL, State.IMMEDIATE_SEND,
              State.IMMEDIATE_RECEIVE, State.GROUP_COMMUNICATION, State.SEND_RECEIVE, State.TEST_PROBE)



class Phase:
    """Phase names the trainer writes (trainer/names.py, held equal by a test); `trace_flush` is the tracer's own
    flush (main thread, outside any step: step is null), so analyses can tell tracing cost from training."""
    DATALOAD, FORWARD, BACKWARD, GRAD_SYNC, OPTIMIZER, CHECKPOINT, TRACE_FLUSH = (
        "dataload", "forward", "backward", "grad_sync", "optimizer", "checkpoint", "trace_flush")
    ALL = (DATALOAD, FORWARD, BACKWARD, GRAD_SYNC, OPTIMIZER, CHECKPOINT, TRACE_FLUSH)
    COMPUTE = (FORWARD, BACKWARD, OPTIMIZER)


class Counter:
    """Counter names: the trainer's, once per step and rank (trainer/names.py, held equal by a test), and the
    tracer's `rss_bytes`, the rank's resident memory in bytes at each phase end (with the phase's step and
    microstep)."""
    LOSS, LR, GRAD_NORM, TOKENS, RSS_BYTES = "loss", "lr", "grad_norm", "tokens", "rss_bytes"
    PER_STEP = (LOSS, LR, GRAD_NORM, TOKENS)
    ALL = (*PER_STEP, RSS_BYTES)


PHASES, COUNTERS = Phase.ALL, Counter.ALL
# Hardware counters (PAPI presets, as Extrae names them): count since the thread's previous read.
INSTRUCTIONS, CYCLES = "PAPI_TOT_INS", "PAPI_TOT_CYC"


def arrow_schema(metadata: dict[bytes, bytes] | None = None) -> pa.Schema:
    meta = {META_VERSION: str(SCHEMA_VERSION).encode()}
    meta.update(metadata or {})
    return pa.schema([pa.field(n, t) for n, t in FIELDS.items()], metadata=meta)


def with_import_notes(table: pa.Table, notes) -> pa.Table:
    """`table` with an importer's notes in its metadata (META_IMPORT_NOTES, sorted), so that `analyze` of the
    trace, or of the Parquet file `import` writes from it, shows them."""
    if not notes:
        return table
    meta = dict(table.schema.metadata or {})
    meta[META_IMPORT_NOTES] = json.dumps(sorted(notes)).encode()
    return table.replace_schema_metadata(meta)


def metadata_json(schema: pa.Schema, key: bytes) -> dict | None:
    """A JSON metadata entry of a trace schema, or None when the trace does not carry it."""
    raw = (schema.metadata or {}).get(key)
    return json.loads(raw) if raw else None
