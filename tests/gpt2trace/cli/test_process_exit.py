"""How a `gpt2trace` process ends under the real mpiexec, and how a signal ends a real `gpt2trace run`.

MPICH (4.1 on) tells Hydra that a rank ended well in a C exit handler; a rank that ends without it counts as
crashed, and Hydra kills the ranks that are still running. Here rank 1 lingers after finalizing MPI, so that
rank 0 has already gone when it leaves: the job must still end with rank 0's own exit code.

Signals, sent as a terminal sends Ctrl-C (to the launcher's process group) in the middle of a long step (`small`,
B=16, T=128, one thread: ~0.2-0.8 s): the first is told at once, in one line naming the step the run stops
after, by rank 0 alone; a second one to `--ranks 2` ends the job with our line, none of MPICH's.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.reader import load
from gpt2trace.format.writer import part_files, parts_dir
from gpt2trace.run.mpiexec import find_mpiexec

LONG_STEPS = ["--model", "small", "-B", "16", "-T", "128", "--threads", "1", "--steps", "100000"]
STARTUP_S = 300             # a cold Numba cache compiles every kernel first
# the lines Hydra (MPICH's mpiexec) prints about signals and ending processes
MPICH_LINES = ("[mpiexec@", "[proxy:", "Sending Ctrl-C", "Press Ctrl-C again", "Ctrl-C caught", "BAD TERMINATION",
               "CLEANING UP REMAINING PROCESSES", "YOU CAN IGNORE THE BELOW CLEANUP MESSAGES")

_RANK = """
import atexit, sys, time
from pathlib import Path
from mpi4py import MPI
from gpt2trace.cli import main
atexit.register(main._leave)                  # as main() does: the last handler to run
rank = MPI.COMM_WORLD.Get_rank()
main._status[0] = int(sys.argv[1]) if rank == 0 else 0
def linger():                                 # runs before _leave: rank 1 finalizes, then leaves 1 s after rank 0
    MPI.Finalize()
    time.sleep(1.0)
    Path(sys.argv[2]).write_text("rank 1 reached its end")
if rank == 1:
    atexit.register(linger)
"""


@pytest.mark.parametrize("code", [0, 3])
def test_a_rank_leaving_after_the_others_is_not_killed_and_the_exit_code_is_kept(tmp_path, code):
    mark = tmp_path / "rank1.txt"
    r = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", _RANK, str(code), str(mark)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == code, r.stdout + r.stderr
    assert "BAD TERMINATION" not in r.stdout + r.stderr
    assert mark.read_text() == "rank 1 reached its end"


def _start(tmp: Path, *extra: str) -> subprocess.Popen:
    """A run in a session of its own, as a shell starts a job in a terminal (its process group is the job's)."""
    cmd = [sys.executable, "-m", "gpt2trace", "run", *LONG_STEPS, "--trace", str(tmp / "trace.parquet"),
           "--metrics-json", str(tmp / "metrics.jsonl"), *extra]
    return subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _steps_done(tmp: Path) -> int:
    """The steps the run has finished, from its metrics file (hidden while it runs)."""
    live = sorted(tmp.glob(".metrics.jsonl.tmp-*"))
    return sum(1 for line in live[0].read_text().splitlines() if line.endswith("}")) if live else 0


def _wait_for_steps(proc: subprocess.Popen, tmp: Path, n: int) -> None:
    deadline = time.monotonic() + STARTUP_S
    while _steps_done(tmp) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"not {n} steps after {STARTUP_S} s"
        time.sleep(0.01)


def _ctrl_c(proc: subprocess.Popen, sig: int = signal.SIGINT) -> None:
    os.killpg(proc.pid, sig)          # the terminal's Ctrl-C: to the foreground process group


def _read_line(proc: subprocess.Popen, starting: str) -> str:
    for line in proc.stdout:
        if line.startswith(starting):
            return line.rstrip("\n")
    pytest.fail(f"no line starting with {starting!r}: {proc.communicate()}")


@pytest.mark.parametrize("sig,ranks", [(signal.SIGTERM, "1"), pytest.param(signal.SIGINT, "2", marks=pytest.mark.mpi)],
                         ids=["SIGTERM, 1 rank", "SIGINT, 2 ranks"])
def test_a_first_signal_during_a_long_step_is_told_at_once_and_once(tmp_path, sig, ranks):
    proc = _start(tmp_path, "--ranks", ranks)
    _wait_for_steps(proc, tmp_path, 2)
    _ctrl_c(proc, sig)
    line = _read_line(proc, "stopping ")
    done = _steps_done(tmp_path)                 # read as the line came: the step in progress has not ended
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, err
    metrics = [json.loads(m) for m in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = metrics[-1]["step"]
    assert line == f"stopping after step {last}; send again to stop now" and done == last, (line, done, last)
    assert "stopping " not in out and err == ""          # once, from rank 0 only
    assert out.splitlines()[-1].startswith(f"interrupted by {sig.name} after step {last}; kept steps 0-{last} in ")
    assert not any(m in out for m in MPICH_LINES), out


@pytest.mark.mpi
def test_ctrl_c_twice_to_two_ranks_ends_with_our_line_and_keeps_the_whole_steps(tmp_path):
    # a part after every step, so that both ranks have written one before the job is killed (a kill loses the
    # window not yet written, as a SIGKILL does: with the default second of window, a slow start can leave none)
    trace = tmp_path / "trace.parquet"
    proc = _start(tmp_path, "--ranks", "2", "--flush-every", "0")
    _wait_for_steps(proc, tmp_path, 2)
    deadline = time.monotonic() + STARTUP_S
    while len({part.parent.name for part in part_files(parts_dir(trace))}) < 2:      # rank0/, rank1/
        assert proc.poll() is None and time.monotonic() < deadline, "no part of each rank"
        time.sleep(0.01)
    _ctrl_c(proc)
    time.sleep(0.1)
    _ctrl_c(proc)                                     # inside the same long step: stop now
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert not any(m in out + err for m in MPICH_LINES), out + err
    lines = err.splitlines()
    # the parts merged by the launcher, or, when the second signal came after rank 0's own merge (a loaded machine
    # can finish the step and the merge within the 0.1 s), that merged trace
    assert len(lines) == 1 and lines[0].startswith(
        ("interrupted by SIGINT twice: the job was stopped at once; each rank's whole steps are kept in "
         f"{trace} (", f"interrupted by SIGINT twice: the job was stopped at once; the ranks had merged {trace}")), \
        (out, err)
    # the parts the ranks had written, merged: whole steps, the same on both ranks, none left behind
    counters = load(trace).records(S.Kind.COUNTER).to_pandas()
    per_rank = counters.groupby(S.RANK)[S.STEP].apply(lambda s: sorted(set(s))).to_dict()
    assert sorted(per_rank) == [0, 1] and per_rank[0] == list(range(len(per_rank[0]))), per_rank
    assert not parts_dir(trace).exists()
