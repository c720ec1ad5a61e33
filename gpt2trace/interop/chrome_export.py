"""Our trace as Chrome's Trace Event JSON, for Perfetto UI and chrome://tracing, written streaming.

pid = rank, one process per rank. Each kind has its own tracks, so durations on a track always nest:
  tid = thread                 states       X events named after the Paraver state
  tid = 100000 + thread        kernels      X events (args: step, layer, microstep)
  tid = 200000 + thread        MPI calls    X events (args: bytes, peer, tag, seq, communicator, step, microstep)
  tid = 300000 + thread        phases       X events (args: step, microstep)
  tid = 400000 + thread        tasks        X events (args: task, block, preds, step, layer, microstep)
`M` events name the processes and tracks; `C` events carry the counters (loss, lr, ...); flow events (`s`, `f`)
link a point-to-point send to its receive, and the last rank to enter a blocking collective to every other
rank's call of it on that communicator (what they waited for), and each task's predecessors to it (cat
"dependency": from the predecessor's end to the task's start); otherData lists the communicators. Times are
microseconds with three decimals (exact nanoseconds).
Events stream out batch by batch (the format does not need them sorted), so memory stays bounded.

Names are JSON strings (any text); a name longer than `labels.LONG_NAME` characters is shortened in the events
(`labels.shorten`: its start and a hash) and given in full once, in otherData's `long_names` (short -> full), so
the file stays proportional to the records. Records the format cannot hold (`validate`) are refused before
anything is written; the file is written under a temporary name and renamed when complete.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format import communicators, schema
from gpt2trace.format.mpi_calls import COLL, classify
from gpt2trace.format.outputs import atomic_output, check_name, check_output
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
    PREDS,
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
from gpt2trace.interop.labels import LONG_NAME, shorten
from gpt2trace.interop.layout import Layout, messages, scan
from gpt2trace.interop.linesort import write_lines
from gpt2trace.interop.source import input_files, open_source
from gpt2trace.interop.textcols import as_text as _s
from gpt2trace.interop.textcols import join as _join

STATE_TID, KERNEL_TID, MPI_TID, PHASE_TID, TASK_TID = 0, 100_000, 200_000, 300_000, 400_000
TRACKS = {Kind.STATE: (STATE_TID, "thread {t}"), Kind.KERNEL: (KERNEL_TID, "thread {t} kernels"),
          Kind.COMM: (MPI_TID, "thread {t} MPI"), Kind.PHASE: (PHASE_TID, "thread {t} phases"),
          Kind.TASK: (TASK_TID, "thread {t} tasks")}
ARGS = {Kind.KERNEL: (STEP, LAYER, MICROSTEP), Kind.COMM: (BYTES, PEER, TAG, SEQ, COMMUNICATOR, STEP, MICROSTEP),
        Kind.PHASE: (STEP, MICROSTEP), Kind.TASK: (TASK, BLOCK, PREDS, STEP, LAYER, MICROSTEP)}
_TASK_EDGE_COLUMNS = (RANK, THREAD, START_NS, END_NS, TASK, PREDS)


@dataclass(frozen=True)
class ChromeExport:
    path: Path
    records: int
    events: int
    flows: int
    dropped_counters: int       # NaN/inf counter values: JSON has no number for them


SUFFIXES = (".json.gz", ".json")


def chrome_path(name: str | Path) -> Path:
    """The file `export_chrome` writes for NAME: NAME as it is when it ends in .json or .json.gz, else NAME.json."""
    return Path(str(name) if str(name).endswith(SUFFIXES) else f"{name}.json")


def export_chrome(source, name: str | Path, batch_rows: int = 1 << 19) -> ChromeExport:
    """Writes NAME.json (NAME.json.gz: gzipped) from a trace (a Parquet path, streamed; a `Trace`; or any file
    `gpt2trace.load` reads). Raises TraceError for a trace it cannot export, OutputError for an output it may not
    or could not write (a NAME that names no file, one of the inputs, an unwritable folder, a full disk: nothing is
    left under the name)."""
    path = check_output(chrome_path(check_name(name, SUFFIXES)), inputs=input_files(source))
    src = open_source(source)
    lay = scan(src)
    opener = partial(gzip.open, compresslevel=6) if path.name.endswith(".gz") else open
    events = flows = dropped = 0
    tasks = []                  # the task records' places and edges, for the dependency flows at the end
    with atomic_output(path) as tmp, opener(tmp, "wb") as fh:
        head = {"displayTimeUnit": "ns", "otherData": _other_data(src.meta, src.name, lay)}
        fh.write((json.dumps(head)[:-1] + ',"traceEvents":[\n').encode())
        meta = _metadata_events(lay)
        fh.write(",\n".join(meta).encode())
        events += len(meta)
        for batch in src.batches(rows=batch_rows):
            kinds = batch.column(KIND)
            for kind in Kind.ALL:
                part = batch.filter(pc.equal(kinds, kind))
                if not part.num_rows:
                    continue
                if kind == Kind.COUNTER:
                    lines, lost = _counters(part)
                    dropped += lost
                else:
                    lines = _slices(kind, part)
                if kind == Kind.TASK:
                    tasks.append(part.select(list(_TASK_EDGE_COLUMNS)))
                write_lines(fh, lines)
                events += len(lines)
        lines = pa.concat_arrays([_flows(lay), _dependency_flows(tasks, lay.records)])
        write_lines(fh, lines)
        flows = len(lines) // 2
        events += len(lines)
        fh.write(b"\n]}\n")
    return ChromeExport(path, lay.records, events, flows, dropped)


def _metadata_events(lay: Layout) -> list[str]:
    out = []
    for r in range(lay.ranks):
        out.append(_m("process_name", r, 0, {"name": f"rank {r}"}))
        out.append(_m("process_sort_index", r, 0, {"sort_index": r}))
    for kind, (base, label) in TRACKS.items():
        for r, t in sorted(lay.kind_threads[kind]):
            out.append(_m("thread_name", r, base + t, {"name": label.format(t=t)}))
            out.append(_m("thread_sort_index", r, base + t, {"sort_index": base + t}))
    return out


def _m(name: str, pid: int, tid: int, args: dict) -> str:
    return json.dumps({"ph": "M", "name": name, "pid": int(pid), "tid": int(tid), "args": args},
                      separators=(",", ":"))


def _slices(kind: str, part: pa.Table) -> pa.Array:
    start, end = part.column(START_NS).to_numpy(), part.column(END_NS).to_numpy()
    if kind == Kind.STATE:
        state = part.column(STATE).to_numpy()
        lookup = {int(s): json.dumps(F.STATE_NAMES.get(int(s), f"state {s}")) for s in np.unique(state)}
        keys = np.array(sorted(lookup))
        names = pa.array([lookup[k] for k in keys]).take(pa.array(np.searchsorted(keys, state)))
    else:
        names = _json_names(part)
    base, _ = TRACKS[kind]
    parts = [',\n{"ph":"X","cat":"', kind, '","name":', names, ',"pid":', _s(part.column(RANK)), ',"tid":',
             _s(pc.add(part.column(THREAD).cast(pa.int64()), base)), ',"ts":', _us(start), ',"dur":',
             _us(end - start)]
    if kind in ARGS:
        parts.append(',"args":{')
        for i, col in enumerate(ARGS[kind]):
            text = _list_text(part.column(col)) if col == PREDS else _s(part.column(col))
            parts += [("," if i else "") + f'"{col}":', pc.fill_null(text, "null")]
        parts.append("}")
    parts.append("}")
    return _join(*parts)


def _counters(part: pa.Table) -> tuple[pa.Array, int]:
    value = part.column(VALUE).to_numpy(zero_copy_only=False)
    ok = np.isfinite(value)
    if not ok.all():
        part = part.filter(pa.array(ok))
    names = _json_names(part)
    lines = _join(',\n{"ph":"C","name":', names, ',"pid":', _s(part.column(RANK)), ',"tid":0,"ts":',
                  _us(part.column(START_NS).to_numpy()), ',"args":{', names, ':', _s(part.column(VALUE)), '}}')
    return lines, int((~ok).sum())


def _flows(lay: Layout) -> pa.Array:
    """Flow pairs (s, f): a send to its receive; the last rank into a blocking collective to each other rank's
    call of it. Each `s` lies in its slice's span, each `f` binds to the enclosing slice (bp "e")."""
    c = lay.comms
    if not c.num_rows:
        return pa.array([], pa.string())
    rank, thread = c.column(RANK).to_numpy(), c.column(THREAD).to_numpy()
    start, end = c.column(START_NS).to_numpy(), c.column(END_NS).to_numpy()
    names = np.array(c.column(NAME).to_pylist(), dtype=object)
    src, dst = messages(lay)
    cat = np.full(len(src), "message", dtype=object)
    seq = pc.fill_null(c.column(SEQ), -1).to_numpy()
    comm = communicators.ids(pc.fill_null(c.column(COMMUNICATOR), -1).to_numpy()).astype(np.int64)
    blocking = np.array([classify(n)[0] == COLL for n in names], dtype=bool) & (seq >= 0)
    if blocking.any():
        idx = np.flatnonzero(blocking)
        code = np.unique(names[idx], return_inverse=True)[1].ravel().astype(np.int64)
        cid = np.unique(comm[idx], return_inverse=True)[1].ravel().astype(np.int64)
        width = int(seq[idx].max()) + 1
        # an instance is (communicator, call, seq): seq counts the collectives of one communicator
        _, inst = np.unique((cid * (int(code.max()) + 1) + code) * width + seq[idx], return_inverse=True)
        order = np.lexsort((start[idx], inst))
        last_of = np.full(inst.max() + 1, -1)
        last_of[inst[order]] = idx[order]                 # the latest enter of each instance wins
        late = last_of[inst]
        other = late != idx
        src = np.concatenate([src, late[other]])
        dst = np.concatenate([dst, idx[other]])
        cat = np.concatenate([cat, np.full(int(other.sum()), "collective", dtype=object)])
    if not len(src):
        return pa.array([], pa.string())
    s_ts = start[src]
    f_ts = np.maximum(s_ts, np.maximum(end[dst] - 1, start[dst]))
    ids = np.arange(1, len(src) + 1)
    label = np.array([json.dumps(shorten(n)) for n in names[src]], dtype=object)
    out = []
    for ph, who, ts, extra in (("s", src, s_ts, ""), ("f", dst, f_ts, ',"bp":"e"')):
        out.append(_join(',\n{"ph":"', ph, '","cat":"', pa.array(cat.astype(str)), '","name":',
                         pa.array(label.astype(str)), ',"id":', _s(ids), ',"pid":', _s(rank[who]), ',"tid":',
                         _s(thread[who].astype(np.int64) + MPI_TID), ',"ts":', _us(ts), extra, '}'))
    return pa.concat_arrays(out)


def _dependency_flows(tasks: list[pa.Table], first_id: int) -> pa.Array:
    """Flow pairs (s, f) of the task graph's edges: from the predecessor's end (inside its slice) to the task's
    start, both on the tasks' tracks; ids from `first_id` up (above the MPI flows' ids)."""
    if not tasks:
        return pa.array([], pa.string())
    t = pa.concat_tables(tasks)
    rank, thread = t.column(RANK).to_numpy(), t.column(THREAD).to_numpy()
    start, end = t.column(START_NS).to_numpy(), t.column(END_NS).to_numpy()
    ids = pc.fill_null(t.column(TASK), -1).to_numpy()
    preds = t.column(PREDS).combine_chunks()
    dst = pc.list_parent_indices(preds).to_numpy()
    pid = pc.list_flatten(preds).to_numpy()
    # one int key per (rank, task id), looked up among the tasks
    key = (rank.astype(np.int64) << 40) + ids
    order = np.argsort(key, kind="stable")
    want = (rank[dst].astype(np.int64) << 40) + pid
    at = np.clip(np.searchsorted(key[order], want), 0, max(len(key) - 1, 0))
    found = key[order][at] == want
    src, dst = order[at][found], dst[found]
    if not len(src):
        return pa.array([], pa.string())
    flow_ids = np.arange(first_id + 1, first_id + len(src) + 1)
    s_ts = np.maximum(start[src], end[src] - 1)
    out = []
    for ph, who, ts, extra in (("s", src, s_ts, ""), ("f", dst, start[dst], ',"bp":"e"')):
        out.append(_join(',\n{"ph":"', ph, '","cat":"dependency","name":"dependency","id":', _s(flow_ids),
                         ',"pid":', _s(rank[who]), ',"tid":', _s(thread[who].astype(np.int64) + TASK_TID),
                         ',"ts":', _us(ts), extra, '}'))
    return pa.concat_arrays(out)


# --- helpers ------------------------------------------------------------------------------------------------

def _list_text(col) -> pa.Array:
    """A list<int> column as JSON arrays ('[3,4]', '[]'), null where the list is null."""
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    items = pc.list_flatten(col).cast(pa.string())
    text = pa.ListArray.from_arrays(col.offsets, items, mask=col.is_null())
    return _join("[", pc.binary_join(text, ","), "]")

def _json_names(part: pa.Table) -> pa.Array:
    """Each record's name as a JSON string, long ones shortened (each distinct name converted once)."""
    col = part.column(NAME).combine_chunks()
    quoted = pa.array([json.dumps(shorten(n)) for n in col.dictionary.to_pylist()], pa.string())
    return quoted.take(col.indices)


def _us(ns: np.ndarray) -> pa.Array:
    """Nanoseconds as exact microseconds with three decimals ('1234.567')."""
    ns = np.asarray(ns, np.int64)
    return _join(_s(ns // 1000), ".", pc.utf8_lpad(_s(ns % 1000), width=3, padding="0"))




def _other_data(meta: dict, name: str, lay: Layout) -> dict:
    out = {"source": name, "gpt2trace.schema_version": schema.SCHEMA_VERSION}
    for key in (schema.META_RUN, schema.META_MACHINE, schema.META_COMMUNICATORS):
        raw = meta.get(key)
        if raw:
            try:
                out[key.decode()] = json.loads(raw)
            except ValueError:
                pass
    long_names = {shorten(n): n for names in lay.names.values() for n in names if len(n) > LONG_NAME}
    if long_names:
        out["long_names"] = long_names
    return out
