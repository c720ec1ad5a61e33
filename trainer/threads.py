"""Numba's thread pool for a run: size, threading layer, and oversubscription settings.

NUMBA_NUM_THREADS fixes the pool's size when Numba is first imported, so it is set here, before that, to
allow --threads beyond the core count (oversubscribed runs are legal, and warned about by the CLI). The CLI
must call this before anything imports Numba: `gpt2trace run` configures the pool before it imports the
trainer, and the other commands import their Numba users (analysis.replay, the Paraver parser) only when they
run (tests/gpt2trace/cli/test_cli_startup.py holds that the CLI's start-up imports no Numba).
"""
from __future__ import annotations

import os
import sys

from trainer.cpu import cores_available
from trainer.errors import ConfigError


def configure_threads(nthreads: int, oversubscribed: bool = False) -> None:
    if nthreads < 1:
        raise ConfigError("threads", nthreads, "must be an integer >= 1")
    if "numba" not in sys.modules:
        # A pool of the cores, or more when asked for more: the kernel tests compare 1, 2 and 3 threads in
        # one process, and more threads than cores is allowed (oversubscribed, warned).
        os.environ.setdefault("NUMBA_NUM_THREADS", str(max(nthreads, cores_available())))
    if oversubscribed:
        # Spinning OpenMP workers would steal the cores the other ranks' threads need. Read by the OpenMP
        # runtime when Numba's first parallel region starts it, so setting it here is early enough.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import numba

    pool = numba.config.NUMBA_NUM_THREADS
    if nthreads > pool:
        cause = (f"NUMBA_NUM_THREADS={os.environ['NUMBA_NUM_THREADS']} in the environment"
                 if "NUMBA_NUM_THREADS" in os.environ else "Numba was loaded before the run could size its pool")
        raise ConfigError("threads", nthreads, f"Numba's thread pool holds {pool} ({cause}); unset "
                          f"NUMBA_NUM_THREADS or set it to at least {nthreads}")
    numba.set_num_threads(nthreads)


def threading_layer() -> str:
    import numba
    if numba.get_num_threads() == 1:
        return "none (--threads 1 runs serial kernels)"
    try:
        return numba.threading_layer()
    except ValueError:  # no parallel region has run yet
        return os.environ.get("NUMBA_THREADING_LAYER", "default")
