"""One rank of a .prv imported in time windows, so that memory stays the same however long the rank's part is.

The rank's spilled rows (`paraver_spill`) are read back a block at a time:
  states    block by block: each state is a record of its own; each thread's first begin and last end are kept
            for the Idle padding, which comes after all of them, as in the whole import
  events    cut into windows of about `window_lines` event lines, at instants where the time moves on: every line
            of an instant is in one window (an Extrae line split at one instant finds its call), and no thread has
            a line in a later window earlier than one in an earlier window. `paraver_events.Window` carries from
            one window to the next what the pairs still open need (see there)
  messages  each side of a 3: record goes to the window of its time, where the calls open at that time are
Within a kind, the whole import lists a rank's records by (thread, event type), in the order they close: each
window's records go to the kind's file a (thread, type) group per batch (`KindFile`), read back group by group
across the windows.

A rank whose event lines go back in time, or whose messages are received physically before logically, is
imported whole (`paraver_stream`), as before: the windows rely on the time order Paraver asks of a .prv.
"""
from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from gpt2trace.format.schema import KIND, NAME, STATE, THREAD, Kind
from gpt2trace.interop.paraver_events import (
    TYPE_COLUMN,
    Events,
    Sides,
    Window,
    message_sides,
)
from gpt2trace.interop.paraver_import import Extent, state_rows
from gpt2trace.interop.paraver_parse import Body
from gpt2trace.interop.paraver_records import kind_table
from gpt2trace.interop.paraver_spill import COMM_ROWS, EVENT_ROWS, PAIR_ROWS, ROW_GROUP, STATE_ROWS, Spill

WINDOW_LINES = 1 << 17
SIDE_ROWS = ("sides", Sides.WIDTH)
MERGED = (Kind.COMM, Kind.KERNEL, Kind.PHASE, Kind.TASK)       # in the order `Events.records` gives them


class NotInTimeOrder(Exception):
    """The rank's lines are not in the order the windows need: import it whole."""


def cuts(spill: Spill, rank: int, window_lines: int) -> tuple[list[int], list[int]]:
    """(first event row, its raw time) of each window: about `window_lines` rows apart, each where the time is
    later than every row before (the last start is the number of rows). NotInTimeOrder when a row's time is
    earlier than the one before it."""
    n = spill.count(rank, EVENT_ROWS)
    starts, times = [0], []
    prev = None
    target = window_lines
    for a in range(0, n, window_lines):
        t = spill.block(rank, EVENT_ROWS, a, min(a + window_lines, n))[:, 4]
        if prev is None:
            prev = t[0]
            times.append(int(prev))
        before = np.r_[prev, t[:-1]]
        if (t < before).any():
            raise NotInTimeOrder
        moves = np.flatnonzero(t > before) + a
        k = np.searchsorted(moves, target)
        while k < len(moves):
            at = int(moves[k])
            starts.append(at)
            times.append(int(t[at - a]))
            target = at + window_lines
            k = np.searchsorted(moves, target)
        prev = t[-1]
    return starts + [n], times or [0]


class KindFile:
    """A kind's records of one rank, from all its windows, in one Arrow file: a (thread, type) group of a window per
    batch (or several when large), read back group by group, each group's windows in order. Each window names its
    records with a dictionary of its own and an Arrow file holds one per column: the file keeps the names' codes in
    one dictionary of the rank's, and the kind, which is the file's, aside."""

    def __init__(self, kind: str, path: Path, batch_rows: int):
        self.kind, self.path, self.batch_rows, self.rows = kind, path, batch_rows, 0
        self._names: dict[str, int] = {}
        self._keys: list[np.ndarray] = []             # per window: (thread, type, window) of each batch
        self._sink = self._writer = None

    def add(self, window: int, table: pa.Table) -> None:
        thread = table.column(THREAD).to_numpy()
        typ = table.column(TYPE_COLUMN).to_numpy()
        bounds = np.r_[0, np.flatnonzero((thread[1:] != thread[:-1]) | (typ[1:] != typ[:-1])) + 1, len(thread)]
        names = table.column(NAME).combine_chunks()
        code = np.array([self._names.setdefault(n, len(self._names)) for n in names.dictionary.to_pylist()],
                        np.int32)
        table = table.drop_columns([TYPE_COLUMN, KIND]).set_column(
            table.column_names.index(NAME) - 1, NAME, pa.array(code[names.indices.to_numpy(zero_copy_only=False)]))
        if self._writer is None:
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = pa.ipc.new_file(self._sink, table.schema)
        keys = []
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            for batch in table.slice(a, b - a).to_batches(max_chunksize=self.batch_rows):
                self._writer.write_batch(batch)
                keys.append((thread[a], typ[a], window))
        self._keys.append(np.array(keys, np.int64).reshape(-1, 3))
        self.rows += table.num_rows

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()

    def tables(self) -> Iterator[pa.Table]:
        keys = np.concatenate(self._keys)
        order = np.lexsort((np.arange(len(keys)), keys[:, 2], keys[:, 1], keys[:, 0]))
        names = pa.array(list(self._names), pa.string())
        kinds = pa.array([self.kind], pa.string())
        with pa.OSFile(str(self.path)) as source:
            reader = pa.ipc.open_file(source)
            for i in order.tolist():
                t = pa.Table.from_batches([reader.get_batch(i)])
                t = t.set_column(t.column_names.index(NAME), NAME,
                                 pa.DictionaryArray.from_arrays(t.column(NAME).combine_chunks(), names))
                yield t.add_column(0, KIND, pa.DictionaryArray.from_arrays(pa.array(np.zeros(t.num_rows, np.int32)),
                                                                          kinds))
        self.path.unlink()


def import_rank(prv, header, lanes, comm_ids, pcf, spill: Spill, rank: int, kept, notes, save,
                window_lines: int = WINDOW_LINES) -> list:
    """The rank's records as the whole import of the rank gives them (`paraver_stream`), in windows of about
    `window_lines` event lines; `kept` is the stream's `_Collectives`, `save(stem, tables)` writes plain tables.
    Raises NotInTimeOrder, having written and noted nothing, when the rank needs the whole import. Returns the
    rank's parts [(path or KindFile, rows)]."""
    spill.flush(rank)
    starts, times = cuts(spill, rank, window_lines)
    n_win = len(starts) - 1
    t_ns = np.array(times, np.int64) * header.unit_ns
    # the first pair row of each window (pairs list their event row, in order)
    n_pr = spill.count(rank, PAIR_ROWS)
    pair_at = np.zeros(len(starts), np.int64)
    for a in range(0, n_pr, window_lines):
        pair_at += np.searchsorted(spill.block(rank, PAIR_ROWS, a, min(a + window_lines, n_pr))[:, 0], starts)
    # the sides of the rank's messages, each in the window of its time
    sides = Spill(spill.folder / f"sides{rank}", spill.limit // 4)
    sides.folder.mkdir()
    try:
        _route_sides(prv, header, lanes, spill, rank, t_ns, window_lines, sides)
    except BaseException:
        shutil.rmtree(sides.folder)
        raise
    folder = spill.folder
    # the states, block by block
    parts = []
    extent = Extent(len(lanes.rank))
    n_st = spill.count(rank, STATE_ROWS)
    for a in range(0, n_st, window_lines):
        st = spill.block(rank, STATE_ROWS, a, min(a + window_lines, n_st))
        lane, begin, end, state = state_rows(prv, header, st[:, :7], st[:, 7], lanes)
        extent.add(lane, begin, end)
        parts += save(folder / f"rank{rank}s{a}", [kind_table(Kind.STATE, lanes, lane, begin, end,
                                                              {STATE: (state, None)})])
    pad_lane, pad_start, pad_end, pad_state = extent.padding(header, notes)
    if len(pad_lane):
        parts += save(folder / f"rank{rank}pad", [kind_table(Kind.STATE, lanes, pad_lane, pad_start, pad_end,
                                                             {STATE: (pad_state, None)})])
    # the events, window by window
    window = Window(kept.received)
    window.last = extent.last.copy()        # the rank's last state ends; its events' times come window by window
    grouped = {k: KindFile(k, folder / f"rank{rank}.{k}.arrow", ROW_GROUP) for k in MERGED}
    counters = []
    empty = (np.empty((0, 14), np.int64), np.empty(0, np.int64))
    for w in range(n_win):
        ev = spill.block(rank, EVENT_ROWS, starts[w], starts[w + 1])
        pr = spill.block(rank, PAIR_ROWS, int(pair_at[w]), int(pair_at[w + 1]))
        body = Body(np.empty((0, 7), np.int64), np.empty(0, np.int64), ev[:, :5], ev[:, 5],
                    pr[:, 0] - starts[w], pr[:, 1], pr[:, 2], *empty, lines=0)
        window.final = w == n_win - 1
        sd = Sides.of_rows(sides.rows(w, SIDE_ROWS))
        sides.drop(w, [SIDE_ROWS])
        events = Events(prv, header, body, lanes, comm_ids, sides=sd, window=window)
        tables = events.records(pcf, notes)
        kept.add(events.attached_index, tables)
        if events.carry is not None:
            window.opens = events.carry
        for table in tables:
            kind = table.column(KIND)[0].as_py()
            if kind in grouped:
                grouped[kind].add(w, table)
            else:
                counters += save(folder / f"rank{rank}w{w}c", [table])
    sides.folder.rmdir()
    for kind in MERGED:
        grouped[kind].close()
        if grouped[kind].rows:
            parts.append((grouped[kind], grouped[kind].rows))
    spill.drop(rank)
    return parts + counters


def _route_sides(prv, header, lanes, spill: Spill, rank: int, t_ns: np.ndarray, block: int, sides: Spill) -> None:
    """The sides of the rank's messages that its threads may hold, each to the window of its time."""
    n = spill.count(rank, COMM_ROWS)
    for a in range(0, n, block):
        cm = spill.block(rank, COMM_ROWS, a, min(a + block, n))
        sd = message_sides(prv, header, lanes, cm[:, :14], cm[:, 14], cm[:, 15])
        mine = lanes.rank[sd.lane] == rank
        win = np.maximum(np.searchsorted(t_ns, sd.when, side="right") - 1, 0)
        k = len(cm)           # message_sides lists every send, then every logical and physical receive
        receive, physical = slice(k, 2 * k), slice(2 * k, 3 * k)
        if ((win[physical] < win[receive]) & mine[receive]).any():
            raise NotInTimeOrder
        sides.add(win[mine], SIDE_ROWS, sd.rows()[mine])
