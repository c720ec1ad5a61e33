"""Pure analyses of traces: a trace in, tables out (see docs/analyze.md)."""
import gpt2trace  # noqa: F401  (sets up Numba's cache location before the analyses' Numba code loads)
