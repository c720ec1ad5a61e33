import numpy as np
import pytest

from analysis import occupancy as occ
from analysis import segments
from analysis.occupancy import occupancy
from analysis.records import records
from analysis.window import select
from gpt2trace.format.schema import RANK, STATE, THREAD, Kind


def _occ(trace, bins=10):
    window = select(trace)
    return occupancy(trace, window, segments.segments(segments.kernel_records(trace, window)), bins=bins)


def test_slow_thread_team(slow_thread):
    out = _occ(slow_thread)
    # Threads Running: [0,1) 1 | [1,2) 3 | [2,3) 2 | [3,5) 1 | [5,8) 1 (main alone) | [8,10) 3.
    # Level 1: 1 + 2 + 3 = 6 s, level 2: 1 s, level 3: 1 + 2 = 3 s; mean (6 + 2 + 9) / 10 = 1.7.
    assert out["levels"]["seconds"].tolist() == pytest.approx([0, 6, 1, 3])
    assert out["per_rank"]["mean_occupancy"].tolist() == pytest.approx([1.7])
    # Only the main thread Running: [0,1) (workers in Fork/Join) and [5,8): 4 s.
    assert out["per_rank"]["serial_s"].tolist() == pytest.approx([4.0])
    assert out["serial_sections"].to_numpy().ravel().tolist() == pytest.approx([0, 5.0, 3.0, 0, 0.0, 1.0])
    # matmul_forward L0: wall [0,5] = 5 s, blocks 2 + 2 + 4 = 8 s -> 1.6 threads; Synchronization in it
    # 3 (thread 0) + 2 (thread 1) = 5 s; Fork/Join 1 + 1 = 2 s. gelu_forward: 2 s wall, 6 s of blocks -> 3.
    k = out["per_kernel"].set_index("kernel")
    assert k.loc["matmul_forward", ["wall_s", "mean_occupancy", "sync_s", "fork_s"]].tolist() == pytest.approx(
        [5, 1.6, 5, 2])
    assert k.loc["gelu_forward", ["wall_s", "mean_occupancy", "sync_s"]].tolist() == pytest.approx([2, 3, 0])
    # 10 bins of 1 s: the level in each second.
    assert out["timeline"]["ranks"][0] == pytest.approx([1, 3, 2, 1, 1, 1, 1, 1, 3, 3])


def test_serial_section(serial):
    out = _occ(serial, bins=5)
    # Both threads [0,4), the main thread alone [4,10): level 2 4 s, level 1 6 s; mean (8 + 6) / 10 = 1.4.
    assert out["levels"]["seconds"].tolist() == pytest.approx([0, 6, 4])
    assert out["per_rank"][["mean_occupancy", "serial_s", "serial_fraction"]].to_numpy().ravel().tolist() == \
        pytest.approx([1.4, 6, 0.6])
    assert out["serial_sections"].to_numpy().ravel().tolist() == pytest.approx([0, 4.0, 6.0])
    # bins of 2 s: [0,2) 2, [2,4) 2, then 1, 1, 1
    assert out["timeline"]["ranks"][0] == pytest.approx([2, 2, 1, 1, 1])


def test_single_thread_ranks_have_no_serial_time(late_rank):
    out = _occ(late_rank)
    # One thread per rank: Running 6 s and 9 s of 10.
    got = out["per_rank"][["mean_occupancy", "serial_s"]].to_numpy().ravel().tolist()
    assert got == pytest.approx([0.6, 0, 0.9, 0])


@pytest.mark.parametrize("name", ["fork_join", "slow_thread", "late_rank"])
def test_part_does_not_depend_on_the_order_of_the_records(name, request):
    """Rank by rank (as a reader gives them) or in reverse (sorted by rank first): the same tables."""
    trace = request.getfixturevalue(name)
    window = select(trace)
    segs = segments.segments(segments.kernel_records(trace, window))
    states = records(trace, Kind.STATE, (RANK, THREAD, STATE), window)
    a, b = occ.part(states, window, segs), occ.part(states.take(np.arange(len(states))[::-1]), window, segs)
    for key in ("per_rank", "levels", "waits", "serial_sections"):
        assert a[key].equals(b[key]), key
    assert a["timeline"] == b["timeline"]
