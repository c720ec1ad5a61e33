"""Starting ranks: detect whether we already run inside MPI, else start `mpiexec -n N` ourselves.

`gpt2trace run --ranks N` re-executes itself under the mpiexec of the installed MPI (the `mpich` wheel's, next to
this Python, else the first on PATH), with the same options. Under `mpiexec -n N gpt2trace run ...` or Slurm's
`srun`, the process manager's environment says so and the run joins that job instead.

The job dies with the launcher: mpiexec gets SIGTERM from the kernel when the launcher dies, even by SIGKILL
(PR_SET_PDEATHSIG, set between fork and exec), and forwards it to every rank, which stop after the step in
progress as for any SIGTERM (gpt2trace.run.signals) and rank 0 merges. Each rank, whose parent is mpiexec's
hydra proxy, asks for SIGTERM when that parent dies too (`die_with_parent`), and checks at every step boundary
that it is still there (gpt2trace.run.signals.StopAtStepBoundary).
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpt2trace.run.ownership import TraceLock

# (rank variable, size variable) of the process managers we know: MPICH/Hydra (PMI), Open MPI, PMIx, Slurm srun
_ENV = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"), ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"))


def launched_by_mpi() -> tuple[int, int] | None:
    """(rank, size) when a process manager started this process, else None."""
    for rank_var, size_var in _ENV:
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return None


# The processes of this job on this node, as the process manager tells each one: MPICH/Hydra, Open MPI. (Slurm's
# SLURM_STEP_TASKS_PER_NODE lists every node's: not read, the run counts them with MPI then.)
_LOCAL_SIZE_ENV = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


def ranks_on_this_node() -> int | None:
    """How many processes of this MPI job share this node, when the process manager says so; else None."""
    for var in _LOCAL_SIZE_ENV:
        text = os.environ.get(var, "")
        if text.isdigit() and int(text) > 0:
            return int(text)
    return None


_PR_SET_PDEATHSIG = 1      # linux/prctl.h


def _prctl():
    """libc's prctl, looked up before any fork (a child of a threaded parent must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(signum: int = signal.SIGTERM, parent: int | None = None, prctl=None) -> bool:
    """Have the kernel send `signum` to this process when its parent dies (Linux; False elsewhere). If the
    parent is already gone (it is not `parent`, or this process was reparented to init), send it now."""
    prctl = prctl if prctl is not None else _prctl()
    if prctl is None or prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
        return False
    if (parent is not None and os.getppid() != parent) or os.getppid() == 1:
        os.kill(os.getpid(), signum)
    return True


def find_mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


@dataclass(frozen=True)
class JobEnd:
    code: int                      # mpiexec's exit code (128 + N when a signal N killed it)
    signals: tuple[int, ...]       # the SIGINT/SIGTERM this process received and passed on, in order


def relaunch(ranks: int, argv: list[str], env_extra: dict[str, str], lock: TraceLock | None = None) -> JobEnd:
    """Run this same command under `mpiexec -n ranks` and wait for it.

    mpiexec runs in a session of its own, so a Ctrl-C at the terminal reaches only this process, which stops the
    job itself: the first SIGINT or SIGTERM goes to every rank (they stop after the same step, and rank 0 merges
    and says so), the second kills the whole job at once (its parts stay for `recover`). mpiexec (MPICH's Hydra)
    would do the same with its own lines about it, a dozen on a second Ctrl-C; it still gets the signal when
    there are no ranks to send it to (not started yet, or no /proc to find them). Were mpiexec in the terminal's
    process group too, one Ctrl-C would reach it twice (from the terminal and from us). When this process dies,
    mpiexec gets SIGTERM (the module's doc).

    `lock` (gpt2trace.run.ownership): this launcher's lock of the trace, inherited by every process of the job."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError("no mpiexec found: install the package's MPI (pip install mpich) or put one on PATH")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "gpt2trace", *argv]
    lock_env, fds = (lock.child_env(), (lock.fd,)) if lock is not None and lock.held else ({}, ())
    me, prctl = os.getpid(), _prctl()
    proc = subprocess.Popen(cmd, env=dict(os.environ, **env_extra, **lock_env), start_new_session=True,
                            pass_fds=fds, preexec_fn=lambda: die_with_parent(signal.SIGTERM, me, prctl))
    received: list[int] = []

    def forward(signum: int, frame) -> None:
        received.append(signum)
        parents = _process_parents()            # one read of /proc for the whole job's tree
        proxies = _children(proc.pid, parents)
        if len(received) > 1:
            _kill_all([proc.pid, *proxies, *(p for proxy in proxies for p in _descendants(proxy, parents))])
            return
        ranks = [p for proxy in proxies for p in _children(proxy, parents)]
        for pid in ranks or ():
            _send(pid, signum)
        if not ranks:
            proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return JobEnd(128 - code if code < 0 else code, tuple(received))     # killed by signal N: the shell's 128 + N


# --- the job's processes: mpiexec -> one hydra proxy per node (here one) -> the ranks --------------------------

def _process_parents() -> dict[int, int]:
    """pid -> parent pid of every process (Linux /proc; empty elsewhere)."""
    parents = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:          # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, the last ')' ends it
        parents[int(name)] = int(stat[stat.rindex(b")") + 2:].split()[1])
    return parents


def _children(pid: int, parents: dict[int, int]) -> list[int]:
    return sorted(p for p, parent in parents.items() if parent == pid)


def _descendants(pid: int, parents: dict[int, int]) -> list[int]:
    """Every process under `pid` in the `parents` map, parents before their children."""
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop(0), parents)
        out += kids
        todo += kids
    return out


def _send(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:   # ended meanwhile
        pass


def _kill_all(pids: list[int]) -> None:
    """Stop every one, then kill them: none runs again, so none sees another end and reports it (Hydra's lines
    about a proxy or a rank that terminated badly)."""
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in pids:
            _send(pid, sig)
