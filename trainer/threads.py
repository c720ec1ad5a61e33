"""Numba's thread pool for a run: size, threading layer, and oversubscription settings.

NUMBA_NUM_THREADS fixes the pool's size when Numba is first imported, so it is set here, before that, to
allow --threads beyond the core count (oversubscribed runs are legal, and warned about by the CLI).
"""
from __future__ import annotations

import os
import sys

from trainer.cpu import cores_available


def configure_threads(nthreads: int, oversubscribed: bool = False) -> None:
    if nthreads < 1:
        raise ValueError(f"--threads must be >= 1, got {nthreads}")
    if "numba" not in sys.modules:
        os.environ.setdefault("NUMBA_NUM_THREADS", str(max(nthreads, cores_available())))
        if oversubscribed:
            # Spinning OpenMP workers would steal the cores the other ranks' threads need.
            os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numba

    if nthreads > numba.config.NUMBA_NUM_THREADS:
        raise ValueError(f"--threads {nthreads} exceeds Numba's pool of {numba.config.NUMBA_NUM_THREADS} "
                         "(NUMBA_NUM_THREADS was fixed before this run configured it); unset it or raise it")
    numba.set_num_threads(nthreads)


def threading_layer() -> str:
    import numba
    if numba.get_num_threads() == 1:
        return "none (--threads 1 runs serial kernels)"
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run yet
        return os.environ.get("NUMBA_THREADING_LAYER", "default")
