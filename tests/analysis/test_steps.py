import numpy as np

from analysis.steps import outliers, steps_table
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import STEP, State
from gpt2trace.testing import synthetic as syn


def test_steps_tile_the_run(three_steps):
    steps = steps_table(three_steps)
    assert steps["seconds"].tolist() == [5, 1, 1.5]


def test_last_step_takes_the_trailing_stepless_phases():
    # steps 0 and 1 each followed by a step-less flush: [0,2] + flush [2,3]; [3,5] + flush [5,6].
    # Step 0 ends where step 1 starts (3); step 1 takes its flush too and ends at 6: both 3 s.
    recs = [syn.state(0, 0, 0, 6, State.RUNNING), syn.phase(0, 0, 2, "forward", 0), syn.phase(0, 3, 5, "forward", 1)]
    flush = syn.phase(0, 2, 3, "trace_flush", 0)
    flush2 = syn.phase(0, 5, 6, "trace_flush", 0)
    flush[STEP] = flush2[STEP] = None
    steps = steps_table(Trace.from_table(syn.from_records(recs + [flush, flush2])))
    assert steps["seconds"].tolist() == [3, 3]


def test_outliers():
    # median 1, MAD 0.01 -> 3 x 1.4826 x 0.01 = 0.044 < 5 % of the median: threshold 0.05; only 3 is out
    assert outliers(np.array([1, 1, 1.01, 0.99, 3])).tolist() == [False, False, False, False, True]
