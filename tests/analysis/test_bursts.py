"""Running bursts and the useful-duration histogram on hand-built traces (times in seconds)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import bursts
from analysis.analyze import analyze
from analysis.records import records
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import RANK, STATE, THREAD, Kind, State
from gpt2trace.testing import synthetic as syn


def _states(trace: Trace):
    return records(trace, Kind.STATE, (RANK, THREAD, STATE), select(trace))


def test_slow_thread_team(slow_thread):
    out = bursts.histogram(_states(slow_thread))
    # Bursts: thread 0 [0,2] 2 s and [5,8]+[8,10] joined (touching) 5 s; thread 1 [1,3] and [8,10], 2 s each;
    # thread 2 [1,5] 4 s and [8,10] 2 s. 10 bins per decade from floor(10 log10 2e9) / 10 = 9.3 to
    # ceil(10 log10 5e9) / 10 = 9.7: edges 10^9.3 .. 10^9.7 ns = 1.995, 2.512, 3.162, 3.981, 5.012 s.
    assert out["edges_s"] == pytest.approx(10 ** np.array([0.3, 0.4, 0.5, 0.6, 0.7]))
    # 2 s in bin 0; 4 s and 5 s in bin 3 [3.981, 5.012). Shares of each thread's burst time: thread 0 2/7, 5/7.
    cells = out["cells"]
    assert cells[["rank", "thread", "bin", "count"]].to_numpy().tolist() == [
        [0, 0, 0, 1], [0, 0, 3, 1], [0, 1, 0, 2], [0, 2, 0, 1], [0, 2, 3, 1]]
    assert cells["seconds"].tolist() == pytest.approx([2, 5, 4, 2, 4])
    assert cells["share"].tolist() == pytest.approx([2 / 7, 5 / 7, 1, 1 / 3, 2 / 3])


def test_other_states_cut_bursts_and_empty_ones_are_dropped():
    # One thread: Running [0,1], Synchronization [1,2], Running [2,2] (zero length), Running [2,2.5] -> two
    # bursts, 1 s and 0.5 s (the zero-length record joins the next one and adds nothing).
    recs = [syn.state(0, 0, 0, 1, State.RUNNING), syn.state(0, 0, 1, 2, State.SYNCHRONIZATION),
            syn.state(0, 0, 2, 2, State.RUNNING), syn.state(0, 0, 2, 2.5, State.RUNNING)]
    out = bursts.histogram(_states(Trace.from_table(syn.from_records(recs))), bins_per_decade=1)
    # One bin per decade: edges 10^8, 10^9, 10^10 ns; 0.5 s in bin 0, 1 s in bin 1.
    assert out["edges_s"] == pytest.approx([0.1, 1, 10])
    assert out["cells"][["bin", "count"]].to_numpy().tolist() == [[0, 1], [1, 1]]
    assert out["cells"]["seconds"].tolist() == pytest.approx([0.5, 1])


def test_no_running_time():
    trace = Trace.from_table(syn.from_records([syn.state(0, 0, 0, 1, State.IDLE)]))
    out = bursts.histogram(_states(trace))
    assert len(out["edges_s"]) == 0 and out["cells"].empty
    assert analyze(trace)["bursts"] == {"edges_s": [], "cells": []}


@settings(max_examples=15, deadline=None)
@given(st.builds(syn.SyntheticConfig, ranks=st.integers(1, 2), threads=st.integers(1, 3), steps=st.integers(1, 3),
                 layers=st.integers(1, 2), seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.5)))
def test_bursts_hold_every_thread_s_running_time(cfg):
    # Bursts partition the Running time: per thread, their seconds sum to its Running time, shares sum to 1.
    trace = Trace.from_table(syn.generate(cfg))
    res = analyze(trace)
    running = {(r["rank"], r["thread"]): r["seconds"] for r in res["states"]["per_thread"]
               if r["state"] == State.RUNNING}
    cells = res["bursts"]["cells"]
    for lane, secs in running.items():
        mine = [c for c in cells if (c["rank"], c["thread"]) == lane]
        assert sum(c["seconds"] for c in mine) == pytest.approx(secs, rel=1e-9)
        assert sum(c["share"] for c in mine) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["fork_join", "slow_thread"])
def test_counts_do_not_depend_on_the_order_of_the_records(name, request):
    states = _states(request.getfixturevalue(name))
    a, b = bursts.counts(states), bursts.counts(states.take(np.arange(len(states))[::-1]))
    for f in ("rank", "thread", "lane", "slot", "count", "ns", "edge_lane", "edge_ns"):
        assert getattr(a, f).tolist() == getattr(b, f).tolist(), f
