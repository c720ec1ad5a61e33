"""The contract between payload.py and report.js: the page's data has exactly the keys the TypedDicts declare
(and the blobs exactly the declared arrays), the script reads only declared keys and every declared key is read,
no constant of the schema is written into the script, and the script is valid JavaScript that cannot end its
<script> element."""
from __future__ import annotations

import json
import re
import subprocess
import typing
from pathlib import Path

import playwright
import pytest

from gpt2trace.format.reader import load
from gpt2trace.format.schema import State
from gpt2trace.report import build, payload
from gpt2trace.report.page import SCRIPT
from gpt2trace.report.timeline import ViewKey

# The script's names for payload objects (its header comment lists them) and what each holds.
VARIABLES = {"DATA": (payload.PageData,), "TL": (payload.TimelineData,), "occ": (payload.OccupancyData,),
             "st": (payload.StepsData,), "v": (payload.ViewData,), "sv": (payload.ViewData,),
             "c": (payload.CategoryData,), "lv": (payload.LevelData, payload.OccupancyLevelData),
             "ex": (payload.ExactData,), "ref": (payload.BlobRef,), "CP": (payload.CriticalPathData,),
             "TP": (payload.TaskProfileData,)}
ARRAYS = (set(payload.LEVEL_ARRAYS) | set(payload.EXACT_ARRAYS) | set(payload.OCCUPANCY_ARRAYS)
          | set(payload.CRITICAL_ARRAYS) | set(payload.TASK_PROFILE_ARRAYS))


def page_data(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="report-data">(.*?)</script>', html).group(1))


def keys(typed_dict) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


def reads(variable: str) -> set[str]:
    """Properties the script reads on a variable (assignments `v.y0 = ...` are the page's own, not payload)."""
    pattern = rf"(?<![\w.]){re.escape(variable)}\.([A-Za-z]\w*)"
    assigned = set(re.findall(pattern + r"\s*=(?!=)", SCRIPT))
    return set(re.findall(pattern, SCRIPT)) - assigned


def check(obj: dict, typed_dict, where: str, blob_arrays: dict[str, set[str]]) -> None:
    """obj has exactly typed_dict's keys; nested TypedDicts (and lists of them) are checked in turn."""
    assert set(obj) == keys(typed_dict), where
    for key, hint in typing.get_type_hints(typed_dict).items():
        inner = typing.get_args(hint)[0] if typing.get_origin(hint) is list else hint
        if typing.is_typeddict(inner):
            for i, item in enumerate(obj[key] if typing.get_origin(hint) is list else [obj[key]]):
                check(item, inner, f"{where}.{key}[{i}]", blob_arrays)
    if "blob" in obj:
        blob_arrays.setdefault(typed_dict.__name__, set()).update(obj["arrays"])


@pytest.fixture(scope="module")
def pages(sample_trace, two_rank_trace, task_trace) -> list[dict]:
    """The data of a real 2-thread trace's page, of a 2-rank one with MPI calls (every view kind) and of a task
    trace (the task columns and the parallelism profile)."""
    return [page_data(build(load(path)).html) for path in (sample_trace, two_rank_trace, task_trace)]


def test_the_page_data_has_exactly_the_declared_keys(pages):
    blob_arrays: dict[str, set[str]] = {}
    for data in pages:
        check(data, payload.PageData, "data", blob_arrays)
        assert {v["key"] for v in data["timeline"]["views"]} <= set(ViewKey.ALL)
    assert {v["key"] for v in pages[1]["timeline"]["views"]} == set(ViewKey.ALL)     # every view was checked
    assert blob_arrays["LevelData"] == set(payload.LEVEL_ARRAYS)
    assert blob_arrays["ExactData"] == set(payload.EXACT_ARRAYS)       # the views together carry every extra array
    assert blob_arrays["OccupancyLevelData"] == set(payload.OCCUPANCY_ARRAYS)
    for data in pages:                                                  # declared `| None`: checked here
        check(data["criticalPath"], payload.CriticalPathData, "data.criticalPath", blob_arrays)
    assert blob_arrays["CriticalPathData"] == set(payload.CRITICAL_ARRAYS)
    assert pages[0]["taskProfile"] is None and pages[1]["taskProfile"] is None    # fork-join traces
    check(pages[2]["taskProfile"], payload.TaskProfileData, "data.taskProfile", blob_arrays)
    assert blob_arrays["TaskProfileData"] == set(payload.TASK_PROFILE_ARRAYS)


def test_the_script_reads_only_declared_keys():
    for variable, typed_dicts in VARIABLES.items():
        declared = set().union(*(keys(t) for t in typed_dicts))
        assert reads(variable) <= declared, f"report.js reads {variable}.{reads(variable) - declared}"
    assert reads("a") <= ARRAYS                              # a blob's arrays
    assert reads("KEY") == {name.lower() for name in vars(ViewKey) if name.isupper() and name != "ALL"}
    assert reads("DATA.constants") == keys(payload.ConstantsData)


def test_every_declared_key_and_array_is_read():
    declared = set()
    for typed_dict in (payload.PageData, payload.TimelineData, payload.OccupancyData, payload.OccupancyLevelData,
                       payload.StepsData, payload.ViewData, payload.CategoryData, payload.LevelData,
                       payload.ExactData, payload.BlobRef, payload.ConstantsData, payload.CriticalPathData,
                       payload.TaskProfileData):
        declared |= keys(typed_dict)
    read = set(re.findall(r"\.([A-Za-z]\w*)", SCRIPT))
    assert declared | ARRAYS <= read, f"never read by report.js: {(declared | ARRAYS) - read}"


def test_no_schema_constant_is_copied_into_the_script():
    literals = set(re.findall(r"'([^'\\]*)'", SCRIPT)) | set(re.findall(r'"([^"\\]*)"', SCRIPT))
    assert not literals & set(ViewKey.ALL)
    # the Running id, or any state's name, is not written as a constant either
    assert not re.search(rf"\bRUNNING\s*=\s*{int(State.RUNNING)}\b", SCRIPT)
    assert not literals & {"Running", "Idle", "Synchronization"}


def test_the_constants_come_from_the_schema(pages):
    constants = pages[0]["constants"]
    assert constants["runningState"] == State.RUNNING == 1
    assert constants["viewKeys"] == {"steps": "steps", "phases": "phases", "states": "states",
                                     "kernels": "kernels", "mpi": "mpi"}


def test_the_script_cannot_end_its_element_and_is_valid_javascript(tmp_path):
    assert "</script" not in SCRIPT.lower() and "<!--" not in SCRIPT
    # `node --check` parses without running; the node that ships inside Playwright's Python package (a test
    # dependency) so that no other install is needed.
    node = Path(playwright.__file__).parent / "driver" / "node"
    ok = subprocess.run([str(node), "--check", str(Path(payload.__file__).with_name("report.js"))],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    broken = tmp_path / "broken.js"
    broken.write_text(SCRIPT.replace("function esc(s) {", "function esc(s) {{", 1))
    assert subprocess.run([str(node), "--check", str(broken)], capture_output=True).returncode != 0
