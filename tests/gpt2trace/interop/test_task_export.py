"""Task traces exported to Paraver (ovni's task type and task ID events) and Chrome (task slices and dependency
flows), checked by the independent checkers and read back: the hand-built graph of
gpt2trace.testing.synthetic_tasks.hand_built (five tasks, four edges: A -> D, B -> C, C -> E, D -> E)."""
from __future__ import annotations

import json

import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.reader import load
from gpt2trace.interop import paraver_format as F
from gpt2trace.interop.chrome_export import TASK_TID, export_chrome
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import import_paraver
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_tasks as tk
from tests.gpt2trace.interop import chrome_checker, prv_checker


@pytest.fixture
def hand_path(tmp_path):
    path = tmp_path / "tasks.parquet"
    syn.write(tk.task_table(*tk.hand_built()), path)
    return path


def test_paraver_writes_tasks_as_ovni_does_and_reads_them_back(tmp_path, hand_path):
    out = export_paraver(hand_path, tmp_path / "tasks")
    assert prv_checker.check(out.prv) == []
    lines = out.prv.read_text().splitlines()
    # task A (id 0, matmul_forward = task type 1, block 0) opens at 11 us on thread 1 (Paraver's 1-based) with its
    # id + 1; both close at its end, 41 us
    assert "2:1:1:1:1:11000:36:1:35:1:71000009:0:71000002:0:71000001:0:71000003:0" in lines
    assert "2:1:1:1:1:41000:36:0:35:0" in lines
    pcf = out.pcf.read_text()
    assert "36           Task type" in pcf and "1        matmul_forward" in pcf
    assert f"35           {F.TASK_ID_LABEL}" in pcf
    back = import_paraver(out.prv)
    got = load(hand_path).records(S.Kind.TASK).to_pandas().sort_values(S.TASK).reset_index(drop=True)
    imported = back.table.to_pandas()
    imported = imported[imported[S.KIND] == S.Kind.TASK].sort_values(S.TASK).reset_index(drop=True)
    for col in (S.RANK, S.THREAD, S.START_NS, S.END_NS, S.TASK, S.BLOCK, S.STEP, S.LAYER):
        assert imported[col].tolist() == got[col].tolist(), col
    assert imported[S.NAME].astype(str).tolist() == got[S.NAME].astype(str).tolist()
    # what is lost: the predecessors (a .prv has no dependency edges), said in a note
    assert imported[S.PREDS].isna().all()
    assert any("without their predecessors" in n for n in back.notes)


def test_chrome_has_task_slices_and_one_flow_per_edge(tmp_path, hand_path):
    out = export_chrome(hand_path, tmp_path / "tasks")
    assert chrome_checker.check(out.path) == []
    events = json.loads(out.path.read_text())["traceEvents"]
    tasks = sorted((e for e in events if e.get("cat") == "task"), key=lambda e: e["args"]["task"])
    assert [e["args"]["preds"] for e in tasks] == [[], [], [1], [0], [2, 3]]
    assert [e["args"]["block"] for e in tasks] == [0, 1, 1, 0, 0] and tasks[0]["tid"] == TASK_TID
    assert tasks[4]["ts"] == 54.0 and tasks[4]["dur"] == 5.0 and tasks[4]["tid"] == TASK_TID + 1
    flows = [e for e in events if e.get("cat") == "dependency"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert len(starts) == len(ends) == 4 and out.flows == 4
    # each edge from the predecessor's end (1 ns inside it) to the task's start: D -> E from 53 us to 54 us
    pairs = sorted((starts[i]["ts"], starts[i]["tid"], ends[i]["ts"], ends[i]["tid"]) for i in starts)
    assert pairs == [(30.999, TASK_TID + 1, 33.0, TASK_TID + 1), (40.999, TASK_TID, 43.0, TASK_TID),
                     (42.999, TASK_TID + 1, 54.0, TASK_TID + 1), (52.999, TASK_TID, 54.0, TASK_TID + 1)]


def test_analyze_of_the_prv_says_what_the_lost_edges_cost(tmp_path, hand_path):
    from analysis.analyze import analyze
    from gpt2trace.interop.loader import load as load_any
    out = export_paraver(hand_path, tmp_path / "tasks")
    res = analyze(load_any(out.prv))
    t = res["tasks"]["totals"]
    # what needs the edges is unknown, not computed as if every task were a root
    assert t["edges_known"] is False and t["critical_path_s"] is None and t["speedup_bound"] is None
    assert t["starved_share"] is None and set(res["tasks"]["profile"]["ready"]) == {-1}
    # what does not need them is as in the Parquet trace (tests/analysis/test_tasks.py: 75 us of tasks, 10 of
    # 140 us in Scheduling, the running profile integrating to the task time)
    assert t["task_s"] == pytest.approx(75e-6) and t["scheduling_share"] == pytest.approx(10 / 140)
    assert any("no predecessors" in w for w in res["warnings"])
    assert not [f for f in res["findings"] if f["metric"] == "tasks.totals.starved_share"]
