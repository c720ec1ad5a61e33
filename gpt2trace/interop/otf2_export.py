"""Our trace as an OTF2 archive (Score-P's format: Vampir, Scalasca, Score-P's tools, pipit), written by the OTF2
library's own writer.

  locations        one per (rank, thread), CPU threads named `rank R thread T`, in a location group per rank
                   (`MPI Rank R`, a process) under its node in the system tree (machine -> node -> process); the node
                   is the rank's host (`machine.hosts[rank]` when the trace has one per rank, else `hostname`)
  regions          kernels and phases (paradigm USER; phases in the `gpt2trace phases` region group, kernels in
                   `gpt2trace kernels`) and MPI calls (paradigm MPI, with Score-P's region roles), as Enter/Leave;
                   step, layer, microstep (and seq, peer, bytes, tag of MPI calls) as attributes of the Enter
  MPI records      inside each MPI call's region, as Score-P writes them: MpiCollectiveBegin/End (operation, root,
                   bytes sent and received), MpiSend at a send's start, MpiRecv at a receive's end (a Sendrecv's
                   from the sender `format.matching` pairs it with: the trace keeps one peer), MpiIsend /
                   MpiIrecvRequest and NonBlockingCollectiveRequest at a posting, completed (MpiIsendComplete,
                   MpiIrecv, NonBlockingCollectiveComplete) inside the next MPI_Wait* of the thread (the request its
                   seq names, else every one still open); each on its communicator: one OTF2 communicator per
                   communicator of the trace (MPI_COMM_WORLD, then the trace's `sp`, `dp`, ... groups over their
                   world ranks), roots and peers as ranks in it, as MPI numbers them; a message's tag is its
                   send's (0 where the trace has none)
  counters         metrics (loss, lr, grad_norm, tokens: absolute values at a point; PAPI counts: since the previous
                   read), with the step as an attribute
  states           the `Paraver state` metric of each thread: the state id from where each state starts (OTF2's
                   ABSOLUTE_NEXT mode), -1 where the thread's states stop; Vampir draws it as a counter, and our
                   import rebuilds the state records from it exactly
  metadata         run, machine, sgemm peak, clock and the communicator table as JSON archive properties
                   (GPT2TRACE::RUN, ...); the communicator id of each MPI call as an attribute of its Enter
Timestamps are our nanoseconds since the trace's start (1e9 ticks per second). A thread's kernel, phase and MPI
records must nest (one call stack per location, as OTF2 requires): the export refuses a trace where two cross,
naming them, and writes nothing under DIR. The archive is written into a hidden folder beside DIR and renamed
onto DIR when complete; an existing archive there is replaced, any other folder is refused.
"""
from __future__ import annotations

import contextlib
import heapq
import json
import math
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpt2trace.format import communicators, mpi_calls, schema
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.matching import match_messages
from gpt2trace.format.outputs import check_folder, check_name, same_file, temp_name
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.format.schema import (
    BYTES,
    COMMUNICATOR,
    END_NS,
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
)
from gpt2trace.interop import otf2_format as F

# Order of records that start and end together on one thread: the phase encloses the kernel, the kernel the call.
_NESTING = {Kind.PHASE: 0, Kind.KERNEL: 1, Kind.COMM: 2}
_ATTRIBUTE_TYPES = {STEP: "INT32", LAYER: "INT32", MICROSTEP: "INT32", SEQ: "INT64", PEER: "INT32",
                    BYTES: "INT64", COMMUNICATOR: "INT32", TAG: "INT32"}


@dataclass(frozen=True)
class Otf2Export:
    anchor: Path            # DIR/traces.otf2
    records: int
    events: int
    locations: int


def export_otf2(source, out_dir: str | Path) -> Otf2Export:
    """Writes `source` (a `Trace`, or any file `gpt2trace.load` reads) as the OTF2 archive DIR. TraceError for a
    trace OTF2 cannot hold, OutputError for an output that may not be written (checked before the work)."""
    from gpt2trace.interop.loader import load
    from gpt2trace.interop.source import input_files
    out_dir = Path(check_name(out_dir, folder=True))      # '' would be the current folder
    F.library()                             # before any work: the bindings are there, or one line says why not
    check_archive_output(out_dir, input_files(source))
    trace = source if isinstance(source, Trace) else load(source)
    _check(trace)
    with atomic_directory(out_dir) as tmp:
        events, locations = _write(trace, tmp)
    return Otf2Export(out_dir / (F.ARCHIVE_NAME + F.ANCHOR_SUFFIX), trace.num_rows, events, locations)


# --- the output folder ------------------------------------------------------------------------------------------

def check_archive_output(path: Path, inputs: Iterable[str | os.PathLike | None] = ()) -> bool:
    """Whether an archive is already at `path` (it is replaced); OutputError when `path` may not be written:
    a file, a folder that is not an OTF2 archive, a folder holding one of the inputs, an unwritable folder."""
    path = Path(path)
    label = f"--output {path}"
    existed = path.exists()
    if existed and not path.is_dir():
        raise OutputError(f"{label} is a file; an OTF2 archive is a folder: give a new folder name")
    if existed and not F.is_archive_dir(path):
        raise OutputError(f"{label} is a folder that is not an OTF2 archive; give a new folder name (nothing is "
                          "written into an existing folder)")
    for src in inputs:
        if src is None:
            continue
        src = Path(src)
        if existed and (same_file(path, src) or src.resolve().is_relative_to(path.resolve())):
            raise OutputError(f"{label} holds an input of this command; choose another output name (nothing was "
                              "written)")
    check_folder(path, label)
    return existed


class atomic_directory:
    """A hidden folder beside `final` to write into; renamed onto `final` when the block ends normally (an archive
    already there is replaced), removed on any exception. OSError becomes a one-line OutputError."""

    def __init__(self, final: Path):
        self.final, self.tmp = Path(final), temp_name(Path(final))

    def __enter__(self) -> Path:
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self.tmp

    def __exit__(self, typ, exc, tb) -> bool:
        if typ is None:
            try:
                self._replace()
                return False
            except OSError as err:
                exc = err
        shutil.rmtree(self.tmp, ignore_errors=True)
        if isinstance(exc, OSError) or _is_otf2_error(exc):
            raise OutputError(f"cannot write {self.final}: {_reason(exc)}; nothing was written under that "
                              "name") from None
        return False

    def _replace(self) -> None:
        """Two renames (a folder cannot replace another in one): the previous archive steps aside, the new one
        takes its name, the previous one goes; if the second rename fails the previous archive steps back."""
        old = self.final.with_name(f".{self.final.name}.old-{os.getpid()}")
        had = self.final.exists()
        if had:
            os.rename(self.final, old)
        try:
            os.rename(self.tmp, self.final)
        except OSError:
            if had:
                os.rename(old, self.final)
            raise
        shutil.rmtree(old, ignore_errors=True)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _is_otf2_error(exc) -> bool:
    import _otf2
    import otf2
    return isinstance(exc, (_otf2.Error, otf2.error.Error))


# --- what OTF2 cannot hold --------------------------------------------------------------------------------------

def _check(trace: Trace) -> None:
    lowest = min((int(np.min(p.column(START_NS).to_numpy())) for p in trace.parts.values() if p.num_rows),
                 default=0)
    if lowest < 0:
        raise TraceError(f"{trace.name}: cannot export: a record starts at {lowest} ns; OTF2's timestamps count "
                         "from the trace's start and cannot be negative")
    check_states(trace)                 # overlapping states: one line naming the thread (gaps are written as such)


# --- writing ----------------------------------------------------------------------------------------------------

def _write(trace: Trace, folder: Path) -> tuple[int, int]:
    otf2 = F.library()
    lanes = _lanes(trace)
    writer = otf2.writer.Writer(str(folder), archive_name=F.ARCHIVE_NAME, timer_resolution=F.TICKS_PER_SECOND)
    try:
        writer.creator = "gpt2trace"
        defs = _Definitions(writer, trace, lanes)
        events = 0
        for lane, recs in lanes.items():
            out = writer.event_writer_from_location(defs.locations[lane])
            for time, method, args, attrs in _lane_events(trace.name, lane, recs, defs):
                getattr(out, method)(time, *args, attributes=attrs or None)
                events += 1
        defs.finish()
        writer.close()
    except BaseException:
        with contextlib.suppress(Exception):
            writer.close()                      # frees the library's files; the folder is removed anyway
        raise
    finally:
        # The bindings' Writer.__del__ closes again when a close failed (a full disk): the error would then come
        # out of the garbage collector. Forget the handle: the caller removes the half-written folder.
        writer._handle = None
    return events, len(lanes)


def _records(trace: Trace, kind: str) -> dict[str, list]:
    part = trace.records(kind)
    cols = {}
    for name in (RANK, THREAD, START_NS, END_NS, NAME, STATE, STEP, LAYER, MICROSTEP, BYTES, PEER, SEQ, VALUE,
                 COMMUNICATOR, TAG):
        cols[name] = part.column(name).to_pylist() if name in part.column_names else [None] * part.num_rows
    return cols


def _lanes(trace: Trace) -> dict[tuple[int, int], dict[str, list[dict]]]:
    """(rank, thread) -> kind -> that thread's records as dicts, in (rank, thread) order."""
    out: dict[tuple[int, int], dict[str, list[dict]]] = {}
    for kind in Kind.ALL:
        cols = _records(trace, kind)
        names = list(cols)
        for row in zip(*cols.values()):
            rec = dict(zip(names, row))
            out.setdefault((rec[RANK], rec[THREAD]), {}).setdefault(kind, []).append(rec)
    _receive_sources(out)
    return dict(sorted(out.items()))


SOURCE = "source"          # a Sendrecv's other partner, found by message matching (the trace keeps one peer)
SOURCE_TAG = "source_tag"  # and the tag of the message it received


def _receive_sources(lanes) -> None:
    """Sets SOURCE and SOURCE_TAG on each Sendrecv whose receive half `format.matching` pairs with a send."""
    calls = [rec for kinds in lanes.values() for rec in kinds.get(Kind.COMM, [])]
    if not any(mpi_calls.operation(r[NAME]) == mpi_calls.SENDRECV for r in calls):
        return
    rank = np.array([r[RANK] for r in calls])
    peer = np.array([-1 if r[PEER] is None else r[PEER] for r in calls])
    op = np.array([mpi_calls.operation(r[NAME]) for r in calls])
    start, end = np.array([r[START_NS] for r in calls]), np.array([r[END_NS] for r in calls])
    sends, recvs = match_messages(rank, peer, op, start, end)
    for s, r in zip(sends, recvs):
        if op[r] == mpi_calls.SENDRECV:
            calls[r][SOURCE] = int(rank[s])
            calls[r][SOURCE_TAG] = calls[s][TAG]


class _Definitions:
    """The archive's global definitions: system tree, locations, regions, attributes, metrics, communicators."""

    def __init__(self, writer, trace: Trace, lanes):
        import otf2
        self.otf2, self.writer, self.d = otf2, writer, writer.definitions
        d = self.d
        mpi = any(Kind.COMM in kinds for kinds in lanes.values())
        table = {"communicators": [c.as_json() for c in sorted(trace.communicators.values(), key=lambda c: c.id)]}
        for key, prop in F.PROPERTIES.items():
            value = {schema.META_RUN: trace.run, schema.META_MACHINE: trace.machine, schema.META_PEAK: trace.peak,
                     schema.META_CLOCK: trace.clock, schema.META_COMMUNICATORS: table if mpi else None}[key]
            if value is not None:
                _set_property(writer, prop, json.dumps(value))
        _set_property(writer, F.PROPERTY_VERSION, str(trace.version))
        ranks = sorted({r for r, _ in lanes})
        hosts = _hosts(trace.machine, ranks)
        machine = d.system_tree_node("machine", class_name="machine")
        nodes = {h: d.system_tree_node(h, class_name="node", parent=machine) for h in dict.fromkeys(hosts.values())}
        self.groups = {r: d.location_group(F.RANK_GROUP_NAME.format(rank=r), system_tree_parent=nodes[hosts[r]])
                       for r in ranks}
        self.locations = {(r, t): d.location(F.LOCATION_NAME.format(rank=r, thread=t), group=self.groups[r])
                          for r, t in lanes}
        self.attributes = {c: d.attribute(c, text, getattr(otf2.Type, _ATTRIBUTE_TYPES[c]))
                           for c, text in F.ATTRIBUTES.items()}
        self.state = d.metric(F.STATE_METRIC, description=F.STATE_DESCRIPTION, unit="state id",
                              value_type=otf2.Type.INT64, metric_mode=otf2.MetricMode.ABSOLUTE_NEXT)
        self.regions: dict[tuple[str, str], object] = {}
        self.counters: dict[str, object] = {}
        self.world = None
        self.comms: dict[int, tuple[object, tuple[int, ...]]] = {}      # our id -> (OTF2 comm, world ranks)
        if mpi:
            self._world(ranks, lanes)
            self._communicators(trace)

    def _world(self, ranks, lanes) -> None:
        """MPI_COMM_WORLD over ranks 0..max: its locations are each rank's thread 0 (where MPI runs)."""
        otf2, d = self.otf2, self.d
        members = []
        for r in range(max(ranks) + 1):
            if (r, 0) not in self.locations:
                group = self.groups.get(r) or d.location_group(F.RANK_GROUP_NAME.format(rank=r),
                                                               system_tree_parent=next(iter(d.system_tree_nodes)))
                self.locations[(r, 0)] = d.location(F.LOCATION_NAME.format(rank=r, thread=0), group=group)
            members.append(self.locations[(r, 0)])
        d.group("MPI", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=members)
        group = d.group(F.WORLD, group_type=otf2.GroupType.COMM_GROUP, paradigm=otf2.Paradigm.MPI,
                        members=list(range(len(members))))
        self.world = d.comm(F.WORLD, group=group)
        self.comms[communicators.WORLD_ID] = (self.world, tuple(range(len(members))))

    def _communicators(self, trace: Trace) -> None:
        """Every other communicator of the trace: a group of world ranks (positions in the MPI group above, whose
        k-th member is rank k's thread 0) and its communicator, named as the trace names it."""
        otf2, d = self.otf2, self.d
        for c in sorted(trace.communicators.values(), key=lambda c: c.id):
            if c.id == communicators.WORLD_ID:
                continue
            group = d.group(c.name, group_type=otf2.GroupType.COMM_GROUP, paradigm=otf2.Paradigm.MPI,
                            members=list(c.ranks))
            self.comms[c.id] = (d.comm(c.name, group=group), c.ranks)

    def comm_of(self, rec: dict) -> tuple[object, tuple[int, ...]]:
        """(OTF2 communicator, its world ranks) of an MPI call; a communicator the table lacks is the world."""
        cid = rec.get(COMMUNICATOR)
        return self.comms.get(communicators.WORLD_ID if cid is None else cid, self.comms[communicators.WORLD_ID])

    def region(self, kind: str, name: str):
        key = (kind, name)
        if key not in self.regions:
            otf2 = self.otf2
            if kind == Kind.COMM:
                role, paradigm = _mpi_role(name), otf2.Paradigm.MPI
            else:
                role = otf2.RegionRole.CODE if kind == Kind.PHASE else otf2.RegionRole.FUNCTION
                paradigm = otf2.Paradigm.USER
            self.regions[key] = self.d.region(name, region_role=role, paradigm=paradigm)
        return self.regions[key]

    def counter(self, name: str):
        if name not in self.counters:
            otf2 = self.otf2
            papi = name in F.PAPI_COUNTERS
            self.counters[name] = self.d.metric(
                name, metric_type=otf2.MetricType.PAPI if papi else otf2.MetricType.OTHER,
                metric_mode=otf2.MetricMode.RELATIVE_LAST if papi else otf2.MetricMode.ABSOLUTE_POINT,
                value_type=otf2.Type.DOUBLE)
        return self.counters[name]

    def finish(self) -> None:
        otf2 = self.otf2
        for group, kind in ((F.PHASE_GROUP, Kind.PHASE), (F.KERNEL_GROUP, Kind.KERNEL)):
            members = [r for (k, _), r in self.regions.items() if k == kind]
            if members:
                self.d.group(group, group_type=otf2.GroupType.REGIONS, members=members)


def _set_property(writer, name: str, value: str) -> None:
    import _otf2
    _otf2.Archive_SetProperty(writer.handle, name, value, False)


def _hosts(machine: dict | None, ranks: list[int]) -> dict[int, str]:
    machine = machine or {}
    per_rank = machine.get("hosts")
    default = str(machine.get("hostname") or "node")
    if isinstance(per_rank, list) and len(per_rank) > max(ranks, default=0):
        return {r: str(per_rank[r]) for r in ranks}
    return {r: default for r in ranks}


def _mpi_role(name: str):
    import otf2
    op, cls, base = mpi_calls.classify(name)
    if base == "MPI_Barrier":
        return otf2.RegionRole.BARRIER
    if op in (mpi_calls.COLL, mpi_calls.COLL_POST):
        return {mpi_calls.NXN: otf2.RegionRole.COLL_ALL2ALL, mpi_calls.ONE_TO_ALL: otf2.RegionRole.COLL_ONE2ALL,
                mpi_calls.ALL_TO_ONE: otf2.RegionRole.COLL_ALL2ONE}[cls]
    if op == mpi_calls.LOCAL:
        return otf2.RegionRole.FUNCTION
    return otf2.RegionRole.POINT2POINT


# --- one location's events ----------------------------------------------------------------------------------------

Event = tuple[int, str, tuple, dict]          # time, EventWriter method, its arguments after the time, attributes


def _lane_events(where: str, lane, recs: dict[str, list[dict]], defs: _Definitions) -> Iterator[Event]:
    """The location's events in time order: the region stack merged with the state and counter samples."""
    regions = list(_region_events(where, lane, recs, defs))
    samples = sorted(list(_state_samples(recs.get(Kind.STATE, []), defs)) +
                     list(_counter_samples(recs.get(Kind.COUNTER, []), defs)), key=lambda e: e[0])
    return heapq.merge(regions, samples, key=lambda e: e[0])


def _attrs(rec: dict, defs: _Definitions, columns) -> dict:
    return {defs.attributes[c]: int(rec[c]) for c in columns if rec.get(c) is not None}


def _region_events(where: str, lane, recs, defs: _Definitions) -> Iterator[Event]:
    """Enter/Leave of the thread's kernels, phases and MPI calls as one stack, with the MPI records inside."""
    intervals = [(r[START_NS], -r[END_NS], _NESTING[k], i, k, r)
                 for k in _NESTING for i, r in enumerate(recs.get(k, []))]
    intervals.sort(key=lambda x: x[:4])
    mpi = _Mpi(defs)
    stack: list[tuple[str, dict]] = []
    for start, _, _, _, kind, rec in intervals:
        while stack and stack[-1][1][END_NS] <= start:
            yield from _leave(*stack.pop(), defs, mpi)
        if stack and stack[-1][1][END_NS] < rec[END_NS]:
            outer = stack[-1]
            raise TraceError(f"{where}: cannot export: on rank {lane[0]} thread {lane[1]}, the {kind} {rec[NAME]!r} "
                             f"[{start}, {rec[END_NS]}] ns starts inside the {outer[0]} {outer[1][NAME]!r} "
                             f"[{outer[1][START_NS]}, {outer[1][END_NS]}] ns and ends after it; OTF2 keeps one "
                             "call stack per thread, so a thread's kernels, phases and MPI calls must nest")
        columns = ((STEP, LAYER, MICROSTEP, SEQ, PEER, BYTES, COMMUNICATOR, TAG) if kind == Kind.COMM
                   else (STEP, LAYER, MICROSTEP))
        yield start, "enter", (defs.region(kind, rec[NAME]),), _attrs(rec, defs, columns)
        if kind == Kind.COMM:
            yield from mpi.begin(rec)
        stack.append((kind, rec))
    while stack:
        yield from _leave(*stack.pop(), defs, mpi)


def _leave(kind: str, rec: dict, defs: _Definitions, mpi: _Mpi) -> Iterator[Event]:
    if kind == Kind.COMM:
        yield from mpi.end(rec)
    yield rec[END_NS], "leave", (defs.region(kind, rec[NAME]),), {}


class _Mpi:
    """The MPI records of one thread's calls, and its open requests (request id -> what completes it)."""

    def __init__(self, defs: _Definitions):
        self.defs, self.open, self.next_id = defs, {}, 1

    def _comm(self, rec: dict):
        return self.defs.comm_of(rec)[0]

    def _local(self, rec: dict, rank: int | None) -> int | None:
        """A world rank as its rank in the call's communicator (OTF2's, as MPI's); None when it is not a member."""
        ranks = self.defs.comm_of(rec)[1]
        return ranks.index(rank) if rank is not None and rank in ranks else None

    def _root(self, rec: dict) -> int:
        root = self._local(rec, rec[PEER]) if rec[NAME] in mpi_calls.ROOTED else None
        return F.UNDEFINED_RANK if root is None else root

    def begin(self, rec: dict) -> Iterator[Event]:
        op = mpi_calls.operation(rec[NAME])
        t, comm, nbytes = rec[START_NS], self._comm(rec), int(rec[BYTES] or 0)
        peer = self._local(rec, rec[PEER])
        if op == mpi_calls.COLL:
            yield t, "mpi_collective_begin", (), {}
        elif op == mpi_calls.COLL_POST:
            yield t, "non_blocking_collective_request", (self._request(rec),), {}
        elif op in (mpi_calls.SEND, mpi_calls.SENDRECV) and peer is not None:
            yield t, "mpi_send", (int(peer), comm, _tag(rec[TAG]), nbytes), {}
        elif op == mpi_calls.ISEND and peer is not None:
            yield t, "mpi_isend", (int(peer), comm, _tag(rec[TAG]), nbytes, self._request(rec)), {}
        elif op == mpi_calls.IRECV:
            yield t, "mpi_irecv_request", (self._request(rec),), {}

    def end(self, rec: dict) -> Iterator[Event]:
        op = mpi_calls.operation(rec[NAME])
        t, comm, nbytes, peer = rec[END_NS], self._comm(rec), int(rec[BYTES] or 0), self._local(rec, rec[PEER])
        source = self._local(rec, rec.get(SOURCE))
        if op == mpi_calls.COLL:
            yield t, "mpi_collective_end", (F.collective_op(rec[NAME]), comm, self._root(rec), nbytes, nbytes), {}
        elif op == mpi_calls.RECV and peer is not None:
            yield t, "mpi_recv", (int(peer), comm, _tag(rec[TAG]), nbytes), {}
        elif op == mpi_calls.SENDRECV and source is not None:
            yield t, "mpi_recv", (source, comm, _tag(rec.get(SOURCE_TAG)), nbytes), {}
        elif op == mpi_calls.WAIT:
            yield from self._complete(rec)

    def _request(self, rec: dict) -> int:
        rid, self.next_id = self.next_id, self.next_id + 1
        self.open[rid] = rec
        return rid

    def _complete(self, wait: dict) -> Iterator[Event]:
        """Completes the request the wait's seq names (a collective posting with that seq), else every open one."""
        named = [rid for rid, r in self.open.items() if wait[SEQ] is not None and r[SEQ] == wait[SEQ]
                 and r.get(COMMUNICATOR) == wait.get(COMMUNICATOR)]
        for rid in named or list(self.open):
            rec = self.open.pop(rid)
            t, comm, nbytes = wait[END_NS], self._comm(rec), int(rec[BYTES] or 0)
            peer = self._local(rec, rec[PEER])
            op = mpi_calls.operation(rec[NAME])
            if op == mpi_calls.COLL_POST:
                yield t, "non_blocking_collective_complete", (F.collective_op(rec[NAME]), comm, self._root(rec),
                                                               nbytes, nbytes, rid), {}
            elif op == mpi_calls.ISEND:
                yield t, "mpi_isend_complete", (rid,), {}
            elif op == mpi_calls.IRECV and peer is not None:
                yield t, "mpi_irecv", (int(peer), comm, _tag(rec[TAG]), nbytes, rid), {}


def _tag(tag: int | None) -> int:
    """A message's tag as OTF2 holds it (uint32): 0 where the trace has none, as our exports always wrote."""
    return 0 if tag is None or tag < 0 else int(tag)


def _state_samples(states: list[dict], defs: _Definitions) -> Iterator[Event]:
    states = sorted(states, key=lambda r: (r[START_NS], r[END_NS]))
    for i, rec in enumerate(states):
        yield rec[START_NS], "metric", (defs.state, int(rec[STATE])), {}
        following = states[i + 1][START_NS] if i + 1 < len(states) else None
        if following is None or following > rec[END_NS]:
            yield rec[END_NS], "metric", (defs.state, F.NO_STATE), {}


def _counter_samples(counters: list[dict], defs: _Definitions) -> Iterator[Event]:
    for rec in counters:
        value = rec[VALUE]
        yield (rec[START_NS], "metric", (defs.counter(rec[NAME]), math.nan if value is None else float(value)),
               _attrs(rec, defs, (STEP, LAYER, MICROSTEP)))
