"""Running a benchmark's measured command in a child process: wall time from the parent and the peak RSS of the
largest process in its tree.

os.wait4 gives the child's resource usage with that of the descendants it waited for, and ru_maxrss is the largest
of them: for `gpt2trace run --ranks N`, which waits for `mpiexec`, which waits for the ranks, that is the largest
rank. Output goes to temporary files, not pipes, so a child that writes much to both streams cannot block.
"""
from __future__ import annotations

import contextlib
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
    return _spawn([[*launcher, sys.executable, *args]])[0]


def together(commands: list[list[str]], env: dict[str, str] | None = None,
             launchers: list[list[str]] | None = None) -> list[Child]:
    """`python ARGS` for each ARGS of `commands`, started at once as independent processes, each timed from the
    common start to its own end (`env` added to the environment; `launchers[i]` before command i, as in `run`); the
    peak RSS of each."""
    launchers = launchers or [[] for _ in commands]
    return _spawn([[*launcher, sys.executable, *args] for launcher, args in zip(launchers, commands)], env)


def _spawn(argvs: list[list[str]], env: dict[str, str] | None = None) -> list[Child]:
    """Each command line started at once, waited for in any order; a Child each, in the order given."""
    env = {**os.environ, **(env or {})}
    with contextlib.ExitStack() as stack:
        files = [(stack.enter_context(tempfile.TemporaryFile("w+")), stack.enter_context(tempfile.TemporaryFile("w+")))
                 for _ in argvs]
        t = time.perf_counter()
        procs = {}
        for i, ((out, err), argv) in enumerate(zip(files, argvs)):
            proc = subprocess.Popen(argv, stdout=out, stderr=err, text=True, env=env)
            procs[proc.pid] = (i, proc)
        done: dict[int, Child] = {}
        while procs:
            pid, status, usage = os.wait4(-1, 0)
            if pid not in procs:
                continue
            wall = time.perf_counter() - t
            i, proc = procs.pop(pid)
            proc.returncode = os.waitstatus_to_exitcode(status)      # reaped here: Popen must not wait for it
            out, err = files[i]
            out.seek(0)
            err.seek(0)
            done[i] = Child(wall, usage.ru_maxrss / 1024, proc.returncode, out.read(), err.read())
        return [done[i] for i in range(len(argvs))]
