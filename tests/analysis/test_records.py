import ast
from pathlib import Path

import numpy as np
import pyarrow as pa

from analysis.records import decode, extent, grouped, records, threads
from analysis.window import select
from gpt2trace.format.schema import END_NS, START_NS, Kind


def test_records_clip_to_the_window(three_steps):
    w = select(three_steps, "1:2")          # [5, 6]
    rec = records(three_steps, Kind.STATE, (), w)
    assert (rec[START_NS].tolist(), rec[END_NS].tolist()) == ([5e9], [6e9])


def test_extent_and_threads(three_steps):
    assert extent(three_steps) == (0, 7.5e9)
    assert threads(three_steps).values.tolist() == [[0, 0]]      # one rank, one thread


def test_decode():
    assert decode(np.array([1, -1, 0]), ("a", "b")).tolist() == ["b", None, "a"]


def test_grouped_is_group_by_on_the_calling_thread():
    table = pa.table({"k": [2, 1, 2, 1, 3], "v": [5, 4, 3, 2, 1]})
    out = grouped(table, "k", [("v", "min")]).sort_by("k")
    assert out.to_pydict() == {"k": [1, 2, 3], "v_min": [2, 3, 1]}


ROOT = Path(__file__).resolve().parents[2]
# Table methods that run an Acero plan (Table.join too, but it cannot be told from str.join here: none is used)
THREADED_PLANS = {"group_by", "join_asof"}


def test_every_arrow_plan_is_run_by_grouped():
    # a plan on Arrow's threads can outlive its call, and a process that exits then aborts (see `grouped`): only
    # `grouped` may start one, and it runs it on the calling thread
    calls = []
    for path in sorted(p for pkg in ("analysis", "gpt2trace", "trainer") for p in (ROOT / pkg).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in THREADED_PLANS and not isinstance(node.func.value, ast.Constant)):
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.func.attr}")
    assert [c for c in calls if not c.startswith("analysis/records.py")] == []
    assert len([c for c in calls if c.startswith("analysis/records.py")]) == 1
