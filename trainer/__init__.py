"""The GPT-2 trainer (llm.c's architecture) in Numba kernels."""
from trainer.blas import configure_openblas as _configure_openblas

# Must happen before anything loads SciPy's OpenBLAS (it reads its kernel and thread count once, at load).
_configure_openblas()
