"""Our trace as a Paraver trace: NAME.prv, NAME.pcf, NAME.row (and NAME.gpt2trace.json), written streaming.

Mapping (ids 1-based: appl 1, task = rank + 1, thread = thread + 1, one virtual CPU per thread on one node):
  state    1:cpu:1:task:thread:begin:end:state
  kernel   2:...:start:60000019:<kernel id>[:attributes]   and   2:...:end:60000019:0   (Extrae's user function)
  phase    2:...:start:71000010:<phase id>[:attributes]    and   2:...:end:71000010:0
  comm     2:...:start:5000000x:<Extrae's call id>[:50100001:bytes:50100002:bytes:50100004:<communicator id + 1>
           [:50100003:1 on the root]][:attributes]  and  2:...:end:5000000x:0; and 3: records for point-to-point
           messages, the k-th send from a to b matched with the k-th receive on b from a, with the send's tag
           (the receive's when the send has none, else 0). The header lists every
           communicator of the trace as a `c:1:<id + 1>:<n>:<task>...` line (tasks = world rank + 1), as Extrae
           does; their names are in NAME.gpt2trace.json
  task     2:...:start:36:<task type id>:35:<task id + 1>[:attributes]  and  2:...:end:36:0:35:0 (ovni's Nanos6
           task type and task ID; the type ids name the kernels in the .pcf; the block is an attribute)
  counter  2:...:t:<type>:<value>[:attributes]: PAPI_TOT_INS/PAPI_TOT_CYC as Extrae's 42000050/42000059, others
           as 71001001.. with value x 1e9 (the .pcf label says so), raw for PAPI_* names
Attributes (71000001.. layer, step, microstep, seq, peer, bytes, communicator, tag, block) carry the record's optional
columns as they are, in the line that starts the record, so an import rebuilds the trace exactly (but for the tasks'
predecessors, which no event holds).

Paraver wants the records sorted by time: lines are generated batch by batch and written through an external
merge sort (`linesort`), so memory stays bounded whatever the trace's size. At one instant on one thread, ends
come before starts, and zero-length records open before they close, so their nesting survives.

Records Paraver cannot hold (`validate`: negative durations or times, overlapping states, crossing records) are
refused before anything is written. Names go into the .pcf and .row through `labels.escape` (one line each;
NAME.gpt2trace.json says so, and the import unescapes them). The four files are written under temporary names and
renamed together when all are complete.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format import communicators, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.mpi_calls import ROOTED
from gpt2trace.format.outputs import atomic_outputs, check_name, check_output
from gpt2trace.format.schema import (
    BLOCK,
    BYTES,
    COMMUNICATOR,
    END_NS,
    KIND,
    LAYER,
    MICROSTEP,
    NAME,
    PEER,
    RANK,
    SEQ,
    START_NS,
    STATE,
    STEP,
    TAG,
    TASK,
    THREAD,
    VALUE,
    Kind,
)
from gpt2trace.interop import paraver_format as F
from gpt2trace.interop.labels import ESCAPED, LABELS_KEY
from gpt2trace.interop.layout import Layout, messages, scan
from gpt2trace.interop.linesort import LineSorter
from gpt2trace.interop.paraver_pcf import EventType, write_pcf, write_row
from gpt2trace.interop.source import input_files, no_progress, open_source
from gpt2trace.interop.textcols import as_text as _s
from gpt2trace.interop.textcols import join as _join

INT64_LIMIT = 9.2e18


@dataclass(frozen=True)
class ParaverExport:
    prv: Path
    pcf: Path
    row: Path
    meta: Path
    records: int               # records read
    lines: int                 # body lines written
    messages: int              # 3: records (matched point-to-point messages)
    dropped_counters: int      # counter values Paraver cannot hold (NaN, inf, beyond int64 once scaled)


@dataclass(frozen=True)
class _Encoding:
    """The event type and value each name of the trace gets."""
    kernel: dict[str, int]
    phase: dict[str, int]
    task: dict[str, int]
    mpi: dict[str, tuple[int, int]]
    counter: dict[str, tuple[int, float]]
    prefix: pa.Array = field(repr=False)       # "cpu:1:task:thread:" of every global thread
    offsets: np.ndarray = field(repr=False)

    @classmethod
    def of(cls, lay: Layout, where: str) -> _Encoding:
        names = lay.names
        mpi, extra = {}, 0
        for n in names[Kind.COMM]:
            if n in F.MPI_CALLS:
                mpi[n] = F.MPI_CALLS[n]
            else:
                mpi[n] = (F.MPI_OTHER, F.OTHER_MPI_FIRST + extra)
                extra += 1
        counter, ours = {}, 0
        hwc = {v: k for k, v in F.HWC_NAMES.items()}
        for n in names[Kind.COUNTER]:
            if n in hwc:
                counter[n] = (hwc[n], 1.0)
            else:
                if F.COUNTER_FIRST + ours > F.COUNTER_LAST:
                    raise TraceError(f"{where}: cannot export: more than {F.COUNTER_LAST - F.COUNTER_FIRST + 1} "
                                     "counter names, the most the Paraver export has event types for")
                counter[n] = (F.COUNTER_FIRST + ours, 1.0 if n.startswith("PAPI_") else F.COUNTER_SCALE)
                ours += 1
        offsets = lay.offsets
        pre = [f"{offsets[r] + t + 1}:1:{r + 1}:{t + 1}:" for r in range(lay.ranks) for t in range(lay.threads[r])]
        return cls({n: i + 1 for i, n in enumerate(names[Kind.KERNEL])},
                   {n: i + 1 for i, n in enumerate(names[Kind.PHASE])},
                   {n: i + 1 for i, n in enumerate(names[Kind.TASK])}, mpi, counter, pa.array(pre), offsets)

    def event_types(self) -> list[EventType]:
        out = []
        for typ, label in F.MPI_TYPE_LABELS.items():
            vals = {v: n for n, (t, v) in self.mpi.items() if t == typ}
            if vals:
                out.append(EventType(typ, label, {0: "End", **vals}))
        if any(t == F.MPI_COLLECTIVE for t, _ in self.mpi.values()):
            out += [EventType(t, label) for t, label in F.MPI_ATTR_LABELS.items()]
        if self.kernel:
            out.append(EventType(F.KERNEL, F.FUNCTION_LABELS[F.KERNEL], {0: "End", **_by_id(self.kernel)}))
        if self.phase:
            out.append(EventType(F.PHASE, F.PHASE_LABEL, {0: "End", **_by_id(self.phase)}))
        if self.task:
            out += [EventType(F.TASK_TYPE, F.TASK_TYPE_LABEL, {0: "End", **_by_id(self.task)}),
                    EventType(F.TASK_ID, F.TASK_ID_LABEL)]
        out += [EventType(t, F.ATTRIBUTE_LABELS[col]) for t, col in F.ATTRIBUTES.items()]
        for n, (t, scale) in self.counter.items():
            label = F.HWC_LABELS.get(t) or (F.COUNTER_LABEL.format(name=n) if scale != 1.0
                                           else F.COUNTER_LABEL_PREFIX + n)
            out.append(EventType(t, label))
        return out


def export_paraver(source, name: str | Path, date: datetime | None = None, tmpdir: str | Path | None = None,
                   run_lines: int = 1_000_000, batch_rows: int = 1 << 17, progress=no_progress) -> ParaverExport:
    """Writes NAME.prv (or NAME.prv.gz), NAME.pcf, NAME.row, NAME.gpt2trace.json from a trace (a Parquet path,
    streamed; a `Trace`; or any file `gpt2trace.load` reads). Raises TraceError for a trace it cannot export,
    OutputError for outputs it may not or could not write (a NAME that names no file, such as '' or '.prv'; an
    input; an unwritable folder; a full disk: then none of the four is left under its name). `progress`: see
    `source.no_progress`."""
    inputs = input_files(source)
    names = F.file_names(check_name(name, F.SUFFIXES))
    prv, pcf, row, meta = outputs = [check_output(p, inputs=inputs) for p in names]
    src = open_source(source)
    lay = scan(src, rows=batch_rows)
    enc = _Encoding.of(lay, src.name)
    opener = partial(gzip.open, compresslevel=6) if prv.name.endswith(".gz") else open
    dropped = 0
    # The sort's spilled runs may fill a disk too: inside the block, that is an OutputError like the rest.
    with atomic_outputs(outputs) as (t_prv, t_pcf, t_row, t_meta), LineSorter(tmpdir, run_lines) as sorter:
        with progress(f"lines of {Path(src.name).name}", lay.records) as advance:
            for batch in src.batches(rows=batch_rows):
                kinds = batch.column(KIND)
                for kind, lines in _LINES.items():
                    part = batch.filter(pc.equal(kinds, kind))
                    if part.num_rows:
                        dropped += lines(sorter, part, enc) or 0
                advance(batch.num_rows)
        messages = _messages(sorter, lay, enc)
        collectives = any(t == F.MPI_COLLECTIVE for t, _ in enc.mpi.values())
        with opener(t_prv, "wb") as fh:
            comms = _communicators(src.meta, lay) if collectives else []
            fh.write(header(lay, date or datetime.now(), comms, _nodes(lay, src.meta)).encode())
            with progress(f"writing {prv.name}", sorter.lines, "lines") as advance:
                lines = sorter.write(fh, advance)
        write_pcf(t_pcf, enc.event_types())
        write_row(t_row, _row_levels(lay, src.meta))
        t_meta.write_text(json.dumps(_meta_json(src.meta), indent=1) + "\n")
    return ParaverExport(prv, pcf, row, meta, lay.records, lines, messages, dropped)


def header(lay: Layout, date: datetime, comms: list, nodes: list[tuple[str, int]] | None = None) -> str:
    """`#Paraver (dd/mm/yyyy at hh:mm):<end>_ns:<nodes>(<cpus>,...):1:<ranks>(<threads>:<node>,...),<comms>` and
    a `c:` line per communicator the collectives use (none without collectives). `nodes`: (name, CPUs) per node,
    its ranks' threads in rank order (default one node)."""
    nodes = nodes or [("node1", lay.total_threads)]
    node_of_rank = _node_of_rank(lay, nodes)
    tasks = ",".join(f"{t}:{node_of_rank[r] + 1}" for r, t in enumerate(lay.threads))
    cpus = ",".join(str(c) for _, c in nodes)
    text = (f"#Paraver ({date:%d/%m/%Y at %H:%M}):{lay.end_ns}_ns:{len(nodes)}({cpus}):1:"
            f"{lay.ranks}({tasks}),{len(comms)}\n")
    for c in comms:
        text += (f"c:1:{c.id + F.PARAVER_COMM_OFFSET}:{len(c.ranks)}:" + ":".join(str(r + 1) for r in c.ranks)
                 + "\n")
    return text


def _communicators(meta: dict, lay: Layout) -> list:
    """The trace's communicators (the world of its ranks when it names none), by id."""
    try:
        table = communicators.from_metadata(meta)
    except (ValueError, KeyError, TypeError):
        table = None
    table = table or {communicators.WORLD_ID: communicators.world(range(lay.ranks))}
    return [table[i] for i in sorted(table)]


# --- lines of each kind -------------------------------------------------------------------------------------

def _state_lines(sorter: LineSorter, part: pa.Table, enc: _Encoding) -> None:
    start = part.column(START_NS).to_numpy()
    line = _join("1:", _prefix(part, enc), _s(part.column(START_NS)), ":", _s(part.column(END_NS)), ":",
                 _s(part.column(STATE)), "\n")
    sorter.add(start, 0, np.zeros(len(start), np.int64), line)


def _kernel_lines(sorter: LineSorter, part: pa.Table, enc: _Encoding) -> None:
    values = _codes(part, {n: v for n, v in enc.kernel.items()})
    _intervals(sorter, part, enc, np.full(part.num_rows, F.KERNEL), values, _attrs(part, (STEP, LAYER, MICROSTEP)))


def _phase_lines(sorter: LineSorter, part: pa.Table, enc: _Encoding) -> None:
    values = _codes(part, enc.phase)
    _intervals(sorter, part, enc, np.full(part.num_rows, F.PHASE), values, _attrs(part, (STEP, LAYER, MICROSTEP)))


def _comm_lines(sorter: LineSorter, part: pa.Table, enc: _Encoding) -> None:
    types = _codes(part, {n: t for n, (t, _) in enc.mpi.items()})
    values = _codes(part, {n: v for n, (_, v) in enc.mpi.items()})
    rooted = _codes(part, {n: int(n in ROOTED) for n in enc.mpi}).astype(bool)
    coll = types == F.MPI_COLLECTIVE
    nbytes = pc.if_else(pa.array(coll), part.column(BYTES), pa.scalar(None, pa.int64()))
    peer = part.column(PEER)
    is_root = coll & rooted & pc.fill_null(pc.equal(peer, part.column(RANK)), False).to_numpy(zero_copy_only=False)
    comm = communicators.ids(pc.fill_null(part.column(COMMUNICATOR), -1).to_numpy(zero_copy_only=False))
    extrae = [_attr(F.MPI_SEND_SIZE, nbytes), _attr(F.MPI_RECV_SIZE, nbytes),
              _attr(F.MPI_COMM, pa.array(comm.astype(np.int64) + F.PARAVER_COMM_OFFSET, mask=~coll)),
              _attr(F.MPI_ROOT, pa.array(np.ones(len(coll), np.int64), mask=~is_root))]
    ours = _attrs(part, (SEQ, PEER, BYTES, STEP, LAYER, MICROSTEP, COMMUNICATOR, TAG))
    _intervals(sorter, part, enc, types, values, extrae + ours)


def _task_lines(sorter: LineSorter, part: pa.Table, enc: _Encoding) -> None:
    """The task's type and id + 1 opening it (its block, step, layer and microstep as attributes), both closed at
    its end: sorted as `_intervals` sorts."""
    start, end = part.column(START_NS).to_numpy(), part.column(END_NS).to_numpy()
    pre = _prefix(part, enc)
    task_id = pc.add(part.column(TASK), 1)
    attrs = [_attr(F.TASK_ID, task_id), *_attrs(part, (BLOCK, STEP, LAYER, MICROSTEP))]
    sorter.add(start, 2, -end, _join("2:", pre, _s(part.column(START_NS)), f":{F.TASK_TYPE}:",
                                     _s(_codes(part, enc.task)), *attrs, "\n"))
    sorter.add(end, np.where(start == end, 3, 1), -start,
               _join("2:", pre, _s(part.column(END_NS)), f":{F.TASK_TYPE}:0:{F.TASK_ID}:0\n"))


def _counter_lines(sorter: LineSorter, part: pa.Table, enc: _Encoding) -> int:
    types = _codes(part, {n: t for n, (t, _) in enc.counter.items()})
    scale = _codes(part, {n: s for n, (_, s) in enc.counter.items()}, dtype=np.float64)
    value = part.column(VALUE).to_numpy(zero_copy_only=False) * scale
    ok = np.isfinite(value) & (np.abs(value) < INT64_LIMIT)
    if not ok.all():
        part, types, value = part.filter(pa.array(ok)), types[ok], value[ok]
    t = part.column(START_NS).to_numpy()
    line = _join("2:", _prefix(part, enc), _s(part.column(START_NS)), ":", _s(types), ":",
                 _s(np.rint(value).astype(np.int64)), *_attrs(part, (STEP, LAYER, MICROSTEP)), "\n")
    sorter.add(t, 2, np.zeros(len(t), np.int64), line)
    return int((~ok).sum())


_LINES = {Kind.STATE: _state_lines, Kind.KERNEL: _kernel_lines, Kind.PHASE: _phase_lines, Kind.COMM: _comm_lines,
          Kind.COUNTER: _counter_lines, Kind.TASK: _task_lines}


def _intervals(sorter: LineSorter, part: pa.Table, enc: _Encoding, types: np.ndarray, values: np.ndarray,
               attrs: list[pa.Array]) -> None:
    """An opening line (type:value and attributes) at the start and a closing one (type:0) at the end.

    Sort keys at one instant: ends of records with a duration (sub 1), then starts (sub 2, the longest first so
    that nesting holds), then ends of zero-length records (sub 3, the latest-started first).
    """
    start, end = part.column(START_NS).to_numpy(), part.column(END_NS).to_numpy()
    pre = _prefix(part, enc)
    t = _s(types)
    sorter.add(start, 2, -end, _join("2:", pre, _s(part.column(START_NS)), ":", t, ":", _s(values), *attrs, "\n"))
    sorter.add(end, np.where(start == end, 3, 1), -start, _join("2:", pre, _s(part.column(END_NS)), ":", t, ":0\n"))


def _messages(sorter: LineSorter, lay: Layout, enc: _Encoding) -> int:
    """3: records for the matched point-to-point messages (`layout.messages`): logical and physical send at the
    send's start, logical receive at the receive's start, physical receive at its end; the message's tag."""
    s, r = messages(lay)
    if not len(s):
        return 0
    c = lay.comms
    rank, thread = c.column(RANK).to_numpy(), c.column(THREAD).to_numpy()
    start, end = c.column(START_NS).to_numpy(), c.column(END_NS).to_numpy()
    nbytes = pc.fill_null(c.column(BYTES), 0).to_numpy()
    tag = pc.fill_null(c.column(TAG), -1).to_numpy()
    tag = np.where(tag[s] >= 0, tag[s], np.maximum(tag[r], 0))
    lane = enc.offsets[rank] + thread
    pre = enc.prefix
    line = _join("3:", pre.take(pa.array(lane[s])), _s(start[s]), ":", _s(start[s]), ":",
                 pre.take(pa.array(lane[r])), _s(start[r]), ":", _s(end[r]), ":", _s(nbytes[s]), ":", _s(tag), "\n")
    sorter.add(start[s], 2, np.zeros(len(s), np.int64), line)
    return len(s)


# --- helpers ------------------------------------------------------------------------------------------------



def _attr(typ: int, column) -> pa.Array:
    """':type:value' per record, null where the column is null (the pair is then left out of the line)."""
    return pc.binary_join_element_wise(f":{typ}:", _s(column), "")


def _attrs(part: pa.Table, cols: tuple[str, ...]) -> list[pa.Array]:
    return [_attr(F.ATTRIBUTE_TYPES[c], part.column(c)) for c in cols if part.column(c).null_count < part.num_rows]


def _prefix(part: pa.Table, enc: _Encoding) -> pa.Array:
    lane = enc.offsets[part.column(RANK).to_numpy()] + part.column(THREAD).to_numpy()
    return enc.prefix.take(pa.array(lane))


def _codes(part: pa.Table, mapping: dict, dtype=np.int64) -> np.ndarray:
    """mapping[name] of each record, through the batch's dictionary (which may hold other kinds' names too)."""
    col = part.column(NAME).combine_chunks()
    lookup = np.array([mapping.get(n, 0) for n in col.dictionary.to_pylist()], dtype=dtype)
    return lookup[col.indices.to_numpy(zero_copy_only=False)]


def _by_id(names: dict[str, int]) -> dict[int, str]:
    return {v: n for n, v in names.items()}


def _nodes(lay: Layout, meta: dict) -> list[tuple[str, int]]:
    """(name, CPUs) of each node: the emulated nodes of a run with --emulate-network (gpt2trace.record.network:
    ranks in blocks, in rank order), else the machine as one node; a CPU per thread."""
    as_schema = pa.schema([], metadata=meta)
    machine = schema.metadata_json(as_schema, schema.META_MACHINE) or {}
    run = schema.metadata_json(as_schema, schema.META_RUN) or {}
    placement = (run.get("network") or {}).get("node_of_rank") if isinstance(run, dict) else None
    if not placement or len(placement) != lay.ranks or sorted(placement) != list(placement):
        return [(str(machine.get("hostname") or "node1"), lay.total_threads)]
    count = max(placement) + 1
    cpus = [0] * count
    for r, node in enumerate(placement):
        cpus[node] += int(lay.threads[r])
    return [(f"node{i + 1}", c) for i, c in enumerate(cpus) if c > 0]


def _node_of_rank(lay: Layout, nodes: list[tuple[str, int]]) -> list[int]:
    """Each rank's node index, filling the nodes' CPUs in rank order."""
    out, node, used = [], 0, 0
    for t in lay.threads:
        while node < len(nodes) - 1 and used >= nodes[node][1]:
            node, used = node + 1, 0
        out.append(node)
        used += int(t)
    return out


def _row_levels(lay: Layout, meta: dict) -> dict[str, list[str]]:
    nodes = _nodes(lay, meta)
    cpu_names = [f"{i + 1}.{name}" for name, c in nodes for i in range(c)]
    return {"CPU": cpu_names, "NODE": [name for name, _ in nodes], "APPL": ["gpt2trace"],
            "TASK": [f"TASK 1.{r + 1}" for r in range(lay.ranks)],
            "THREAD": [f"THREAD 1.{r + 1}.{t + 1}" for r in range(lay.ranks) for t in range(lay.threads[r])]}


def _meta_json(meta: dict) -> dict:
    out = {"format": "gpt2trace Paraver export", "schema_version": schema.SCHEMA_VERSION, LABELS_KEY: ESCAPED}
    for key, raw in meta.items():
        if key == schema.META_VERSION:
            continue
        try:
            out[key.decode()] = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            continue
    return out
