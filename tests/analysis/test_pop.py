import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import pop
from analysis.window import select
from gpt2trace.testing import synthetic
from gpt2trace.format.reader import Trace

# (fixture, expected) with every number worked out by hand from the traces in conftest.py (T = runtime).
CASES = [
    # late_rank: T = 10; U = (6, 9): LB = 7.5 / 9, CommE = 9 / 10, PE = 7.5 / 10.
    # Outside MPI O = (10 - 4, 10 - 1) = (6, 9): the MPI level equals the whole, the thread level is 1.
    # Replay: rank 0 enters at 6, rank 1 at 9, the allreduce ends at 9, nothing after: T_ideal = 9,
    # SerE = 9 / 9 = 1, TE = 9 / 10.
    ("late_rank", dict(runtime_s=10, parallel_efficiency=0.75, load_balance=7.5 / 9, communication_efficiency=0.9,
                       serialization_efficiency=1.0, transfer_efficiency=0.9, ideal_runtime_s=9,
                       mpi=(0.75, 7.5 / 9, 0.9), threads=(1.0, 1.0, 1.0))),
    # slow_thread: T = 10; U = (7, 4, 6): LB = (17/3) / 7, CommE = 7 / 10, PE = 17 / 30.
    # No MPI: O = 10 for every thread, MPI level 1, the thread level is everything; T_ideal = T.
    ("slow_thread", dict(runtime_s=10, parallel_efficiency=17 / 30, load_balance=17 / 21,
                         communication_efficiency=0.7, serialization_efficiency=0.7, transfer_efficiency=1.0,
                         ideal_runtime_s=10, mpi=(1.0, 1.0, 1.0), threads=(17 / 30, 17 / 21, 0.7))),
    # serial: T = 10; U = (10, 4): LB = 7 / 10, CommE = 1, PE = 0.7.
    ("serial", dict(runtime_s=10, parallel_efficiency=0.7, load_balance=0.7, communication_efficiency=1.0,
                    serialization_efficiency=1.0, transfer_efficiency=1.0, ideal_runtime_s=10,
                    mpi=(1.0, 1.0, 1.0), threads=(0.7, 0.7, 1.0))),
    # nonblocking: T = 7; U = (1 + 2.5 + 1, 4.5 + 1) = (4.5, 5.5): LB = 5 / 5.5, CommE = 5.5 / 7.
    # In MPI (GC + Wait): rank 0 0.5 + 2 = 2.5, rank 1 0.5 + 1 = 1.5; O = (4.5, 5.5): MPI level = whole.
    # Replay: rank 0 posts at 1, waits from 1 + 2.5 = 3.5; rank 1 posts at 4.5 and waits at once; the collective
    # completes at 4.5 (last post); both leave at 4.5 and run 1 s more: T_ideal = 5.5, SerE = 1, TE = 5.5 / 7.
    ("nonblocking", dict(runtime_s=7, parallel_efficiency=5 / 7, load_balance=5 / 5.5,
                         communication_efficiency=5.5 / 7, serialization_efficiency=1.0,
                         transfer_efficiency=5.5 / 7, ideal_runtime_s=5.5, mpi=(5 / 7, 5 / 5.5, 5.5 / 7),
                         threads=(1.0, 1.0, 1.0))),
]
LEVEL_KEYS = ("parallel_efficiency", "load_balance", "communication_efficiency")


@pytest.mark.parametrize("fixture,expected", CASES, ids=[c[0] for c in CASES])
def test_pop_hand_checked(fixture, expected, request):
    trace = request.getfixturevalue(fixture)
    out = pop.pop(trace, select(trace))
    for key, value in expected.items():
        if key in ("mpi", "threads"):
            assert [out[key][k] for k in LEVEL_KEYS] == pytest.approx(value), key
        else:
            assert out[key] == pytest.approx(value), key


def test_efficiencies_with_no_useful_time_are_none():
    import numpy as np
    out = pop.efficiencies(np.zeros(2), np.ones(2), 10.0, 10.0)
    assert out["parallel_efficiency"] is None and out["mpi"]["load_balance"] is None


configs = st.builds(
    synthetic.SyntheticConfig,
    ranks=st.integers(1, 3), threads=st.integers(1, 3), steps=st.integers(1, 4), layers=st.integers(1, 2),
    seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.5), allreduce=st.booleans(),
    serial_ns=st.integers(0, 300_000), transfer_ns=st.integers(0, 200_000),
    late_rank=st.one_of(st.none(), st.tuples(st.just(0), st.floats(1.0, 3.0))),
    slow_thread=st.one_of(st.none(), st.tuples(st.just(0), st.just(0), st.floats(1.0, 3.0))),
)


@settings(max_examples=40, deadline=None)
@given(configs)
def test_pop_properties_on_random_traces(cfg):
    trace = Trace.from_table(synthetic.generate(cfg))
    out = pop.pop(trace, select(trace))
    assert out["parallel_efficiency"] == pytest.approx(out["load_balance"] * out["communication_efficiency"])
    assert out["communication_efficiency"] == pytest.approx(
        out["serialization_efficiency"] * out["transfer_efficiency"])
    for value in [out[k] for k in ("parallel_efficiency", "load_balance", "communication_efficiency",
                                   "serialization_efficiency", "transfer_efficiency")] + \
            [out["mpi"][k] for k in LEVEL_KEYS] + [out["threads"]["parallel_efficiency"],
                                                   out["threads"]["communication_efficiency"]]:
        assert 0 < value <= 1 + 1e-12
    # The thread-level load balance is a residual (LB / LB_mpi): positive, and here at most 1 as well since
    # in these traces the rank longest outside MPI is also the one with the most useful time.
    assert out["threads"]["load_balance"] > 0
    assert out["ideal_runtime_s"] <= out["runtime_s"] + 1e-12
    assert out["mpi"]["parallel_efficiency"] * out["threads"]["parallel_efficiency"] == pytest.approx(
        out["parallel_efficiency"])
