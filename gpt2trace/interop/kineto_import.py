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
Times: Kineto's microseconds (with nanosecond decimals) become nanoseconds; the ranks are put on one time axis as
Holistic Trace Analysis does, the earliest event of all files at 0 (all ranks read one clock: on one machine they
do). GPU kernels, Python frames (with_stack), memory and other instant events are left out and counted in the
notes. A file that is not JSON, not a Chrome trace, or a Chrome trace without PyTorch's CPU events is one
TraceError naming it.
"""
from __future__ import annotations

import bisect
import gzip
import json
import math
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
from gpt2trace.interop.otf2_import import MPI_STATE

SUFFIXES = (".json", ".json.gz")
CPU_OP, ANNOTATION = "cpu_op", "user_annotation"
STEP_PREFIX, STEP_PHASE = "ProfilerStep#", "ProfilerStep"
BACKENDS = ("gloo:", "nccl:", "mpi:", "ucc:")
# A backend's call name -> its MPI twin.
MPI_TWINS = {**dict.fromkeys(("all_reduce", "allreduce", "allreduce_coalesced"), "MPI_Allreduce"),
             **dict.fromkeys(("broadcast", "bcast"), "MPI_Bcast"),
             **dict.fromkeys(("all_gather", "allgather", "all_gather_into_tensor", "_allgather_base",
                              "allgather_into_tensor_coalesced"), "MPI_Allgather"),
             **dict.fromkeys(("reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
                              "reduce_scatter_tensor_coalesced"), "MPI_Reduce_scatter"),
             "reduce": "MPI_Reduce", "gather": "MPI_Gather", "scatter": "MPI_Scatter",
             **dict.fromkeys(("all_to_all", "alltoall", "alltoall_base"), "MPI_Alltoall"),
             "barrier": "MPI_Barrier", "send": "MPI_Send", **dict.fromkeys(("recv", "recv_anysource"), "MPI_Recv")}
# Element sizes of the dtypes the profiler names in "Input type".
DTYPE_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
               "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1, "c10::complex<float>": 8,
               "c10::complex<double>": 16}


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
    hosts = {d.get("host_name") for d in docs} - {None}
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
    return KinetoImport(_table(records, meta), tuple(notes), tuple(files))


# --- one file ---------------------------------------------------------------------------------------------------

def _read(path: Path) -> dict:
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.name.endswith(".gz") else
              open(path, encoding="utf-8")) as fh:
            doc = json.load(fh)
    except (OSError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not valid JSON ({str(exc).splitlines()[0]}); a PyTorch profiler trace is the "
                         "JSON file export_chrome_trace writes") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise TraceError(f"{path}: not a Chrome trace (no traceEvents list); a PyTorch profiler trace is the JSON "
                         "file export_chrome_trace writes")
    if not any(isinstance(e, dict) and e.get("ph") == "X" and e.get("cat") in (CPU_OP, ANNOTATION) for e in events):
        raise TraceError(f"{path}: a Chrome trace, but not a PyTorch profiler (Kineto) trace: it has no CPU op "
                         "events (cat cpu_op or user_annotation); profile with torch.profiler and "
                         "ProfilerActivity.CPU")
    return doc


def _ranks(files: list[Path], docs: list[dict]) -> list[int]:
    given = [(d.get("distributedInfo") or {}).get("rank") for d in docs]
    if all(isinstance(r, int) for r in given):
        if len(set(given)) != len(given):
            raise TraceError(f"{files[0].parent}: several files of one rank ({sorted(given)}); give one file per "
                             "rank")
        return given
    return list(range(len(files)))


class _Rank:
    """One file's events: its threads, steps, ops, annotations and collectives, in nanoseconds of its clock."""

    def __init__(self, path: Path, rank: int, doc: dict, notes: list[str]):
        self.path, self.rank = path, rank
        self.skipped: dict[str, int] = {}
        spans = []
        for e in doc["traceEvents"]:
            if not isinstance(e, dict) or e.get("ph") != "X" or e.get("cat") not in (CPU_OP, ANNOTATION):
                self._skip(e)
                continue
            try:
                start = round(float(e["ts"]) * 1000)
                end = start + round(float(e.get("dur", 0)) * 1000)
                name = str(e["name"])
            except (KeyError, TypeError, ValueError):
                raise TraceError(f"{path}: an X event without a number ts/dur or a name: "
                                 f"{json.dumps(e)[:120]}") from None
            if end < start:
                raise TraceError(f"{path}: event {name!r} at ts {e['ts']} has a negative duration")
            spans.append((start, end, name, e.get("cat"), e.get("tid"), e.get("pid"), e.get("args") or {}))
        if not spans:
            raise TraceError(f"{path}: no CPU events to import")
        spans.sort(key=lambda s: (s[0], -s[1]))
        self.spans = _without_redispatches(spans, self.skipped)
        self.first_ns = spans[0][0]
        self.last_ns = max(s[1] for s in spans)
        self.threads = _thread_order(spans)
        self.steps = sorted((s[0], s[1], _step_of(s[2])) for s in spans if s[3] == ANNOTATION and
                            _step_of(s[2]) is not None)
        self.step_starts = [st[0] for st in self.steps]

    def _skip(self, e) -> None:
        what = "events that are not PyTorch CPU events" if not isinstance(e, dict) else {
            "X": f"{e.get('cat')} events", "i": "instant events", "M": None, "s": None, "f": None,
        }.get(e.get("ph"), f"'{e.get('ph')}' events")
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
            twin = _mpi_twin(name) if cat == ANNOTATION else None
            if k is not None:
                out.append({**base, KIND: Kind.PHASE, NAME: STEP_PHASE, STEP: k})
            elif twin is not None:
                op = mpi_calls.operation(twin)
                out.append({**base, KIND: Kind.COMM, NAME: twin, STEP: self.step_at(start), BYTES: _bytes(args),
                            SEQ: seq if op == mpi_calls.COLL else None})
                seq += op == mpi_calls.COLL
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


def _mpi_twin(name: str) -> str | None:
    for prefix in BACKENDS:
        if name.startswith(prefix):
            return MPI_TWINS.get(name[len(prefix):])
    return None


def _bytes(args: dict) -> int | None:
    """Bytes of the call's tensors from its recorded shapes and dtypes (None without record_shapes)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    total = 0
    for shape, dtype in zip(dims, types):
        size = DTYPE_BYTES.get(dtype)
        if size is None or not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            return None
        total += math.prod(shape) * size
    return total


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
