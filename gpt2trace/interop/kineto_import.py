"""PyTorch profiler traces (Kineto's Chrome trace JSON, `prof.export_chrome_trace`) as a trace of our schema: one
file per rank, or a folder of them.

  rank             the file's `distributedInfo.rank` (written when torch.distributed is initialized), else its
                   place among the files in name order
  thread           each thread with CPU events: thread 0 is the one that runs `ProfilerStep#k` (else the process's
                   main thread), the others follow in tid order (autograd, gloo and data-loader threads). Intra-op
                   worker threads (OpenMP inside ATen) are not recorded by the profiler, so they are not here
  kernel           every CPU op (`cpu_op`: aten::mm, autograd nodes, c10d::allreduce_, ...), nested as recorded,
                   except an op that is the only child of an op of its name (a redispatch: one op recorded twice,
                   which the profiler's key_averages also drops)
  phase            `ProfilerStep#k` as phase `ProfilerStep` of step k, and every other `record_function`
                   annotation (`user_annotation`) as a phase of that name; every record gets the step whose
                   ProfilerStep it starts in
  comm             the collectives and point-to-point calls that gloo, NCCL or MPI run (`gloo:all_reduce`, ...), on
                   the thread that runs them, named by their MPI twin (MPI_Allreduce, MPI_Bcast, ...) so that the
                   analyses treat them alike; bytes from the recorded shapes and dtype (profile with
                   record_shapes=True), seq = the call's order among its rank's collectives
  state            Running inside a thread's top-level ops and annotations, the MPI twin's state inside a
                   collective (Group Communication, ...), Idle between and around them, from the trace's start to
                   its end
A file with two or more ProfilerSteps keeps the events that start before its last one (the profiler's closing
step), as Holistic Trace Analysis does; `distributedInfo.world_size` is the job's size in the run metadata. An
`nccl:` range only enqueues its GPU operation, so it is named by the nonblocking twin (MPI_Iallreduce: a posting).
Times: Kineto's microseconds, parsed exactly (kineto_events.time_ns), become nanoseconds; the ranks are put on
one time axis as Holistic Trace Analysis does, the earliest event of all files at 0 (all ranks read one clock: on
one machine they do). GPU kernels, Python frames (with_stack), memory and other instant events are left out
and counted in the notes. A file that is not JSON, not a Chrome trace, or a Chrome trace without PyTorch's CPU
events is one TraceError naming it.
"""
from __future__ import annotations

import bisect
import gzip
import json
import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from gpt2trace.format import mpi_calls, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import (
    BYTES,
    END_NS,
    FIELDS,
    KIND,
    NAME,
    RANK,
    SEQ,
    START_NS,
    STATE,
    STEP,
    THREAD,
    Kind,
    State,
)
from gpt2trace.interop.kineto_events import (
    ANNOTATION,
    CPU_CATEGORIES,
    CPU_OP,
    LEGACY_OP,
    mpi_twin,
    tensor_bytes,
    time_ns,
)
from gpt2trace.interop.otf2_import import MPI_STATE

SUFFIXES = (".json", ".json.gz")
STEP_PREFIX, STEP_PHASE = "ProfilerStep#", "ProfilerStep"

@dataclass(frozen=True)
class KinetoImport:
    table: pa.Table                     # schema columns and metadata
    notes: tuple[str, ...]
    inputs: tuple[Path, ...] = ()       # the JSON files read: never to be written


def is_kineto_path(path: Path) -> bool:
    """A .json/.json.gz file, or a folder holding some."""
    path = Path(path)
    if path.is_dir():
        return any(p.name.endswith(SUFFIXES) for p in path.iterdir())
    return path.name.endswith(SUFFIXES)


def kineto_files(path: str | Path) -> list[Path]:
    """The trace files of `path`: the file itself, or the folder's .json/.json.gz files in name order."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith(SUFFIXES))
        if not files:
            raise TraceError(f"{path}: no PyTorch profiler traces (*.json, *.json.gz) in the folder")
        return files
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    return [path]


def load_kineto(path: str | Path) -> Trace:
    return Trace.from_table(import_kineto(path).table, path)


def import_kineto(path: str | Path) -> KinetoImport:
    files = kineto_files(path)
    docs = [_read(f) for f in files]
    ranks = _ranks(files, docs)
    notes: list[str] = []
    per_rank = [_Rank(f, r, d, notes) for f, r, d in zip(files, ranks, docs)]
    origin = min(r.first_ns for r in per_rank)
    end = max(r.last_ns for r in per_rank) - origin
    hosts = {h for d in docs if isinstance(h := d.get("host_name"), str)}
    if len(hosts) > 1:
        notes.append(f"the files come from {len(hosts)} hosts, whose clocks may differ: the ranks are aligned as "
                     "HTA aligns them, by the earliest event of all files")
    records = [rec for r in per_rank for rec in r.records(origin, end)]
    skipped: dict[str, int] = {}
    for r in per_rank:
        for what, n in r.skipped.items():
            skipped[what] = skipped.get(what, 0) + n
    if skipped:
        notes.append("left out: " + ", ".join(f"{n} {what}" for what, n in sorted(skipped.items())))
    meta = {}
    if len(hosts) == 1:
        meta[schema.META_MACHINE] = json.dumps({"hostname": hosts.pop()}).encode()
    world = _world_size(files, docs, ranks, notes)
    if world is not None:
        meta[schema.META_RUN] = json.dumps(run_of_world(world)).encode()
    return KinetoImport(schema.with_import_notes(_table(records, meta), notes), tuple(notes), tuple(files))


def run_of_world(world: int) -> dict:
    """The run metadata of a job of `world` ranks that the profiler saw as plain data parallelism (it records no
    other degree): the analyses read the degrees from here, not from the ranks present."""
    return {"parallel": {"ranks": world}, "grid": {"dims": [["dp", world]]}}


def _world_size(files: list[Path], docs: list[dict], ranks: list[int], notes: list[str]) -> int | None:
    """The job's world size from the files' `distributedInfo.world_size` (a file of one rank is one rank of a
    bigger job); None when a file does not say, the files disagree, or a rank does not fit in it."""
    sizes = {_dist_info(d).get("world_size") for d in docs}
    if len(sizes) != 1 or not all(isinstance(w, int) and not isinstance(w, bool) and w >= 1 for w in sizes):
        if sizes - {None}:
            notes.append(f"the files' world sizes ({', '.join(sorted(map(str, sizes)))}) disagree or are not "
                         "numbers: the job's size is not known")
        return None
    world = sizes.pop()
    if max(ranks) >= world:
        notes.append(f"{files[ranks.index(max(ranks))]}: rank {max(ranks)} is not in a world of {world} ranks: the "
                     "job's size is not known")
        return None
    if len(files) < world:
        notes.append(f"{len(files)} of the job's {world} ranks were profiled")
    return world


# --- one file ---------------------------------------------------------------------------------------------------

def _read(path: Path) -> dict:
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else
              open(path, encoding="utf-8")) as fh:
            doc = json.load(fh, parse_float=str)            # times exactly: see kineto_events
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except RecursionError:
        raise TraceError(f"{path}: not valid JSON (nested too deeply); a PyTorch profiler trace is the JSON file "
                         "export_chrome_trace writes") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not valid JSON ({str(exc).splitlines()[0]}); a PyTorch profiler trace is the "
                         "JSON file export_chrome_trace writes") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list); a PyTorch profiler trace is the JSON "
                         "file export_chrome_trace writes")
    if not any(isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in CPU_CATEGORIES for e in events):
        raise TraceError(f"{path}: a Chrome trace, but not a PyTorch profiler (Kineto) trace: it has no CPU op "
                         "events (cat cpu_op, user_annotation, or Operator before PyTorch 1.10); profile with "
                         "torch.profiler and ProfilerActivity.CPU")
    return doc


def _ranks(files: list[Path], docs: list[dict]) -> list[int]:
    given = [_dist_info(d).get("rank") for d in docs]
    if all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in given):
        if len(set(given)) != len(given):
            raise TraceError(f"{files[0].parent}: several files of one rank ({sorted(given)}); give one file per "
                             "rank")
        return given
    return list(range(len(files)))


def _dist_info(doc: dict) -> dict:
    info = doc.get("distributedInfo")
    return info if isinstance(info, dict) else {}


class _Rank:
    """One file's events: its threads, steps, ops, annotations and collectives, in nanoseconds of its clock."""

    def __init__(self, path: Path, rank: int, doc: dict, notes: list[str]):
        self.path, self.rank = path, rank
        self.skipped: dict[str, int] = {}
        spans = [span for e in doc["traceEvents"] if (span := self._span(e)) is not None]
        if not spans:
            raise TraceError(f"{path}: no CPU events to import")
        spans.sort(key=lambda s: (s[0], -s[1]))
        spans = _before_last_step(spans, self.skipped)
        spans = _clipped_to_parents(_without_redispatches(spans, self.skipped), self.skipped)
        self.spans = spans
        self.first_ns = spans[0][0]
        self.last_ns = max(s[1] for s in spans)
        self.threads = _thread_order(spans)
        self.steps = sorted((s[0], s[1], _step_of(s[2])) for s in spans if s[3] == ANNOTATION and
                            _step_of(s[2]) is not None)
        self.step_starts = [st[0] for st in self.steps]

    def _span(self, e) -> tuple | None:
        """(start, end, name, category, tid, pid, args) of a CPU event, None (counted) for any other event. A
        PyTorch 1.8/1.9 "Operator" is an annotation when it is a ProfilerStep, else an op."""
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in CPU_CATEGORIES:
            self._skip(e)
            return None
        try:
            start = time_ns(e["ts"])
            end = start + time_ns(e.get("dur", 0))
            name = e["name"]
        except (KeyError, ValueError):
            raise TraceError(f"{self.path}: an X event without a number ts/dur or a name: "
                             f"{json.dumps(e)[:120]}") from None
        if not isinstance(name, str):
            raise TraceError(f"{self.path}: an X event whose name is not a string: {json.dumps(e)[:120]}")
        if end < start:
            raise TraceError(f"{self.path}: event {name!r} at ts {e['ts']} has a negative duration")
        cat = e["cat"]
        if cat == LEGACY_OP:
            cat = ANNOTATION if _step_of(name) is not None else CPU_OP
        args = e.get("args")
        return start, end, name, cat, _lane_id(e.get("tid")), _lane_id(e.get("pid")), \
            args if isinstance(args, dict) else {}

    def _skip(self, e) -> None:
        what = "events that are not PyTorch CPU events" if not isinstance(e, dict) else {
            "X": f"{e.get('cat')} events", "i": "instant events", "M": None, "s": None, "f": None,
        }.get(_lane_id(e.get("ph")), f"'{e.get('ph')}' events")
        if what:
            self.skipped[what] = self.skipped.get(what, 0) + 1

    def step_at(self, t: int) -> int | None:
        """The step whose ProfilerStep span holds `t` (None before the first and between steps)."""
        i = bisect.bisect_right(self.step_starts, t) - 1
        return self.steps[i][2] if i >= 0 and t <= self.steps[i][1] else None

    def records(self, origin: int, end_ns: int) -> list[dict]:
        out: list[dict] = []
        seq = 0
        for start, end, name, cat, tid, _, args in self.spans:
            base = {RANK: self.rank, THREAD: self.threads[tid], START_NS: start - origin, END_NS: end - origin}
            k = _step_of(name) if cat == ANNOTATION else None
            twin = mpi_twin(name) if cat == ANNOTATION else None
            if k is not None:
                out.append({**base, KIND: Kind.PHASE, NAME: STEP_PHASE, STEP: k})
            elif twin is not None:
                op = mpi_calls.operation(twin)
                collective = op in (mpi_calls.COLL, mpi_calls.COLL_POST)
                out.append({**base, KIND: Kind.COMM, NAME: twin, STEP: self.step_at(start),
                            BYTES: tensor_bytes(args), SEQ: seq if collective else None})
                seq += collective
            else:
                out.append({**base, KIND: Kind.PHASE if cat == ANNOTATION else Kind.KERNEL, NAME: name,
                            STEP: self.step_at(start)})
        out += self._states(out, end_ns)
        return out

    def _states(self, recs: list[dict], end_ns: int) -> list[dict]:
        """Each thread's states: the collective's state inside a collective, Running inside its other top-level
        records, Idle elsewhere, over [0, end_ns]."""
        out = []
        for thread in sorted(set(self.threads.values())):
            busy = [(r[START_NS], r[END_NS], _state_of(r)) for r in recs
                    if r[THREAD] == thread and not (r[KIND] == Kind.PHASE and r[NAME] == STEP_PHASE)]
            for t0, t1, state in _partition(busy, end_ns):
                out.append({RANK: self.rank, THREAD: thread, START_NS: t0, END_NS: t1, KIND: Kind.STATE,
                            STATE: state})
        return out


def _without_redispatches(spans: list[tuple], skipped: dict[str, int]) -> list[tuple]:
    """Drops a CPU op that is the only child of an op of the same name on its thread (aten::mean dispatching to
    aten::mean): one op, recorded twice. The profiler's own tables (key_averages) drop these too."""
    parent = [-1] * len(spans)
    children = [0] * len(spans)
    stacks: dict = {}
    for i, (start, end, _, _, tid, _, _) in enumerate(spans):          # in (start, -end) order
        stack = stacks.setdefault(tid, [])
        while stack and spans[stack[-1]][1] <= start and not (spans[stack[-1]][0] == start == end):
            stack.pop()
        if stack and end <= spans[stack[-1]][1]:
            parent[i] = stack[-1]
            children[stack[-1]] += 1
        stack.append(i)
    drop = {i for i, p in enumerate(parent) if p >= 0 and spans[i][3] == CPU_OP and spans[p][2] == spans[i][2]
            and children[p] == 1}
    if drop:
        skipped["CPU ops that are their parent's only child of the same name (one op recorded twice)"] = len(drop)
    return [s for i, s in enumerate(spans) if i not in drop]


def _lane_id(value):
    """A tid or pid as a key: the profiler writes numbers (strings before PyTorch 1.10); anything else by its text."""
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else json.dumps(value)


def _before_last_step(spans: list[tuple], skipped: dict[str, int]) -> list[tuple]:
    """The events that start before the last ProfilerStep does, when there are two or more. The profiler ends its
    trace with a step it closes early (the last `prof.step()` opens it, the end of the `with` block ends it), so
    it is not a step of the run; Holistic Trace Analysis leaves it out the same way by default
    (`include_last_profiler_step=False`: only CPU events with ts < the last ProfilerStep's ts are kept)."""
    starts = [s[0] for s in spans if s[3] == ANNOTATION and _step_of(s[2]) is not None]
    if len(starts) < 2:
        return spans
    cut = max(starts)
    kept = [s for s in spans if s[0] < cut]
    if len(kept) < len(spans):
        skipped["CPU events of the last ProfilerStep, the profiler's closing step (as HTA leaves it out)"] = (
            len(spans) - len(kept))
    return kept


def _clipped_to_parents(spans: list[tuple], skipped: dict[str, int]) -> list[tuple]:
    """Ends an event that starts inside another of its thread and record kind (ops, annotations, collectives) but
    ends after it at the end of that enclosing event: ranges of one thread nest (exports and analyses rely on it),
    so when two recorded ones still cross, the outer one is taken as the truth. Spans come in (start, -end)
    order."""
    stacks: dict = {}
    out = []
    clipped = 0
    for span in spans:
        start, end, name, cat, tid = span[:5]
        stack = stacks.setdefault((tid, _record_kind(name, cat)), [])
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            span, end = (start, stack[-1], *span[2:]), stack[-1]
            clipped += 1
        stack.append(end)
        out.append(span)
    if clipped:
        skipped["ends of CPU events that crossed their enclosing event's end (clipped to it)"] = clipped
    return out


def _record_kind(name: str, cat: str) -> str:
    if cat != ANNOTATION:
        return Kind.KERNEL
    return Kind.COMM if _step_of(name) is None and mpi_twin(name) is not None else Kind.PHASE


def _thread_order(spans) -> dict:
    """tid -> thread: the ProfilerStep thread (else the process's main thread, tid == pid) first, then by tid."""
    tids = list(dict.fromkeys(s[4] for s in spans))
    main = next((s[4] for s in spans if s[3] == ANNOTATION and _step_of(s[2]) is not None), None)
    if main is None:
        main = next((s[4] for s in spans if s[4] == s[5]), tids[0])
    rest = sorted((t for t in tids if t != main), key=lambda t: (not isinstance(t, int), str(t) if not
                                                                   isinstance(t, int) else t))
    return {t: i for i, t in enumerate([main] + rest)}


def _step_of(name: str) -> int | None:
    if name.startswith(STEP_PREFIX) and name[len(STEP_PREFIX):].isdigit():
        return int(name[len(STEP_PREFIX):])
    return None


def _state_of(rec: dict) -> int:
    if rec[KIND] == Kind.COMM:
        return int(MPI_STATE[mpi_calls.operation(rec[NAME])])
    return int(State.RUNNING)


def _partition(busy: list[tuple[int, int, int]], end_ns: int) -> list[tuple[int, int, int]]:
    """[0, end_ns] as consecutive (start, end, state): inside a collective its state, inside other records
    Running, Idle elsewhere (one sweep over the records' starts and ends)."""
    edges = sorted([(t0, 1, s) for t0, t1, s in busy] + [(t1, -1, s) for t0, t1, s in busy])
    active: dict[int, int] = {}
    out: list[tuple[int, int, int]] = []
    at, state = 0, int(State.IDLE)
    for t, delta, s in edges + [(end_ns, 0, int(State.IDLE))]:
        if t > at:
            if out and out[-1][2] == state:
                out[-1] = (out[-1][0], t, state)
            else:
                out.append((at, t, state))
            at = t
        active[s] = active.get(s, 0) + delta
        comm = [k for k, n in active.items() if n > 0 and k != State.RUNNING]
        state = comm[0] if comm else int(State.RUNNING) if active.get(int(State.RUNNING), 0) > 0 else int(State.IDLE)
    return out


def _table(records: list[dict], meta: dict) -> pa.Table:
    records.sort(key=lambda r: (Kind.ALL.index(r[KIND]), r[RANK], r[THREAD], r[START_NS], -r[END_NS]))
    cols = {KIND: pa.array([r[KIND] for r in records], pa.string()).dictionary_encode()}
    for col, typ in FIELDS.items():
        if col != KIND:
            cols[col] = pa.array([r.get(col) for r in records], pa.string() if col == NAME else typ).cast(typ)
    return pa.table(cols).replace_schema_metadata(schema.arrow_schema(meta).metadata)
