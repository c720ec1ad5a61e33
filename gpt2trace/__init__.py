"""gpt2trace: an instrumented GPT-2 trainer, its Paraver-like traces, and the tools that read them.

`gpt2trace.load(path)` is the one call a notebook needs; the heavy modules load only when it runs.
"""
from __future__ import annotations

# Before anything here imports Numba: trainer/__init__ points Numba's cache at a directory keyed by the kernel
# sources (stale machine code otherwise loads after an edit) and picks OpenBLAS's kernel. It imports nothing heavy.
import trainer  # noqa: F401


def load(path):
    """The trace in `path`, whatever its format: our Parquet trace, or a Paraver trace (.prv or .prv.gz, with its
    .pcf and .row beside it). Returns a `gpt2trace.reader.Trace` (`.table` is the Arrow table with the schema's
    metadata, `.to_pandas()` a DataFrame); raises `gpt2trace.errors.TraceError` with a one-line message."""
    from gpt2trace.reader import load as _load
    return _load(path)
