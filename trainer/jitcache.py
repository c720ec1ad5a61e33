"""Where Numba caches our compiled kernels: a directory keyed by a hash of the trainer's sources.

Numba invalidates a cached function only when *its own* file changes, but every kernel inlines helpers from
trainer/kernels/launch.py and trainer/blas.py; after an edit there, stale machine code would load and crash.
Keying the cache directory by the hash of the compiled sources (trainer/kernels/ and trainer/blas.py) makes
any edit there start a fresh cache; edits elsewhere (the model, the loop) keep it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path


def source_hash() -> str:
    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted([*root.joinpath("kernels").glob("*.py"), root / "blas.py"]):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def configure_jit_cache() -> None:
    """Set NUMBA_CACHE_DIR (unless the user did) before Numba is imported."""
    if "NUMBA_CACHE_DIR" in os.environ:
        return
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gpt2trace" / "numba"
    os.environ["NUMBA_CACHE_DIR"] = str(base / source_hash())
