"""With --flush-every 0 (a part per step, written before the next step starts), a run killed with SIGKILL after
step k leaves a readable trace of every whole step up to k, and `gpt2trace recover` turns it into a trace that
passes the invariants. (The default, parts cut every second, is tested against its loss bound in test_signals.py.)
`recover` with nothing to recover says so in one line."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from typer.testing import CliRunner

from gpt2trace.cli.main import app
from gpt2trace.format import raw_part
from gpt2trace.format import schema as S
from gpt2trace.format.parts import KERNEL_CALL
from gpt2trace.format.raw_window import RankDecoder
from gpt2trace.format.writer import part_files, parts_dir
from gpt2trace.testing.invariants import check_trace

K = 4                 # kill once the part of step K exists
STARTUP_S = 300       # a cold Numba cache compiles every kernel first


def _run_until_step(trace, k: int) -> None:
    cmd = [sys.executable, "-c", "from gpt2trace.cli.main import app; app()", "run", "--model", "tiny",
           "-B", "2", "-T", "16", "--threads", "2", "--steps", "100000", "--trace", str(trace), "--flush-every", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    part = parts_dir(trace) / "rank00000" / f"{k:08d}{raw_part.SUFFIX}"
    deadline = time.monotonic() + STARTUP_S
    try:
        while not part.exists():
            assert proc.poll() is None, f"the run ended early: {proc.stderr.read().decode()}"
            assert time.monotonic() < deadline, f"no part for step {k} after {STARTUP_S} s"
            time.sleep(0.002)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_leaves_whole_steps(tmp_path):
    trace = tmp_path / "trace.parquet"
    _run_until_step(trace, K)
    assert not trace.exists()

    # every finished part decodes as the merge decodes it (a write the kill interrupted is a hidden temporary,
    # skipped): raw buffers become one row per kernel call, phases, MPI calls and counters
    decoder = RankDecoder()
    table = pa.concat_tables([raw_part.decoded(f, decoder) for f in part_files(parts_dir(trace))])
    kind, step = table.column(S.KIND), table.column(S.STEP)
    per_step = pc.and_(pc.equal(kind, S.Kind.COUNTER), pc.is_in(table.column(S.NAME).cast(pa.string()),
                                                                pa.array(S.Counter.PER_STEP)))
    counters = pc.value_counts(pc.filter(step, per_step)).to_pylist()
    steps = sorted(c["values"] for c in counters)
    assert steps[: K + 1] == list(range(K + 1))            # every step up to k (and maybe a few more)...
    assert steps == list(range(len(steps)))
    assert all(c["counts"] == len(S.Counter.PER_STEP) for c in counters)   # ... each with all its counters
    calls = pc.value_counts(pc.filter(step, pc.equal(kind, KERNEL_CALL))).to_pylist()
    per_step = {c["values"]: c["counts"] for c in calls}
    assert sorted(per_step) == steps and len(set(per_step.values())) == 1   # and all its kernel calls

    result = CliRunner().invoke(app, ["recover", str(trace)])
    assert result.exit_code == 0, result.output
    assert f"steps 0-{steps[-1]}" in result.stdout and not parts_dir(trace).exists()
    check_trace(trace, threads=2, steps=len(steps), tokens=2 * 16, closed=False)


def _empty_parts(tmp):
    (tmp / "trace.parquet.parts" / "rank00000").mkdir(parents=True)   # what a crash at start-up used to leave
    return tmp / "trace.parquet"


def _empty_file(tmp):
    (tmp / "empty.parquet").write_bytes(b"")
    return tmp / "empty.parquet"


RECOVER_NOTHING = [
    ("no parts", lambda tmp: tmp / "trace.parquet", "no parts directory to recover"),
    ("empty parts folder", _empty_parts, "holds no finished part: the run stopped before it wrote its first one"),
    ("empty file", _empty_file, "is not a complete trace either"),
]


@pytest.mark.parametrize("case,make,message", RECOVER_NOTHING, ids=[r[0] for r in RECOVER_NOTHING])
def test_recover_with_nothing_to_recover_is_a_one_line_error(tmp_path, case, make, message):
    result = CliRunner().invoke(app, ["recover", str(make(tmp_path))])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().count("\n") == 0 and message in result.stderr, result.stderr
    assert "already complete" not in result.stderr


def test_recover_on_a_full_disk_is_one_line_and_writes_nothing(small_fs):
    disk = small_fs(1024)                     # room for step K's part (raw buffers: ~40 KiB a part)
    trace = disk / "trace.parquet"
    _run_until_step(trace, K)
    parts = {p: p.read_bytes() for p in part_files(parts_dir(trace))}
    with open(disk / "filler", "wb", buffering=0) as f:    # fill the disk: no room for the merged trace
        try:
            while f.write(b"\0" * 4096):
                pass
        except OSError:
            pass
    result = CliRunner().invoke(app, ["recover", str(trace)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.stderr.strip().count("\n") == 0 and "No space left on device" in result.stderr, result.stderr
    assert not trace.exists() and not [p for p in disk.iterdir() if p.name.startswith(".")]
    assert {p: p.read_bytes() for p in part_files(parts_dir(trace))} == parts     # the parts are untouched
