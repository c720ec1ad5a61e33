"""SciPy's bundled OpenBLAS, called straight from Numba kernels through `cblas_sgemm`.

Why not `np.dot` inside the kernels: `cblas_sgemm` takes leading dimensions and beta, so a thread multiplies its
row block in place and backward accumulates into gradients (beta = 1) with no temporaries.

OpenBLAS reads OPENBLAS_CORETYPE and OPENBLAS_NUM_THREADS once, when it loads: `trainer/__init__.py` sets them
(trainer.cpu.configure_openblas) before this module loads SciPy.
"""
from __future__ import annotations

import ctypes
import os

from trainer.cpu import AVX512_FLAGS, cpu_flags


def _scipy_openblas() -> dict:
    import scipy.linalg  # noqa: F401  (loads SciPy's OpenBLAS into the process)
    from threadpoolctl import threadpool_info

    for lib in threadpool_info():
        if lib.get("internal_api") == "openblas" and "scipy.libs" in lib.get("filepath", ""):
            return lib
    for lib in threadpool_info():  # SciPy linked to a system OpenBLAS
        if lib.get("internal_api") == "openblas":
            return lib
    raise RuntimeError("SciPy's OpenBLAS was not found in this process; reinstall scipy from its wheel")


def _load() -> tuple[ctypes.CDLL, str]:
    info = _scipy_openblas()
    lib = ctypes.CDLL(info["filepath"])
    prefix = "scipy_" if hasattr(lib, "scipy_cblas_sgemm") else ""
    getattr(lib, prefix + "openblas_set_num_threads")(1)
    return lib, prefix


_LIB, _PREFIX = _load()


def blas_info() -> dict:
    """What the trace metadata and benchmarks report about BLAS."""
    info = _scipy_openblas()
    corename = getattr(_LIB, _PREFIX + "openblas_get_corename")
    corename.restype = ctypes.c_char_p
    return {
        "library": "openblas",
        "version": info.get("version"),
        "filepath": info.get("filepath"),
        "kernel": corename().decode(),
        "coretype_env": os.environ.get("OPENBLAS_CORETYPE"),
        "threads": info.get("num_threads"),
        "cpu_has_avx512": set(AVX512_FLAGS) <= cpu_flags(),
    }


def sgemm_address() -> int:
    return ctypes.cast(getattr(_LIB, _PREFIX + "cblas_sgemm"), ctypes.c_void_p).value


# Registered by name so Numba's on-disk cache stays valid across processes (the address changes each run).
import llvmlite.binding as _llvm  # noqa: E402
from numba import types as _nt  # noqa: E402

_llvm.add_symbol("gpt2trace_cblas_sgemm", sgemm_address())

# cblas_sgemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); pointers passed as uintp
# (`arr.ctypes.data`), which has the same ABI as a pointer on every 64-bit platform Numba supports.
cblas_sgemm = _nt.ExternalFunction(
    "gpt2trace_cblas_sgemm",
    _nt.void(_nt.int32, _nt.int32, _nt.int32, _nt.int32, _nt.int32, _nt.int32, _nt.float32,
             _nt.uintp, _nt.int32, _nt.uintp, _nt.int32, _nt.float32, _nt.uintp, _nt.int32),
)

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112
