"""Per-step phase times on a hand-built 2-rank trace (times in seconds)."""
from __future__ import annotations

import pytest

from analysis.analyze import analyze
from analysis.step_phases import step_phases
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import Phase, State
from gpt2trace.testing import synthetic as syn


@pytest.fixture
def two_steps() -> Trace:
    # rank 0: dataload [0,1] (no step: before step 0, counts in no step), step 0: forward [1,3], backward [3,6],
    #         trace_flush [6,7] (no step: counts in step 0, whose time holds its start), step 1: forward [7,8],
    #         backward [8,10]
    # rank 1: step 0: forward [1,4], backward [4,6]; step 1: forward [7,9], backward [9,10]
    # Steps tile the run: step 0 [1,7) = 6 s, step 1 [7,10] = 3 s.
    recs = [syn.phase(0, 0, 1, Phase.DATALOAD, None), syn.phase(0, 1, 3, Phase.FORWARD, 0),
            syn.phase(0, 3, 6, Phase.BACKWARD, 0), syn.phase(0, 6, 7, Phase.TRACE_FLUSH, None),
            syn.phase(0, 7, 8, Phase.FORWARD, 1), syn.phase(0, 8, 10, Phase.BACKWARD, 1),
            syn.phase(1, 1, 4, Phase.FORWARD, 0), syn.phase(1, 4, 6, Phase.BACKWARD, 0),
            syn.phase(1, 7, 9, Phase.FORWARD, 1), syn.phase(1, 9, 10, Phase.BACKWARD, 1)]
    recs += [syn.state(rank, 0, 0, 10, State.RUNNING) for rank in (0, 1)]
    return Trace.from_table(syn.from_records(recs))


def test_hand_checked(two_steps):
    out = step_phases(two_steps)
    # Mean over the 2 ranks with phases. Step 0: forward (2 + 3) / 2 = 2.5, backward (3 + 2) / 2 = 2.5,
    # trace_flush 1 / 2 = 0.5; other 6 - 5.5 = 0.5. Step 1: forward (1 + 2) / 2 = 1.5, backward (2 + 1) / 2 = 1.5,
    # other 3 - 3 = 0. Totals: backward 4 = forward 4 (tie: by name), trace_flush 0.5; dataload is in no step.
    assert out["steps"].to_dict("list") == {"step": [0, 1], "seconds": pytest.approx([6, 3]),
                                            "other_s": pytest.approx([0.5, 0])}
    assert out["phases"]["phase"].tolist() == ["backward", "backward", "forward", "forward", "trace_flush",
                                               "trace_flush"]
    assert out["phases"]["step"].tolist() == [0, 1, 0, 1, 0, 1]
    assert out["phases"]["seconds"].tolist() == pytest.approx([2.5, 1.5, 2.5, 1.5, 0.5, 0])


def test_other_is_never_negative():
    # Overlapping phases on one rank (nested records) sum past the step: 3 + 2 > 4 s, other stays 0.
    recs = [syn.phase(0, 0, 3, Phase.FORWARD, 0), syn.phase(0, 1, 3, Phase.BACKWARD, 0),
            syn.phase(0, 3, 4, Phase.OPTIMIZER, 0), syn.state(0, 0, 0, 4, State.RUNNING)]
    out = step_phases(Trace.from_table(syn.from_records(recs)))
    assert out["steps"]["other_s"].tolist() == [0.0]


def test_no_steps_gives_empty_tables():
    out = step_phases(Trace.from_table(syn.from_records([syn.state(0, 0, 0, 1, State.RUNNING)])))
    assert out["steps"].empty and out["phases"].empty
    assert list(out["steps"].columns) == ["step", "seconds", "other_s"]


def test_in_analyze_for_every_step_not_only_the_window(two_steps):
    # The default window leaves the warm-up step 0 out; the table keeps it (the report shades it).
    res = analyze(two_steps)
    assert res["window"]["steps"] == [1]
    assert [row["step"] for row in res["step_phases"]["steps"]] == [0, 1]
    assert res["step_phases"]["phases"][0] == {"step": 0, "phase": "backward", "seconds": pytest.approx(2.5)}
