"""An OTF2 archive (ours, or Score-P's and other tools') as a trace of our schema, read by the OTF2 library's reader.

  rank, thread     our export's locations by their names (`rank R thread T`); other archives' CPU-thread locations
                   by their process: its index in MPI's location group when there is one, else the order of the
                   processes; threads in the order the process defines them (Score-P's master thread first)
  kernel, phase    every non-MPI region's Enter/Leave (phases: the regions of our `gpt2trace phases` group), with
                   step, layer and microstep from their attributes
  comm             every MPI region (paradigm MPI, or named MPI_*): bytes, peer and tag from our attributes (in our
                   archives a call without the tag attribute has no tag), else from the MPI records inside (the
                   receiver and tag of an MpiSend, the sender and tag of an MpiRecv, the root and bytes
                   sent of an MpiCollectiveEnd, a request's completion for nonblocking calls; ranks in the record's
                   communicator, turned into world ranks); seq from our attribute, else the call's order among the
                   collectives of its communicator on its rank; communicator from our attribute, else the MPI
                   records' (only MPI-paradigm groups: MPI_COMM_WORLD is the world, id 0; the other COMM_GROUPs
                   1, 2, ... in definition order, unnamed ones after the paradigm's name template; COMM_SELF one
                   communicator per rank), MPI_Init/MPI_Finalize on the world, listed in the metadata (ours:
                   restored from GPT2TRACE::COMMUNICATORS)
  counter          metrics (each member of a metric class is one counter), step from the attribute, as the schema's
                   counters hold them, the amount of (previous sample, t] at t: running totals (ACCUMULATED) by
                   their increases, samples that describe the time to the next one (NEXT) at that next sample
  state            our `Paraver state` metric when the archive has it (our export: exact); else from the call
                   stack: inside an MPI call its MPI state (Group Communication for collectives, Waiting a message
                   in a receive, ...), in a barrier region Synchronization, in a file-I/O region I/O, in any other
                   region Running, and Idle in between and around, from the archive's start to its end
Timestamps become nanoseconds since the archive's first timestamp (ours are that already). Events of other kinds
(OpenMP, RMA, I/O records, ...) are counted in the notes. A missing, truncated or foreign file is one TraceError.
"""
from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from gpt2trace.format import communicators, mpi_calls, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import (
    BYTES,
    COMMUNICATOR,
    END_NS,
    FIELDS,
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
    THREAD,
    VALUE,
    Kind,
    State,
)
from gpt2trace.interop import otf2_format as F

# The MPI state of a thread inside a call, by the call's operation type (Extrae's states for the same calls).
MPI_STATE = {mpi_calls.COLL: State.GROUP_COMMUNICATION, mpi_calls.COLL_POST: State.GROUP_COMMUNICATION,
              mpi_calls.SEND: State.BLOCKING_SEND, mpi_calls.ISEND: State.IMMEDIATE_SEND,
              mpi_calls.RECV: State.WAITING_A_MESSAGE, mpi_calls.IRECV: State.IMMEDIATE_RECEIVE,
              mpi_calls.SENDRECV: State.SEND_RECEIVE, mpi_calls.WAIT: State.WAIT_WAITALL,
              mpi_calls.LOCAL: State.OTHERS}
_COLUMNS = (START_NS, END_NS, NAME, STATE, STEP, LAYER, MICROSTEP, BYTES, PEER, SEQ, VALUE, COMMUNICATOR, TAG)


@dataclass(frozen=True)
class Otf2Import:
    table: pa.Table                     # schema columns and metadata
    notes: tuple[str, ...]              # what the import did beyond a plain translation
    inputs: tuple[Path, ...] = ()       # the archive's files: never to be written


def load_otf2(path: str | Path) -> Trace:
    """`gpt2trace.load` for OTF2 archives (anchor file or folder): the imported trace, checked as any trace."""
    return Trace.from_table(import_otf2(path).table, path)


def import_otf2(path: str | Path) -> Otf2Import:
    otf2 = F.library()
    import _otf2
    anchor = F.anchor_of(path)
    # The bindings catch what fails inside their reader callbacks (a damaged record naming a definition the
    # archive lacks), write its traceback to sys.stderr and stop the reader: we keep that text for the one line.
    failed = io.StringIO()
    try:
        with contextlib.redirect_stderr(failed), otf2.reader.open(str(anchor)) as reader:
            result = _Reader(anchor, reader).run()
    except (_otf2.Error, otf2.error.Error) as exc:
        raise _unreadable(anchor, _last_line(failed.getvalue()) or _first_line(exc)) from None
    if failed.getvalue().strip():
        raise _unreadable(anchor, _last_line(failed.getvalue()))
    return result


def _unreadable(anchor: Path, why: str) -> TraceError:
    return TraceError(f"{anchor}: not a readable OTF2 archive ({why}); is it complete? An archive is its anchor "
                      "file, the .def beside it and the folder of .evt files")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _last_line(text: str) -> str:
    """The exception line of a traceback the bindings wrote (empty: none), as a record they could not read."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"a record the OTF2 bindings could not read: {lines[-1]}" if lines else ""


@dataclass
class _Lane:
    """One location's open regions and what became of them."""
    rank: int
    thread: int
    stack: list = field(default_factory=list)           # [region, start, attributes, mpi details]
    states: list = field(default_factory=list)          # (time, state id) samples
    requests: dict = field(default_factory=dict)        # request id -> the comm record it posted
    totals: dict = field(default_factory=dict)          # metric member -> its last running total
    pending: dict = field(default_factory=dict)         # metric member -> the record the next sample places
    last_ns: int = 0                                    # the time of the location's last event


class _Reader:
    def __init__(self, anchor: Path, reader):
        import _otf2
        import otf2
        self.otf2, self.anchor, self.reader = otf2, anchor, reader
        props = {n: _otf2.Reader_GetProperty(reader.handle, n) for n in _otf2.Reader_GetPropertyNames(reader.handle)}
        self.ours = F.PROPERTY_VERSION in props
        self.props = props
        defs = reader.definitions
        clock = defs.clock_properties
        self.resolution = int(clock.timer_resolution) or 1
        self.origin = 0 if self.ours else int(clock.global_offset)
        self.end_ns = self._ns(int(clock.global_offset) + int(clock.trace_length))
        self.phases = {r for g in defs.groups if g.group_type == otf2.GroupType.REGIONS and g.name == F.PHASE_GROUP
                       for r in g.members}
        self.lanes, skipped = self._lanes(defs)
        self.comms = self._communicators(defs)   # OTF2 communicator -> ours
        self.notes: list[str] = []
        if skipped:
            self.notes.append(f"{skipped} location(s) that are not CPU threads (metric or accelerator locations) "
                              "left out")
        self.records: dict[str, list[dict]] = {k: [] for k in Kind.ALL}      # filled in until the end (requests)
        self.readings: dict = {}            # metric member -> F.MetricReading
        self.first_totals = 0
        self.other_events: dict[str, int] = {}

    def _ns(self, ticks: int) -> int:
        t = ticks - self.origin
        return t if self.resolution == F.TICKS_PER_SECOND else t * F.TICKS_PER_SECOND // self.resolution

    def _lanes(self, defs) -> tuple[dict, int]:
        otf2 = self.otf2
        threads = [loc for loc in defs.locations if loc.type == otf2.LocationType.CPU_THREAD]
        skipped = len(list(defs.locations)) - len(threads)
        if self.ours:
            ids = {loc: F.location_ids(loc.name) for loc in threads}
            if all(ids.values()):
                return {loc: _Lane(*ids[loc]) for loc in threads}, skipped
        processes = list(dict.fromkeys(loc.group for loc in threads))
        mpi = next((g for g in defs.groups if g.group_type == otf2.GroupType.COMM_LOCATIONS
                    and g.paradigm == otf2.Paradigm.MPI), None)
        if mpi is not None and {m.group for m in mpi.members} >= set(processes):
            rank_of = {m.group: i for i, m in enumerate(mpi.members)}
        else:
            rank_of = {g: i for i, g in enumerate(processes)}
        counts: dict = {}
        lanes = {}
        for loc in threads:
            t = counts[loc.group] = counts.get(loc.group, -1) + 1
            lanes[loc] = _Lane(rank_of[loc.group], t)
        return lanes, skipped

    def _communicators(self, defs) -> dict:
        """Each MPI communicator as ours, as otf2-print resolves them: only communicators whose group is of the MPI
        paradigm (Score-P's "Process x Threads CPU Locations" is the measurement system's, not MPI's); a
        COMM_GROUP's members are positions in MPI's COMM_LOCATIONS group, which the bindings give as locations
        and we turn into world ranks; a COMM_SELF group is every process on its own, one communicator per rank
        (see `_comm_of`). Ids: those our table gives (name, ranks) in our archives, else the world 0 (the one
        named MPI_COMM_WORLD, else the first over every rank) and 1, 2, ... in definition order; an unnamed
        communicator is named by the paradigm's COMM_NAME_TEMPLATE ("Comm ${id}")."""
        known = self._known_communicators()
        mpi = [c for c in defs.comms if c.group is not None and c.group.paradigm == self.otf2.Paradigm.MPI]
        groups = [c for c in mpi if c.group.group_type == self.otf2.GroupType.COMM_GROUP]
        world = self._world_of(groups)
        template = self._name_template(defs)
        out, next_id = {}, max(known.values(), default=0) + 1
        for comm in groups:
            members = tuple(self.lanes[m].rank if m in self.lanes else int(m) for m in comm.group.members)
            name = communicators.WORLD_NAME if comm.name == F.WORLD else comm.name
            if (name, members) in known:
                cid = known[(name, members)]
            elif comm is world:
                cid, name = communicators.WORLD_ID, communicators.WORLD_NAME
            else:
                cid, next_id = next_id, next_id + 1
            out[comm] = communicators.Communicator(cid, name or template.replace("${id}", str(cid)), members)
        for comm in mpi:
            if comm.group.group_type == self.otf2.GroupType.COMM_SELF:
                ranks = sorted({lane.rank for lane in self.lanes.values()})
                out[comm] = {r: communicators.Communicator(next_id + i, comm.name or F.SELF, (r,))
                             for i, r in enumerate(ranks)}
                next_id += len(ranks)
        return out

    def _table_of_communicators(self) -> dict:
        """Every communicator by id, with the world over every rank when the archive defines none (its
        MPI_Init and MPI_Finalize still run on it)."""
        table = {communicators.WORLD_ID: communicators.world(sorted({lane.rank for lane in self.lanes.values()}))}
        for c in self.comms.values():
            table.update({x.id: x for x in (c.values() if isinstance(c, dict) else [c])})
        return table

    def _known_communicators(self) -> dict:
        """(name, ranks) -> id of our archives' communicator table (empty for other archives)."""
        table = self.props.get(F.PROPERTIES[schema.META_COMMUNICATORS]) if self.ours else None
        if not table:
            return {}
        try:
            parsed = communicators.from_metadata({schema.META_COMMUNICATORS: table.encode()}) or {}
        except (ValueError, KeyError, TypeError):
            raise TraceError(f"{self.anchor}: archive property {F.PROPERTIES[schema.META_COMMUNICATORS]} is not "
                             "a communicator table") from None
        return {(c.name, c.ranks): c.id for c in parsed.values()}

    def _world_of(self, groups: list):
        """MPI's world among the MPI communicator groups: the one named so, else the first over every rank."""
        ranks = {lane.rank for lane in self.lanes.values()}
        named = [c for c in groups if c.name == F.WORLD]
        if named:
            return named[0]
        return next((c for c in groups if {self.lanes[m].rank for m in c.group.members if m in self.lanes} >= ranks),
                    None)

    def _name_template(self, defs) -> str:
        otf2 = self.otf2
        for prop in defs.paradigm_properties:
            if prop.paradigm == otf2.Paradigm.MPI and prop.property == otf2.ParadigmProperty.COMM_NAME_TEMPLATE \
                    and isinstance(prop.value, str) and "${id}" in prop.value:
                return prop.value
        return F.COMM_NAME_TEMPLATE

    def _comm_of(self, comm, rank: int):
        """Our communicator of an MPI record's communicator on `rank` (MPI_COMM_SELF: that rank's own); None for
        a communicator that is not MPI's."""
        c = self.comms.get(comm)
        return c.get(rank) if isinstance(c, dict) else c

    def _world_rank(self, comm, lane: _Lane, rank: int) -> int:
        """A rank of an MPI record's communicator, on `lane`'s process, as a world rank."""
        c = self._comm_of(comm, lane.rank)
        return c.ranks[rank] if c is not None and 0 <= rank < len(c.ranks) else rank

    # --- events ---------------------------------------------------------------------------------------------

    def run(self) -> Otf2Import:
        E = self.otf2.events
        handlers = {E.Enter: self._enter, E.Leave: self._leave, E.Metric: self._metric,
                    E.MpiSend: self._send, E.MpiIsend: self._send, E.MpiRecv: self._recv, E.MpiIrecv: self._recv,
                    E.MpiCollectiveEnd: self._collective, E.NonBlockingCollectiveComplete: self._collective,
                    E.MpiIrecvRequest: self._request, E.NonBlockingCollectiveRequest: self._request,
                    E.MpiCollectiveBegin: _ignore, E.MpiIsendComplete: _ignore}
        for location, event in self.reader.events:
            lane = self.lanes.get(location)
            if lane is None:
                continue
            lane.last_ns = self._ns(event.time)
            handler = handlers.get(type(event))
            if handler is None:
                name = type(event).__name__
                self.other_events[name] = self.other_events.get(name, 0) + 1
                continue
            handler(lane, event)
        for lane in self.lanes.values():
            if lane.stack:
                raise TraceError(f"{self.anchor}: rank {lane.rank} thread {lane.thread} ends inside region "
                                 f"{lane.stack[-1][0].name!r} (an Enter without its Leave: a truncated archive?)")
        self._flush_metrics()
        if self.other_events:
            listed = ", ".join(f"{n} {k}" for k, n in sorted(self.other_events.items()))
            self.notes.append(f"events of kinds our schema has no record for, not imported: {listed}")
        self._states()
        self._fill_seq()
        return Otf2Import(schema.with_import_notes(self._table(), self.notes), tuple(self.notes),
                          F.archive_files(self.anchor))

    def _enter(self, lane: _Lane, ev) -> None:
        attrs = {a.name: v for a, v in (ev.attributes or {}).items()}
        lane.stack.append([ev.region, self._ns(ev.time), attrs, {}])
        if not self.ours:
            lane.states.append((self._ns(ev.time), self._state_in(ev.region)))

    def _leave(self, lane: _Lane, ev) -> None:
        if not lane.stack or lane.stack[-1][0] != ev.region:
            raise TraceError(f"{self.anchor}: rank {lane.rank} thread {lane.thread} leaves region "
                             f"{ev.region.name!r} at {ev.time} without entering it last (the Enter/Leave records "
                             "do not nest)")
        region, start, attrs, mpi = lane.stack.pop()
        end = self._ns(ev.time)
        kind = self._kind(region)
        rec = {RANK: lane.rank, THREAD: lane.thread, START_NS: start, END_NS: end, NAME: region.name}
        for col in (STEP, LAYER, MICROSTEP):
            rec[col] = _int(attrs.get(col))
        if kind == Kind.COMM:
            for col in (SEQ, PEER, BYTES):
                ours = _int(attrs.get(col))
                rec[col] = ours if ours is not None else mpi.get(col)
            rec[TAG] = _int(attrs.get(TAG)) if self.ours else mpi.get(TAG)
            ours = _int(attrs.get(COMMUNICATOR))
            rec[COMMUNICATOR] = ours if ours is not None else self._comm_id(lane, mpi.get("comm"), region.name)
            for rid in mpi.get("requests", ()):
                lane.requests[rid] = rec
        self._add(kind, rec)
        if not self.ours:
            lane.states.append((end, self._state_in(lane.stack[-1][0]) if lane.stack else State.IDLE))

    def _metric(self, lane: _Lane, ev) -> None:
        t = self._ns(ev.time)
        members = ev.metric.members
        if self.ours and len(members) == 1 and members[0].name == F.STATE_METRIC:
            lane.states.append((t, int(ev.values[0])))
            return
        attrs = {a.name: v for a, v in (ev.attributes or {}).items()}
        for member, value in zip(members, ev.values):
            value = self._increase(lane, member, value)
            if value is None:
                continue
            rec = {RANK: lane.rank, THREAD: lane.thread, START_NS: t, END_NS: t, NAME: member.name,
                   VALUE: float(value), STEP: _int(attrs.get(STEP)), LAYER: _int(attrs.get(LAYER)),
                   MICROSTEP: _int(attrs.get(MICROSTEP))}
            if self._reading(member).shifted:
                self._place(lane.pending.pop(member, None), t)
                lane.pending[member] = rec
            else:
                self._add(Kind.COUNTER, rec)

    def _reading(self, member) -> F.MetricReading:
        if member not in self.readings:
            self.readings[member] = F.metric_reading(member.metric_mode)
        return self.readings[member]

    def _increase(self, lane: _Lane, member, value):
        """A sample as the schema's counter value; None for a running total's first sample when the total does
        not count from the measurement's start (no earlier reading to subtract)."""
        reading = self._reading(member)
        if not reading.difference:
            return value
        previous = lane.totals.get(member, 0 if reading.from_zero else None)
        lane.totals[member] = value
        if previous is None:
            self.first_totals += 1
            return None
        return value - previous             # exact for 64-bit integers: Python's ints do not wrap

    def _place(self, rec: dict | None, t: int) -> None:
        """A NEXT-timed sample's record, at the end of the interval it describes."""
        if rec is not None:
            rec[START_NS] = rec[END_NS] = t
            self._add(Kind.COUNTER, rec)

    def _flush_metrics(self) -> None:
        """The last sample of a NEXT-timed metric holds to its location's last event."""
        for lane in self.lanes.values():
            for rec in lane.pending.values():
                self._place(rec, max(lane.last_ns, rec[START_NS]))
            lane.pending.clear()
        if self.first_totals:
            self.notes.append(f"{self.first_totals} first sample(s) of running-total metrics (accumulated, not "
                              "from the start) left out: they have no earlier reading to count from")

    def _comm_id(self, lane: _Lane, comm, name: str) -> int | None:
        """The communicator id of an MPI call whose records name `comm` (None: they name none)."""
        c = self._comm_of(comm, lane.rank) if comm is not None else None
        if c is None and name in F.WORLD_CALLS:
            return communicators.WORLD_ID
        return c.id if c is not None else None

    def _mpi(self, lane: _Lane) -> dict | None:
        """The details of the MPI call the thread is in (None outside MPI calls)."""
        if lane.stack and self._kind(lane.stack[-1][0]) == Kind.COMM:
            return lane.stack[-1][3]
        return None

    def _send(self, lane: _Lane, ev) -> None:
        mpi = self._mpi(lane)
        if mpi is not None:
            mpi.setdefault(PEER, self._world_rank(ev.communicator, lane, int(ev.receiver)))
            mpi.setdefault(BYTES, int(ev.msg_length))
            mpi.setdefault(TAG, _message_tag(ev))
            mpi.setdefault("comm", ev.communicator)

    def _recv(self, lane: _Lane, ev) -> None:
        rec = lane.requests.pop(getattr(ev, "request_id", None), None)
        target = rec if rec is not None else self._mpi(lane)
        if target is None:
            return
        if target.get(PEER) is None:
            target[PEER] = self._world_rank(ev.communicator, lane, int(ev.sender))
        if target.get(BYTES) is None:
            target[BYTES] = int(ev.msg_length)
        if target.get(TAG) is None:
            target[TAG] = _message_tag(ev)
        target.setdefault("comm", ev.communicator)
        self._complete(lane, target, ev.communicator)

    def _collective(self, lane: _Lane, ev) -> None:
        rid = getattr(ev, "request_id", None)
        target = lane.requests.pop(rid, None) if rid is not None else self._mpi(lane)
        if target is None:
            return
        if target.get(BYTES) is None:
            target[BYTES] = int(ev.size_sent) or int(ev.size_received)
        root = int(ev.root)
        if target.get(PEER) is None and root != F.UNDEFINED_RANK:
            target[PEER] = self._world_rank(ev.communicator, lane, root)
        target.setdefault("comm", ev.communicator)
        self._complete(lane, target, ev.communicator)

    def _complete(self, lane: _Lane, target: dict, comm) -> None:
        """A posting's record (MPI_Irecv, MPI_Iallreduce, ...), already written at its Leave, gets the
        communicator of the record that completes its request."""
        if RANK in target and target.get(COMMUNICATOR) is None:
            target[COMMUNICATOR] = self._comm_id(lane, comm, target[NAME])

    def _request(self, lane: _Lane, ev) -> None:
        mpi = self._mpi(lane)
        if mpi is not None:
            mpi.setdefault("requests", []).append(int(ev.request_id))

    # --- what regions are -------------------------------------------------------------------------------------

    def _kind(self, region) -> str:
        if region in self.phases:
            return Kind.PHASE
        if region.paradigm == self.otf2.Paradigm.MPI or region.name.startswith(mpi_calls.PREFIX):
            return Kind.COMM
        return Kind.KERNEL

    def _state_in(self, region) -> int:
        """A thread's state inside `region` (innermost), for archives without our state metric."""
        otf2 = self.otf2
        if self._kind(region) == Kind.COMM:
            return int(MPI_STATE[mpi_calls.operation(region.name)])
        if region.region_role in (otf2.RegionRole.BARRIER, otf2.RegionRole.IMPLICIT_BARRIER):
            return int(State.SYNCHRONIZATION)
        if region.region_role in (otf2.RegionRole.FILE_IO, otf2.RegionRole.FILE_IO_METADATA):
            return int(State.IO)
        return int(State.RUNNING)

    # --- records --------------------------------------------------------------------------------------------

    def _add(self, kind: str, rec: dict) -> None:
        self.records[kind].append(rec)

    def _states(self) -> None:
        """State records from each thread's samples: a sample holds until the next one (NO_STATE: none)."""
        for lane in self.lanes.values():
            samples = lane.states
            if not self.ours:           # Idle from the archive's start to its end, around the call stack
                samples = [(0, int(State.IDLE))] + samples + [(self.end_ns, F.NO_STATE)]
                samples = _collapse(samples)
            for (t0, state), (t1, _) in zip(samples, samples[1:]):
                if state != F.NO_STATE:
                    self._add(Kind.STATE, {RANK: lane.rank, THREAD: lane.thread, START_NS: t0, END_NS: t1,
                                           STATE: state})

    def _fill_seq(self) -> None:
        """A collective's seq, where no attribute gave one: its order among its rank's collectives on its
        communicator."""
        count: dict[tuple, int] = {}
        for rec in sorted(self.records[Kind.COMM], key=lambda r: (r[RANK], r[START_NS], r[END_NS])):
            if mpi_calls.operation(rec[NAME]) in (mpi_calls.COLL, mpi_calls.COLL_POST):
                key = (rec[RANK], rec.get(COMMUNICATOR))
                k = count[key] = count.get(key, -1) + 1
                if rec.get(SEQ) is None:
                    rec[SEQ] = k

    def _table(self) -> pa.Table:
        tables = []
        for kind, recs in self.records.items():
            if not recs:
                continue
            recs = sorted(recs, key=_thread_time)         # each thread's records in time order, threads in order
            cols = {KIND: pa.array([kind] * len(recs), pa.string()).dictionary_encode()}
            for col in (RANK, THREAD) + _COLUMNS:
                cols[col] = pa.array([r.get(col) for r in recs], FIELDS[col] if col != NAME else pa.string())
            tables.append(pa.table(cols))
        if not tables:
            raise TraceError(f"{self.anchor}: the archive has no events of our schema (regions, MPI calls, metrics)")
        table = pa.concat_tables(tables, promote_options="default")
        table = pa.table({c: table.column(c).cast(FIELDS[c]) if c in table.column_names else
                          pa.nulls(table.num_rows, FIELDS[c]) for c in FIELDS})
        return table.unify_dictionaries().replace_schema_metadata(schema.arrow_schema(self._metadata()).metadata)

    def _metadata(self) -> dict[bytes, bytes]:
        out = {}
        for key, prop in F.PROPERTIES.items():
            if prop in self.props:
                try:
                    json.loads(self.props[prop])
                except ValueError:
                    raise TraceError(f"{self.anchor}: archive property {prop} is not valid JSON") from None
                out[key] = self.props[prop].encode()
        used = {r.get(COMMUNICATOR) for r in self.records[Kind.COMM]} - {None}
        if schema.META_COMMUNICATORS not in out and used:
            table = self._table_of_communicators()
            out.update(communicators.to_metadata(table[i] for i in sorted(used) if i in table))
        return out


def _ignore(lane, ev) -> None:
    """Records whose content the region around them already gives."""


def _thread_time(rec: dict) -> tuple[int, int, int, int]:
    return rec[RANK], rec[THREAD], rec[START_NS], -rec[END_NS]


def _int(value) -> int | None:
    """An attribute's value as an integer column value; None when absent or not an integer (another tool's
    attribute of the same name)."""
    return int(value) if isinstance(value, int) else None


def _message_tag(ev) -> int | None:
    """An MPI record's tag (OTF2's uint32) as the tag column holds it; None beyond int32 (no MPI tag is)."""
    tag = int(ev.msg_tag)
    return tag if tag < 2**31 else None


def _collapse(samples: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Samples in time order with repeats of one state merged and zero-length states dropped."""
    out: list[tuple[int, int]] = []
    for t, state in samples:
        if out and out[-1][0] == t:
            out.pop()                   # a later sample at the same time wins: no zero-length state
        if not out or out[-1][1] != state:
            out.append((t, state))
    return out
