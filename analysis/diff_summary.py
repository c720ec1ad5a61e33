"""What `analysis.diff.diff` compares of one trace, computed without the rest of `analysis.analyze`.

The same values as `analyze(trace, steps)` under the keys diff reads (trace, summary, pop, parallel, pipeline,
waits.calls, states.totals, occupancy.per_kernel's wall time, imbalance's per-kernel rows across ranks), from
the same functions, but none of the tables diff does not read: the occupancy levels and timeline, the per-thread
and per-layer imbalance, bursts, counters, memory, the per-communicator waits, findings. On a 10-million-record
trace that is about half of analyze's work, and diff runs it once per trace.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis import groups, mpi, pipeline, pop, segments, waits
from analysis.imbalance import kernels_across_ranks
from analysis.occupancy import kernel_wall
from analysis.plain import jsonable, rows
from analysis.records import records, threads
from analysis.sections import Sections
from analysis.state_profile import state_profile
from analysis.summary import summary, token_ranks
from analysis.window import select
from gpt2trace.format import grid as rank_grid
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.format.schema import RANK, STATE, THREAD, Kind


def summarize(trace: Trace, steps: str | None = None) -> dict:
    """The parts of `analysis.analyze.analyze(trace, steps)` that `analysis.diff.diff` compares, equal to
    analyze's; the occupancy's per-kernel rows carry only kernel, layer and wall_s.
    Raises TraceError for an invalid trace (as analyze does) and WindowError for a `steps` that does not fit it."""
    check_states(trace)
    window = select(trace, steps)
    ranks = np.unique(threads(trace)[RANK].to_numpy())
    grid = rank_grid.of_trace(trace)
    kern = segments.kernel_records(trace, window)
    segs = segments.segments(kern)
    calls = mpi.calls(trace, window)
    states = records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    wait_rows = waits.wait_states(calls)
    layout = groups.parallel(trace)
    per_call = waits.per_call(calls, wait_rows)
    per_call["split"] = [groups.split_of(g, layout) for g in per_call[mpi.GROUP]]
    said: list[str] = []
    pipe = Sections(said)("pipeline", lambda: pipeline.pipeline(trace, window, calls, wait_rows, segs))
    summ = summary(trace, window, None, token_ranks(pipe, grid, ranks), grid)
    return jsonable({
        "trace": trace.name,
        "summary": {k: (rows(v) if isinstance(v, pd.DataFrame) else v) for k, v in summ.items()},
        "pop": pop.pop(trace, window, calls, states, kern),
        "parallel": layout,
        "pipeline": {k: (rows(v) if isinstance(v, pd.DataFrame) else v) for k, v in pipe.items()} if pipe else None,
        "waits": {"calls": rows(per_call)},
        "states": {"totals": rows(state_profile(states, window)["totals"])},
        "occupancy": {"per_kernel": rows(kernel_wall(segs))},
        "imbalance": rows(kernels_across_ranks(segs, ranks)),
        "warnings": said,
    })
