import pytest

from analysis import mpi, rootcause, segments, waits
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.testing import synthetic as syn


def _causes(trace):
    window = select(trace)
    calls = mpi.calls(trace, window)
    segs = segments.segments(segments.kernel_records(trace, window))
    return rootcause.root_causes(calls, waits.wait_states(calls), segs, window)


def test_late_rank_wait_charged_to_its_slow_kernel(late_rank):
    # Since the start, rank 0 (waiter) ran matmul_forward L0 4 s and gelu_forward L1 2 s; rank 1 (culprit)
    # 4 s and 5 s. Excess: 0 and 3 s, so the 3 s wait is all charged to gelu_forward layer 1 on rank 1.
    out = _causes(late_rank)
    assert out[["rank", "kernel", "layer", "waits"]].values.tolist() == [[1, "gelu_forward", 1, 1]]
    assert out["wait_s"].tolist() == pytest.approx([3.0])
    assert out["share"].tolist() == pytest.approx([1.0])
    assert rootcause.sentence(out.iloc[0].to_dict()) == \
        "3 s of waits caused by kernel gelu_forward (layer 1) on rank 1"


def test_nonblocking_wait_charged_to_the_late_posters_kernel(nonblocking):
    # Rank 0's 0.5 s wait: before its post (at 1) rank 0 ran 1 s outside kernels; before its post (at 4.5)
    # rank 1 ran 1 s outside kernels and matmul_backward L1 3.5 s. Excess: 0 outside, 3.5 s in the kernel.
    out = _causes(nonblocking)
    assert out[["rank", "kernel", "layer"]].values.tolist() == [[1, "matmul_backward", 1]]
    assert out["wait_s"].tolist() == pytest.approx([0.5])


def test_postings_do_not_restart_the_interval(bucketed):
    # Rank 0's MPI_Waitall enters at 5.5; the bucket rank 1 posts last is its third, at 7.5: a 2 s wait
    # (Wait at NxN) charged to rank 1. Both ranks last synchronized at the barrier, which ended at 1.
    #   waiter  [1, 5.5):  matmul_backward L1 2, L0 2, encoder_backward 0.2, outside kernels 0.3 (3 postings)
    #   culprit [1, 7.5):  matmul_backward L1 3, L0 3, encoder_backward 0.3, outside kernels 0.2 (2 postings)
    # Excess 1 + 1 + 0.1 + 0 = 2.1 s: L1 and L0 get 2 x 1 / 2.1 s each, encoder_backward 2 x 0.1 / 2.1 s.
    # (Comparing each side only since its previous MPI call, a posting, would set encoder_backward's 0.3 s
    # against 0.2 s and charge all 2 s to it.)
    out = _causes(bucketed)
    assert out[["rank", "kernel", "waits"]].values.tolist() == [
        [1, "matmul_backward", 1], [1, "matmul_backward", 1], [1, "encoder_backward", 1]]
    assert out["layer"].astype(object).where(out["layer"].notna(), None).tolist() == [0, 1, None]
    assert out["wait_s"].tolist() == pytest.approx([2 / 2.1, 2 / 2.1, 0.2 / 2.1])
    assert out["share"].sum() == pytest.approx(1.0)


def test_irecv_wait_charged_to_the_late_senders_kernel():
    # Step 0 is a forward phase [0,6] on both ranks;
    # rank 0: matmul_forward L0 [0,5], MPI_Send [5,5.1] to 1
    # rank 1: matmul_forward L0 [0,1], MPI_Irecv [1,1.1] from 0, gelu_forward L0 [1.1,2], MPI_Wait [2,5.2]
    # The wait (Late Sender 5 - 2 = 3 s) compares rank 1 up to its wait, [0,2): matmul 1 s, gelu 0.9 s, outside
    # 0.1 s (the posting synchronizes nothing), with rank 0 up to its send, [0,5): matmul 5 s. Excess: matmul 4 s
    # only, so all 3 s go to the sender's matmul_forward.
    recs = [syn.kernel(0, 0, 0, 5, "matmul_forward", 0, 0), syn.comm(0, 5, 5.1, "MPI_Send", peer=1),
            syn.kernel(1, 0, 0, 1, "matmul_forward", 0, 0), syn.comm(1, 1, 1.1, "MPI_Irecv", peer=0),
            syn.kernel(1, 0, 1.1, 2, "gelu_forward", 0, 0), syn.comm(1, 2, 5.2, "MPI_Wait"),
            syn.phase(0, 0, 6, "forward", 0), syn.phase(1, 0, 6, "forward", 0)]
    out = _causes(Trace.from_table(syn.from_records(recs)))
    assert out[["rank", "kernel", "layer", "waits"]].values.tolist() == [[0, "matmul_forward", 0, 1]]
    assert out["wait_s"].tolist() == pytest.approx([3.0])


def test_no_waits_no_causes(serial):
    assert _causes(serial).empty
