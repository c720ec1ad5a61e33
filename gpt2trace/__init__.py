"""gpt2trace: an instrumented GPT-2 trainer, its Paraver-like traces, and the tools that read them.

`gpt2trace.load(path)` is the one call a notebook needs. Importing the package loads nothing heavy: reading a
trace never imports the trainer or Numba (tests/test_imports.py holds that).
"""
from __future__ import annotations


def load(path):
    """The trace in `path`, whatever its format: our Parquet trace, or a Paraver trace (.prv or .prv.gz, with its
    .pcf and .row beside it). Returns a `gpt2trace.format.reader.Trace` (`.table` is the Arrow table with the
    schema's metadata, `.to_pandas()` a DataFrame); raises `gpt2trace.format.errors.TraceError` with a one-line
    message."""
    from gpt2trace.interop.loader import load as _load
    return _load(path)
