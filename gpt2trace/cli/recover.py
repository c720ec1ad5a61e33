"""`gpt2trace recover TRACE`: merge the parts a killed run left beside TRACE into TRACE (gpt2trace.format.writer)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpt2trace.cli.common import console, fail, plain
from gpt2trace.format.errors import OutputError, TraceError


def recover(
    trace: Annotated[Path, typer.Argument(help="The killed run's --trace path (or its .parts directory).")],
) -> None:
    """Write TRACE from the parts in TRACE.parts/ that a killed or crashed run left behind (whole steps only).

    The parts stay until the merged file is complete; on a full disk nothing is written and they are kept.
    Refused while the run is still writing them (it holds TRACE.lock, gpt2trace.run.ownership)."""
    from gpt2trace.format.writer import PARTS_SUFFIX, parts_dir, steps_phrase  # pyarrow loads here
    from gpt2trace.format.writer import recover as recover_trace
    from gpt2trace.run.ownership import claim
    if trace.name.endswith(PARTS_SUFFIX) and trace.is_dir():     # the .parts directory: its trace's lock
        trace = trace.with_name(trace.name[: -len(PARTS_SUFFIX)])
    lock = None
    try:
        if parts_dir(trace).is_dir():   # else nothing to merge, and recover_trace says why (no lock file made)
            lock = claim(trace, doing="recover merges what a run left once it ended: wait for it, or stop it "
                                      "first (its own SIGTERM keeps its whole steps)")
        merged = recover_trace(trace)
    except (TraceError, OutputError) as exc:
        fail(str(exc))
    finally:
        if lock is not None:
            lock.release()
    steps = steps_phrase(merged.steps)
    ranks = f" of {merged.ranks} ranks" if merged.ranks > 1 else ""
    console.print(plain(f"recovered {merged.path}: {steps}{ranks}, {merged.records:,} records; "
                        f"{parts_dir(merged.path)} removed"), soft_wrap=True)
