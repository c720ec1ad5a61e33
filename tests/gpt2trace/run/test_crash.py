"""A run killed with SIGKILL after step k leaves a readable trace of whole steps < k, and `gpt2trace recover`
turns it into a trace that passes the invariants."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
from gpt2trace.testing.invariants import check_trace
from typer.testing import CliRunner

from gpt2trace.format import schema as S
from gpt2trace.cli.main import app
from gpt2trace.format.writer import parts_dir

K = 4                 # kill once the part of step K exists
STARTUP_S = 300       # a cold Numba cache compiles every kernel first


def _run_until_step(trace, k: int) -> None:
    cmd = [sys.executable, "-c", "from gpt2trace.cli.main import app; app()", "run", "--model", "tiny",
           "-B", "2", "-T", "16", "--threads", "2", "--steps", "100000", "--trace", str(trace)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    part = parts_dir(trace) / "rank00000" / f"{k:08d}.parquet"
    deadline = time.monotonic() + STARTUP_S
    try:
        while not part.exists():
            assert proc.poll() is None, f"the run ended early: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, "no part for step {k} after {STARTUP_S} s"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_leaves_whole_steps(tmp_path):
    trace = tmp_path / "trace.parquet"
    _run_until_step(trace, K)
    assert not trace.exists()

    # pyarrow reads the parts as they are (a write the kill interrupted is a hidden temporary, skipped)
    table = pq.read_table(parts_dir(trace))
    kind, step = table.column(S.KIND), table.column(S.STEP)
    counters = pc.value_counts(pc.filter(step, pc.equal(kind, S.Kind.COUNTER))).to_pylist()
    steps = sorted(c["values"] for c in counters)
    assert steps[: K + 1] == list(range(K + 1))            # every step up to k (and maybe a few more)...
    assert steps == list(range(len(steps)))
    assert all(c["counts"] == len(S.COUNTERS) for c in counters)   # ... each with all its counters
    kernels = pc.value_counts(pc.filter(step, pc.equal(kind, S.Kind.KERNEL))).to_pylist()
    per_step = {c["values"]: c["counts"] for c in kernels}
    assert sorted(per_step) == steps and len(set(per_step.values())) == 1   # and all its kernel records

    result = CliRunner().invoke(app, ["recover", str(trace)])
    assert result.exit_code == 0, result.output
    assert f"steps 0..{steps[-1]}" in result.stdout and not parts_dir(trace).exists()
    check_trace(trace, threads=2, steps=len(steps), tokens=2 * 16, closed=False)


def test_recover_without_parts_is_a_one_line_error(tmp_path):
    result = CliRunner().invoke(app, ["recover", str(tmp_path / "trace.parquet")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().count("\n") == 0 and "no parts directory to recover" in result.stderr
