"""Reading a .prv (or .prv.gz) file: its header and communicator lines, then the body in large chunks.

The body is read 32 MB at a time and each chunk is scanned by one compiled pass (Numba) that fills NumPy arrays:
state records, event records with their (type, value) pairs, communication records, and each record's line
number. Nothing is parsed line by line in Python. A line that does not follow the format stops the parse with a
TraceError naming the file and the line: nothing is skipped silently. Lines starting with '#' are comments, as
Paraver reads them.

Record formats (every field an integer):
  1:cpu:appl:task:thread:begin:end:state
  2:cpu:appl:task:thread:time:type:value[:type:value...]
  3:cpu:appl:task:thread:lsend:psend:cpu:appl:task:thread:lrecv:precv:size:tag
  4:...  a global communication record of old traces (Paraver reads and ignores them): counted, not parsed
Event values are unsigned 64-bit numbers in Extrae's traces (up to 18446744073709551615): they are kept as the int64
of the same 64 bits, so values of 2**63 and more come out negative and `paraver_events` decides what each type's
large values mean. Our own exports write signed values (a negative counter), read as they are. Every other field
has at most 18 digits.
"""
from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numba import njit

from gpt2trace.format.errors import TraceError

CHUNK_BYTES = 32 << 20
# Beyond these a header is damaged rather than large: every thread has a few int64 slots in the import's tables,
# and times in ns with the thread in the high bits of a sort key must stay below 2**62
MAX_THREADS = 1 << 22
MAX_END_NS = 1 << 55
STATE_FIELDS = ("cpu", "appl", "task", "thread", "begin", "end", "state")
EVENT_FIELDS = ("cpu", "appl", "task", "thread", "time")
COMM_FIELDS = ("cpu", "appl", "task", "thread", "logical send", "physical send", "receiver cpu", "receiver appl",
               "receiver task", "receiver thread", "logical receive", "physical receive", "size", "tag")
_UNKNOWN, _BAD_NUMBER, _FIELD_COUNT, _TOO_LONG, _BEYOND_64_BITS = 1, 2, 3, 4, 5
U64_MAX = 2**64 - 1


@dataclass(frozen=True)
class Header:
    end_ns: int                           # the trace's end time, in ns
    unit_ns: int                          # 1 (times in ns, '_ns') or 1000 (no unit: microseconds)
    cpus: int                             # 0: the trace defines no nodes or CPUs
    tasks: tuple[tuple[int, ...], ...]    # per application, the threads of each task
    communicators: dict                   # (appl, id) -> tasks (1-based)
    lines: int                            # header lines: 1 + communicator lines
    left_out: tuple[str, ...] = ()        # the communicator lines not kept, and why (for the import's notes)


@dataclass(frozen=True)
class Body:
    """Every record of the body; `*_line` are 1-based line numbers in the file."""
    states: np.ndarray            # (n, 7) STATE_FIELDS
    state_line: np.ndarray
    events: np.ndarray            # (m, 5) EVENT_FIELDS: one row per event line
    event_line: np.ndarray
    pair_rec: np.ndarray          # for each (type, value) pair, its row in `events`
    pair_type: np.ndarray
    pair_value: np.ndarray
    comms: np.ndarray             # (k, 14) COMM_FIELDS
    comm_line: np.ndarray
    lines: int
    global_comms: int = 0         # `4:` records skipped


_HEAD = re.compile(r"^#Paraver \((?P<date>[^)]*)\):(?P<time>\d+)(?P<unit>_ns)?:(?P<rest>.*)$")


def read(path: Path) -> tuple[Header, Body]:
    """The header and the whole body in memory."""
    got = list(chunks(path))
    return got[-1][0], _concat([part for _, part, _ in got], got[-1][2])


def global_comms(part: tuple) -> int:
    """The `4:` records of a chunk's part (skipped: our schema has no global communication record)."""
    return int(part[9])


def chunks(path: Path, chunk_bytes: int = CHUNK_BYTES) -> Iterator[tuple[Header, tuple, int]]:
    """(header, part, lines so far) per body chunk of about `chunk_bytes`, in file order: `part` holds the chunk's
    records as `Body` fields (line numbers in the file; `pair_rec` indexes the chunk's own event rows), then the
    number of its `4:` records (`global_comms`). A file
    without records yields one empty part, so the header always comes out."""
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            buf = fh.read(chunk_bytes)
            header, buf = _header(path, fh, buf)
            empty = True
            for part, lines in _body(path, fh, buf, header.lines, chunk_bytes):
                empty = False
                yield header, part, lines
            if empty:
                yield header, _empty_part(), header.lines
    except (OSError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None


def _header(path: Path, fh, buf: bytes) -> tuple[Header, bytes]:
    nl = buf.find(b"\n")
    first = (buf[:nl] if nl >= 0 else buf).decode(errors="replace").rstrip("\r")
    m = _HEAD.match(first)
    if not m:
        raise TraceError(f"{path}:1: not a Paraver header (expected '#Paraver (date):<end>_ns:<nodes>:<appls>:"
                         f"...'), got {first[:80]!r}")
    unit = 1 if m["unit"] else 1000
    if int(m["time"]) * unit > MAX_END_NS:
        raise TraceError(f"{path}:1: malformed header: end time {m['time']} is beyond {MAX_END_NS // unit} "
                         f"{'ns' if unit == 1 else 'us'} (over a year): is the header damaged?")
    cpus, tasks, ncomms = _resources(path, m["rest"])
    rest = buf[nl + 1:] if nl >= 0 else b""
    comms, left_out = {}, []
    for k in range(ncomms):
        nl = rest.find(b"\n")
        while nl < 0:
            more = fh.read(CHUNK_BYTES)
            if not more:
                nl = len(rest)
                rest += b"\n"
                break
            rest += more
            nl = rest.find(b"\n")
        line = rest[:nl].decode(errors="replace").rstrip("\r")
        rest = rest[nl + 1:]
        kept, why = _communicator(path, k + 2, line, tasks)
        comms.update(kept)
        if why:
            left_out.append(why)
    end = int(m["time"]) * unit
    return Header(end, unit, cpus, tasks, comms, 1 + ncomms, tuple(left_out)), rest


def _resources(path: Path, rest: str) -> tuple[int, tuple, int]:
    def bad(what: str):
        return TraceError(f"{path}:1: malformed header: {what} (in {rest[:60]!r})")

    m = re.match(r"(\d+)(?:\(([\d,]*)\))?:", rest)
    if not m:
        raise bad("expected <nodes>(<cpus>,...) after the end time")
    nodes = int(m[1])
    if nodes == 0:
        cpus = 0
    elif m[2] is None:
        cpus = nodes
    else:
        per = [int(c) for c in m[2].split(",") if c]
        if len(per) != nodes:
            raise bad(f"{nodes} nodes but {len(per)} CPU counts")
        cpus = sum(per)
    rest = rest[m.end():]
    m = re.match(r"(\d+):", rest)
    if not m or int(m[1]) < 1:
        raise bad("expected the number of applications (>= 1)")
    nappl, rest = int(m[1]), rest[m.end():]
    tasks, ncomms = [], 0
    for a in range(nappl):
        m = re.match(r"(\d+)\(([^)]*)\)(?:,(\d+))?", rest)
        if not m:
            raise bad(f"expected <tasks>(<threads>:<node>,...) for application {a + 1}")
        spec = m[2].split(",")
        if int(m[1]) < 1 or len(spec) != int(m[1]):
            raise bad(f"application {a + 1} declares {m[1]} tasks but lists {len(spec)}")
        threads = []
        for s in spec:
            parts = s.split(":")
            if len(parts) != 2 or not all(p.isdigit() for p in parts) or int(parts[0]) < 1:
                raise bad(f"task spec {s!r} is not <threads>:<node> with threads >= 1")
            if cpus and not 1 <= int(parts[1]) <= max(nodes, 1):
                raise bad(f"task spec {s!r} names node {parts[1]}; the header declares {nodes}")
            threads.append(int(parts[0]))
        tasks.append(tuple(threads))
        ncomms += int(m[3] or 0)
        rest = rest[m.end():]
        if a < nappl - 1:
            if not rest.startswith(":"):
                raise bad(f"expected ':' before application {a + 2}")
            rest = rest[1:]
    if rest.strip():
        raise bad(f"unexpected {rest.strip()[:20]!r} at the end")
    total = sum(sum(t) for t in tasks)
    if total > MAX_THREADS:
        raise bad(f"{total} threads in all; gpt2trace imports at most {MAX_THREADS}")
    return cpus, tuple(tasks), ncomms


def _communicator(path: Path, lineno: int, line: str, tasks: tuple) -> tuple[dict, str | None]:
    """({(appl, id): tasks}, None) for a communicator line we can use; ({}, why) for one Paraver would read but
    that names no tasks of ours (old MPItrace traces write a task of -1): Paraver keeps such lines as text and
    never refuses a trace for them, so neither do we. A line that is no communicator line is an error."""
    fields = line.split(":")
    if fields[0] not in ("c", "C"):
        raise TraceError(f"{path}:{lineno}: expected a communicator line 'c:<appl>:<id>:<ntasks>:<task>...', "
                         f"got {line[:80]!r}")
    shown = line if len(line) <= 40 else line[:37] + "..."
    numbers = [int(f) if re.fullmatch(r"-?\d{1,18}", f) else None for f in fields[1:]]
    if len(numbers) < 3 or None in numbers:
        return {}, f"line {lineno} ({shown!r}) is not c:<appl>:<id>:<ntasks>:<task>..."
    (appl, cid, n), members = numbers[:3], tuple(numbers[3:])
    if not 1 <= appl <= len(tasks):
        return {}, f"line {lineno}: communicator {cid} names application {appl}; the header declares {len(tasks)}"
    if len(members) != n:
        return {}, f"line {lineno}: communicator {cid} announces {n} tasks but lists {len(members)}"
    bad = [t for t in members if not 1 <= t <= len(tasks[appl - 1])]
    if bad:
        return {}, (f"line {lineno}: communicator {cid} names task {bad[0]}; application {appl} has "
                    f"{len(tasks[appl - 1])}")
    return {(appl, cid): members}, None


def _body(path: Path, fh, buf: bytes, first_line: int, chunk_bytes: int) -> Iterator[tuple[tuple, int]]:
    base = first_line
    while True:
        more = fh.read(chunk_bytes - len(buf)) if len(buf) < chunk_bytes else b""
        if not more and len(buf) >= chunk_bytes:
            more = fh.read(1 << 16)           # the buffer is full: a little more to end its last line
        if not more:
            if buf and not buf.endswith(b"\n"):
                buf += b"\n"
            chunk, buf = buf, b""
        else:
            buf += more
            cut = buf.rfind(b"\n") + 1
            chunk, buf = buf[:cut], buf[cut:]
        if chunk:
            part = _parse_chunk(path, chunk, base)
            base += chunk.count(b"\n")
            yield part, base
        if not more and not buf:
            break


def _parse_chunk(path: Path, chunk: bytes, base: int) -> tuple:
    arr = np.frombuffer(chunk, dtype=np.uint8)
    ns, ne, nc, npairs = _count(arr)
    st, st_line = np.empty((ns, 7), np.int64), np.empty(ns, np.int64)
    ev, ev_line = np.empty((ne, 5), np.int64), np.empty(ne, np.int64)
    pr, pt, pv = np.empty(npairs, np.int64), np.empty(npairs, np.int64), np.empty(npairs, np.int64)
    cm, cm_line = np.empty((nc, 14), np.int64), np.empty(nc, np.int64)
    counts = np.zeros(5, np.int64)
    err, line, fieldno = _scan(arr, st, st_line, ev, ev_line, pr, pt, pv, cm, cm_line, counts)
    if err:
        raise _error(path, chunk, base, err, int(line), int(fieldno))
    s, e, p, c, g = counts
    off = base + 1
    return (st[:s], st_line[:s] + off, ev[:e], ev_line[:e] + off, pr[:p], pt[:p], pv[:p], cm[:c], cm_line[:c] + off,
            int(g))


def _empty_part() -> tuple:
    return (np.empty((0, 7), np.int64), np.empty(0, np.int64), np.empty((0, 5), np.int64), np.empty(0, np.int64),
            np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), np.empty((0, 14), np.int64),
            np.empty(0, np.int64), 0)


def _concat(parts: list[tuple], lines: int) -> Body:
    skipped = sum(global_comms(p) for p in parts)
    if len(parts) == 1:
        return Body(*parts[0][:9], lines=lines, global_comms=skipped)
    offsets = np.cumsum([0] + [len(p[2]) for p in parts])[:-1]
    cols = [np.concatenate([p[i] for p in parts]) for i in range(9)]
    cols[4] = np.concatenate([p[4] + o for p, o in zip(parts, offsets)])     # pair -> global event row
    return Body(*cols, lines=lines, global_comms=skipped)


def _error(path: Path, chunk: bytes, base: int, err: int, line: int, fieldno: int) -> TraceError:
    text = chunk.split(b"\n", line + 1)[line].decode(errors="replace").rstrip("\r")
    where = f"{path}:{base + line + 1}"
    shown = text if len(text) <= 80 else text[:77] + "..."
    kind = text[:1]
    names = {"1": STATE_FIELDS, "3": COMM_FIELDS}.get(kind, EVENT_FIELDS)
    if err == _UNKNOWN:
        return TraceError(f"{where}: unknown record type (a body line starts with 1:, 2:, 3:, 4: or #): {shown!r}")
    if err == _FIELD_COUNT:
        want = {"1": "8 fields (1:cpu:appl:task:thread:begin:end:state)",
                "2": "6 fields and type:value pairs (2:cpu:appl:task:thread:time:type:value...)",
                "3": "15 fields (3:cpu:appl:task:thread:lsend:psend:cpu:appl:task:thread:lrecv:precv:size:tag)"}
        return TraceError(f"{where}: wrong number of fields, expected {want[kind]}: {shown!r}")
    label = names[fieldno] if fieldno < len(names) else ("type" if (fieldno - 5) % 2 == 0 else "value")
    problem = {_BAD_NUMBER: "is not an integer", _TOO_LONG: "has too many digits",
               _BEYOND_64_BITS: f"does not fit in 64 bits (values go from -{2**63} to {U64_MAX})"}[err]
    return TraceError(f"{where}: field {fieldno + 2} ({label}) {problem}: {shown!r}")


@njit(cache=True)
def _count(buf):
    """(state lines, event lines, comm lines, an upper bound of the event pairs) of a chunk."""
    ns = ne = nc = colons = 0
    n = len(buf)
    i = 0
    while i < n:
        c = buf[i]
        j = i
        while j < n and buf[j] != 10:
            j += 1
        if c == 49:
            ns += 1
        elif c == 50:
            ne += 1
            for k in range(i, j):
                if buf[k] == 58:
                    colons += 1
        elif c == 51:
            nc += 1
        i = j + 1
    return ns, ne, nc, colons // 2 + 1


_U64_TENTH, _U64_LAST = np.uint64(U64_MAX // 10), np.uint64(U64_MAX % 10)
_I64_MIN_MAGNITUDE = np.uint64(2**63)


@njit(cache=True)
def _scan(buf, st, st_line, ev, ev_line, pr, pt, pv, cm, cm_line, counts):
    """Fills the arrays; returns (error code, line index in the chunk, field index) with code 0 when all is well."""
    n = len(buf)
    tmp = np.zeros(14, np.int64)
    i = 0
    line = 0
    ns = ne = np_ = nc = 0
    while i < n:
        c = buf[i]
        if c == 10:
            line += 1
            i += 1
            continue
        if c == 13 and i + 1 < n and buf[i + 1] == 10:
            line += 1
            i += 2
            continue
        if c == 35:
            while i < n and buf[i] != 10:
                i += 1
            line += 1
            i += 1
            continue
        if not (49 <= c <= 52) or i + 1 >= n or buf[i + 1] != 58:
            return _UNKNOWN, line, 0
        if c == 52:                       # a global communication record: Paraver ignores it, we count it
            while i < n and buf[i] != 10:
                i += 1
            counts[4] += 1
            line += 1
            i += 1
            continue
        kind = c - 48
        i += 2
        nf = 0
        pair_type = 0
        first_pair = np_
        while True:
            neg = False
            if i < n and buf[i] == 45:
                neg = True
                i += 1
            start = i
            is_value = kind == 2 and nf >= 5 and (nf - 5) % 2 == 1
            u = np.uint64(0)              # unsigned: wraps defined; the checks below keep it within 64 bits
            big = False
            while i < n and 48 <= buf[i] <= 57:
                d = np.uint64(buf[i] - 48)
                if i - start >= 19 and (i - start > 19 or u > _U64_TENTH or (u == _U64_TENTH and d > _U64_LAST)):
                    big = True            # a 20th digit beyond 2**64 - 1, or a 21st
                u = u * np.uint64(10) + d
                i += 1
            if i == start:
                return _BAD_NUMBER, line, nf
            if not is_value and i - start > 18:
                return _TOO_LONG, line, nf
            if big or (neg and u > _I64_MIN_MAGNITUDE):
                return _BEYOND_64_BITS, line, nf
            v = np.int64(u)               # the same 64 bits: 2**63 and more come out negative
            if neg:
                v = -v
            if kind == 2 and nf >= 5:
                if (nf - 5) % 2 == 0:
                    pair_type = v
                else:
                    pr[np_] = ne
                    pt[np_] = pair_type
                    pv[np_] = v
                    np_ += 1
            elif nf < 14:
                tmp[nf] = v
            nf += 1
            d = buf[i] if i < n else 10
            if d == 13 and i + 1 < n and buf[i + 1] == 10:
                i += 1
                d = 10
            if d == 58:
                i += 1
                continue
            if d == 10:
                break
            return _BAD_NUMBER, line, nf - 1
        if kind == 1:
            if nf != 7:
                return _FIELD_COUNT, line, nf
            for k in range(7):
                st[ns, k] = tmp[k]
            st_line[ns] = line
            ns += 1
        elif kind == 2:
            if nf < 7 or (nf - 5) % 2 != 0:
                np_ = first_pair
                return _FIELD_COUNT, line, nf
            for k in range(5):
                ev[ne, k] = tmp[k]
            ev_line[ne] = line
            ne += 1
        else:
            if nf != 14:
                return _FIELD_COUNT, line, nf
            for k in range(14):
                cm[nc, k] = tmp[k]
            cm_line[nc] = line
            nc += 1
        i += 1
        line += 1
    counts[0] = ns
    counts[1] = ne
    counts[2] = np_
    counts[3] = nc
    return 0, line, 0
