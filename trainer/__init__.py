"""The GPT-2 trainer (llm.c's architecture) in Numba kernels."""
from trainer.cpu import configure_openblas as _configure_openblas
from trainer.jitcache import configure_jit_cache as _configure_jit_cache

# Both must happen before Numba and SciPy's OpenBLAS load: they read these settings once, at import.
_configure_openblas()
_configure_jit_cache()
