"""A Paraver/Extrae trace (.prv or .prv.gz, with the .pcf and .row beside it) as a trace of our schema.

  states              `1:` records, as they are (rank = the task's global order, thread = thread - 1); a thread's
                      time before its first and after its last state, up to the header's end time, is Idle, as
                      Paraver shows it, so the runtime is the header's end time (BasicAnalysis' convention)
  comm                MPI call events (types 5000000x, value = the call, 0 at its return); bytes from our
                      attribute, else Extrae's collective sizes (50100001/2), else the `3:` record the call sends or
                      receives; peer from our attribute, else the root of the collective (50100003 on the root),
                      else the `3:` record's partner; tag from our attribute (all of them in a trace whose .pcf
                      defines it, as our exports' do), else the `3:` record's; seq from our attribute, else the
                      call's order among the collectives of its communicator (50100004) on its rank; communicator
                      from our attribute, else Extrae's (50100004) through the header's `c:` lines
                      (`header_communicators`: the one of all tasks is the world, id 0), named in the metadata as
                      our export's .gpt2trace.json names them, else world and comm<Paraver id>
  kernel              user function / OpenMP function events (60000018/19/20/23), named from the .pcf
  phase               our phase events (71000010), named from the .pcf
  counter             hardware counters (42xxxxxx, e.g. 42000050 PAPI_TOT_INS, 42000059 PAPI_TOT_CYC: the count
                      since the thread's previous read, so `analysis.counters` gives it to the burst it closes) and
                      our counters (71001xxx, scaled back as their .pcf label says)
Opening and closing events pair per thread and type as a stack (Paraver's nesting). Events of other types are
not records of our schema: the import counts them in its notes. Every malformed or out-of-range line is a
TraceError naming its line. Modules: `paraver_parse` reads the text, `paraver_records` places and checks
records, `paraver_events` turns events into records, this one assembles the trace and its metadata.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpt2trace.format import communicators, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.outputs import atomic_output, check_output
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import STATE, Kind, State
from gpt2trace.interop import paraver_format as F
from gpt2trace.interop.labels import ESCAPED, LABELS_KEY
from gpt2trace.interop.paraver_events import Events, header_communicators, message_lanes
from gpt2trace.interop.paraver_parse import Body, Header, read
from gpt2trace.interop.paraver_pcf import Pcf, read_pcf, read_row
from gpt2trace.interop.paraver_records import Lanes, Notes, kind_table, require, to_ns


@dataclass(frozen=True)
class ParaverImport:
    table: pa.Table                     # schema columns and metadata
    header: Header
    notes: tuple[str, ...]              # what the import did beyond a plain translation
    inputs: tuple[Path, ...] = ()       # the .prv and its .pcf, .row, .gpt2trace.json: never to be written


def load_paraver(path: str | Path) -> Trace:
    """`gpt2trace.load` for .prv/.prv.gz files: the imported trace, checked as any trace."""
    return Trace.from_table(import_paraver(path).table, path)


def import_paraver(path: str | Path) -> ParaverImport:
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    if not path.name.endswith((".prv", ".prv.gz")):
        raise TraceError(f"{path}: not a Paraver trace (expected a .prv or .prv.gz file)")
    inputs = tuple(Path(p) for p in F.file_names(str(path)))
    _, pcf_name, row_name, meta_name = inputs
    header, body = read(path)
    notes = Notes()
    format_notes(header, body.global_comms, notes)
    side = sidecars(path, header, notes)
    lanes = Lanes(header)
    tables = [states(path, header, body, lanes, notes)]
    comm_ids, comm_table = header_communicators(header, lanes)
    message_lanes(path, header, lanes, body.comms, body.comm_line)
    events = Events(path, header, body, lanes, comm_ids)
    tables += events.records(side.pcf, notes)
    table = pa.concat_tables([t for t in tables if t.num_rows]) if any(t.num_rows for t in tables) else None
    if table is None:
        raise no_records(path)
    table = table.unify_dictionaries().replace_schema_metadata(trace_metadata(side.meta, comm_table, notes.lines()))
    return ParaverImport(table, header, notes.lines(), inputs)


@dataclass(frozen=True)
class Sidecars:
    pcf: Pcf
    meta: dict                          # NAME.gpt2trace.json (empty without one)


def sidecars(path: Path, header: Header, notes: Notes) -> Sidecars:
    """The .pcf, .row and .gpt2trace.json beside a .prv, as far as they are there (notes say what is missing)."""
    _, pcf_name, row_name, meta_name = (Path(p) for p in F.file_names(str(path)))
    meta = _sidecar(meta_name)
    escaped = meta.get(LABELS_KEY) == ESCAPED          # our own export's labels: escaped, see `labels`
    pcf = read_pcf(pcf_name, escaped) if pcf_name.is_file() else Pcf()
    if not pcf_name.is_file():
        notes.add(f"no {pcf_name.name} beside the trace: names are the built-in ones or numbers")
    if row_name.is_file():
        threads = read_row(row_name, escaped).get("THREAD")
        total = sum(sum(t) for t in header.tasks)
        if threads is not None and len(threads) != total:
            notes.add(f"{row_name.name} names {len(threads)} threads; the header declares {total}")
    return Sidecars(pcf, meta)


def format_notes(header: Header, global_comms: int, notes: Notes) -> None:
    """What the import leaves out of the constructs Paraver reads but our schema has no place for."""
    for why in header.left_out:
        notes.add(f"communicator line left out ({why}): its collectives count as the world's")
    notes.add("{n} global communication record(s) (4: lines, of old Paraver traces) were skipped: our schema has "
              "no record for them", global_comms)


def no_records(path: Path) -> TraceError:
    return TraceError(f"{path}: the trace has no records of our schema (states, MPI calls, functions, counters)")


def trace_metadata(meta: dict, comm_table: list, notes: tuple[str, ...] = ()) -> dict[bytes, bytes]:
    """The imported trace's schema metadata: ours from NAME.gpt2trace.json, the header's communicators else, and
    the import's notes (META_IMPORT_NOTES), so that an analysis of the imported trace can show them."""
    metadata = _metadata(meta)
    if schema.META_COMMUNICATORS not in metadata and comm_table:
        metadata.update(communicators.to_metadata(comm_table))
    if notes:      # sorted: an import rank by rank or window by window gives the same lines in another order
        metadata[schema.META_IMPORT_NOTES] = json.dumps(sorted(notes)).encode()
    return schema.arrow_schema(metadata).metadata


def write_parquet(imported: ParaverImport, out: str | Path) -> int:
    """Writes the imported trace as our Parquet trace (zstd); returns the number of records. OutputError when
    `out` is one of the import's files or cannot be written (then nothing is left under its name)."""
    out = check_output(out, inputs=imported.inputs)
    # through a Python file: a full disk is then the OSError of the write, with its plain message
    with atomic_output(out) as tmp, open(tmp, "wb") as fh, \
            pq.ParquetWriter(fh, imported.table.schema, compression="zstd") as writer:
        writer.write_table(imported.table, row_group_size=1 << 20)
    return imported.table.num_rows


# --- states --------------------------------------------------------------------------------------------------

def states(path: Path, header: Header, body: Body, lanes: Lanes, notes: Notes) -> pa.Table:
    """The `1:` records (of the whole trace or of some ranks' threads: the padding is per thread)."""
    lane, begin, end, state = state_rows(path, header, body.states, body.state_line, lanes)
    # Paraver shows a thread's time outside its state records as Idle: made explicit up to the header's end.
    extent = Extent(len(lanes.rank))
    extent.add(lane, begin, end)
    pad = extent.padding(header, notes)
    if len(pad[0]):
        lane, begin, end, state = (np.concatenate(pair) for pair in zip((lane, begin, end, state), pad))
    return kind_table(Kind.STATE, lanes, lane, begin, end, {STATE: (state, None)})


def state_rows(path: Path, header: Header, st: np.ndarray, line: np.ndarray, lanes: Lanes) -> tuple:
    """(lane, begin, end, state) of `1:` records, checked."""
    lane = lanes.lane(path, st, line, "state record")
    begin = to_ns(path, header, line, st[:, 4], "begin time")
    end = to_ns(path, header, line, st[:, 5], "end time")
    require(path, line, end >= begin, lambda i: f"state ends ({st[i, 5]}) before it begins ({st[i, 4]})")
    require(path, line, (st[:, 6] >= 0) & (st[:, 6] < 2**15), lambda i: f"state id {st[i, 6]} is out of range")
    return lane, begin, end, st[:, 6].astype(np.int16)


class Extent:
    """Each thread's first state begin and last state end, over as many parts of the trace as come."""

    def __init__(self, lanes: int):
        self.first = np.full(lanes, np.iinfo(np.int64).max)
        self.last = np.full(lanes, -1)

    def add(self, lane: np.ndarray, begin: np.ndarray, end: np.ndarray) -> None:
        np.minimum.at(self.first, lane, begin)
        np.maximum.at(self.last, lane, end)

    def padding(self, header: Header, notes: Notes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Idle states (lane, start, end, state id) before each thread's first state and after its last, up to the
        header's end, for the threads that have states: leads first, then tails."""
        has = np.flatnonzero(self.last >= 0)
        lead = has[self.first[has] > 0]
        tail = has[self.last[has] < header.end_ns]
        pad = (np.concatenate([lead, tail]), np.concatenate([np.zeros(len(lead), np.int64), self.last[tail]]),
               np.concatenate([self.first[lead], np.full(len(tail), header.end_ns)]),
               np.full(len(lead) + len(tail), int(State.IDLE), np.int16))
        if len(pad[0]):
            notes.add("{n} thread(s) padded with Idle before their first or after their last state, up to the "
                      "header's end time", len(np.unique(pad[0])))
        return pad


# --- metadata ------------------------------------------------------------------------------------------------

def _sidecar(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        raise TraceError(f"{path}: not valid JSON (the metadata our Paraver export writes beside the .prv)") from None
    return data if isinstance(data, dict) else {}


def _metadata(meta: dict) -> dict[bytes, bytes]:
    """Our trace's metadata from NAME.gpt2trace.json when our export wrote one (an Extrae trace has none)."""
    out = {}
    for key in (schema.META_RUN, schema.META_MACHINE, schema.META_PEAK, schema.META_CLOCK,
                schema.META_COMMUNICATORS):
        if key.decode() in meta:
            out[key] = json.dumps(meta[key.decode()]).encode()
    return out
