"""Where each step's time goes: per step, the mean time per rank in each phase, and the rest of the step.

Every step of the trace, not only the analyzed window (the report shades the steps left out). A phase counts in
the step whose time holds its start (`steps.steps_table`: steps tile the run), so step-less phases such as the
tracer's flush count too; its time is the sum over ranks divided by the ranks that have phase records.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.plain import rows
from analysis.records import NS, records
from analysis.sections import Inputs, Section
from analysis.steps import steps_table
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, NAME, RANK, START_NS, STEP, Kind

STEP_COLUMNS = [STEP, "seconds", "other_s"]
PHASE_COLUMNS = [STEP, "phase", "seconds"]


def step_phases(trace: Trace, steps: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """`steps`: step, seconds (the step's time), other_s (its time outside every phase, at least 0);
    `phases`: step, phase, seconds, one row per step for each phase present, phases by their total time over the
    run (largest first; ties by name), steps ascending. Both empty when no record has a step. `steps`:
    `steps_table(trace)` when the caller has it."""
    steps = steps_table(trace) if steps is None else steps
    if steps.empty:
        return {"steps": pd.DataFrame(columns=STEP_COLUMNS), "phases": pd.DataFrame(columns=PHASE_COLUMNS)}
    step = steps[STEP].to_numpy().astype(np.int64)
    total = steps["seconds"].to_numpy()
    ph = records(trace, Kind.PHASE, (RANK, NAME))
    names, per_phase = [], []
    if len(ph):
        ranks = max(len(np.unique(ph[RANK])), 1)
        idx = np.searchsorted(steps[START_NS].to_numpy(), ph[START_NS], side="right") - 1
        inside = (idx >= 0) & (ph[START_NS] < steps[END_NS].to_numpy()[np.maximum(idx, 0)])
        label = list(ph.names) + ["(no name)"]                    # code -1: a phase record without a name
        code, idx = np.where(ph[NAME] < 0, len(ph.names), ph[NAME])[inside], idx[inside]
        dur = (ph[END_NS] - ph[START_NS])[inside] / NS / ranks
        for c in sorted(np.unique(code), key=lambda c: (-dur[code == c].sum(), label[c])):
            names.append(label[c])
            per_phase.append(np.bincount(idx[code == c], weights=dur[code == c], minlength=len(step)))
    stacked = np.zeros(len(step))
    for secs in per_phase:            # summed in the order the chart stacks them: its "other" is the same float
        stacked += secs
    phases = pd.DataFrame({STEP: np.tile(step, len(names)), "phase": np.repeat(np.array(names, dtype=object),
                                                                                len(step)),
                           "seconds": np.concatenate(per_phase) if per_phase else np.zeros(0)})
    return {"steps": pd.DataFrame({STEP: step, "seconds": total, "other_s": np.maximum(total - stacked, 0)}),
            "phases": phases[PHASE_COLUMNS]}


def _section(inputs: Inputs, parts: list) -> dict:
    return {k: rows(v) for k, v in step_phases(inputs.trace, inputs.steps).items()}


# Every step's phases (the report draws them)
SECTION = Section("step_phases", "step phases", _section)
