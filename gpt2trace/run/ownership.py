"""Which process owns a trace path: an exclusive lock on <trace>.lock, taken at start-up, released at exit.

Two runs with one --trace share its parts folder and the merge's temporary file: the second one's start-up
removes the first's parts folder while it holds no finished part, and two merges into one temporary leave a
file that does not read. And `gpt2trace recover` must not merge the parts of a run that is still writing them.
So `gpt2trace run` takes the lock before it checks or touches anything of its trace (the preflight clears old
parts), and `recover` takes it before it merges; whoever finds it taken refuses, naming the pid that holds it.

The lock is flock(2) on <trace>.lock, which holds the owner's pid (for the messages only). The kernel drops a
flock when the last descriptor of it is closed, so a killed owner leaves a stale file with a dead pid, and the
next run or `recover` simply takes it over. An owner that ends removes the file, holding the lock while it does;
who locked a file that was then removed finds its inode gone and tries again.

Under `--ranks N` the launcher takes the lock, before it starts mpiexec, and hands its descriptor down: mpiexec,
the hydra proxy and every rank inherit it (its number in GPT2TRACE_TRACE_LOCK), so the lock lives until the last
process of the job is gone, even when the launcher is killed. Started by `mpiexec`/`srun` directly, rank 0 takes
it (the other ranks do not touch the trace's folder before rank 0 cleared it, gpt2trace.run.session).
"""
from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass
from pathlib import Path

from gpt2trace.format.errors import OutputError

LOCK_SUFFIX = ".lock"
ENV_FD = "GPT2TRACE_TRACE_LOCK"      # the inherited descriptor of the launcher's lock, in the ranks


def lock_path(trace: Path) -> Path:
    """The lock beside the trace and its parts folder: trace.parquet -> trace.parquet.lock."""
    return Path(str(trace) + LOCK_SUFFIX)


class TraceBusy(OutputError):
    """The trace's lock is held by another process (`pid`, when its file says)."""

    def __init__(self, trace: Path, lock: Path, pid: int | None, doing: str):
        self.trace, self.lock, self.pid = trace, lock, pid
        who = f"pid {pid}" if pid is not None else "a process that has not written its pid yet"
        super().__init__(f"{trace} is being written by another gpt2trace run ({who}, holding {lock}); {doing}")


@dataclass
class TraceLock:
    """What this process holds of a trace's lock: the descriptor (None: nothing to hold, e.g. --no-trace or a
    rank other than 0), and whether it came from the launcher (then the launcher releases it)."""
    path: Path | None = None
    fd: int | None = None
    inherited: bool = False

    @property
    def held(self) -> bool:
        return self.fd is not None

    def child_env(self) -> dict[str, str]:
        """The environment that hands the lock to the processes of an MPI job (with `pass_fds=(fd,)`)."""
        return {ENV_FD: str(self.fd)} if self.fd is not None else {}

    def release(self) -> None:
        """Remove the lock file while holding it, then close it (idempotent). An inherited lock stays: the
        launcher removes the file once the whole job is gone."""
        fd, self.fd = self.fd, None
        if fd is None or self.inherited:
            return
        try:
            if _same_inode(fd, self.path):
                os.unlink(self.path)
        except OSError:
            pass                        # a vanished folder: the kernel drops the lock with the descriptor
        finally:
            os.close(fd)


def claim(trace: Path | None, launched: tuple[int, int] | None = None, doing: str = "wait for it to end",
          option: str | None = None) -> TraceLock:
    """The lock of `trace` for this process, or TraceBusy (an OutputError, one line naming the pid, then `doing`:
    what the user can do). With `option` (the CLI's name for `trace`) its folder is checked first, so a missing
    or read-only folder reads as for any output (gpt2trace.format.outputs).

    `launched`: (rank, size) when a process manager started this process (gpt2trace.run.mpiexec.launched_by_mpi).
    A rank of a job the launcher started finds the inherited lock; rank 0 of a job started by `mpiexec` directly
    takes it; the other ranks of such a job hold nothing."""
    if trace is None:
        return TraceLock()
    lock = lock_path(trace)
    inherited = _inherited(lock)
    if inherited is not None:
        if launched is None or launched[0] == 0:
            _add_pid(inherited)         # rank 0's pid, which the launcher's messages cannot know
        return TraceLock(lock, inherited, inherited=True)
    if launched is not None and launched[1] > 1 and launched[0] != 0:
        return TraceLock()
    if option is not None:
        from gpt2trace.format.outputs import check_output
        check_output(trace, option=option)
    return TraceLock(lock, _take(trace, lock, doing))


def _take(trace: Path, lock: Path, doing: str) -> int:
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise OutputError(f"cannot create the lock {lock} of {trace}: {exc.strerror or exc}; check the "
                              "folder's permissions or choose another path") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = holder(fd)
            os.close(fd)
            raise TraceBusy(trace, lock, pid, doing) from None
        if _same_inode(fd, lock):       # else its owner removed it before we locked it: lock the new one
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError:
                pass                    # a full disk: the pid is for messages only, the lock holds without it
            return fd
        os.close(fd)


def holder(fd: int) -> int | None:
    """The pid that holds the lock: the first of the file's pids still alive (the launcher, then rank 0)."""
    try:
        pids = [int(w) for w in os.pread(fd, 4096, 0).split()]
    except (OSError, ValueError):
        return None
    alive = [p for p in pids if _alive(p)]
    return (alive or pids or [None])[0]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _inherited(lock: Path) -> int | None:
    """The descriptor of `lock` this process inherited from the launcher, if GPT2TRACE_TRACE_LOCK names one."""
    try:
        fd = int(os.environ[ENV_FD])
    except (KeyError, ValueError):
        return None
    return fd if _same_inode(fd, lock) else None


def _same_inode(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _add_pid(fd: int) -> None:
    try:
        os.pwrite(fd, f"{os.getpid()}\n".encode(), os.fstat(fd).st_size)
    except OSError:
        pass                            # the pid is for messages only
