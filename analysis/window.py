"""The analysis window: `--steps A:B` and the time span [t0, t1) of the steps it selects.

By default every step but the first (warm-up) is analyzed; steps come from `analysis.steps`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis.records import NS, extent
from analysis.steps import outliers, steps_table
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, START_NS, STEP


class WindowError(ValueError):
    """A --steps selection that does not fit the trace; the message is one line naming the option."""


@dataclass(frozen=True)
class Window:
    """The time window [t0_ns, t1_ns) the analyses look at and the steps it holds (empty: no step info)."""
    t0_ns: int
    t1_ns: int
    steps: tuple[int, ...] = ()
    warmup_excluded: bool = False
    warmup_outlier: bool = False

    @property
    def seconds(self) -> float:
        return (self.t1_ns - self.t0_ns) / NS


def parse_steps(spec: str) -> tuple[int | None, int | None]:
    """'A:B' (B excluded, as in Python slices; either side may be empty) or 'A' (one step)."""
    text = spec.strip()
    try:
        if ":" not in text:
            return int(text), int(text) + 1
        a, b = text.split(":", 1)
        return (int(a) if a.strip() else None), (int(b) if b.strip() else None)
    except ValueError:
        raise WindowError(f"--steps {spec!r}: expected A:B with integers, for example 1:10 (B excluded)") from None


def select(trace: Trace, spec: str | None = None) -> Window:
    """The window of `--steps A:B`, or by default every step but the first (warm-up) when there are two or more."""
    return of_steps(steps_table(trace), lambda: extent(trace), trace.name, spec)


def of_steps(steps: pd.DataFrame, span: Callable[[], tuple[int, int]], name: str, spec: str | None = None) -> Window:
    """`select` from the trace's steps table; `span()`: the trace's (first start, last end), for a trace without
    steps."""
    if steps.empty:
        if spec:
            raise WindowError(f"--steps {spec}: {name} has no step numbers; analyze it without --steps")
        return Window(*span())
    step = steps[STEP].to_numpy()
    is_outlier = outliers(steps["seconds"].to_numpy())
    if spec:
        a, b = parse_steps(spec)
        keep = (step >= (a if a is not None else step.min())) & (step < (b if b is not None else step.max() + 1))
        if not keep.any():
            raise WindowError(f"--steps {spec} selects no step; {name} has steps {step.min()}..{step.max()}")
        excluded = False
    else:
        excluded = len(step) >= 2
        keep = np.arange(len(step)) >= (1 if excluded else 0)
    chosen = steps[keep]
    return Window(int(chosen[START_NS].iloc[0]), int(chosen[END_NS].iloc[-1]), tuple(int(s) for s in chosen[STEP]),
                  warmup_excluded=excluded, warmup_outlier=bool(is_outlier[0]))
