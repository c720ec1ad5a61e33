import pytest

from analysis.window import WindowError, parse_steps, select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn


@pytest.mark.parametrize("spec,expected", [("1:3", (1, 3)), (":2", (None, 2)), ("2:", (2, None)), ("4", (4, 5)),
                                           (" 0 : 1 ", (0, 1))])
def test_parse_steps(spec, expected):
    assert parse_steps(spec) == expected


@pytest.mark.parametrize("spec", ["a:b", "1:2:3", "x"])
def test_parse_steps_rejects(spec):
    with pytest.raises(WindowError, match="--steps"):
        parse_steps(spec)


@pytest.mark.parametrize("spec,t0,t1,steps,excluded", [
    (None, 6e9 - 1e9, 7.5e9, (1, 2), True),     # default: the warm-up step 0 is left out
    ("0:1", 0, 5e9, (0,), False),
    ("1:", 5e9, 7.5e9, (1, 2), False),
    ("2", 6e9, 7.5e9, (2,), False),
])
def test_select(three_steps, spec, t0, t1, steps, excluded):
    w = select(three_steps, spec)
    assert (w.t0_ns, w.t1_ns, w.steps, w.warmup_excluded) == (t0, t1, steps, excluded)


def test_select_outside_the_trace(three_steps):
    with pytest.raises(WindowError, match="selects no step; <table> has steps 0..2"):
        select(three_steps, "5:9")


def test_no_step_information_means_the_whole_trace():
    trace = Trace.from_table(syn.from_records([syn.state(0, 0, 1, 3, State.RUNNING)]))
    w = select(trace)
    assert (w.t0_ns, w.t1_ns, w.steps) == (1e9, 3e9, ())
    with pytest.raises(WindowError, match="no step numbers"):
        select(trace, "0:1")
