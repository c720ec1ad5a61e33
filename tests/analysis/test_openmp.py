from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis import openmp
from analysis.records import records
from analysis.segments import kernel_records
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import RANK, STATE, THREAD, Kind
from gpt2trace.testing import synthetic


def _split(trace):
    w = select(trace)
    return openmp.split(records(trace, Kind.STATE, (RANK, THREAD, STATE), w), kernel_records(trace, w)), w


# (fixture, expected OpenMP factors) worked out by hand from conftest.py; P x T is the thread time.
CASES = [
    # slow_thread: 1 rank x 3 threads, T = 10, P x T = 30. Regions [0,5] (matmul_forward: blocks and the
    # Fork/Join and Synchronization around them) and [8,10] (gelu_forward); the main thread's Python [5,8] is
    # serial: S = 3, lost 2 x 3 = 6. Region [0,5]: useful 2, 2, 4 -> imbalance 3 x 4 - 8 = 4, scheduling
    # 3 x (5 - 4) = 3; region [8,10]: 2, 2, 2 -> nothing lost.
    # POP's formulas: region efficiency 1 - (7 - mean useful inside (4 + 4 + 6) / 3) / 10 = 1 - 7/30;
    # serial region efficiency 1 - 3 x (1 - 1/3) / 10 = 0.8.
    ("slow_thread", dict(thread_efficiency=17 / 30, serial_region_efficiency=0.8, region_efficiency=23 / 30,
                         region_load_balance=26 / 30, region_scheduling_efficiency=0.9, regions=2,
                         in_regions_avg_s=7, serial_useful_s=3, serial_lost_s=6, region_imbalance_lost_s=4,
                         region_scheduling_lost_s=3)),
    # serial: 1 rank x 2 threads, T = 10, P x T = 20. One region [0,4] where both run 4 s (nothing lost), then
    # 6 s of Python on the main thread: lost 1 x 6 = 6, serial region efficiency 1 - 6/20 = 0.7. All of the
    # 30 % that BSC's load balance reports here (LB = 0.7) is serial code.
    ("serial", dict(thread_efficiency=0.7, serial_region_efficiency=0.7, region_efficiency=1.0,
                    region_load_balance=1.0, region_scheduling_efficiency=1.0, regions=1, in_regions_avg_s=4,
                    serial_useful_s=6, serial_lost_s=6, region_imbalance_lost_s=0, region_scheduling_lost_s=0)),
    # fork_join: 1 rank x 4 threads, T = 12, P x T = 48.
    #   region A [2,6], W = 4: useful 3, 3.5, 2, 0 (thread 3 got no block) -> imbalance 4 x 3.5 - 8.5 = 5.5,
    #     scheduling 4 x (4 - 3.5) = 2
    #   region B [8,11], W = 3: useful 3, 2.5, 2.5, 2.5 -> imbalance 12 - 10.5 = 1.5, scheduling 4 x 0 = 0
    #   serial: Python 2 + 1 + 1 = 4 s (the I/O second is not useful), lost 3 x 4 = 12
    # thread efficiency 1 - (12 + 7 + 2) / 48 = 27/48; serial 1 - 12/48; regions 1 - 9/48; load balance 1 - 7/48;
    # scheduling 1 - 2/48. POP's region efficiency: 1 - (7 - mean useful inside (6 + 6 + 4.5 + 2.5) / 4) / 12
    # = 1 - 2.25 / 12 = 1 - 9/48.
    ("fork_join", dict(thread_efficiency=27 / 48, serial_region_efficiency=36 / 48, region_efficiency=39 / 48,
                       region_load_balance=41 / 48, region_scheduling_efficiency=46 / 48, regions=2,
                       in_regions_avg_s=7, serial_useful_s=4, serial_lost_s=12, region_imbalance_lost_s=7,
                       region_scheduling_lost_s=2)),
]


@pytest.mark.parametrize("fixture,expected", CASES, ids=[c[0] for c in CASES])
def test_openmp_factors_hand_checked(fixture, expected, request):
    sp, w = _split(request.getfixturevalue(fixture))
    out = openmp.factors(sp, w.t1_ns - w.t0_ns)
    assert set(out) == set(expected)
    for key, value in expected.items():
        assert out[key] == pytest.approx(value), key


def test_fork_join_split_per_rank(fork_join):
    sp, _ = _split(fork_join)
    # Regions 4 + 3 s, serial Python 4 s: the rank computes 11 of its 12 s (the I/O second is the rest).
    assert sp.threads.tolist() == [4]
    assert (sp.region_ns / 1e9).tolist() == pytest.approx([7])
    assert (sp.computing_ns / 1e9).tolist() == pytest.approx([11])
    assert (sp.useful_ns / 1e9).tolist() == pytest.approx([23])


@pytest.mark.parametrize("fixture", ["late_rank", "nonblocking", "io_rank"])
def test_no_threads_no_openmp_factors(fixture, request):
    sp, w = _split(request.getfixturevalue(fixture))
    assert openmp.factors(sp, w.t1_ns - w.t0_ns) is None
    # a one-thread rank has no regions: all its useful time counts as serial, which costs nothing
    assert sp.region_ns.tolist() == [0, 0] and np.array_equal(sp.computing_ns, sp.useful_ns)


configs = st.builds(
    synthetic.SyntheticConfig,
    ranks=st.integers(1, 3), threads=st.integers(2, 4), steps=st.integers(1, 3), layers=st.integers(1, 2),
    seed=st.integers(0, 10_000), noise=st.floats(0.0, 0.5), allreduce=st.booleans(),
    serial_ns=st.integers(0, 300_000),
    slow_thread=st.one_of(st.none(), st.tuples(st.just(0), st.integers(0, 1), st.floats(1.0, 3.0))),
)


@settings(max_examples=30, deadline=None)
@given(configs)
def test_losses_account_for_every_lost_thread_second(cfg):
    # Per rank, the thread time in computing stretches n_p (R_p + S_p) less the useful time is exactly what the
    # three losses add up to, and each factor is in (0, 1].
    sp, w = _split(Trace.from_table(synthetic.generate(cfg)))
    lost = sp.serial_lost_ns + sp.imbalance_ns + sp.scheduling_ns
    assert lost == pytest.approx(sp.threads * sp.computing_ns - sp.useful_ns, abs=1e-3)
    assert (sp.imbalance_ns >= -1e-6).all() and (sp.scheduling_ns >= -1e-6).all()
    out = openmp.factors(sp, w.t1_ns - w.t0_ns)
    for key in ("thread_efficiency", "serial_region_efficiency", "region_efficiency", "region_load_balance",
                "region_scheduling_efficiency"):
        assert 0 < out[key] <= 1 + 1e-12, key
    assert out["thread_efficiency"] == pytest.approx(out["serial_region_efficiency"] + out["region_efficiency"] - 1)
    assert out["region_efficiency"] == pytest.approx(out["region_load_balance"] +
                                                     out["region_scheduling_efficiency"] - 1)
    if cfg.ranks == 1:
        # the generator writes one region per kernel, separated by Python on the main thread; the first step is
        # left out as warm-up when there are two or more
        kept = cfg.steps - 1 if cfg.steps >= 2 else cfg.steps
        assert out["regions"] == kept * len(synthetic.kernel_sequence(cfg.layers)[0])


def test_split_does_not_depend_on_the_record_order():
    # the reader gives records sorted by rank, which `split` cuts into slices; any other order is sorted first
    trace = Trace.from_table(synthetic.generate(synthetic.SyntheticConfig(ranks=3, threads=3, steps=2, seed=4)))
    w = select(trace)
    states, kern = records(trace, Kind.STATE, (RANK, THREAD, STATE), w), kernel_records(trace, w)
    mix = np.random.default_rng(1)
    a = openmp.split(states, kern)
    b = openmp.split(states.take(mix.permutation(len(states))), kern.take(mix.permutation(len(kern))))
    for f in fields(openmp.Split):
        assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f.name
    assert a.rank.tolist() == [0, 1, 2] and a.threads.tolist() == [3, 3, 3] and (a.regions > 0).all()


@pytest.mark.parametrize("name", ["fork_join", "slow_thread", "serial"])
def test_split_does_not_depend_on_the_order_of_the_records(name, request):
    """Records thread by thread (as a reader gives them) and in reverse (sorted by thread first): the same."""
    trace = request.getfixturevalue(name)
    w = select(trace)
    states, kern = records(trace, Kind.STATE, (RANK, THREAD, STATE), w), kernel_records(trace, w)
    a = openmp.split(states, kern)
    b = openmp.split(states.take(np.arange(len(states))[::-1]), kern.take(np.arange(len(kern))[::-1]))
    for f in fields(a):
        assert getattr(a, f.name).tolist() == getattr(b, f.name).tolist(), f.name
