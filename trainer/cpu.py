"""What CPU this is and how OpenBLAS must be set up for it; imports nothing heavy (runs before NumPy/SciPy)."""
from __future__ import annotations

import os
import sys

AVX512_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


def cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform
    return platform.processor() or platform.machine()


def configure_openblas() -> None:
    """Pick OpenBLAS's kernel for this CPU and hold BLAS to one thread (our threads are the parallelism).

    OpenBLAS does not select its AVX-512 kernels on AMD Zen 4/5 by itself (it picks Haswell/Zen); where the
    CPU has AVX-512 we ask for SkylakeX. On CPUs without it (Zen 3 here) the default is already right, and
    forcing SkylakeX would die with SIGILL. A value the user set wins.
    """
    if "scipy.linalg" in sys.modules:
        return  # too late to choose; blas_info() reports what was loaded
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if "OPENBLAS_CORETYPE" not in os.environ and set(AVX512_FLAGS) <= cpu_flags():
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"


def cores_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1
