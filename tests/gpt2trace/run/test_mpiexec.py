"""gpt2trace.run.mpiexec: what a process manager's environment tells a rank (real jobs under mpiexec:
tests/gpt2trace/run/mpi)."""
from __future__ import annotations

import pytest

from gpt2trace.run.mpiexec import ranks_on_this_node

_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")


@pytest.mark.parametrize("env,expected", [
    ({"MPI_LOCALNRANKS": "2"}, 2),                        # MPICH's Hydra (what `--ranks 2` starts)
    ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, 4),             # Open MPI
    ({}, None),                                           # Slurm's srun, or no MPI: the run counts with MPI
    ({"MPI_LOCALNRANKS": "0"}, None),
    ({"MPI_LOCALNRANKS": "two"}, None),
])
def test_the_ranks_on_this_node_as_the_process_manager_says(monkeypatch, env, expected):
    for var in _VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert ranks_on_this_node() == expected
