"""What the trace says about the machine it was taken on (schema.META_MACHINE)."""
from __future__ import annotations

import platform
import sys
from importlib import metadata


def _version(pkg: str) -> str | None:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return None


def machine_info(mpi: dict | None = None) -> dict:
    """CPU, cores, Numba threading layer, BLAS and its kernel, MPI, Python and package versions.

    Call after the first parallel kernel ran: Numba only knows its threading layer from then on.
    """
    from trainer.blas import blas_info
    from trainer.cpu import cores_available, cpu_model
    from trainer.threads import threading_layer

    return {
        "hostname": platform.node(),
        "cpu": cpu_model(),
        "cores": cores_available(),
        "machine": platform.machine(),
        "os": platform.platform(),
        "threading_layer": threading_layer(),
        "blas": blas_info(),
        "mpi": mpi,
        "python": sys.version.split()[0],
        "packages": {p: _version(p) for p in ("gpt2trace", "numpy", "numba", "llvmlite", "scipy", "pyarrow",
                                              "mpi4py", "mpich")},
    }
