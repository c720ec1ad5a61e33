"""`gpt2trace analyze` of a Paraver trace too big to import whole: imported rank by rank into a temporary Parquet
trace and analyzed group by group (also under `mpiexec`), with the result of the whole import, and the temporary
removed. --group-records scales the size over which a .prv counts as big, so a small sample shows it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2trace.interop.loader import is_big_paraver
from gpt2trace.run.mpiexec import find_mpiexec

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
GPT2TRACE = [sys.executable, "-m", "gpt2trace"]


def _run(args: list, tmp: Path, processes: int = 1) -> subprocess.CompletedProcess:
    cmd = [*GPT2TRACE, *map(str, args)]
    if processes > 1:
        cmd = [find_mpiexec(), "-n", str(processes), *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "TMPDIR": str(tmp)})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r


@pytest.fixture(scope="module")
def prv(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("prv")
    _run(["export", SAMPLES / "small_8ranks_3d.parquet", "-o", folder / "t"], folder)
    return folder / "t.prv"


@pytest.mark.parametrize("processes", [1, 2])
def test_big_prv_is_streamed_with_the_whole_result(prv, tmp_path, processes):
    whole, streamed = tmp_path / "whole.json", tmp_path / "streamed.json"
    spill = tmp_path / "tmp"
    spill.mkdir()
    _run(["analyze", prv, "--json", whole], spill)
    assert not is_big_paraver(prv)                        # the default limit: imported whole above
    html = tmp_path / "streamed.html"
    _run(["analyze", prv, "--json", streamed, "--group-records", "1000", "--html", html], spill, processes)
    assert is_big_paraver(prv, limit=1000 * 46)
    assert json.loads(streamed.read_text()) == json.loads(whole.read_text())
    assert json.loads(whole.read_text())["trace"] == str(prv)      # the .prv named, not the temporary file
    page = html.read_text()            # the report, built group by group from the import before it was removed
    assert str(prv) in page and "gpt2trace-analyze-" not in page and "imported.parquet" not in page
    assert list(spill.iterdir()) == []                   # the temporary import is gone


def test_info_of_a_big_prv_reads_its_import_rank_by_rank(prv, tmp_path):
    whole = json.loads(_run(["info", prv, "--json"], tmp_path).stdout)
    streamed = json.loads(_run(["info", prv, "--json", "--group-records", "1000"], tmp_path).stdout)
    assert streamed == whole and whole["path"] == str(prv) and whole["bytes"] == prv.stat().st_size
    assert list(tmp_path.iterdir()) == []


def test_report_of_a_big_prv_is_built_from_its_import_group_by_group(prv, tmp_path):
    spill = tmp_path / "tmp"
    spill.mkdir()
    whole, streamed = tmp_path / "whole.html", tmp_path / "streamed.html"
    said_whole = _run(["report", prv, "-o", whole], spill).stdout
    said = _run(["report", prv, "-o", streamed, "--group-records", "1000"], spill).stdout
    records = [line.split(" records")[0].rsplit(", ", 1)[-1] for line in (said_whole, said)]
    assert records[0] == records[1] and int(records[0].replace(",", "")) > 1000
    page = streamed.read_text()
    assert str(prv) in page and "gpt2trace-analyze-" not in page and "imported.parquet" not in page
    assert list(spill.iterdir()) == []
