"""The one home of the checks of numbers given on the command line beyond Typer's types: each bound follows from
what the code does with the value (gpt2trace.format.limits holds the bounds and says why). A value outside
raises OutOfRange, one line naming the option; `refused()` turns it into that line and exit code 2 (`fail`), and
`run` says it once for all its ranks.
"""
from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

from gpt2trace.cli.common import fail
from gpt2trace.format import limits


class OutOfRange(ValueError):
    """A number outside what the code can do with it; the message is one line naming the option."""


@contextlib.contextmanager
def refused() -> Iterator[None]:
    """OutOfRange inside the block: its line, exit code 2."""
    try:
        yield
    except OutOfRange as exc:
        fail(str(exc))


def seconds(value: float, option: str) -> float:
    """A time in seconds >= 0 that fits the int64 nanosecond clock and time.sleep."""
    if not (math.isfinite(value) and 0 <= value <= limits.MAX_SECONDS):
        raise OutOfRange(f"{option} {value:g}: give a number of seconds from 0 to {limits.MAX_SECONDS:.3g} (a time "
                         "must fit the int64 nanosecond clock: ~146 years)")
    return value


def at_most(value: int, option: str, most: int, why: str) -> int:
    """An integer no larger than `most`; `why` says where the bound comes from."""
    if value > most:
        raise OutOfRange(f"{option} {value}: at most {most:,} ({why})")
    return value


def threads(value: int, cores: int) -> int:
    most = limits.MAX_THREADS_PER_CORE * max(cores, 1)
    return at_most(value, "--threads", most, f"{limits.MAX_THREADS_PER_CORE} per core of the {cores} available; "
                   "more would only measure the OS scheduler")


def float32(value: float, option: str) -> float:
    """A value >= 0 that float32 holds as a finite number that is not rounded to zero."""
    if math.isfinite(value) and value > limits.FLOAT32_MAX:
        raise OutOfRange(f"{option} {value:g}: the parameters are float32, which holds at most "
                         f"{limits.FLOAT32_MAX:.4g}")
    if 0 < value < limits.FLOAT32_TINY:
        raise OutOfRange(f"{option} {value:g}: rounds to 0 in float32 (the parameters' type); give 0 or at least "
                         f"{limits.FLOAT32_TINY:.3g}")
    return value


def peak_gflops(value: float) -> float:
    low, high = limits.PEAK_GFLOPS
    if not (math.isfinite(value) and low <= value <= high):
        raise OutOfRange(f"--peak-gflops {value}: give the sgemm GFLOP/s per core, a number from {low:g} to {high:g} "
                         "(an MFU against a peak outside that means nothing)")
    return value
