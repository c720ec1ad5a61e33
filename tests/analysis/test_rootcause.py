import pytest

from analysis import mpi, rootcause, segments, waits
from analysis.window import select


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


def test_no_waits_no_causes(serial):
    assert _causes(serial).empty
