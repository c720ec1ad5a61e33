"""What the merge makes of a raw window (`RankDecoder`), from the Arrow layouts of raw parts of earlier versions and
as `pieces` takes it apart (the .raw files of gpt2trace.format.raw_part)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.raw_window import (
    _BUFFERS,
    COMM_FIELDS,
    COUNTER_FIELDS,
    META_RAW,
    PHASE_FIELDS,
    TASK_FIELDS,
    RankDecoder,
    RawWindow,
    TaskBuffers,
    pieces,
    unpack,
)

MAIN, WORKER = 4242, 4343
META = {S.META_RUN: b'{"model": {}}'}


def _window(names=("matmul_forward", "gelu_forward")) -> RawWindow:
    """Two kernel calls on two threads, a phase, an MPI call, two counters and a task graph of two tasks."""
    times = np.array([[[100, 200, 0], [110, 150, MAIN], [120, 190, WORKER]],
                      [[210, 260, 1 << 32], [215, 250, MAIN], [0, 0, -1]]], np.int64)
    phases = np.array([[90, 270, 3, 0, -1]], np.int64).reshape(-1, len(PHASE_FIELDS))
    comms = np.array([[300, 320, 3, 0, 4096, 1, 7, 0, 9, 5]], np.int64).reshape(-1, len(COMM_FIELDS))
    counters = np.array([[330, 3, -1], [331, 3, -1]], np.int64).reshape(-1, len(COUNTER_FIELDS))
    tasks = np.array([[0, 0, 2, 0, MAIN, 400, 401, 450, 451, 3, 0],
                      [1, 1, 2, 0, WORKER, 452, 453, 480, 481, 3, 0]], np.int64).reshape(-1, len(TASK_FIELDS))
    task = TaskBuffers(tasks, ["layernorm_forward", "residual_forward"], np.array([0, 0, 1], np.int64),
                       np.array([0], np.int64), np.array([[WORKER, 400, 452]], np.int64),
                       np.array([[400, 481]], np.int64))
    return RawWindow(0, 50, 500, 0, 2, MAIN, times, np.array([0, (1 << 32) - 1], np.int64),
                     np.array([[0, 3, 0]], np.int64), list(names), ["forward"], phases, ["MPI_Send"], comms,
                     ["loss", "tokens"], counters, np.array([2.5, 256.0]), task)


def _earlier_layout(w: RawWindow) -> pa.Table:
    """The same window as parts of earlier versions held it: a one-row list column per buffer."""
    t = w.tasks
    values = {"times": w.times, "keys": w.keys, "marks": w.marks, "kernel_names": w.kernel_names,
              "phases": w.phases, "phase_names": w.phase_names, "comms": w.comms, "comm_names": w.comm_names,
              "counters": w.counters, "counter_values": w.counter_values, "counter_names": w.counter_names,
              "tasks": t.tasks, "task_names": t.names, "task_pred_offsets": t.pred_offsets,
              "task_preds": t.preds, "task_idle": t.idle, "task_graphs": t.graphs}
    columns = [pa.array([list(np.asarray(values[n]).reshape(-1)) if typ != pa.string() else values[n]],
                        pa.large_list(typ)) for n, typ in _BUFFERS.items()]
    info = {"rank": w.rank, "start_ns": w.start_ns, "end_ns": w.end_ns, "origin_ns": w.origin_ns,
            "threads": w.threads, "main_tid": w.main_tid}
    return pa.Table.from_arrays(columns, names=list(_BUFFERS), metadata={**META, META_RAW: json.dumps(info).encode()})


def _four_columns(w: RawWindow) -> pa.Table:
    """The window as raw parts of the previous version held it: an Arrow table of one row, four list columns."""
    info, flat, text = pieces(w)
    columns = [pa.array([w.times.reshape(-1)], pa.large_list(pa.int64())),
               pa.array([np.concatenate(flat)], pa.large_list(pa.int64())),
               pa.array([w.counter_values], pa.large_list(pa.float64())), pa.array([text], pa.string())]
    return pa.Table.from_arrays(columns, names=["times", "ints", "counter_values", "names"],
                                metadata={**META, META_RAW: json.dumps(info).encode()})


def _window_of_pieces(w: RawWindow) -> pa.Table:
    """The window through `pieces` and `unpack`, as a .raw file holds it, decoded."""
    info, flat, text = pieces(w)
    return RankDecoder().window(info, *unpack(info, w.times.reshape(-1), np.concatenate(flat), w.counter_values,
                                              text), META)


def test_every_layout_decodes_to_the_same_records():
    w = _window()
    got = _window_of_pieces(w)
    for earlier in (_four_columns(w), _earlier_layout(w)):
        want = RankDecoder().part(earlier)
        assert got.equals(want)
    assert got.num_rows > 0
    kinds = got.column(S.KIND).to_pylist()
    for kind in (S.Kind.PHASE, S.Kind.COMM, S.Kind.COUNTER, S.Kind.TASK):
        assert kind in kinds                         # every group of buffers made it through


def test_a_window_without_tasks_or_mpi_calls():
    w = _window()
    bare = RawWindow(**{**w.__dict__, "comm_names": [], "comms": w.comms[:0], "tasks": None})
    got = _window_of_pieces(bare)
    kinds = got.column(S.KIND).to_pylist()
    assert S.Kind.COMM not in kinds and S.Kind.TASK not in kinds and S.Kind.PHASE in kinds
    assert got.equals(RankDecoder().part(_four_columns(bare)))


def test_a_name_holding_nul_is_refused_where_it_would_be_split():
    with pytest.raises(ValueError, match="NUL"):
        pieces(_window(names=("matmul\x00forward", "gelu_forward")))


@pytest.mark.parametrize("field", ["ints", "names"])
def test_lengths_that_do_not_match_the_buffers_are_refused(field):
    part = _four_columns(_window())
    info = json.loads(part.schema.metadata[META_RAW])
    info[field][0] += 1
    bad = part.replace_schema_metadata({**part.schema.metadata, META_RAW: json.dumps(info).encode()})
    with pytest.raises(ValueError, match="do not match"):
        RankDecoder().part(bad)
