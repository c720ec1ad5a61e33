import numpy as np
import pytest

from analysis.window import WindowError, outliers, parse_steps, records, select, steps_table
from gpt2trace.testing import synthetic as syn
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import END_NS, START_NS, STEP, Kind, State


def _three_steps() -> Trace:
    # steps 0, 1, 2 on one rank: phases [0,5], [5,6], [6,7.5] -> step times 5, 1, 1.5 (they tile [0, 7.5])
    recs = [syn.state(0, 0, 0, 7.5, State.RUNNING)]
    for step, (a, b) in enumerate(((0, 5), (5, 6), (6, 7.5))):
        recs.append(syn.phase(0, a, b, "forward", step))
    return Trace.from_table(syn.from_records(recs))


@pytest.mark.parametrize("spec,expected", [("1:3", (1, 3)), (":2", (None, 2)), ("2:", (2, None)), ("4", (4, 5)),
                                           (" 0 : 1 ", (0, 1))])
def test_parse_steps(spec, expected):
    assert parse_steps(spec) == expected


@pytest.mark.parametrize("spec", ["a:b", "1:2:3", "x"])
def test_parse_steps_rejects(spec):
    with pytest.raises(WindowError, match="--steps"):
        parse_steps(spec)


def test_steps_tile_the_run():
    steps = steps_table(_three_steps())
    assert steps["seconds"].tolist() == [5, 1, 1.5]


@pytest.mark.parametrize("spec,t0,t1,steps,excluded", [
    (None, 6e9 - 1e9, 7.5e9, (1, 2), True),     # default: the warm-up step 0 is left out
    ("0:1", 0, 5e9, (0,), False),
    ("1:", 5e9, 7.5e9, (1, 2), False),
    ("2", 6e9, 7.5e9, (2,), False),
])
def test_select(spec, t0, t1, steps, excluded):
    w = select(_three_steps(), spec)
    assert (w.t0_ns, w.t1_ns, w.steps, w.warmup_excluded) == (t0, t1, steps, excluded)


def test_select_outside_the_trace():
    with pytest.raises(WindowError, match="selects no step; <table> has steps 0..2"):
        select(_three_steps(), "5:9")


def test_no_step_information_means_the_whole_trace():
    trace = Trace.from_table(syn.from_records([syn.state(0, 0, 1, 3, State.RUNNING)]))
    w = select(trace)
    assert (w.t0_ns, w.t1_ns, w.steps) == (1e9, 3e9, ())
    with pytest.raises(WindowError, match="no step numbers"):
        select(trace, "0:1")


def test_outliers():
    # median 1, MAD 0.01 -> 3 x 1.4826 x 0.01 = 0.044 < 5 % of the median: threshold 0.05; only 3 is out
    assert outliers(np.array([1, 1, 1.01, 0.99, 3])).tolist() == [False, False, False, False, True]


def test_records_clip_to_the_window():
    w = select(_three_steps(), "1:2")          # [5, 6]
    rec = records(_three_steps(), Kind.STATE, (), w)
    assert (rec[START_NS].tolist(), rec[END_NS].tolist()) == ([5e9], [6e9])


def test_last_step_takes_the_trailing_stepless_phases():
    # steps 0 and 1 each followed by a step-less flush: [0,2] + flush [2,3]; [3,5] + flush [5,6].
    # Step 0 ends where step 1 starts (3); step 1 takes its flush too and ends at 6: both 3 s.
    recs = [syn.state(0, 0, 0, 6, State.RUNNING), syn.phase(0, 0, 2, "forward", 0), syn.phase(0, 3, 5, "forward", 1)]
    flush = syn.phase(0, 2, 3, "trace_flush", 0)
    flush2 = syn.phase(0, 5, 6, "trace_flush", 0)
    flush[STEP] = flush2[STEP] = None
    steps = steps_table(Trace.from_table(syn.from_records(recs + [flush, flush2])))
    assert steps["seconds"].tolist() == [3, 3]
