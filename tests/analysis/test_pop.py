import numpy as np
import pytest
import random_traces
from hypothesis import given, settings

from analysis import pop
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import KIND, Kind, State
from gpt2trace.testing import synthetic
from gpt2trace.testing import synthetic as syn

# (fixture, expected) with every number worked out by hand from the traces in conftest.py (T = runtime).
# mpi and threads: (PE, LB, CommE); serialization/transfer None where there is no MPI to replay, and only at the
# MPI level on traces with threads.
CASES = [
    # late_rank: T = 10; U = (6, 9): LB = 7.5 / 9, CommE = 9 / 10, PE = 7.5 / 10. One thread per rank: the rank's
    # computing time is its useful time, the MPI level equals the whole and the thread level is exactly 1.
    # Replay: bursts 6 and 9 (max_ideal 9); rank 0 enters at 6, rank 1 at 9, the allreduce ends at 9, nothing
    # after: T_ideal = 9, SerE = 9 / 9 = 1, TE = CommE / SerE = 0.9.
    ("late_rank", dict(runtime_s=10, parallel_efficiency=0.75, load_balance=7.5 / 9, communication_efficiency=0.9,
                       serialization_efficiency=1.0, transfer_efficiency=0.9, ideal_runtime_s=9,
                       useful_ideal_max_s=9, useful_total_s=15, mpi=(0.75, 7.5 / 9, 0.9, 1.0, 0.9),
                       threads=(1.0, 1.0, 1.0))),
    # slow_thread: T = 10; U = (7, 4, 6): LB = (17/3) / 7, CommE = 7 / 10, PE = 17 / 30. Regions [0,5] and
    # [8,10] and the main thread's Python [5,8]: the rank computes all 10 s, so the MPI level is 1 and the thread
    # level is everything. No MPI: no replay.
    ("slow_thread", dict(runtime_s=10, parallel_efficiency=17 / 30, load_balance=17 / 21,
                         communication_efficiency=0.7, serialization_efficiency=None, transfer_efficiency=None,
                         ideal_runtime_s=None, useful_ideal_max_s=None, mpi=(1.0, 1.0, 1.0, None, None),
                         threads=(17 / 30, 17 / 21, 0.7))),
    # serial: T = 10; U = (10, 4): LB = 7 / 10, CommE = 1, PE = 0.7; the region [0,4] and Python [4,10] cover T.
    ("serial", dict(runtime_s=10, parallel_efficiency=0.7, load_balance=0.7, communication_efficiency=1.0,
                    serialization_efficiency=None, transfer_efficiency=None, mpi=(1.0, 1.0, 1.0, None, None),
                    threads=(0.7, 0.7, 1.0))),
    # nonblocking: T = 7; U = (1 + 2.5 + 1, 4.5 + 1) = (4.5, 5.5): LB = 5 / 5.5, CommE = 5.5 / 7.
    # Replay: rank 0 posts at 1, waits from 1 + 2.5 = 3.5; rank 1 posts at 4.5 and waits at once; the collective
    # completes at 4.5 (last post); both leave at 4.5 and run 1 s more: T_ideal = 5.5. Bursts: 1 + 2.5 + 1 = 4.5
    # and 4.5 + 0 + 1 = 5.5: max_ideal 5.5, SerE = 1, TE = (5.5 / 7) / 1.
    ("nonblocking", dict(runtime_s=7, parallel_efficiency=5 / 7, load_balance=5 / 5.5,
                         communication_efficiency=5.5 / 7, serialization_efficiency=1.0,
                         transfer_efficiency=5.5 / 7, ideal_runtime_s=5.5, useful_ideal_max_s=5.5,
                         mpi=(5 / 7, 5 / 5.5, 5.5 / 7, 1.0, 5.5 / 7), threads=(1.0, 1.0, 1.0))),
    # io_rank: T = 8; U = (3 + 2, 4 + 2) = (5, 6): LB = 5.5 / 6, CommE = 6 / 8, PE = 5.5 / 8. Rank 0's 2 s of
    # I/O are neither MPI nor threads: its computing time is its useful time (5), so the thread level is exactly 1
    # (BSC's time outside MPI, 7 and 6, would give a thread-level LB of (5.5/6) / (6.5/7) = 0.987).
    # Replay: bursts 5 + 2 = 7 and 4 + 2 = 6 (I/O is in a burst: max_ideal 7); rank 0 enters at 5, rank 1 at 4,
    # both leave at 5 and compute 2 s: T_ideal = 7. SerE = 7 / 7 = 1, TE = CommE / SerE = 0.75 (the I/O lands in
    # transfer, as in BSC's definition; SerE = max U / T_ideal would give 6/7, TE = T_ideal / T 7/8).
    ("io_rank", dict(runtime_s=8, parallel_efficiency=5.5 / 8, load_balance=5.5 / 6, communication_efficiency=0.75,
                     serialization_efficiency=1.0, transfer_efficiency=0.75, ideal_runtime_s=7,
                     useful_ideal_max_s=7, outside_mpi_max_s=6, mpi=(5.5 / 8, 5.5 / 6, 0.75, 1.0, 0.75),
                     threads=(1.0, 1.0, 1.0))),
    # fork_join (1 rank x 4 threads, T = 12): U = (10, 6, 4.5, 2.5), sum 23: PE = 23 / 48, LB = 5.75 / 10,
    # CommE = 10 / 12. Computing time: regions 4 + 3 and Python 2 + 1 + 1 = 11 (the I/O second is not):
    # MPI level (1 rank) LB 1, CommE = PE = 11 / 12; thread level PE (23/48) / (11/12) = 23 / 44.
    ("fork_join", dict(runtime_s=12, parallel_efficiency=23 / 48, load_balance=0.575, communication_efficiency=10 / 12,
                       serialization_efficiency=None, transfer_efficiency=None, useful_total_s=23,
                       outside_mpi_max_s=11, mpi=(11 / 12, 1.0, 11 / 12, None, None),
                       threads=(23 / 44, 0.575, (10 / 12) / (11 / 12)))),
]
LEVEL_KEYS = ("parallel_efficiency", "load_balance", "communication_efficiency")
MPI_KEYS = LEVEL_KEYS + ("serialization_efficiency", "transfer_efficiency")


@pytest.mark.parametrize("fixture,expected", CASES, ids=[c[0] for c in CASES])
def test_pop_hand_checked(fixture, expected, request):
    trace = request.getfixturevalue(fixture)
    out = pop.pop(trace, select(trace))
    for key, value in expected.items():
        if key in ("mpi", "threads"):
            got = [out[key][k] for k in (MPI_KEYS if key == "mpi" else LEVEL_KEYS)]
            assert [g is None for g in got] == [v is None for v in value], key
            assert [g for g in got if g is not None] == pytest.approx([v for v in value if v is not None]), key
        elif value is None:
            assert out[key] is None, key
        else:
            assert out[key] == pytest.approx(value), key


@pytest.mark.parametrize("fixture", ["late_rank", "nonblocking", "io_rank", "bucketed"])
def test_pure_mpi_thread_level_is_exactly_one(fixture, request):
    trace = request.getfixturevalue(fixture)
    out = pop.pop(trace, select(trace))
    assert [out["threads"][k] for k in LEVEL_KEYS] == [1.0, 1.0, 1.0]
    assert out["openmp"] is None


@pytest.mark.parametrize("state", [State.IO, State.OTHERS, State.NOT_CREATED, State.IDLE])
def test_time_neither_mpi_nor_useful_keeps_the_thread_level_at_one(state):
    # 2 ranks x 1 thread, T = 8: rank 0 is in `state` [0,2], Running [2,5], in MPI_Allreduce [5,6], Running [6,8];
    # rank 1 Running [0,4], MPI_Allreduce [4,6], Running [6,8]. U = (5, 6): whatever the state, it is not
    # computation at the MPI level either, so the MPI level equals the whole and the thread level is 1.
    recs = [syn.state(0, 0, 0, 2, state), syn.state(0, 0, 2, 5, State.RUNNING),
            syn.state(0, 0, 5, 6, State.GROUP_COMMUNICATION), syn.state(0, 0, 6, 8, State.RUNNING),
            syn.comm(0, 5, 6, "MPI_Allreduce", seq=0), syn.state(1, 0, 0, 4, State.RUNNING),
            syn.state(1, 0, 4, 6, State.GROUP_COMMUNICATION), syn.state(1, 0, 6, 8, State.RUNNING),
            syn.comm(1, 4, 6, "MPI_Allreduce", seq=0)]
    trace = Trace.from_table(syn.from_records(recs))
    out = pop.pop(trace, select(trace))
    assert [out["mpi"][k] for k in LEVEL_KEYS] == pytest.approx([5.5 / 8, 5.5 / 6, 0.75])
    assert [out["threads"][k] for k in LEVEL_KEYS] == [1.0, 1.0, 1.0]


def test_a_replay_longer_than_the_run_is_a_warning_not_a_clip():
    # Rank 1's receive ends (1.1) before its send starts (5): the replay takes 9.9 s of a 6 s run (see
    # test_replay). T_ideal stays 9.9; bursts 5 + 0.9 = 5.9 on both: SerE = 5.9 / 9.9; U = (5.9, 5.9) (Running
    # outside the calls), CommE = 5.9 / 6, so TE = CommE / SerE = 9.9 / 6 > 1, reported as is.
    recs = [syn.state(0, 0, 0, 5, State.RUNNING), syn.state(0, 0, 5, 5.1, State.BLOCKING_SEND),
            syn.state(0, 0, 5.1, 6, State.RUNNING), syn.comm(0, 5, 5.1, "MPI_Send", peer=1),
            syn.state(1, 0, 0, 1, State.RUNNING), syn.state(1, 0, 1, 1.1, State.WAITING_A_MESSAGE),
            syn.state(1, 0, 1.1, 6, State.RUNNING), syn.comm(1, 1, 1.1, "MPI_Recv", peer=0)]
    trace = Trace.from_table(syn.from_records(recs))
    out = pop.pop(trace, select(trace))
    assert out["ideal_runtime_s"] == pytest.approx(9.9)
    assert out["serialization_efficiency"] == pytest.approx(5.9 / 9.9)
    assert out["transfer_efficiency"] == pytest.approx(9.9 / 6)
    (warning,) = pop.warnings(out)
    assert "takes 9.9 s, longer than the measured 6 s" in warning and "not clipped" in warning


def test_efficiencies_with_no_useful_time_are_none():
    out = pop.efficiencies(np.zeros(2), np.ones(2), 10.0, 10.0, 5.0)
    assert out["parallel_efficiency"] is None and out["mpi"]["load_balance"] is None


configs = random_traces.configs(max_threads=3, max_steps=4)


@settings(max_examples=40, deadline=None)
@given(configs)
def test_pop_properties_on_random_traces(cfg):
    table = synthetic.generate(cfg)
    trace = Trace.from_table(table)
    out = pop.pop(trace, select(trace))
    assert out["parallel_efficiency"] == pytest.approx(out["load_balance"] * out["communication_efficiency"])
    m = out["mpi"]
    # the generator leaves out zero-length records: with no noise and no transfer time an allreduce takes 0 ns
    has_calls = Kind.COMM in table.column(KIND).to_pylist()
    if has_calls and cfg.ranks > 1:
        assert m["communication_efficiency"] == pytest.approx(m["serialization_efficiency"] *
                                                              m["transfer_efficiency"])
        assert 0 < m["serialization_efficiency"] <= 1 + 1e-12 and 0 < m["transfer_efficiency"] <= 1 + 1e-12
        assert out["ideal_runtime_s"] <= out["runtime_s"] + 1e-12 and pop.warnings(out) == []
    for value in [out[k] for k in LEVEL_KEYS] + [m[k] for k in LEVEL_KEYS] + \
            [out["threads"]["parallel_efficiency"], out["threads"]["communication_efficiency"]]:
        assert 0 < value <= 1 + 1e-12
    # The thread-level load balance is a residual (LB / LB_mpi): positive, and here at most 1 as well since
    # in these traces the rank that computes longest is also the one with the most useful time.
    assert out["threads"]["load_balance"] > 0
    assert m["parallel_efficiency"] * out["threads"]["parallel_efficiency"] == pytest.approx(
        out["parallel_efficiency"])
    if cfg.threads == 1:
        assert [out["threads"][k] for k in LEVEL_KEYS] == [1.0, 1.0, 1.0]
