"""A run owns its trace path (gpt2trace.run.ownership): a second run with the same --trace, or `recover` while the
run writes, is refused in one line naming the pid; and the processes of a `--ranks N` job die with the launcher.
Real processes, real mpiexec, real signals."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pyarrow.parquet as pq

from gpt2trace.format import raw_part
from gpt2trace.format.writer import parts_dir
from gpt2trace.run.ownership import lock_path

STARTUP_S = 300       # a cold Numba cache compiles every kernel first


def _gpt2trace(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpt2trace", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _run(trace, steps: int, *extra: str, flush_every: float = 0, **kw) -> subprocess.Popen:
    return _gpt2trace("run", "--model", "tiny", "--threads", "1", "--steps", str(steps), "--flush-every",
                      str(flush_every), "--trace", str(trace), *extra, **kw)


def _wait_for_part(proc: subprocess.Popen, trace, rank: int = 0, step: int = 2) -> None:
    part = parts_dir(trace) / f"rank{rank:05d}" / f"{step:08d}{raw_part.SUFFIX}"
    deadline = time.monotonic() + STARTUP_S
    while not part.exists():
        assert proc.poll() is None, f"the run ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, f"no part {part} after {STARTUP_S} s"
        time.sleep(0.01)


def _one_line_refusal(proc: subprocess.Popen, *words: str) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    for w in words:
        assert w in err, err
    return err


def _running(procs: list[psutil.Process], within_s: float) -> list[psutil.Process]:
    """Those of `procs` still running after `within_s` (a zombie has ended: init has not reaped it yet)."""
    deadline = time.monotonic() + within_s
    while True:
        alive = []
        for p in procs:
            try:
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


def test_second_writer_is_refused_and_the_first_completes(tmp_path):
    trace = tmp_path / "same.parquet"
    first = _run(trace, 3000)           # ~2 ms a step: seconds after its first parts
    try:
        _wait_for_part(first, trace)
        second = _run(trace, 3000)
        _one_line_refusal(second, str(trace), f"pid {first.pid}", "another --trace")
        assert first.poll() is None     # refused while the first was writing
        out, err = first.communicate(timeout=300)
        assert first.returncode == 0, err
    finally:
        _stop(first)
    assert pq.read_table(trace).num_rows > 0 and not parts_dir(trace).exists()
    assert not lock_path(trace).exists()                     # released at exit


def test_recover_is_refused_while_the_run_writes_and_works_after(tmp_path):
    trace = tmp_path / "trace.parquet"
    run = _run(trace, 100000)
    try:
        _wait_for_part(run, trace)
        _one_line_refusal(_gpt2trace("recover", str(trace)), str(trace), f"pid {run.pid}")
        _one_line_refusal(_gpt2trace("recover", str(parts_dir(trace))), f"pid {run.pid}")   # the folder, too
        assert parts_dir(trace).is_dir() and run.poll() is None        # nothing touched: the run goes on
    finally:
        _stop(run)
    assert lock_path(trace).exists()            # a SIGKILL leaves the lock file, with a dead pid: taken over
    rec = _gpt2trace("recover", str(trace))
    out, err = rec.communicate(timeout=120)
    assert rec.returncode == 0, err
    assert pq.read_table(trace).num_rows > 0 and not parts_dir(trace).exists() and not lock_path(trace).exists()


def test_sigkill_of_the_launcher_ends_every_process_of_the_job(tmp_path):
    trace = tmp_path / "trace.parquet"
    # parts every 0.2 s, not every step: the ranks' merge after the SIGTERM takes a fraction of a second
    launcher = _run(trace, 100000, "--ranks", "2", flush_every=0.2, start_new_session=True)   # its own group
    try:
        _wait_for_part(launcher, trace, rank=0, step=1)
        _wait_for_part(launcher, trace, rank=1, step=1)
        job = psutil.Process(launcher.pid).children(recursive=True)     # mpiexec, hydra proxy, 2 ranks
        names = sorted(p.name() for p in job)
        assert len(job) >= 4 and any("mpiexec" in n for n in names) and any("hydra" in n for n in names), names
        # while the job runs, the lock (taken by the launcher, inherited by the ranks) refuses a second run
        _one_line_refusal(_run(trace, 10), f"pid {launcher.pid}")
        os.killpg(launcher.pid, signal.SIGKILL)
        alive = _running(job, within_s=5)
        assert not alive, [(p.pid, p.name()) for p in alive]
    finally:
        _stop(launcher)
        for p in psutil.Process().children(recursive=True):   # only what this test started
            p.kill()
    # Nothing lost: a SIGKILL of the whole group reaches the ranks too, before or after the SIGTERM that lets them
    # stop at a step boundary and merge, so either rank 0 merged the trace or its parts are left for recover
    if parts_dir(trace).exists():
        recovered = subprocess.run([sys.executable, "-m", "gpt2trace", "recover", str(trace)], capture_output=True,
                                   text=True, timeout=300)
        assert recovered.returncode == 0 and "Traceback" not in recovered.stderr, recovered.stderr
    assert pq.read_table(trace).num_rows > 0 and not parts_dir(trace).exists()
    second = _run(trace, 3)                    # the lock went with the job
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
