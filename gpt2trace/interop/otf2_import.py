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
                   records' (the one over every rank is the world, id 0; the others 1, 2, ... in definition order,
                   with their OTF2 names), listed in the metadata (ours: restored from GPT2TRACE::COMMUNICATORS)
  counter          metrics (each member of a metric class is one counter), step from the attribute
  state            our `Paraver state` metric when the archive has it (our export: exact); else from the call
                   stack: inside an MPI call its MPI state (Group Communication for collectives, Waiting a message
                   in a receive, ...), in a barrier region Synchronization, in a file-I/O region I/O, in any other
                   region Running, and Idle in between and around, from the archive's start to its end
Timestamps become nanoseconds since the archive's first timestamp (ours are that already). Events of other kinds
(OpenMP, RMA, I/O records, ...) are counted in the notes. A missing, truncated or foreign file is one TraceError.
"""
from __future__ import annotations

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
    try:
        with otf2.reader.open(str(anchor)) as reader:
            return _Reader(anchor, reader).run()
    except (_otf2.Error, otf2.error.Error) as exc:
        raise TraceError(f"{anchor}: not a readable OTF2 archive ({_first_line(exc)}); is it complete? An archive "
                         "is its anchor file, the .def beside it and the folder of .evt files") from None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


@dataclass
class _Lane:
    """One location's open regions and what became of them."""
    rank: int
    thread: int
    stack: list = field(default_factory=list)           # [region, start, attributes, mpi details]
    states: list = field(default_factory=list)          # (time, state id) samples
    requests: dict = field(default_factory=dict)        # request id -> the comm record it posted


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
        """Each OTF2 communicator as ours: the id our table gives its (name, ranks) in our archives, else the world
        (the first over every rank, id 0) and 1, 2, ... in definition order. Members are world ranks: the ranks of
        the MPI locations a communicator group names."""
        otf2 = self.otf2
        ranks = {lane.rank for lane in self.lanes.values()}
        known = {}
        table = self.props.get(F.PROPERTIES[schema.META_COMMUNICATORS]) if self.ours else None
        if table:
            try:
                parsed = communicators.from_metadata({schema.META_COMMUNICATORS: table.encode()}) or {}
            except (ValueError, KeyError, TypeError):
                raise TraceError(f"{self.anchor}: archive property {F.PROPERTIES[schema.META_COMMUNICATORS]} is not "
                                 "a communicator table") from None
            known = {(c.name, c.ranks): c.id for c in parsed.values()}
        out, others, world = {}, 1, False
        for comm in defs.comms:
            group = comm.group
            if group is None or group.group_type != otf2.GroupType.COMM_GROUP:
                continue
            # the bindings give a communicator group's members as the MPI locations they stand for
            members = tuple(self.lanes[m].rank if m in self.lanes else int(m) for m in group.members)
            name = communicators.WORLD_NAME if comm.name == F.WORLD else comm.name
            if (name, members) in known:
                cid = known[(name, members)]
            elif not world and set(members) >= ranks:
                cid, name, world = communicators.WORLD_ID, communicators.WORLD_NAME, True
            else:
                cid, others = others + max(known.values(), default=0), others + 1
            out[comm] = communicators.Communicator(cid, name, members)
        return out

    def _world_rank(self, comm, rank: int) -> int:
        """A rank of an MPI record's communicator as a world rank."""
        c = self.comms.get(comm)
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
        if self.other_events:
            listed = ", ".join(f"{n} {k}" for k, n in sorted(self.other_events.items()))
            self.notes.append(f"events of kinds our schema has no record for, not imported: {listed}")
        self._states()
        self._fill_seq()
        return Otf2Import(self._table(), tuple(self.notes), F.archive_files(self.anchor))

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
            comm = self.comms.get(mpi.get("comm"))
            rec[COMMUNICATOR] = ours if ours is not None else (comm.id if comm is not None else None)
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
            self._add(Kind.COUNTER, {RANK: lane.rank, THREAD: lane.thread, START_NS: t, END_NS: t,
                                     NAME: member.name, VALUE: float(value), STEP: _int(attrs.get(STEP)),
                                     LAYER: _int(attrs.get(LAYER)), MICROSTEP: _int(attrs.get(MICROSTEP))})

    def _mpi(self, lane: _Lane) -> dict | None:
        """The details of the MPI call the thread is in (None outside MPI calls)."""
        if lane.stack and self._kind(lane.stack[-1][0]) == Kind.COMM:
            return lane.stack[-1][3]
        return None

    def _send(self, lane: _Lane, ev) -> None:
        mpi = self._mpi(lane)
        if mpi is not None:
            mpi.setdefault(PEER, self._world_rank(ev.communicator, int(ev.receiver)))
            mpi.setdefault(BYTES, int(ev.msg_length))
            mpi.setdefault(TAG, _message_tag(ev))
            mpi.setdefault("comm", ev.communicator)

    def _recv(self, lane: _Lane, ev) -> None:
        rec = lane.requests.pop(getattr(ev, "request_id", None), None)
        target = rec if rec is not None else self._mpi(lane)
        if target is None:
            return
        if target.get(PEER) is None:
            target[PEER] = self._world_rank(ev.communicator, int(ev.sender))
        if target.get(BYTES) is None:
            target[BYTES] = int(ev.msg_length)
        if target.get(TAG) is None:
            target[TAG] = _message_tag(ev)
        target.setdefault("comm", ev.communicator)

    def _collective(self, lane: _Lane, ev) -> None:
        rid = getattr(ev, "request_id", None)
        target = lane.requests.pop(rid, None) if rid is not None else self._mpi(lane)
        if target is None:
            return
        if target.get(BYTES) is None:
            target[BYTES] = int(ev.size_sent) or int(ev.size_received)
        root = int(ev.root)
        if target.get(PEER) is None and root != F.UNDEFINED_RANK:
            target[PEER] = self._world_rank(ev.communicator, root)
        target.setdefault("comm", ev.communicator)
        if RANK in target and target.get(COMMUNICATOR) is None:     # a posting's record, completed now
            comm = self.comms.get(ev.communicator)
            target[COMMUNICATOR] = comm.id if comm is not None else None

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
            out.update(communicators.to_metadata(c for c in self.comms.values() if c.id in used))
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
