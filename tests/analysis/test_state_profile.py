"""The state profile on the hand-built slow-thread team (see conftest.slow_thread for the intervals)."""
from __future__ import annotations

import numpy as np
import pytest

from analysis.analyze import analyze
from analysis.records import records
from analysis.state_profile import lane_states
from analysis.window import select
from gpt2trace.format.schema import RANK, STATE, THREAD, Kind


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


def test_lane_states_do_not_depend_on_the_order_of_the_records(slow_thread):
    """Thread by thread (one count per thread) or not (a lane index per record): the same times."""
    states = records(slow_thread, Kind.STATE, (RANK, THREAD, STATE), select(slow_thread))
    a, b = lane_states(states), lane_states(states.take(np.arange(len(states))[::-1]))
    assert a.rank.tolist() == b.rank.tolist() == [0, 0, 0] and a.thread.tolist() == b.thread.tolist() == [0, 1, 2]
    assert a.ns.tolist() == b.ns.tolist()
