"""Random valid traces of the three foreign formats, drawn from one small model, import as that model.

The model: 1-3 ranks of 1-2 threads; each thread a few nested-or-sequential functions with integer times; on thread
0 the MPI calls of a few matched point-to-point messages (the call that starts first sends) and of collectives on
every rank (Allreduce, or Bcast from a root), in one order on all ranks. Each format writes it as its tool would
(Paraver text with states, function and MPI events and 3: records; an OTF2 archive through the bindings, as
Score-P defines its groups; a Kineto JSON per rank with cpu_op and gloo annotations, ProfilerSteps and
distributedInfo); the import must give back, after the format's documented conversions, the ranks and threads,
each thread's functions (name, start_ns, end_ns), the MPI calls with their bytes, peers, tags and seq numbers, the
states the tool's reader derives, pass `check_states` and survive `analyze`."""
from __future__ import annotations

import gzip
import json
import tempfile
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import test_kineto_import as kineto_hand
import test_paraver_import as paraver_hand
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.format.schema import Kind, State
from gpt2trace.interop import paraver_format as PF
from gpt2trace.interop.kineto_import import STEP_PHASE, import_kineto
from gpt2trace.interop.otf2_import import import_otf2
from gpt2trace.interop.paraver_import import import_paraver

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = ("forward", "matmul", "attention", "gelu", "layernorm")
MAX_GAP = 12
COLLECTIVES = ("MPI_Allreduce", "MPI_Bcast")
# The state a thread is in inside each call, as Extrae writes it and the OTF2 and Kineto readers derive it
CALL_STATE = {"MPI_Send": State.BLOCKING_SEND, "MPI_Recv": State.WAITING_A_MESSAGE,
              "MPI_Allreduce": State.GROUP_COMMUNICATION, "MPI_Bcast": State.GROUP_COMMUNICATION}


# --- the model ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """A function (call None) or an MPI call on one thread, [start, end] in the model's integer time."""
    name: str
    start: int
    end: int
    call: str | None = None          # "p2p" or "coll"
    nbytes: int | None = None
    peer: int | None = None          # the other side of a message; a Bcast's root
    tag: int | None = None
    seq: int | None = None           # a collective's order among its rank's collectives


@dataclass(frozen=True)
class Message:
    sender: int
    receiver: int
    send_at: int                     # the logical send, at the send call's start
    recv_at: int                     # the logical receive, inside the receive call (before its end)
    nbytes: int
    tag: int


@dataclass(frozen=True)
class Model:
    threads: tuple[int, ...]                                        # per rank
    items: dict[tuple[int, int], tuple[Item, ...]]                  # (rank, thread) -> its items
    events: dict[tuple[int, int], tuple[tuple[int, bool, int], ...]]  # (time, enter?, item) in stack order
    messages: tuple[Message, ...]

    @property
    def lanes(self) -> list[tuple[int, int]]:
        return [(r, t) for r, n in enumerate(self.threads) for t in range(n)]

    @property
    def end(self) -> int:
        return max(i.end for items in self.items.values() for i in items)


def _timeline(draw, leaves: list[int], distinct_names: bool) -> tuple[list[dict], list[tuple[int, bool, int]]]:
    """One thread: functions opened and closed as a stack, the MPI calls `leaves` (op ids) in order among them;
    a function may last 0, a call lasts at least 1, neighbours may touch. `distinct_names`: every function of the
    thread has a name of its own."""
    n_functions = draw(st.integers(0 if leaves else 1, 4))
    items: list[dict] = []
    events: list[tuple[int, bool, int]] = []
    stack: list[int] = []
    opened = placed = 0
    t = draw(st.integers(0, 5))
    while opened < n_functions or stack or placed < len(leaves):
        choices = [c for c, ok in (("open", opened < n_functions), ("close", bool(stack)),
                                   ("leaf", placed < len(leaves))) if ok]
        choice = draw(st.sampled_from(choices))
        if choice == "open":
            t += draw(st.integers(0, MAX_GAP))
            taken = {it["name"] for it in items} if distinct_names else set()
            stack.append(len(items))
            items.append({"name": draw(st.sampled_from([n for n in NAMES if n not in taken])), "start": t})
            events.append((t, True, stack[-1]))
            opened += 1
        elif choice == "close":
            k = stack.pop()
            t += draw(st.integers(0, MAX_GAP))
            items[k]["end"] = t
            events.append((t, False, k))
        else:
            t += draw(st.integers(0, MAX_GAP))
            start, t = t, t + draw(st.integers(1, MAX_GAP))
            items.append({"name": None, "start": start, "end": t, "op": leaves[placed]})
            events += [(start, True, len(items) - 1), (t, False, len(items) - 1)]
            placed += 1
    return items, events


@st.composite
def models(draw, distinct_names: bool = False) -> Model:
    threads = tuple(draw(st.lists(st.integers(1, 2), min_size=1, max_size=3)))
    ranks = len(threads)
    ops: list[tuple] = []
    if ranks > 1:
        for _ in range(draw(st.integers(0, 3))):
            a = draw(st.integers(0, ranks - 1))
            b = (a + draw(st.integers(1, ranks - 1))) % ranks
            ops.append(("p2p", a, b, 4 * draw(st.integers(0, 4096)), draw(st.integers(0, 99))))
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(COLLECTIVES))
        root = draw(st.integers(0, ranks - 1)) if name == "MPI_Bcast" else None
        ops.append(("coll", name, root, 4 * draw(st.integers(1, 4096))))
    ops = draw(st.permutations(ops))
    raw = {}
    for r in range(ranks):
        mine = [i for i, op in enumerate(ops) if op[0] == "coll" or r in op[1:3]]
        for t in range(threads[r]):
            raw[(r, t)] = _timeline(draw, mine if t == 0 else [], distinct_names)

    def leaf(rank: int, op: int) -> dict:
        return next(it for it in raw[(rank, 0)][0] if it.get("op") == op)

    messages = []
    seqs = [0] * ranks
    for i, op in enumerate(ops):
        if op[0] == "p2p":
            _, a, b, nbytes, tag = op
            if leaf(b, i)["start"] < leaf(a, i)["start"]:
                a, b = b, a                       # the call that starts first sends: a message is never early
            send, recv = leaf(a, i), leaf(b, i)
            recv_at = draw(st.integers(recv["start"], recv["end"] - 1))
            send.update(name="MPI_Send", call="p2p", nbytes=nbytes, peer=b, tag=tag)
            recv.update(name="MPI_Recv", call="p2p", nbytes=nbytes, peer=a, tag=tag)
            messages.append(Message(a, b, send["start"], recv_at, nbytes, tag))
        else:
            _, name, root, nbytes = op
            for r in range(ranks):
                leaf(r, i).update(name=name, call="coll", nbytes=nbytes, peer=root, seq=seqs[r])
                seqs[r] += 1
    spans = [it for lane in raw.values() for it in lane[0]]
    assume(max(it["end"] for it in spans) > min(it["start"] for it in spans))     # a trace lasts: it has states
    fields = ("name", "start", "end", "call", "nbytes", "peer", "tag", "seq")
    items = {lane: tuple(Item(**{f: it.get(f) for f in fields}) for it in raw[lane][0]) for lane in raw}
    return Model(threads, items, {lane: tuple(raw[lane][1]) for lane in raw}, tuple(messages))


# --- what an import must give ---------------------------------------------------------------------------------------

def derived_states(spans: list[tuple[int, int, int]], end: int) -> list[tuple[int, int, int]]:
    """[0, end] as (start, end, state) from a thread's (start, end, state) spans: inside an MPI call its state,
    else Running inside a function, else Idle; equal neighbours merged (what Extrae writes, and what the OTF2 and
    Kineto readers derive from the call stack)."""
    cuts = sorted({0, end} | {s for s, _, _ in spans} | {e for _, e, _ in spans})
    out: list[tuple[int, int, int]] = []
    for a, b in zip(cuts, cuts[1:]):
        inside = [x for s, e, x in spans if s <= a and b <= e]
        mpi = [x for x in inside if x != State.RUNNING]
        state = int(mpi[0] if mpi else State.RUNNING if inside else State.IDLE)
        if out and out[-1][2] == state:
            out[-1] = (out[-1][0], b, state)
        else:
            out.append((a, b, state))
    return out


def _spans(items, ns) -> list[tuple[int, int, int]]:
    return [(ns(i.start), ns(i.end), int(CALL_STATE[i.name]) if i.call else int(State.RUNNING)) for i in items]


def _rows(trace: Trace, kind: str, cols: tuple[str, ...]) -> list[tuple]:
    part = trace.records(kind)
    got = [part.column(c).to_pylist() if c in part.column_names else [None] * part.num_rows for c in cols]
    return sorted(zip(*got), key=repr)


KERNEL_COLS = ("rank", "thread", "name", "start_ns", "end_ns")
STATE_COLS = ("rank", "thread", "start_ns", "end_ns", "state")


def check_import(trace: Trace, lanes: list[tuple[int, int]], kernels: list[tuple], comms: list[tuple],
                 comm_cols: tuple[str, ...], states: list[tuple]) -> None:
    """`trace` holds exactly the expected records; it is a valid trace and every analysis runs on it."""
    seen = {(r, t) for kind in (Kind.STATE, Kind.KERNEL, Kind.COMM) for r, t in _rows(trace, kind, ("rank", "thread"))}
    assert sorted(seen) == sorted(lanes)
    assert _rows(trace, Kind.KERNEL, KERNEL_COLS) == sorted(kernels, key=repr)
    got = _rows(trace, Kind.COMM, comm_cols)
    assert got == sorted(comms, key=repr)
    assert Counter(r[2] for r in got) == Counter(r[2] for r in comms)          # message and collective counts
    assert _rows(trace, Kind.STATE, STATE_COLS) == sorted(states, key=repr)
    assert check_states(trace) == []
    analyze(trace)


# --- Paraver --------------------------------------------------------------------------------------------------------

FUNCTION_TYPES = (PF.USER_FUNCTION, PF.OMP_FUNCTION, PF.TASK_FUNCTION)


def paraver_text(model: Model, unit_ns: int, padded: bool, extra: int, types: dict, merged: bool) -> tuple[str, str]:
    """The model as Extrae writes it, the .prv and the .pcf: the header (times in ns, or in us without the _ns
    suffix), the world's communicator line, each thread's states (with `padded`, none before its first item and
    after its last: the import makes them Idle), function events (value = the name's id in the .pcf, 0 at the
    return), MPI call events (collectives with their sizes and communicator, the root flagged), one 3: record per
    message; lines in time order. `types`: (lane, item) -> the function's event type. `merged`: a thread's events
    of different types at one time in one line, as Extrae writes them."""
    ranks = len(model.threads)
    lane_no = {lane: k for k, lane in enumerate(model.lanes)}
    end = model.end + extra
    codes: dict[tuple[int, str], int] = {}
    lines: list[tuple[int, str]] = []

    def place(lane):
        r, t = lane
        return f"{lane_no[lane] + 1}:1:{r + 1}:{t + 1}"

    for lane in model.lanes:
        items = model.items[lane]
        first, last = min(i.start for i in items), max(i.end for i in items)
        for a, b, state in derived_states(_spans(items, lambda t: t), end):
            if not padded or first == last or (first <= a and b <= last):       # padding needs a state
                lines.append((a, f"1:{place(lane)}:{a}:{b}:{state}"))
        events: list[tuple[int, int, int, str]] = []
        for t, enter, k in model.events[lane]:
            it = items[k]
            if it.call == "p2p":
                typ, value = PF.MPI_CALLS[it.name]
                extra_attrs = ""
            elif it.call == "coll":
                typ, value = PF.MPI_CALLS[it.name]
                sizes = (it.nbytes, 0) if it.peer == lane[0] else (0, it.nbytes) if it.peer is not None else \
                    (it.nbytes, it.nbytes)
                extra_attrs = f":{PF.MPI_SEND_SIZE}:{sizes[0]}:{PF.MPI_RECV_SIZE}:{sizes[1]}:{PF.MPI_COMM}:1" + (
                    f":{PF.MPI_ROOT}:1" if it.peer == lane[0] else "")
            else:
                typ = types[(lane, k)]
                value = codes.setdefault((typ, it.name), 1 + sum(1 for ty, _ in codes if ty == typ))
                extra_attrs = ""
            events.append((t, typ, value if enter else 0, extra_attrs if enter else ""))
        groups: list[list[tuple[int, int, int, str]]] = []
        for e in events:
            if merged and groups and groups[-1][0][0] == e[0] and e[1] not in {g[1] for g in groups[-1]}:
                groups[-1].append(e)
            else:
                groups.append([e])
        for g in groups:
            pairs = ":".join(f"{typ}:{value}" for _, typ, value, _ in g)
            lines.append((g[0][0], f"2:{place(lane)}:{g[0][0]}:{pairs}" + "".join(e[3] for e in g)))
    for m in model.messages:
        lines.append((m.send_at, f"3:{place((m.sender, 0))}:{m.send_at}:{m.send_at}:{place((m.receiver, 0))}:"
                                 f"{m.recv_at}:{m.recv_at}:{m.nbytes}:{m.tag}"))
    lines.sort(key=lambda x: x[0])               # stable: each thread's events stay in their stack order
    tasks = ",".join(f"{n}:1" for n in model.threads)
    unit = "_ns" if unit_ns == 1 else ""
    head = (f"#Paraver (01/01/2024 at 10:00):{end}{unit}:1({len(lane_no)}):1:{ranks}({tasks}),1\n"
            f"c:1:1:{ranks}:{':'.join(str(r + 1) for r in range(ranks))}\n")
    pcf = ["DEFAULT_OPTIONS\n\nLEVEL               THREAD\nUNITS               NANOSEC\n\nSTATES"]
    pcf += [f"{int(s)}    {name}" for s, name in PF.STATE_NAMES.items()]
    for typ in FUNCTION_TYPES:
        pcf += ["", "EVENT_TYPE", f"0    {typ}    {PF.FUNCTION_LABELS[typ]}", "VALUES", "0      End"]
        pcf += [f"{v}      {name}" for (ty, name), v in sorted(codes.items(), key=lambda x: x[1]) if ty == typ]
    for typ in (PF.MPI_P2P, PF.MPI_COLLECTIVE):
        pcf += ["", "EVENT_TYPE", f"9    {typ}    {PF.MPI_TYPE_LABELS[typ]}", "VALUES", "0      Outside MPI"]
        pcf += [f"{v}      {name}" for name, (ty, v) in PF.MPI_CALLS.items() if ty == typ]
    return head + "".join(text + "\n" for _, text in lines), "\n".join(pcf) + "\n"


@SETTINGS
@given(model=models(), unit_ns=st.sampled_from([1, 1000]), padded=st.booleans(), extra=st.integers(0, 20),
       merged=st.booleans(), name=st.sampled_from(["t.prv", "t.prv.gz"]), data=st.data())
def test_a_random_paraver_trace_imports_as_drawn(model, unit_ns, padded, extra, merged, name, data):
    types = {(lane, k): data.draw(st.sampled_from(FUNCTION_TYPES)) for lane in model.lanes
             for k, it in enumerate(model.items[lane]) if it.call is None}
    with tempfile.TemporaryDirectory() as tmp:
        prv, pcf = paraver_text(model, unit_ns, padded, extra, types, merged)
        imported = import_paraver(paraver_hand.write(Path(tmp), prv, pcf, name=name))
    assert not [n for n in imported.notes if n.startswith("warning") or "fall in no" in n], imported.notes

    def ns(t):                                  # the header's unit
        return t * unit_ns

    end = ns(model.end + extra)                     # the header's end: every thread's states reach it
    kernels, comms, states = [], [], []
    for (r, t) in model.lanes:
        items = model.items[(r, t)]
        kernels += [(r, t, i.name, ns(i.start), ns(i.end)) for i in items if i.call is None]
        comms += [(r, t, i.name, ns(i.start), ns(i.end), i.nbytes, i.peer, i.tag, i.seq,
                   0 if i.call == "coll" else None) for i in items if i.call]
        states += [(r, t, *s) for s in derived_states(_spans(items, ns), end)]
    check_import(Trace.from_table(imported.table), model.lanes, kernels, comms,
                 ("rank", "thread", "name", "start_ns", "end_ns", "bytes", "peer", "tag", "seq", "communicator"),
                 states)


# --- OTF2 -----------------------------------------------------------------------------------------------------------

def write_otf2(folder: Path, model: Model, resolution: int, offset: int, rank_order: list[int],
               masters_first: bool) -> Path:
    """The model as Score-P writes it: a location group per rank (defined in `rank_order`), a CPU thread location
    per thread (all master threads first with `masters_first`), MPI's location group and MPI_COMM_WORLD, an MPI
    region per call with its MpiSend/MpiRecv/MpiCollectiveBegin+End inside; times in ticks of `resolution`, from
    `offset`."""
    import otf2
    ranks = len(model.threads)
    with otf2.writer.open(str(folder), timer_resolution=resolution) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        groups = {r: d.location_group(f"MPI Rank {r}", system_tree_parent=node) for r in rank_order}
        order = sorted(model.lanes, key=lambda lane: (lane[1], rank_order.index(lane[0])) if masters_first else
                       (rank_order.index(lane[0]), lane[1]))
        locs = {lane: d.location("Master thread" if lane[1] == 0 else f"Pthread thread {lane[1]}",
                                 group=groups[lane[0]]) for lane in order}
        d.group("", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI,
                members=[locs[(r, 0)] for r in range(ranks)])
        world = d.comm("MPI_COMM_WORLD", group=d.group("", group_type=otf2.GroupType.COMM_GROUP,
                                                       paradigm=otf2.Paradigm.MPI, members=list(range(ranks))))
        roles = {"MPI_Send": otf2.RegionRole.POINT2POINT, "MPI_Recv": otf2.RegionRole.POINT2POINT,
                 "MPI_Allreduce": otf2.RegionRole.COLL_ALL2ALL, "MPI_Bcast": otf2.RegionRole.COLL_ONE2ALL}
        regions = {n: d.region(n, paradigm=otf2.Paradigm.MPI, region_role=role) for n, role in roles.items()}
        regions.update({n: d.region(n, paradigm=otf2.Paradigm.USER, region_role=otf2.RegionRole.FUNCTION)
                        for n in NAMES})
        sends = {m.sender: [] for m in model.messages}
        recvs = {m.receiver: [] for m in model.messages}
        for m in model.messages:
            sends[m.sender].append(m)
            recvs[m.receiver].append(m)
        for lane in order:
            ev = w.event_writer_from_location(locs[lane])
            items = model.items[lane]
            for t, enter, k in model.events[lane]:
                it = items[k]
                if enter:
                    ev.enter(offset + t, regions[it.name])
                if it.name == "MPI_Send" and enter:
                    m = next(m for m in sends[lane[0]] if m.send_at == it.start)
                    ev.mpi_send(offset + m.send_at, m.receiver, world, m.tag, m.nbytes)
                elif it.name == "MPI_Recv" and enter:
                    m = next(m for m in recvs[lane[0]] if it.start <= m.recv_at < it.end)
                    ev.mpi_recv(offset + m.recv_at, m.sender, world, m.tag, m.nbytes)
                elif it.call == "coll" and enter:
                    ev.mpi_collective_begin(offset + t)
                elif it.call == "coll":
                    op = otf2.CollectiveOp.ALLREDUCE if it.name == "MPI_Allreduce" else otf2.CollectiveOp.BCAST
                    root = otf2.Undefined.UINT32 if it.peer is None else it.peer
                    sent = it.nbytes if it.peer in (None, lane[0]) else 0
                    got = it.nbytes if it.peer != lane[0] else 0
                    ev.mpi_collective_end(offset + t, op, world, root, sent, got)
                if not enter:
                    ev.leave(offset + t, regions[it.name])
    return folder / "traces.otf2"


@SETTINGS
@given(model=models(), resolution=st.sampled_from([10**9, 10**8, 10**6]), offset=st.integers(0, 10**12),
       masters_first=st.booleans(), data=st.data())
def test_a_random_otf2_archive_imports_as_drawn(model, resolution, offset, masters_first, data):
    rank_order = data.draw(st.permutations(range(len(model.threads))))
    with tempfile.TemporaryDirectory() as tmp:
        imported = import_otf2(write_otf2(Path(tmp) / "arch", model, resolution, offset, rank_order,
                                          masters_first))
    first = min(i.start for items in model.items.values() for i in items)

    def ns(t):                                  # nanoseconds since the archive's first timestamp
        return (t - first) * (10**9 // resolution)

    kernels, comms, states = [], [], []
    for (r, t) in model.lanes:
        items = model.items[(r, t)]
        kernels += [(r, t, i.name, ns(i.start), ns(i.end)) for i in items if i.call is None]
        comms += [(r, t, i.name, ns(i.start), ns(i.end), i.nbytes, i.peer, i.tag, i.seq, 0)
                  for i in items if i.call]
        states += [(r, t, *s) for s in derived_states(_spans(items, ns), ns(model.end))]
    check_import(Trace.from_table(imported.table), model.lanes, kernels, comms,
                 ("rank", "thread", "name", "start_ns", "end_ns", "bytes", "peer", "tag", "seq", "communicator"),
                 states)


# --- Kineto ---------------------------------------------------------------------------------------------------------

GLOO = {"MPI_Send": "gloo:send", "MPI_Recv": "gloo:recv", "MPI_Allreduce": "gloo:all_reduce",
        "MPI_Bcast": "gloo:broadcast"}


@dataclass(frozen=True)
class Steps:
    """A rank's ProfilerSteps: (number, start, end) in model time; with two or more, the last is the profiler's
    closing step, and what starts from its start on is left out."""
    spans: tuple[tuple[int, int, int], ...]

    @property
    def cut(self) -> int | None:
        return self.spans[-1][1] if len(self.spans) >= 2 else None

    @property
    def real(self) -> tuple[tuple[int, int, int], ...]:
        """The steps of the run: all but the closing one."""
        return self.spans[:-1] if self.cut is not None else self.spans

    def kept(self, start: int) -> bool:
        return self.cut is None or start < self.cut

    def step_at(self, t: int) -> int | None:
        """The step whose span holds t (at a boundary, the one that starts there)."""
        real = self.real
        i = bisect_right([s for _, s, _ in real], t) - 1
        return real[i][0] if i >= 0 and t <= real[i][2] else None


@st.composite
def kineto_steps(draw, model: Model, rank: int) -> Steps:
    """None, one step over the rank's run, or 1-2 steps then the closing step (which may start before the rank's
    last items end, so that those are left out)."""
    n = draw(st.integers(0, 3))
    end = max(i.end for (r, _), items in model.items.items() if r == rank for i in items)
    first = draw(st.integers(0, 10))
    if n == 0:
        return Steps(())
    if n == 1:
        return Steps(((first, 0, end),))
    cut = draw(st.integers(n - 1, end + 3))
    start = draw(st.integers(0, cut - (n - 1)))
    bounds = [start] + ([draw(st.integers(start + 1, cut - 1))] if n == 3 else []) + [cut]
    spans = [(first + k, bounds[k], bounds[k + 1]) for k in range(n - 1)]
    return Steps((*spans, (first + n - 1, cut, max(cut, end) + draw(st.integers(0, 5)))))


def _us(ns: int, decimals: bool) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}" if decimals else str(ns // 1000)


def write_kineto(folder: Path, placed: dict, steps: list[Steps], scale: int, base_us: int, decimals: bool,
                 names: list[int], other_tid: int, gz: bool, shuffle) -> None:
    """One file per rank (named `names[rank]`, so that name order is not rank order), as the profiler writes it:
    `placed` (rank, thread) -> items: the ops as cpu_op X events, the MPI calls as gloo user_annotations with their
    tensors' shapes, the ProfilerSteps on the main thread (tid == pid == 1; the other thread's tid is
    `other_tid`), an op in the closing step, and a metadata and an instant event the import leaves out; the
    events in the order `shuffle` gives them. Times: epoch microseconds from `base_us`, with three decimals (ns) or
    whole; a model time unit is `scale` ns."""
    ranks = len(steps)
    for r in range(ranks):
        def x(name, start, end, cat="cpu_op", thread=0, args=None):
            t0 = base_us * 1000 + start * scale
            return kineto_hand._x(name, _us(t0, decimals), _us((end - start) * scale, decimals), cat=cat,
                                  tid=other_tid if thread else 1, args=args)

        events = []
        for (rank, t), items in placed.items():
            if rank == r:
                events += [x(i.name, i.start, i.end, thread=t) if i.call is None else
                           x(GLOO[i.name], i.start, i.end, "user_annotation", t,
                             {"Input Dims": [[i.nbytes // 4]], "Input type": ["float"]}) for i in items]
        events += [x(f"{STEP_PHASE}#{k}", s0, s1, "user_annotation") for k, s0, s1 in steps[r].spans]
        if steps[r].cut is not None:
            events.append(x("aten::closing_op", steps[r].cut, steps[r].cut + 1))
        events.append(json.dumps({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                                  "ts": base_us, "s": "t", "args": {}}))
        shuffle(events)
        events.insert(0, json.dumps({"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                                     "args": {"name": "python"}}))
        path = kineto_hand._kineto(folder, events, name=f"rank-{names[r]}.json", host_name="node0",
                                   distributedInfo={"backend": "gloo", "rank": r, "world_size": ranks})
        if gz:
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes()))
            path.unlink()


@SETTINGS
@given(model=models(distinct_names=True), scale=st.sampled_from([1, 37, 1000]), decimals=st.booleans(),
       base_us=st.integers(0, 2 * 10**15), other_tid=st.sampled_from([0, 8, 123456]), gz=st.booleans(),
       data=st.data())
def test_a_random_kineto_trace_imports_as_drawn(model, scale, decimals, base_us, other_tid, gz, data):
    ranks = len(model.threads)
    if not decimals:
        scale = 1000 * max(1, scale // 1000)    # whole microseconds
    steps = [data.draw(kineto_steps(model, r)) for r in range(ranks)]
    # gloo runs a rank's collectives and messages on the main thread or on a worker thread (its other thread)
    comm_thread = [data.draw(st.integers(0, n - 1)) for n in model.threads]
    placed = {lane: [i for i in items if i.call is None] for lane, items in model.items.items()}
    for (r, _), items in model.items.items():
        placed[(r, comm_thread[r])] += [i for i in items if i.call]
    names = data.draw(st.permutations(range(ranks)))
    with tempfile.TemporaryDirectory() as tmp:
        write_kineto(Path(tmp), placed, steps, scale, base_us, decimals, names, other_tid, gz,
                     data.draw(st.randoms()).shuffle)
        imported = import_kineto(tmp)
    kept = {lane: [i for i in items if steps[lane[0]].kept(i.start)] for lane, items in placed.items()}
    spans = [(i.start, i.end) for items in kept.values() for i in items] + [(s0, s1) for s in steps
                                                                             for _, s0, s1 in s.real]
    origin = min(a for a, _ in spans)

    def ns(t):                                  # the earliest event of all files at 0
        return (t - origin) * scale

    # the threads with events: the main one (where the steps are) first
    present = {r: [t for t in range(n) if kept[(r, t)] or (t == 0 and steps[r].spans)]
               for r, n in enumerate(model.threads)}
    lanes = [(r, present[r].index(t)) for r, t in placed if t in present[r]]
    kernels, comms, states = [], [], []
    for (r, t) in placed:
        if t not in present[r]:
            continue
        items, k = kept[(r, t)], present[r].index(t)
        kernels += [(r, k, i.name, ns(i.start), ns(i.end), steps[r].step_at(i.start)) for i in items
                    if i.call is None]
        comms += [(r, k, i.name, ns(i.start), ns(i.end), i.nbytes, i.seq, steps[r].step_at(i.start))
                  for i in items if i.call]
        states += [(r, k, *s) for s in derived_states(_spans(items, ns), ns(max(b for _, b in spans)))]
    trace = Trace.from_table(imported.table)
    check_import(trace, lanes, [k[:5] for k in kernels], comms,
                 ("rank", "thread", "name", "start_ns", "end_ns", "bytes", "seq", "step"), states)
    assert _rows(trace, Kind.KERNEL, (*KERNEL_COLS, "step")) == sorted(kernels, key=repr)
    phases = [(r, 0, STEP_PHASE, ns(s0), ns(s1), k) for r in range(ranks) for k, s0, s1 in steps[r].real]
    assert _rows(trace, Kind.PHASE, (*KERNEL_COLS, "step")) == sorted(phases, key=repr)
    assert trace.run["parallel"]["ranks"] == ranks
