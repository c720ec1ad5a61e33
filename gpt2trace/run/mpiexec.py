"""Starting ranks: detect whether we already run inside MPI, else start `mpiexec -n N` ourselves.

`gpt2trace run --ranks N` re-executes itself under the mpiexec of the installed MPI (the `mpich` wheel's, next to
this Python, else the first on PATH), with the same options. Under `mpiexec -n N gpt2trace run ...` or Slurm's
`srun`, the process manager's environment says so and the run joins that job instead.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# (rank variable, size variable) of the process managers we know: MPICH/Hydra (PMI), Open MPI, PMIx, Slurm srun
_ENV = (("PMI_RANK", "PMI_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMIX_RANK", "PMIX_SIZE"), ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"))


def launched_by_mpi() -> tuple[int, int] | None:
    """(rank, size) when a process manager started this process, else None."""
    for rank_var, size_var in _ENV:
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return None


def find_mpiexec() -> str | None:
    beside = Path(sys.executable).with_name("mpiexec")
    return str(beside) if beside.exists() else shutil.which("mpiexec")


@dataclass(frozen=True)
class JobEnd:
    code: int                      # mpiexec's exit code (128 + N when a signal N killed it)
    signals: tuple[int, ...]       # the SIGINT/SIGTERM this process received and passed on, in order


def relaunch(ranks: int, argv: list[str], env_extra: dict[str, str]) -> JobEnd:
    """Run this same command under `mpiexec -n ranks` and wait for it.

    mpiexec runs in a session of its own, so a Ctrl-C at the terminal reaches only this process, which passes
    each SIGINT and SIGTERM on to mpiexec; mpiexec (MPICH's Hydra) forwards the first to every rank, and takes
    a second as "abort the job now". Were mpiexec in the terminal's process group too, one Ctrl-C would reach
    it twice (from the terminal and from us)."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError("no mpiexec found: install the package's MPI (pip install mpich) or put one on PATH")
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "gpt2trace", *argv]
    proc = subprocess.Popen(cmd, env=dict(os.environ, **env_extra), start_new_session=True)
    received: list[int] = []

    def forward(signum: int, frame) -> None:
        received.append(signum)
        proc.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    return JobEnd(128 - code if code < 0 else code, tuple(received))     # killed by signal N: the shell's 128 + N
