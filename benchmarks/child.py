"""Running a benchmark's measured command in a child process: wall time from the parent and the peak RSS of the
largest process in its tree.

os.wait4 gives the child's resource usage with that of the descendants it waited for, and ru_maxrss is the largest
of them: for `gpt2trace run --ranks N`, which waits for `mpiexec`, which waits for the ranks, that is the largest
rank. Output goes to temporary files, not pipes, so a child that writes much to both streams cannot block.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Child:
    wall_s: float
    peak_rss_mb: float
    exit_code: int
    stdout: str
    stderr: str


def run(args: list[str], launcher: list[str] = ()) -> Child:
    """`python ARGS` in a child process, timed from here (interpreter start and imports included); `launcher`
    goes before it (`mpiexec -n 2`: the peak RSS is then the largest process's)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        proc = subprocess.Popen([*launcher, sys.executable, *args], stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Child(wall, usage.ru_maxrss / 1024, proc.returncode, out.read(), err.read())


def together(commands: list[list[str]], env: dict[str, str] | None = None) -> list[Child]:
    """`python ARGS` for each ARGS of `commands`, started at once as independent processes, each timed from the
    common start to its own end (`env` added to the environment); the peak RSS of each."""
    env = {**os.environ, **(env or {})}
    files = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in commands]
    t = time.perf_counter()
    procs = {subprocess.Popen([sys.executable, *args], stdout=o, stderr=e, text=True, env=env).pid: i
             for i, ((o, e), args) in enumerate(zip(files, commands))}
    done: dict[int, Child] = {}
    while procs:
        pid, status, usage = os.wait4(-1, 0)
        if pid not in procs:
            continue
        i = procs.pop(pid)
        out, err = files[i]
        out.seek(0)
        err.seek(0)
        done[i] = Child(time.perf_counter() - t, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status),
                        out.read(), err.read())
        out.close()
        err.close()
    return [done[i] for i in range(len(commands))]
