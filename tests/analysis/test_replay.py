from pathlib import Path

import numpy as np
import pytest

from analysis import mpi, replay
from analysis.replay_kernels import replay_calls
from analysis.window import select
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn


def _replay(comm_records, end_s, ranks=2):
    # every rank has one Running state over [0, end_s] so the window is [0, end_s]
    recs = [syn.state(r, 0, 0, end_s, State.RUNNING) for r in range(ranks)] + comm_records
    trace = Trace.from_table(syn.from_records(recs))
    w = select(trace)
    return replay.replay(mpi.calls(trace, w), np.arange(ranks), w.t0_ns, w.t1_ns)


def _rounds(peers):
    """Two Sendrecv rounds on 3 ranks, rank r to peers[r]: rank 0 computes 3 s before round 1 and rank 1 3 s before
    round 2, the others 1 s; round 1 ends at 3.2, round 2 at 6.4, then 1 s more (T = 7.4)."""
    enter = ((3, 1, 1), (4.2, 6.2, 4.2))
    return [syn.comm(r, enter[j][r], (3.2, 6.4)[j], "MPI_Sendrecv", peer=peers[r]) for j in range(2)
            for r in range(3)]


CASES = [
    # Bcast from root 0: root enters at 5 and leaves at once; rank 1 enters at 2 and leaves when the root
    # enters (5); both then compute 8 - 6 = 2 s: T_ideal = 7. Busy: rank 0 5 + 2, rank 1 2 + 2.
    ("bcast", [syn.comm(0, 5, 6, "MPI_Bcast", seq=0, peer=0), syn.comm(1, 2, 6, "MPI_Bcast", seq=0, peer=0)],
     8, 2, 7, [7, 4]),
    # Send at 5 (eager: leaves at 5, then 6 - 5.1 = 0.9 s): 5.9; Recv entered at 2 ends when the send starts (5),
    # then 6 - 5.2 = 0.8 s: 5.8. T_ideal = 5.9.
    ("send-recv", [syn.comm(0, 5, 5.1, "MPI_Send", peer=1), syn.comm(1, 2, 5.2, "MPI_Recv", peer=0)], 6, 2, 5.9,
     [5.9, 2.8]),
    # No MPI on one rank: it keeps its whole 3 s as one burst.
    ("one-rank", [syn.comm(0, 1, 2, "MPI_Barrier", seq=0)], 3, 2, 3, [2, 3]),
    # Sendrecv ring of 3, r -> r + 1 (r receives from r - 1). Bursts: round 1 3, 1, 1; round 2 1, 3, 1; then 1.
    # Round 1: rank 1 waits for rank 0 (3) -> 3, rank 2 for rank 1 (1) -> 1, rank 0 for rank 2 (1) -> 3.
    # Round 2 entries 4, 6, 2: rank 1 waits for rank 0 (4) -> 6, rank 2 for rank 1 (6) -> 6, rank 0 for rank 2
    # (2) -> 4. Ends 5, 7, 7: T_ideal = 7, though no rank computes more than 5 s (serialization). A replay in
    # which no receive waits would give 5.
    ("sendrecv-ring", _rounds([1, 2, 0]), 7.4, 3, 7, [5, 5, 3]),
    # Non-periodic shift 0 -> 1 -> 2 (rank 2 sends to no one: its peer is its source, 1), the same bursts: rank 0
    # receives nothing, rank 1 waits for rank 0 and rank 2 for rank 1 as in the ring: T_ideal = 7. (Taking the
    # peer as the source as well would pair ranks 1 and 2 both ways and give 5.)
    ("sendrecv-shift", _rounds([1, 2, 1]), 7.4, 3, 7, [5, 5, 3]),
    # Mixed nonblocking calls, T = 6:
    #   rank 0: Irecv(1) [1,1.1], Isend(1) [1.1,1.2], compute 2 s, Iallreduce [3.2,3.3], Waitall [3.3,5], 1 s
    #   rank 1: compute 3 s, Irecv(0) [3,3.1], Isend(0) [3.1,3.2], 0.5 s, Iallreduce [3.7,3.8], Waitall [3.8,5], 1 s
    # Replay (postings take no time), rank 0: Irecv and Isend at 1, Iallreduce at 1 + 2 = 3, Waitall at 3.
    # Rank 1: Irecv and Isend at 3, Iallreduce at 3.5, Waitall at 3.5: its Irecv's send (rank 0's Isend) entered
    # at 1, the collective's last posting is 3.5, so it leaves at 3.5. Rank 0's Waitall needs rank 1's Isend
    # (3) and the collective (3.5): leaves at 3.5. Both compute 1 s more: T_ideal = 4.5.
    # Busy (bursts): rank 0 1 + 2 + 1 = 4, rank 1 3 + 0.5 + 1 = 4.5.
    ("mixed-nonblocking",
     [syn.comm(0, 1, 1.1, "MPI_Irecv", peer=1), syn.comm(0, 1.1, 1.2, "MPI_Isend", peer=1),
      syn.comm(0, 3.2, 3.3, "MPI_Iallreduce", seq=0), syn.comm(0, 3.3, 5, "MPI_Waitall"),
      syn.comm(1, 3, 3.1, "MPI_Irecv", peer=0), syn.comm(1, 3.1, 3.2, "MPI_Isend", peer=0),
      syn.comm(1, 3.7, 3.8, "MPI_Iallreduce", seq=0), syn.comm(1, 3.8, 5, "MPI_Waitall")],
     6, 2, 4.5, [4, 4.5]),
]


@pytest.mark.parametrize("recs,end_s,ranks,ideal,busy", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ideal_runtime(recs, end_s, ranks, ideal, busy):
    out = _replay(recs, end_s, ranks)
    assert out.ideal_ns / 1e9 == pytest.approx(ideal)
    assert (out.busy_ns / 1e9).tolist() == pytest.approx(busy)
    assert out.forced == {}                          # every blocked call found its partner


def test_crossed_collectives_are_released_and_counted():
    # Collectives in crossed order on the two ranks (a trace no real run makes): the replay releases rank 0's
    # first allreduce at its enter (1), rank 0 enters seq 1 at 2, which ends at 2 for both; rank 1 enters
    # seq 0 at 3, which ends at 3; tails of 1 s: rank 0 ends at 3, rank 1 at 4.
    out = _replay([syn.comm(0, 1, 2, "MPI_Allreduce", seq=0), syn.comm(0, 3, 4, "MPI_Allreduce", seq=1),
                   syn.comm(1, 1, 2, "MPI_Allreduce", seq=1), syn.comm(1, 3, 4, "MPI_Allreduce", seq=0)], 5)
    assert out.ideal_ns / 1e9 == pytest.approx(4)
    assert out.forced == {"MPI_Allreduce": 1}


def test_a_replay_longer_than_the_run_is_not_clipped():
    # Rank 1's receive ends at 1.1, before its send starts at 5 (clocks out of sync): the replay holds the
    # receive until 5, and rank 1's 4.9 s after it end at 9.9, past the 6 s run. Returned as is.
    out = _replay([syn.comm(0, 5, 5.1, "MPI_Send", peer=1), syn.comm(1, 1, 1.1, "MPI_Recv", peer=0)], 6)
    assert out.ideal_ns / 1e9 == pytest.approx(9.9)


def test_warm_loads_the_code_the_replay_of_a_real_trace_runs():
    # warm() is only worth its time if it loads the very specialization a replay calls: one of the same argument
    # types (a dtype or layout that differs compiles or loads a second one when the real replay comes)
    replay.warm()
    trace = load(Path(__file__).resolve().parents[2] / "sample_traces" / "small_8ranks_3d.parquet")
    w = select(trace)
    calls = mpi.calls(trace, w)
    assert len(calls) > 100
    replay.replay(calls, np.unique(calls["rank"].to_numpy()), w.t0_ns, w.t1_ns)
    assert len(replay_calls.signatures) == 1


def test_a_call_outside_the_vocabulary_replays_as_a_local_call():
    # A foreign trace's MPI call without a record (gpt2trace/format/mpi_calls.py) is local: it waits for no rank
    # and, like every MPI call of the replay, takes no time itself; no network costs it as some collective.
    # Rank 0 calls it over [1, 2] then computes 2 s, rank 1 over [1, 3] then 1 s (seq 0 on both, as if an
    # instance): they leave at 1, end at 3 and 2: T = 3 on the ideal network and on 1 GB/s, 0.1 s (a Barrier in
    # its place would cost ceil(log2 2) x 0.1 s more there: 3.1).
    recs = [syn.state(r, 0, 0, 4, State.RUNNING) for r in range(2)] + [
        syn.comm(0, 1, 2, "MPI_Neighbor_allgather", seq=0, nbytes=10**9),
        syn.comm(1, 1, 3, "MPI_Neighbor_allgather", seq=0, nbytes=10**9)]
    trace = Trace.from_table(syn.from_records(recs))
    w = select(trace)
    prog = replay.program(mpi.calls(trace, w), np.arange(2), w.t0_ns, w.t1_ns)
    assert (prog.inst < 0).all()
    for network in (replay.IDEAL, replay.Network(bandwidth_bps=1e9, latency_ns=1e8)):
        assert replay.play(prog, network).end_ns / 1e9 == pytest.approx(3)
