"""What every imported record needs: its place (rank and thread from the .prv's appl, task, thread), its times
in ns, checked against the header, and a schema table per kind. Shared by the import of states and of events."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from gpt2trace.format import schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.schema import END_NS, FIELDS, KIND, NAME, RANK, START_NS, THREAD
from gpt2trace.interop.paraver_parse import Header


class Lanes:
    """(appl, task, thread) -> global thread (lane), its rank (the task's global order) and thread (0-based)."""

    def __init__(self, header: Header):
        per_task = [t for appl in header.tasks for t in appl]
        self.task_base = np.cumsum([0] + [len(a) for a in header.tasks])
        self.ntasks = np.array([len(a) for a in header.tasks])
        self.nthreads = np.array(per_task)
        self.thread_base = np.cumsum([0] + per_task)
        self.rank = np.repeat(np.arange(len(per_task)), per_task)
        self.thread = np.concatenate([np.arange(n) for n in per_task])
        self.header = header

    def lane(self, path: Path, rec: np.ndarray, lines: np.ndarray, what: str, first: int = 0) -> np.ndarray:
        """Checks cpu, appl, task, thread (columns first..first+3 of rec) and returns the lanes."""
        cpu, appl, task, thread = (rec[:, first + k] for k in range(4))
        h = self.header
        require(path, lines, (cpu >= 0) & ((cpu <= h.cpus) | (h.cpus == 0)), lambda i:
                 f"{what} cpu {cpu[i]} is out of range (the header declares {h.cpus} CPUs)")
        require(path, lines, (appl >= 1) & (appl <= len(self.ntasks)), lambda i:
                 f"{what} application {appl[i]} is out of range (the header declares {len(self.ntasks)})")
        a = appl - 1
        require(path, lines, (task >= 1) & (task <= self.ntasks[a]), lambda i:
                 f"{what} task {task[i]} is out of range (application {appl[i]} has {self.ntasks[a[i]]} tasks)")
        g = self.task_base[a] + task - 1
        require(path, lines, (thread >= 1) & (thread <= self.nthreads[g]), lambda i:
                 f"{what} thread {thread[i]} is out of range (task {task[i]} has {self.nthreads[g[i]]} threads)")
        return self.thread_base[g] + thread - 1


def require(path: Path, lines: np.ndarray, ok: np.ndarray, message) -> None:
    if not ok.all():
        i = int(np.argmin(ok))
        raise TraceError(f"{path}:{lines[i]}: {message(i)}")


def to_ns(path: Path, header: Header, lines: np.ndarray, t: np.ndarray, what: str) -> np.ndarray:
    require(path, lines, (t >= 0) & (t * header.unit_ns <= header.end_ns), lambda i:
             f"{what} {t[i]} is outside the trace (0 to {header.end_ns // header.unit_ns} in the header)")
    return t * header.unit_ns


def kind_table(kind: str, lanes: Lanes, lane, start, end, cols: dict, names: tuple | None = None) -> pa.Table:
    """A schema table of one kind; cols: column -> (values, present or None). Records keep their order (each
    thread's in time order, as the file lists them)."""
    n = len(lane)
    arrays = {KIND: pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([kind])),
              RANK: pa.array(lanes.rank[lane].astype(np.int32)), THREAD: pa.array(lanes.thread[lane].astype(np.int32)),
              START_NS: pa.array(np.asarray(start, np.int64)), END_NS: pa.array(np.asarray(end, np.int64)),
              NAME: name_array(names, n)}
    for col, typ in FIELDS.items():
        if col in arrays:
            continue
        if col in cols:
            values, ok = cols[col]
            arrays[col] = pa.array(np.asarray(values), type=typ, mask=None if ok is None or ok.all() else ~ok)
        else:
            arrays[col] = pa.nulls(n, typ)
    return pa.table({c: arrays[c] for c in FIELDS}, schema=schema.arrow_schema())


def name_array(names: tuple[np.ndarray, list[str]] | None, n: int) -> pa.Array:
    if names is None:
        return pa.nulls(n, FIELDS[NAME])
    codes, dictionary = names
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(dictionary, pa.string()))




class Notes:
    """What an import did beyond a plain translation, as lines. A note given with a count is summed with the notes
    of the same text (an import that works rank by rank adds one per rank), and the event types left out are
    tallied by type, so the lines come out the same however the trace was split."""

    def __init__(self):
        self._counts: dict[str, int | None] = {}     # template with {n} -> count (None: plain text), in order
        self._skipped: dict[int, list] = {}          # event type -> [label, count]

    def add(self, template: str, count: int | None = None) -> None:
        """`template` with `{n}` where the count goes; without a count, plain text said once (a file name in it
        is data, never a template)."""
        if count is None:
            self._counts.setdefault(template, None)
        elif count:
            self._counts[template] = (self._counts.get(template) or 0) + int(count)

    def skipped(self, types: np.ndarray, counts: np.ndarray, labels: dict[int, str]) -> None:
        self._counts.setdefault(_SKIPPED, 0)
        for ty, c in zip(types.tolist(), counts.tolist()):
            self._skipped.setdefault(ty, [labels.get(ty, "unnamed"), 0])[1] += c

    def lines(self) -> tuple[str, ...]:
        out = []
        for template, n in self._counts.items():
            if template == _SKIPPED:
                items = sorted(self._skipped.items())
                shown = ", ".join(f"{ty} ({label}: {c})" for ty, (label, c) in items[:8])
                out.append(f"{sum(c for _, c in self._skipped.values())} event(s) of {len(items)} type(s) are not "
                           f"records of our schema and were not imported: {shown}{', ...' if len(items) > 8 else ''}")
            else:
                out.append(template if n is None else template.format(n=n))
        return tuple(out)


_SKIPPED = "\0skipped event types"
