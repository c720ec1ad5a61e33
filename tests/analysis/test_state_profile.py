"""The state profile on the hand-built slow-thread team (see conftest.slow_thread for the intervals)."""
from __future__ import annotations

import pytest

from analysis.analyze import analyze


def test_state_profile_of_the_slow_thread_team(slow_thread):
    states = analyze(slow_thread, steps=":")["states"]
    # T = 10 s, 3 threads: 30 thread-seconds. Running 2+3+2 + 2+2 + 4+2 = 17; Idle 3+3 = 6;
    # Synchronization 3+2 = 5; Scheduling and Fork/Join 1+1 = 2.
    totals = {r["name"]: (r["seconds"], r["share"]) for r in states["totals"]}
    assert totals == {"Running": pytest.approx((17, 17 / 30)), "Idle": pytest.approx((6, 6 / 30)),
                      "Synchronization": pytest.approx((5, 5 / 30)),
                      "Scheduling and Fork/Join": pytest.approx((2, 2 / 30))}
    assert [r["name"] for r in states["totals"]] == ["Running", "Idle", "Synchronization",
                                                     "Scheduling and Fork/Join"]
    # per thread, fractions of the 10 s window add up to 1
    per = {}
    for r in states["per_thread"]:
        per.setdefault((r["rank"], r["thread"]), 0.0)
        per[(r["rank"], r["thread"])] += r["fraction"]
    assert per == {(0, 0): pytest.approx(1), (0, 1): pytest.approx(1), (0, 2): pytest.approx(1)}
    slow = {r["name"]: r["seconds"] for r in states["per_thread"] if r["thread"] == 2}
    assert slow == pytest.approx({"Scheduling and Fork/Join": 1, "Running": 6, "Idle": 3})
