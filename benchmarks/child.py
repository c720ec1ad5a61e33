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
