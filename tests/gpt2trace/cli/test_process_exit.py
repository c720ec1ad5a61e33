"""How a `gpt2trace` process ends under the real mpiexec: every rank must look finished to the launcher.

MPICH (4.1 on) tells Hydra that a rank ended well in a C exit handler; a rank that ends without it counts as
crashed, and Hydra kills the ranks that are still running. Here rank 1 lingers after finalizing MPI, so that
rank 0 has already gone when it leaves: the job must still end with rank 0's own exit code.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from gpt2trace.run.mpiexec import find_mpiexec

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
