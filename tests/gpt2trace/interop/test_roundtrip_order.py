"""Rows of equal value keep one order: a trace and its Paraver or OTF2 round trip (export, import to Parquet, as
`gpt2trace export T -f paraver -o x && gpt2trace import x.prv -o y.parquet` do) give the same `analyze` lists in
the same order, and so do the same records given in two orders (another name dictionary, lanes reversed)."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

import gpt2trace
from analysis.analyze import analyze, jsonable
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import NAME, RANK, THREAD, State
from gpt2trace.interop.otf2_export import export_otf2
from gpt2trace.interop.otf2_import import import_otf2
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import write_parquet
from gpt2trace.interop.paraver_stream import import_paraver_to
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
# tiny_2ranks_tasks: its kernels of no Synchronization (sync_s 0) came back in another order before the fix
ROUND_TRIP = ("tiny_2threads", "tiny_2ranks_allreduce", "small_2threads", "tiny_2ranks_tasks")
# what an import cannot bring back, so its values may differ (their rows' order is still checked below):
# a .prv and OTF2 hold no task dependencies (tasks and their findings), Paraver pads threads with Idle (states)
LOST_IN_IMPORT = ("trace", "warnings", "tasks", "findings", "states")


def _paraver(src: Path, tmp: Path) -> Path:
    out = export_paraver(src, tmp / src.stem)
    import_paraver_to(out.prv, tmp / "paraver.parquet")
    return tmp / "paraver.parquet"


def _otf2(src: Path, tmp: Path) -> Path:
    out = export_otf2(src, tmp / f"{src.stem}_otf2")
    write_parquet(import_otf2(out.anchor), tmp / "otf2.parquet")
    return tmp / "otf2.parquet"


def _tables(obj, path: str = "") -> dict[str, list[str]]:
    """Every list of rows (dicts) in an `analyze` result, by its path, each row as its JSON text."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out |= _tables(v, f"{path}.{k}")
    elif isinstance(obj, list) and obj and all(isinstance(r, dict) for r in obj):
        out[path] = [json.dumps(r, sort_keys=True) for r in obj]
        for i, r in enumerate(obj):
            out |= _tables(r, f"{path}[{i}]")
    return out


def _common_order(a: list[str], b: list[str]) -> tuple[list[str], list[str]]:
    """The rows both lists hold (as many times as both do), each list's in its own order."""
    both = Counter(a) & Counter(b)

    def keep(rows):
        left = Counter(both)
        out = []
        for r in rows:
            if left[r] > 0:
                left[r] -= 1
                out.append(r)
        return out
    return keep(a), keep(b)


def _assert_same_order(a: dict, b: dict) -> None:
    ta, tb = _tables(a), _tables(b)
    for path in ta.keys() & tb.keys():
        ra, rb = _common_order(ta[path], tb[path])
        assert ra == rb, path


@pytest.mark.parametrize("fmt", [_paraver, _otf2], ids=["paraver", "otf2"])
@pytest.mark.parametrize("sample", ROUND_TRIP)
def test_round_trip_keeps_every_list_in_order(tmp_path, sample, fmt):
    src = SAMPLES / f"{sample}.parquet"
    a = jsonable(analyze(gpt2trace.load(src)))
    b = jsonable(analyze(gpt2trace.load(fmt(src, tmp_path))))
    assert [r["kernel"] for r in b["occupancy"]["per_kernel"]] == [r["kernel"] for r in a["occupancy"]["per_kernel"]]
    _assert_same_order(a, b)
    assert {k: v for k, v in a.items() if k not in LOST_IN_IMPORT} == \
        {k: v for k, v in b.items() if k not in LOST_IN_IMPORT}


RUN, GROUP = State.RUNNING, State.GROUP_COMMUNICATION


def _tied_records() -> list[dict]:
    """2 ranks x 2 threads, one step [0, 10] s, in lane order; every kernel on both threads of a rank, no
    Synchronization anywhere (every kernel's sync_s is 0):
        rank 0: zeta_forward L0 [0,1], alpha_forward L0 [1,2], mid_forward (no layer) [2,3], Python [3,8]
        rank 1: zeta_forward L0 [0,2], alpha_forward L0 [2,4], mid_forward [4,5], Python [5,8]
        both:   MPI_Allreduce [8,10] on thread 0 (rank 0 waits 0 s: both arrive at 8)
    Rank 1 is 1 s slower in zeta and in alpha: equal time lost in both."""
    recs = []
    for rank, k in ((0, 1), (1, 2)):
        for thread in (0, 1):
            recs += [syn.state(rank, thread, 0, 2 * k + 1, RUN),
                     syn.kernel(rank, thread, 0, k, "zeta_forward", 0, 0),
                     syn.kernel(rank, thread, k, 2 * k, "alpha_forward", 0, 0),
                     syn.kernel(rank, thread, 2 * k, 2 * k + 1, "mid_forward", 0, None)]
            if thread == 0:
                recs += [syn.state(rank, 0, 2 * k + 1, 8, RUN), syn.state(rank, 0, 8, 10, GROUP),
                         syn.phase(rank, 0, 8, "forward", 0), syn.phase(rank, 8, 10, "grad_sync", 0),
                         syn.comm(rank, 8, 10, "MPI_Allreduce", seq=0, nbytes=1000, step=0)]
            else:
                recs.append(syn.state(rank, 1, 2 * k + 1, 10, State.IDLE))
    return recs


def _reordered(table: pa.Table) -> pa.Table:
    """The same records, lanes in reverse order (each lane's own in order) and the names' dictionary reversed."""
    lane = [(-r, -t) for r, t in zip(table.column(RANK).to_pylist(), table.column(THREAD).to_pylist())]
    order = sorted(range(table.num_rows), key=lambda i: lane[i])        # a stable sort: a lane keeps its order
    table = table.take(pa.array(order))
    names = table.column(NAME).to_pylist()
    dictionary = sorted({n for n in names if n is not None}, reverse=True)
    codes = pa.array([dictionary.index(n) if n is not None else None for n in names], pa.int32())
    column = pa.DictionaryArray.from_arrays(codes, pa.array(dictionary, pa.string()))
    return table.set_column(table.schema.get_field_index(NAME), table.schema.field(NAME), column)


def test_ties_in_two_input_orders_give_one_order():
    table = syn.from_records(_tied_records())
    other = _reordered(table)
    assert other.column(NAME).chunk(0).dictionary.to_pylist()[0] == "zeta_forward"     # another dictionary order
    a = jsonable(analyze(Trace.from_table(table)))
    b = jsonable(analyze(Trace.from_table(other)))
    per_kernel = [(r["kernel"], r["layer"], r["sync_s"]) for r in a["occupancy"]["per_kernel"]]
    # all of sync_s 0: by name, then layer
    assert per_kernel == [("alpha_forward", 0, 0.0), ("mid_forward", None, 0.0), ("zeta_forward", 0, 0.0)]
    lost = [(r["scope"], r["kernel"], r["layer"], r["lost_s"]) for r in a["imbalance"]]
    # rank 1's segments of alpha and zeta take 2 s, rank 0's 1 s: 2 - 1 = 1 s lost in each, per kernel and per
    # kernel x layer; by name, then layer (the per-kernel row, of no layer, first)
    assert lost == [("ranks", "alpha_forward", None, 1.0), ("ranks", "alpha_forward", 0, 1.0),
                    ("ranks", "zeta_forward", None, 1.0), ("ranks", "zeta_forward", 0, 1.0)]
    assert a == b
