"""The events of an imported .prv as records: MPI calls, functions (kernels), phases and counters.

Opening and closing events pair per thread and type as a stack; the attributes written in a record's opening line
(ours, and Extrae's collective sizes, root flag and communicator) become its columns; `3:` records give the bytes,
partner and tag of the point-to-point calls they fall in. `paraver_import` documents the mapping.

Values arrive as the int64 of their 64 bits (`paraver_parse`): Extrae's unsigned values of 2**63 and more are
negative here. Ids (functions, MPI calls, phases) work whatever their value, and a name made up from one shows it
unsigned; a hardware counter value of 2**63 or more is no count (Extrae prints a difference that went negative,
such as a counter reset, as unsigned) and is left out; Extrae's collective sizes and communicator ids of 2**63 or
more count as absent; our attributes outside their column's range are left null. The notes count each case.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from numba import njit

from gpt2trace.format import communicators
from gpt2trace.format.errors import TraceError
from gpt2trace.format.schema import (
    BLOCK,
    BYTES,
    COMMUNICATOR,
    FIELDS,
    LAYER,
    MICROSTEP,
    PEER,
    SEQ,
    STEP,
    TAG,
    TASK,
    VALUE,
    Kind,
)
from gpt2trace.interop import paraver_format as F
from gpt2trace.interop.paraver_parse import Body, Header
from gpt2trace.interop.paraver_pcf import Pcf
from gpt2trace.interop.paraver_records import Lanes, Notes, kind_table, require, to_ns

MPI_ATTRS = (F.MPI_SEND_SIZE, F.MPI_RECV_SIZE, F.MPI_ROOT, F.MPI_COMM)
# Attribute-like types read from a record's opening line: ours, Extrae's MPI ones, the task id (ovni's)
LINE_ATTRS = (*F.ATTRIBUTES, *MPI_ATTRS, F.TASK_ID)
FUNCTIONS = tuple(F.FUNCTION_LABELS)
# What a deferred comm table keeps for `paraver_stream` to complete it: the communicator id of a collective (-1:
# none), its seq computed here (not in the trace), Extrae's root flag on it.
COLLECTIVE_COLUMNS = ("_collective_comm", "_seq_computed", "_root_flag")
# In a window's tables: the record's event type (windows of a rank are merged by thread and type)
TYPE_COLUMN = "_event_type"
# What a 3: record may give the point-to-point calls it falls in
FILLS = (BYTES, PEER, TAG)
# The sides of a message, in the order they are tried: its sender at the logical send, its receiver at the
# logical receive, then at the physical receive
SEND, LOGICAL_RECEIVE, PHYSICAL_RECEIVE = 0, 1, 2


@dataclass(frozen=True)
class Sides:
    """The 3: records as the calls see them: a row per message and side tried (`message_sides`)."""
    index: np.ndarray             # the message's order among the trace's 3: records
    lane: np.ndarray
    when: np.ndarray              # ns
    step: np.ndarray              # SEND, LOGICAL_RECEIVE, PHYSICAL_RECEIVE
    size: np.ndarray
    tag: np.ndarray
    partner: np.ndarray           # the other side's rank

    WIDTH = 7

    def rows(self) -> np.ndarray:
        return np.column_stack([self.index, self.lane, self.when, self.step, self.size, self.tag, self.partner])

    @classmethod
    def of_rows(cls, rows: np.ndarray) -> Sides:
        return cls(*(np.ascontiguousarray(rows[:, k]) for k in range(cls.WIDTH)))


def message_lanes(path: Path, header: Header, lanes: Lanes, cm: np.ndarray,
                  line: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sender's and the receiver's lanes of the 3: records `cm` (at `line`), every field checked: every import
    checks every message, whether or not a call takes it."""
    s_lane = lanes.lane(path, cm, line, "sender", 0)
    r_lane = lanes.lane(path, cm, line, "receiver", 6)
    for k, what in ((4, "logical send"), (5, "physical send"), (10, "logical receive"),
                    (11, "physical receive")):
        to_ns(path, header, line, cm[:, k], what)
    require(path, line, cm[:, 12] >= 0, lambda i: f"message size {cm[i, 12]} is negative")
    return s_lane, r_lane


def message_sides(path: Path, header: Header, lanes: Lanes, cm: np.ndarray, line: np.ndarray,
                  index: np.ndarray) -> Sides:
    """The sides of the 3: records `cm` (at `line`, numbered `index`), checked."""
    s_lane, r_lane = message_lanes(path, header, lanes, cm, line)
    n = len(cm)
    s_rank, r_rank = lanes.rank[s_lane], lanes.rank[r_lane]
    return Sides(np.tile(index, 3), np.concatenate([s_lane, r_lane, r_lane]),
                 np.concatenate([cm[:, 4], cm[:, 10], cm[:, 11]]) * header.unit_ns,
                 np.repeat(np.array([SEND, LOGICAL_RECEIVE, PHYSICAL_RECEIVE]), n), np.tile(cm[:, 12], 3),
                 np.tile(cm[:, 13], 3), np.concatenate([r_rank, s_rank, s_rank]))


@dataclass(frozen=True)
class Opens:
    """Pairs open at the end of a window, bottom of each stack first: their event line's fields, line number, type
    and value, and what was found for them at their opening (attributes, seq, the messages so far)."""
    events: np.ndarray            # (n, 5) the event line's place and time, as `Body.events`
    line: np.ndarray
    type: np.ndarray
    value: np.ndarray
    attrs: dict                   # LINE_ATTRS type -> (value, present)
    seq: tuple                    # (value, present) of MPI calls
    computed: np.ndarray          # whether seq was computed here
    fills: dict                   # FILLS column -> (given, step, index, value)

    @classmethod
    def none(cls) -> Opens:
        z, b = np.zeros(0, np.int64), np.zeros(0, bool)
        return cls(np.zeros((0, 5), np.int64), z, z, z, {t: (z, b) for t in LINE_ATTRS}, (z, b), b,
                   {f: _no_fills(0) for f in FILLS})

    def prepended(self, body: Body) -> Body:
        """`body` with these pairs' event lines first, one pair each."""
        n = len(self.line)
        return Body(body.states, body.state_line, np.concatenate([self.events, body.events]),
                    np.concatenate([self.line, body.event_line]),
                    np.concatenate([np.arange(n), body.pair_rec + n]), np.concatenate([self.type, body.pair_type]),
                    np.concatenate([self.value, body.pair_value]), body.comms, body.comm_line, body.lines)


class Window:
    """What the import of one rank carries from a time window to the next (`Events` with `window`): the pairs
    still open, the number of collectives per communicator so far (seq numbers count them), per thread the
    point-to-point call that started last among those that ended (a message after its end falls in no call, as
    in the whole trace), and which messages' logical receive fell in a call (`received`, by message index)."""

    def __init__(self, received: np.ndarray):
        self.opens = Opens.none()
        self.offsets: dict[int, int] = {}
        self.received = received
        self.last = np.zeros(0, np.int64)      # each lane's last record so far (`Events.last_ns`)
        self.final = False
        self._ghost: dict[int, tuple[int, int]] = {}

    def ghosts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        items = sorted(self._ghost.items())
        return tuple(np.array(x, np.int64) for x in ([k for k, _ in items], [v[0] for _, v in items],
                                                     [v[1] for _, v in items]))

    def closed(self, lane: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """Point-to-point calls that ended in this window, in the order of the records."""
        if not len(lane):
            return
        order = np.lexsort((np.arange(len(lane)), start, lane))
        last = order[np.r_[lane[order][1:] != lane[order][:-1], True]]
        for ln, st, en in zip(lane[last].tolist(), start[last].tolist(), end[last].tolist()):
            if ln not in self._ghost or st >= self._ghost[ln][0]:
                self._ghost[ln] = (st, en)


class Events:
    """The event pairs with their place and time, classified, paired and joined with their attributes.

    `body` may be the whole trace or the part of one rank (with the `3:` records it sends or receives, numbered by
    `message_index` in the trace, or given as `sides`): every step is per thread or per rank but two. The roots of
    collectives (a call's peer from the root's flag, on another rank) and the communicator bits of computed seq
    numbers (whether the whole trace uses several communicators) need every rank: with `deferred`, the comm table
    keeps what they need in the COLLECTIVE_COLUMNS and `paraver_stream` completes it once all ranks have been
    seen; `attached_index` tells which `3:` records fell in a call (the note about the others is then the
    caller's).

    With `window`, `body` is one time window of a rank (`paraver_windows`): the pairs the window before left open
    come first in it, with what they had found; only the records that close in it come out (every one in the
    last window), in the tables' TYPE_COLUMN their event type; `carry` is what the next window takes."""

    def __init__(self, path: Path, header: Header, body: Body, lanes: Lanes, comm_ids: dict[int, int] | None = None,
                 deferred: bool = False, message_index: np.ndarray | None = None, sides: Sides | None = None,
                 window: Window | None = None):
        self.path, self.header, self.lanes = path, header, lanes
        self.comm_ids = comm_ids or {}       # Paraver communicator id -> ours (`header_communicators`)
        self.deferred = deferred or window is not None
        self.window = window
        self.final = window is None or window.final
        self.carried = 0 if window is None else len(window.opens.line)
        if self.carried:
            body = window.opens.prepended(body)
        self.body = body
        self.sides = sides
        self.message_index = message_index                # of body.comms in the trace (default: their order)
        self.attached_index = np.zeros(0, np.int64)     # the 3: records (their index) that fell in a call
        self.carry: Opens | None = None                  # a window's pairs still open at its end
        ev_lane = lanes.lane(path, body.events, body.event_line, "event record")
        ev_time = to_ns(path, header, body.event_line, body.events[:, 4], "event time")
        self.row = body.pair_rec                          # the pair's line (row in body.events)
        self.lane, self.time = ev_lane[self.row], ev_time[self.row]
        self.type, self.value = body.pair_type, body.pair_value
        self._emitted = np.ones(len(self.type), bool)

    def records(self, pcf: Pcf, notes: Notes) -> list[pa.Table]:
        t = self.type
        mpi = (t >= F.MPI_P2P) & (t <= F.MPI_IO)
        ranged = mpi | np.isin(t, FUNCTIONS) | (t == F.PHASE) | (t == F.TASK_TYPE)
        attr = np.isin(t, LINE_ATTRS)
        hwc = (t >= F.HWC_FIRST) & (t <= F.HWC_LAST) & ~np.isin(t, F.HWC_SET_IDS)
        wrapped = hwc & (self.value < 0)                   # unsigned 2**63 and more: no count
        if wrapped.any():
            notes.add("{n} hardware counter value(s) of 2**63 or more (Extrae prints a difference that went "
                      "negative as unsigned) are no counts and were left out", int(wrapped.sum()))
        counter = (hwc & ~wrapped) | ((t >= F.COUNTER_FIRST) & (t <= F.COUNTER_LAST))
        other = ~(ranged | attr | counter | wrapped)
        if other.any():
            notes.skipped(*np.unique(t[other], return_counts=True), pcf.types)
        opens, ends, closed = self._pair(np.flatnonzero(ranged), notes)
        emit = closed | self.final
        self._emitted[opens[~emit]] = False
        starts = np.concatenate([opens, np.flatnonzero(counter)])
        attrs = self._attributes(starts, np.flatnonzero(attr), len(opens), notes)
        a = {typ: (v[:len(opens)], ok[:len(opens)]) for typ, (v, ok) in attrs.items()}
        c = {typ: (v[len(opens):], ok[len(opens):]) for typ, (v, ok) in attrs.items()}
        if self.carried:
            k = self.row[opens]
            old = np.flatnonzero(k < self.carried)
            for typ, (v, ok) in a.items():
                v[old], ok[old] = self.window.opens.attrs[typ][0][k[old]], self.window.opens.attrs[typ][1][k[old]]
        kind_of = self.type[opens]
        out = []
        self._comm_carry = None
        for sel, build in (((kind_of >= F.MPI_P2P) & (kind_of <= F.MPI_IO), self._comms),
                           (np.isin(kind_of, FUNCTIONS), self._kernels), (kind_of == F.PHASE, self._phases),
                           (kind_of == F.TASK_TYPE, self._tasks)):
            if sel.any() and (build == self._comms or emit[sel].any()):
                table = build(opens[sel], ends[sel], {k: (v[sel], ok[sel]) for k, (v, ok) in a.items()}, pcf, notes)
                if table.num_rows:
                    out.append(table)
        cidx = np.flatnonzero(counter)
        if len(cidx):
            out.append(self._counters(cidx, c, pcf, notes))
        if not self.final:
            self.carry = self._still_open(opens[~emit], {k: (v[~emit], ok[~emit]) for k, (v, ok) in a.items()})
        if not self.deferred:         # the whole trace: its body holds every 3: record
            notes.add("{n} message(s) (3: records) fall in no point-to-point MPI call of their sender or receiver",
                      len(self.body.comms) - len(self.attached_index))
        return out

    def _pair(self, idx: np.ndarray, notes: Notes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Opening pairs, the time each closes and whether it closes, stacked per thread and type in time order
        (file order at one instant). MPI calls never nest on a thread, so for their types a new value closes the
        open call, as Paraver reads a value change (old MPItrace traces write calls so); functions, phases and
        tasks nest. A pair never closed ends at its thread's last record: not at the header's end, which may be
        far beyond the thread's run. In a window but the last, the pairs still open are not closed yet: they go
        on to the next window (`carry`), not to the notes."""
        order = idx[np.lexsort((idx, self.time[idx], self.type[idx], self.lane[idx]))]
        opened, closed = np.empty(len(order), np.int64), np.empty(len(order), np.int64)
        t = self.type[order]
        change = (t >= F.MPI_P2P) & (t <= F.MPI_IO)
        n, stray, changed = _stack_pairs(self.lane[order], t, self.value[order], change, opened, closed)
        opens = order[opened[:n]]
        shut = closed[:n]
        last = self.last_ns()
        ends = np.where(shut >= 0, self.time[order[np.maximum(shut, 0)]], last[self.lane[opens]])
        if self.final:
            notes.add("warning: {n} event(s) never closed (value 0); each is cut at its thread's last record",
                      int((shut < 0).sum()))
        notes.add("{n} MPI call(s) closed by the next call's event of their type (a value change, as Paraver reads "
                  "it) instead of a value 0", int(changed))
        notes.add("{n} closing event(s) (value 0) without an open one were ignored", int(stray))
        return opens, ends, shut >= 0

    def last_ns(self) -> np.ndarray:
        """Each lane's last record so far (state end or event time, ns; -1 for none): in a window, over every
        window up to this one and the rank's states (`Window.last`)."""
        last = np.full(len(self.lanes.rank), -1, np.int64) if self.window is None else self.window.last
        if len(self.lane):
            np.maximum.at(last, self.lane, self.time)
        st = self.body.states
        if len(st):
            lane = self.lanes.lane(self.path, st, self.body.state_line, "state record")
            np.maximum.at(last, lane, st[:, 5] * self.header.unit_ns)
        return last

    def _still_open(self, pairs: np.ndarray, attrs: dict) -> Opens:
        """The pairs open at the window's end, in the order of their stacks (bottom first), with what they carry."""
        order = np.lexsort((pairs, self.time[pairs], self.type[pairs], self.lane[pairs]))
        pairs = pairs[order]
        rows = self.row[pairs]
        n = len(pairs)
        comm = {"seq": (np.zeros(n, np.int64), np.zeros(n, bool)), "computed": np.zeros(n, bool),
                "fills": {f: _no_fills(n) for f in FILLS}}
        if self._comm_carry is not None and n:
            which, seq, computed, fills = self._comm_carry
            by = np.argsort(which)
            at = np.minimum(np.searchsorted(which[by], pairs), len(which) - 1)
            hit = np.flatnonzero(which[by][at] == pairs)
            src = by[at[hit]]
            comm["seq"][0][hit], comm["seq"][1][hit] = seq[0][src], seq[1][src]
            comm["computed"][hit] = computed[src]
            for f in FILLS:
                for dst, got in zip(comm["fills"][f], fills[f]):
                    dst[hit] = got[src]
        return Opens(self.body.events[rows], self.body.event_line[rows], self.type[pairs], self.value[pairs],
                     {typ: (v[order], ok[order]) for typ, (v, ok) in attrs.items()}, comm["seq"], comm["computed"],
                     comm["fills"])

    def _emitted_only(self, opens, ends, attrs):
        keep = self._emitted[opens]
        if keep.all():
            return opens, ends, attrs
        return opens[keep], ends[keep], {k: (v[keep], ok[keep]) for k, (v, ok) in attrs.items()}

    def _typed(self, table: pa.Table, opens: np.ndarray) -> pa.Table:
        """In a window, the records' event type in a column of its own: windows are merged by (thread, type)."""
        if self.window is None:
            return table
        return table.append_column(TYPE_COLUMN, pa.array(self.type[opens], pa.int64()))

    def _attributes(self, starts: np.ndarray, attr_idx: np.ndarray, n_open: int, notes: Notes) -> dict:
        """For each attribute type, (value, present) of every record start: the attribute in the same line, else
        (a line of Extrae's split at one instant) one at the same thread and time as an MPI call's start. Values
        out of range for what they give (see the module's docstring) count as absent."""
        rows = self.row[starts]
        out = {}
        has_start = np.zeros(len(self.body.events), bool)
        has_start[rows] = True
        for typ in LINE_ATTRS:
            sel = attr_idx[self.type[attr_idx] == typ]
            value, ok = np.zeros(len(starts), np.int64), np.zeros(len(starts), bool)
            if len(sel):
                i = np.searchsorted(self.row[sel], rows, side="right") - 1
                hit = (i >= 0) & (self.row[sel][np.maximum(i, 0)] == rows)
                value[hit], ok[hit] = self.value[sel][i[hit]], True
                orphan = sel[~has_start[self.row[sel]]]
                if len(orphan) and n_open:
                    self._orphans(orphan, starts[:n_open], value, ok)
            low, high = _ATTRIBUTE_RANGES[typ]
            outside = ok & ((value < low) | (value > high))
            if outside.any():
                label = F.ATTRIBUTES.get(typ) or F.MPI_ATTR_LABELS.get(typ) or F.TASK_ID_LABEL
                notes.add(f"{{n}} value(s) of event type {typ} ({label}) outside {low}..{high} were left out",
                          int(outside.sum()))
                ok = ok & ~outside
            out[typ] = (value, ok)
        return out

    def _orphans(self, orphan: np.ndarray, opens: np.ndarray, value: np.ndarray, ok: np.ndarray) -> None:
        width = self.header.end_ns + 1
        if (int(self.lane.max()) + 1) * width >= 2**62:
            return
        key = self.lane[opens] * width + self.time[opens]
        order = np.argsort(key, kind="stable")
        okey = self.lane[orphan] * width + self.time[orphan]
        i = np.searchsorted(key[order], okey, side="right") - 1
        hit = (i >= 0) & (key[order][np.maximum(i, 0)] == okey)
        target = order[i[hit]]
        free = ~ok[target]
        value[target[free]], ok[target[free]] = self.value[orphan][hit][free], True

    # --- kinds -----------------------------------------------------------------------------------------------

    def _kernels(self, opens, ends, attrs, pcf: Pcf, notes) -> pa.Table:
        opens, ends, attrs = self._emitted_only(opens, ends, attrs)
        names = self._names(opens, pcf, lambda typ, v: f"{F.FUNCTION_LABELS.get(typ, 'function')} {_unsigned(v)}")
        cols = _columns(attrs, (STEP, LAYER, MICROSTEP))
        return self._typed(kind_table(Kind.KERNEL, self.lanes, self.lane[opens], self.time[opens], ends, cols,
                                      names), opens)

    def _phases(self, opens, ends, attrs, pcf: Pcf, notes) -> pa.Table:
        opens, ends, attrs = self._emitted_only(opens, ends, attrs)
        names = self._names(opens, pcf, lambda typ, v: f"phase {_unsigned(v)}")
        cols = _columns(attrs, (STEP, LAYER, MICROSTEP))
        return self._typed(kind_table(Kind.PHASE, self.lanes, self.lane[opens], self.time[opens], ends, cols,
                                      names), opens)

    def _tasks(self, opens, ends, attrs, pcf: Pcf, notes) -> pa.Table:
        """Tasks from their type events, the id from the task ID event in the same line (value - 1); their
        predecessors are not in a .prv: `preds` is null (unknown), and the analyses see no dependency edges."""
        opens, ends, attrs = self._emitted_only(opens, ends, attrs)
        names = self._names(opens, pcf, lambda typ, v: f"task type {_unsigned(v)}")
        cols = _columns(attrs, (STEP, LAYER, MICROSTEP, BLOCK))
        value, ok = attrs[F.TASK_ID]
        cols[TASK] = (value - 1, ok)
        notes.add("{n} task(s) imported without their predecessors (a .prv holds no dependency edges): the task "
                  "graph's critical path and ready tasks are not known", len(opens))
        return self._typed(kind_table(Kind.TASK, self.lanes, self.lane[opens], self.time[opens], ends, cols,
                                      names), opens)

    def _comms(self, opens, ends, attrs, pcf: Pcf, notes) -> pa.Table:
        lane, start = self.lane[opens], self.time[opens]
        rank = self.lanes.rank[lane]
        cols = _columns(attrs, (STEP, LAYER, MICROSTEP, SEQ, PEER, BYTES, COMMUNICATOR, TAG))
        nbytes, has_bytes = (a.copy() for a in cols[BYTES])
        send, recv = attrs[F.MPI_SEND_SIZE], attrs[F.MPI_RECV_SIZE]
        sizes = np.maximum(np.where(send[1], send[0], -1), np.where(recv[1], recv[0], -1))
        use = ~has_bytes & (sizes >= 0)
        nbytes[use], has_bytes[use] = sizes[use], True
        coll = self.type[opens] == F.MPI_COLLECTIVE
        cid = np.where(attrs[F.MPI_COMM][1], attrs[F.MPI_COMM][0], 0)
        k = self.row[opens]
        old = k < self.carried                              # opened in an earlier window
        offsets = None if self.window is None else self.window.offsets
        seq, computed = _collective_seq(rank, start, coll, cid, cols[SEQ], ~old, offsets)
        if old.any():
            carried = self.window.opens
            seq[0][old], seq[1][old], computed[old] = carried.seq[0][k[old]], carried.seq[1][k[old]], \
                carried.computed[k[old]]
        flagged = coll & attrs[F.MPI_ROOT][1] & (attrs[F.MPI_ROOT][0] == 1)
        peer = cols[PEER]
        if not self.deferred:
            seq = (shift_seq(seq[0], computed, cid, len(np.unique(cid[coll])) > 1), seq[1])
            peer = fill_roots(*root_table(rank[flagged], cid[flagged], seq[0][flagged]), coll, cid, seq, peer)
        p2p = self.type[opens] == F.MPI_P2P
        # a trace whose .pcf defines our tag attribute (our export) has every tag in it: a call without one has none
        tag_given = F.ATTRIBUTE_TYPES[TAG] in pcf.types
        tag = cols[TAG] if tag_given else (cols[TAG][0].copy(), cols[TAG][1].copy())
        given = {BYTES: (nbytes, has_bytes), PEER: peer, TAG: None if tag_given else tag}
        fills = self._messages(opens, lane, start, ends, p2p)
        (nbytes, has_bytes), peer, filled_tag = (_filled(given[f], fills[f]) for f in FILLS)
        if not tag_given:
            tag = filled_tag
        cols.update({BYTES: (nbytes, has_bytes), SEQ: seq, PEER: peer, TAG: tag,
                     COMMUNICATOR: self._communicator(cols[COMMUNICATOR], attrs[F.MPI_COMM])})
        emit = self._emitted[opens]
        if self.window is not None:
            done = p2p & emit
            self.window.closed(lane[done], start[done], ends[done])
        if not emit.all():
            still = ~emit
            self._comm_carry = (opens[still], (seq[0][still], seq[1][still]), computed[still],
                                {f: tuple(x[still] for x in fills[f]) for f in FILLS})
            opens, lane, start, ends = opens[emit], lane[emit], start[emit], ends[emit]
            cols = {c: (v[emit], ok[emit]) for c, (v, ok) in cols.items()}
            coll, cid, computed, flagged = coll[emit], cid[emit], computed[emit], flagged[emit]
        names = self._names(opens, pcf, lambda typ, v: F.MPI_NAMES.get(v, f"MPI call {_unsigned(v)}"),
                            prefer_builtin=True)
        table = kind_table(Kind.COMM, self.lanes, lane, start, ends, cols, names)
        if self.deferred:
            for col, values in zip(COLLECTIVE_COLUMNS, (np.where(coll, cid, -1), computed, flagged)):
                table = table.append_column(col, pa.array(values))
        return self._typed(table, opens)

    def _communicator(self, ours, extrae):
        """Our attribute where the trace has it (our exports); else Extrae's communicator id of a collective, as
        the id `header_communicators` gave it; else null (the world)."""
        value, ok = ours[0].copy(), ours[1].copy()
        if not self.comm_ids:
            return value, ok
        known = np.array(sorted(self.comm_ids), dtype=np.int64)
        mapped = np.array([self.comm_ids[k] for k in known], dtype=np.int64)
        i = np.minimum(np.searchsorted(known, extrae[0]), len(known) - 1)
        use = ~ok & extrae[1] & (known[i] == extrae[0])
        value[use], ok[use] = mapped[i[use]], True
        return value, ok

    def _messages(self, opens, lane, start, end, p2p) -> dict:
        """For each of BYTES, PEER, TAG, what the 3: records give the point-to-point calls: (given, step, message
        index, value) per call, with `_fill`'s precedence; the calls carried from an earlier window bring theirs."""
        n = len(opens)
        fills = {f: _no_fills(n) for f in FILLS}
        if self.carried:
            k = self.row[opens]
            old = np.flatnonzero(k < self.carried)
            for f in FILLS:
                for dst, got in zip(fills[f], self.window.opens.fills[f]):
                    dst[old] = got[k[old]]
        if self.sides is None:
            cm = self.body.comms
            if not len(cm):
                return fills
            index = np.arange(len(cm)) if self.message_index is None else self.message_index
            self.sides = message_sides(self.path, self.header, self.lanes, cm, self.body.comm_line, index)
        sd = self.sides
        if not len(sd.index):
            return fills
        call = self._attach(lane, start, end, p2p, sd)
        hit = call >= 0
        self.attached_index = np.unique(sd.index[hit])
        c, step, index = call[hit], sd.step[hit], sd.index[hit]
        tag_ok = (sd.tag[hit] >= _TAGS[0]) & (sd.tag[hit] <= _TAGS[1])
        for f, value, use in ((BYTES, sd.size[hit], None), (PEER, sd.partner[hit], None), (TAG, sd.tag[hit], tag_ok)):
            fills[f] = _fill(fills[f], c, step, index, value, use)
        return fills

    def _attach(self, lane, start, end, p2p, sd: Sides) -> np.ndarray:
        """The point-to-point call (its position) each side of a message falls in, -1 for none: the call of the
        thread that started last at or before the side's time, if it has not ended before it. A receiver tries its
        logical receive first and its physical receive only when that fell in no call."""
        path, header = self.path, self.header
        width = header.end_ns + 1
        ghost = (np.zeros(0, np.int64),) * 3 if self.window is None else self.window.ghosts()
        c_lane = np.concatenate([ghost[0], lane[p2p]])
        if (int(max(lane.max(initial=0), c_lane.max(initial=0), sd.lane.max())) + 1) * width >= 2**62:
            raise TraceError(f"{path}: too many threads x too long a trace to match messages with their calls")
        c_start, c_end = np.concatenate([ghost[1], start[p2p]]), np.concatenate([ghost[2], end[p2p]])
        c_pos = np.concatenate([np.full(len(ghost[0]), -1), np.flatnonzero(p2p)])
        key = c_lane * width + c_start
        order = np.argsort(key, kind="stable")       # a ghost before a call at the same start: the call wins
        skey = key[order]
        call = np.full(len(sd.index), -1)
        received = self.window.received if self.window is not None else np.zeros(int(sd.index.max()) + 1, bool)
        for step in (SEND, LOGICAL_RECEIVE, PHYSICAL_RECEIVE):
            rows = np.flatnonzero(sd.step == step)
            if step == PHYSICAL_RECEIVE:
                rows = rows[~received[sd.index[rows]]]
            if not len(rows) or not len(skey):
                continue
            when, at_lane = sd.when[rows], sd.lane[rows]
            i = np.searchsorted(skey, at_lane * width + when, side="right") - 1
            j = order[np.maximum(i, 0)]
            ok = (i >= 0) & (c_lane[j] == at_lane) & (c_end[j] >= when) & (c_pos[j] >= 0)
            call[rows[ok]] = c_pos[j[ok]]
            if step == LOGICAL_RECEIVE:
                received[sd.index[rows[ok]]] = True
        return call

    def _counters(self, idx, attrs, pcf: Pcf, notes) -> pa.Table:
        typ = self.type[idx]
        value = self.value[idx].astype(np.float64)
        types, inverse = _factorize(typ)
        dictionary: dict[str, int] = {}
        code_of_type = np.empty(len(types), np.int32)
        for k, ty in enumerate(types):
            name, scale = _counter_name(int(ty), pcf)
            code_of_type[k] = dictionary.setdefault(name, len(dictionary))
            value[inverse == k] /= scale      # a division undoes the export's scaling exactly where it was exact
        cols = {STEP: attrs[F.ATTRIBUTE_TYPES[STEP]], LAYER: attrs[F.ATTRIBUTE_TYPES[LAYER]],
                MICROSTEP: attrs[F.ATTRIBUTE_TYPES[MICROSTEP]], VALUE: (value, None)}
        t = self.time[idx]
        names = (code_of_type[inverse], list(dictionary))
        return kind_table(Kind.COUNTER, self.lanes, self.lane[idx], t, t, cols, names)

    def _names(self, opens, pcf: Pcf, fallback, prefer_builtin: bool = False) -> tuple[np.ndarray, list[str]]:
        """(codes, dictionary): the names of the records' (type, value), the dictionary in (type, value) order, so
        names keep the order our export gave them (their order of first appearance in the original trace)."""
        typ, val = self.type[opens], self.value[opens]
        types, t_inv = _factorize(typ)
        values, v_inv = _factorize(val)
        pair_key, inverse = _factorize(t_inv * len(values) + v_inv)       # sorted by (type, value)
        pairs = np.stack([types[pair_key // len(values)], values[pair_key % len(values)]], axis=1)
        dictionary: dict[str, int] = {}
        code_of_pair = np.empty(len(pairs), np.int32)
        for k, (ty, v) in enumerate(pairs):
            label = pcf.value_label(int(ty), int(v))
            builtin = fallback(int(ty), int(v))
            name = builtin if (prefer_builtin and int(v) in F.MPI_NAMES) or label is None else label
            code_of_pair[k] = dictionary.setdefault(name, len(dictionary))
        return code_of_pair[inverse], list(dictionary)


def header_communicators(header: Header, lanes: Lanes) -> tuple[dict[int, int], list]:
    """The .prv header's `c:` lines as our communicators: (Paraver id -> our id, [Communicator]). The first one
    holding every task of its application is the world (id 0); the others get ids 1, 2, ... in the header's order
    and the name `comm<Paraver id>`. Members are world ranks (the task's global order)."""
    groups = {}
    for (appl, cid), tasks in header.communicators.items():
        groups.setdefault(cid, (appl, tasks))       # the same id in another application: the first one names it
    world = next((cid for cid, (appl, tasks) in groups.items() if len(tasks) == lanes.ntasks[appl - 1]), None)
    others = iter(range(1, len(groups) + 1))
    ids, table = {}, []
    for cid, (appl, tasks) in groups.items():
        ids[cid] = communicators.WORLD_ID if cid == world else next(others)
        name = communicators.WORLD_NAME if cid == world else f"comm{cid}"
        table.append(communicators.Communicator(ids[cid], name,
                                                tuple(int(lanes.task_base[appl - 1] + t - 1) for t in tasks)))
    return ids, table


def _unsigned(value: int) -> int:
    """An event value as Extrae wrote it (unsigned 64-bit)."""
    return int(value) % 2**64


def _range(typ: pa.DataType) -> tuple[int, int]:
    bits = typ.bit_width
    return -2**(bits - 1), 2**(bits - 1) - 1


# What each attribute type may hold: ours their column's range (the schema's integer types); Extrae's are
# unsigned (2**63 and more arrive negative: absent), and its communicator ids must fit the seq arithmetic (id << 32).
_ATTRIBUTE_RANGES = {**{typ: _range(FIELDS[col]) for typ, col in F.ATTRIBUTES.items()},
                     F.MPI_SEND_SIZE: (0, 2**63 - 1), F.MPI_RECV_SIZE: (0, 2**63 - 1), F.MPI_ROOT: (0, 2**63 - 1),
                     F.MPI_COMM: (0, 2**31 - 1), F.TASK_ID: (1, 2**63 - 1)}


_TAGS = _range(FIELDS[TAG])      # a 3: record's tag beyond the column's range is left out (MPI's are far below)


def _columns(attrs: dict, cols: tuple[str, ...]) -> dict:
    """Our attribute types' (values, present) as the columns they carry."""
    return {c: attrs[F.ATTRIBUTE_TYPES[c]] for c in cols}


def _factorize(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, index of each element's value): by counting when the values are small
    non-negative ints (ids, the usual case), else by sorting."""
    x = np.asarray(x, np.int64)
    if not len(x):
        return x, np.zeros(0, np.int64)
    lo, hi = int(x.min()), int(x.max())
    if lo >= 0 and hi < 4 * len(x) + 4096:
        present = np.flatnonzero(np.bincount(x, minlength=hi + 1))
        lookup = np.zeros(hi + 1, np.int64)
        lookup[present] = np.arange(len(present))
        return present, lookup[x]
    uniq, inverse = np.unique(x, return_inverse=True)
    return uniq, inverse.ravel()


def _counter_name(typ: int, pcf: Pcf) -> tuple[str, float]:
    """The counter's name and the scale its values were multiplied by in the .prv."""
    label = pcf.types.get(typ)
    if F.COUNTER_FIRST <= typ <= F.COUNTER_LAST:
        if label and label.startswith(F.COUNTER_LABEL_PREFIX):
            name = label[len(F.COUNTER_LABEL_PREFIX):]
            if name.endswith(F.COUNTER_LABEL_SUFFIX):
                return name[:-len(F.COUNTER_LABEL_SUFFIX)], F.COUNTER_SCALE
            return name, 1.0
        return f"counter {typ}", 1.0
    if typ in F.HWC_NAMES:
        return F.HWC_NAMES[typ], 1.0
    return (label.split()[0] if label else f"counter {typ}"), 1.0


def _no_fills(n: int) -> tuple:
    return np.zeros(n, bool), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)


def _fill(current: tuple, call, step, index, value, use=None) -> tuple:
    """(given, step, index, value) per call with the messages that fell in it: the first step that reached it
    wins, and in it the message listed last (as if each message in turn overwrote the one before)."""
    if use is not None:
        call, step, index, value = call[use], step[use], index[use], value[use]
    has, st, ix, val = (x.copy() for x in current)
    if not len(call):
        return has, st, ix, val
    cur = np.flatnonzero(has)
    c, s, i, v = (np.concatenate(p) for p in ((call, cur), (step, st[cur]), (index, ix[cur]), (value, val[cur])))
    order = np.lexsort((-i, s, c))
    first = order[np.r_[True, c[order][1:] != c[order][:-1]]]
    has[c[first]], st[c[first]], ix[c[first]], val[c[first]] = True, s[first], i[first], v[first]
    return has, st, ix, val


def _filled(given, fills):
    """A column's (value, present): what the call's own line gave, else what a message gave."""
    if given is None:
        return None
    value, ok = given[0].copy(), given[1].copy()
    use = ~ok & fills[0]
    value[use], ok[use] = fills[3][use], True
    return value, ok


def _collective_seq(rank, start, coll, cid, seq, new=None, offsets=None):
    """Our seq where the trace has it; else the call's order among its rank's collectives on its communicator
    (every rank calls a communicator's collectives in the same order). Returns ((value, present), computed): the
    computed ones get the communicator's id in their high bits from `shift_seq`. In a window, only the `new`
    calls are numbered, after the `offsets` collectives each communicator had before (updated)."""
    value, ok = seq[0].copy(), seq[1].copy()
    mine = coll if new is None else coll & new
    need = mine & ~ok
    idx = np.flatnonzero(mine)
    base = np.zeros(len(rank), np.int64)
    if offsets is not None and len(idx):
        ids, counts = np.unique(cid[idx], return_counts=True)
        base[idx] = [offsets.get(c, 0) for c in cid[idx].tolist()]
        for c, n in zip(ids.tolist(), counts.tolist()):
            offsets[c] = offsets.get(c, 0) + n
    if not need.any():
        return (value, ok), need
    order = idx[np.lexsort((start[idx], cid[idx], rank[idx]))]
    group = rank[order] * (int(cid.max()) + 1) + cid[order]
    first = np.r_[0, np.flatnonzero(group[1:] != group[:-1]) + 1]
    ordinal = np.arange(len(order)) - np.repeat(first, np.diff(np.r_[first, len(order)]))
    computed = np.zeros(len(rank), np.int64)
    computed[order] = ordinal + base[order]
    value[need], ok[need] = computed[need], True
    return (value, ok), need


def shift_seq(seq: np.ndarray, computed: np.ndarray, cid: np.ndarray, several: bool) -> np.ndarray:
    """Computed seq numbers with the communicator's id in the high 32 bits when the trace's collectives use more
    than one communicator (`several`: a property of the whole trace)."""
    if not several or not computed.any():
        return seq
    out = seq.copy()
    out[computed] += cid[computed] << 32
    return out


def root_table(rank: np.ndarray, cid: np.ndarray, seq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys sorted, root ranks) of the calls that carry Extrae's root flag: one key per collective instance."""
    key = cid * (2**40) + seq
    order = np.argsort(key, kind="stable")
    return key[order], rank[order]


def fill_roots(keys, roots, coll, cid, seq, peer):
    """The root's rank (`root_table`) as the peer of every call of a rooted collective instance that has none."""
    value, ok = peer[0].copy(), peer[1].copy()
    if not len(keys):
        return value, ok
    key = np.where(coll & seq[1], cid * (2**40) + seq[0], -1)
    i = np.searchsorted(keys, key)
    hit = coll & ~ok & (key >= 0) & (i < len(keys)) & (keys[np.minimum(i, len(keys) - 1)] == key)
    value[hit], ok[hit] = roots[i[hit]], True
    return value, ok


@njit(cache=True)
def _stack_pairs(lane, typ, value, change, opened, closed):
    """Pairs each opening event (value != 0) with the next closing one (value 0) of its (lane, type) as a stack.
    Where `change` holds (types whose records never nest), an opening event on an open one closes it and opens
    its own (Paraver's value change). Fills opened/closed with positions (closed -1: never closed); returns
    (pairs, closings without an open, pairs closed by a value change)."""
    n = len(lane)
    stack = np.empty(n, np.int64)
    top = 0
    k = 0
    stray = 0
    changed = 0
    for i in range(n):
        if i > 0 and (lane[i] != lane[i - 1] or typ[i] != typ[i - 1]):
            while top > 0:
                top -= 1
                opened[k] = stack[top]
                closed[k] = -1
                k += 1
        if value[i] != 0:
            if change[i] and top > 0:
                top -= 1
                opened[k] = stack[top]
                closed[k] = i
                k += 1
                changed += 1
            stack[top] = i
            top += 1
        elif top == 0:
            stray += 1
        else:
            top -= 1
            opened[k] = stack[top]
            closed[k] = i
            k += 1
    while top > 0:
        top -= 1
        opened[k] = stack[top]
        closed[k] = -1
        k += 1
    return k, stray, changed
