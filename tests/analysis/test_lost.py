import pytest
import random_traces
from hypothesis import given, settings

from analysis import lost, pop
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.testing import synthetic

# (fixture, expected shares of the thread time P x T), worked out by hand from conftest.py.
CASES = [
    # io_rank: T = 8, P = 2, U = (5, 6), computing A = U. Lost 1 - 11/16 = 5/16:
    #   MPI load balance (6 - 5.5) / 8 = 1/16; the rest (8 - 6) / 8 = 2/8 splits with max_ideal 7 (rank 0's
    #   bursts, I/O included) and T_ideal 7 into outside computation (7 - 6) / 8, serialization (7 - 7) / 8 = 0
    #   and transfer (8 - 7) / 8.
    ("io_rank", dict(total=5 / 16, mpi_load_balance=1 / 16, outside_computation=1 / 8, serialization=0.0,
                     transfer=1 / 8, serial_regions=0.0, region_load_balance=0.0, region_scheduling=0.0)),
    # fork_join: T = 12, P = 4, sum U = 23: lost 25/48. One rank computing 11 s: MPI load balance 0, outside
    # computation (12 - 11) / 12 = 4/48 (the I/O second idles all four threads); no MPI, so no serialization or
    # transfer; serial 12/48, region load balance 7/48, region scheduling 2/48 (test_openmp).
    ("fork_join", dict(total=25 / 48, mpi_load_balance=0.0, outside_computation=4 / 48, serialization=None,
                       transfer=None, serial_regions=12 / 48, region_load_balance=7 / 48,
                       region_scheduling=2 / 48)),
]


@pytest.mark.parametrize("fixture,expected", CASES, ids=[c[0] for c in CASES])
def test_lost_time_partition_hand_checked(fixture, expected, request):
    trace = request.getfixturevalue(fixture)
    out = pop.pop(trace, select(trace))["lost"]
    assert set(out) == {"total", *lost.KEYS}
    for key, value in expected.items():
        assert (out[key] is None) if value is None else out[key] == pytest.approx(value), key


configs = random_traces.configs()


@settings(max_examples=40, deadline=None)
@given(configs)
def test_the_shares_partition_the_lost_time(cfg):
    trace = Trace.from_table(synthetic.generate(cfg))
    p = pop.pop(trace, select(trace))
    out = p["lost"]
    parts = [out[k] for k in lost.KEYS if out[k] is not None]
    assert all(x >= 0 for x in parts)
    assert sum(parts) == pytest.approx(out["total"], abs=1e-9)
    assert out["total"] == pytest.approx(1 - p["parallel_efficiency"])
