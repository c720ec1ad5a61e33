"""Sections of a result computed one at a time, so that one analysis that fails on a trace (a construct of
another tool's trace that it does not handle, say) is reported in one line and the others are still given."""
from __future__ import annotations

from collections.abc import Callable


class Sections:
    """Computes a result's sections one at a time: one that raises is reported in `warnings` in one line and
    given its `default` (None: not computed), so that a trace one analysis cannot handle still gets the others."""

    def __init__(self, warnings: list[str]):
        self.warnings = warnings

    def __call__(self, title: str, compute: Callable[[], object], default=None):
        try:
            return compute()
        except MemoryError:
            raise
        except Exception as exc:      # any analysis's failure: reported, never the whole result's
            self.warnings.append(f"{title}: not computed: {failure(exc)}")
            return default


def failure(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
