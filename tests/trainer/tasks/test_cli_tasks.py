"""`gpt2trace run --schedule tasks` at the command line: what it refuses (one line naming --schedule, exit 2, before
anything runs), the run metadata, and `gpt2trace rerun --set schedule=tasks`."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpt2trace.format.reader import load
from gpt2trace.format.schema import META_RUN, Kind
from gpt2trace.testing.invariants import check_trace
from tests.gpt2trace.cli.test_bad_input import assert_one_line_error, invoke

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"


@pytest.fixture(scope="module")
def app():
    from gpt2trace.cli.main import app
    return app


@pytest.mark.parametrize("args,needles", [
    (["--ranks", "2", "--tp", "2"], ["--schedule tasks", "--tp 2", "--schedule forkjoin"]),
    (["--ranks", "2", "--sp", "2"], ["--schedule tasks", "--sp 2"]),
    (["--ranks", "2", "--pp", "2"], ["--schedule tasks", "--pp 2"]),
    (["--recompute"], ["--schedule tasks", "--recompute"]),
    (["--ranks", "2", "--dp-sync", "zero1"], ["--schedule tasks", "--dp-sync allreduce", "zero1"]),
    (["--task-block", "0"], ["--task-block 0", ">= 1"]),
])
def test_what_tasks_refuse_is_one_line_before_anything_runs(app, tmp_path, args, needles):
    r = invoke(app, "run", "--model", "tiny", "--steps", "1", "--schedule", "tasks", "--trace",
               tmp_path / "t.parquet", *args)
    assert_one_line_error(r, *needles)
    assert list(tmp_path.iterdir()) == []


def test_a_tasks_run_stores_its_schedule_and_a_rerun_can_set_it(tmp_path):
    trace = tmp_path / "fj.parquet"
    shutil.copy(SAMPLES / "tiny_1thread.parquet", trace)
    new = tmp_path / "tasks.parquet"
    r = subprocess.run([sys.executable, "-m", "gpt2trace", "rerun", trace, "--set", "schedule=tasks", "--set",
                        "task-block=8", "--set", "steps=2", "-o", new], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    stored = json.loads(pq.read_schema(trace).metadata[META_RUN])["parallel"]
    run = json.loads(pq.read_schema(new).metadata[META_RUN])["parallel"]
    assert stored.get("schedule", "forkjoin") == "forkjoin"       # samples written before the option: forkjoin
    assert (run["schedule"], run["task_block"]) == ("tasks", 8)
    # the rerun's trace is a task trace that holds the invariants (a fresh 1-rank run, 1 thread as the original)
    check_trace(new, threads=1, steps=2, n_layer=2, tokens=4 * 32, closed=True)
    assert load(new).records(Kind.TASK).num_rows > 0
