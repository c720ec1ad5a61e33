import numpy as np

from analysis import segments
from analysis.window import select


def test_segments_of_a_thread_team(slow_thread):
    segs = segments.segments(segments.kernel_records(slow_thread, select(slow_thread)))
    # matmul_forward blocks [0,2], [1,3], [1,5] -> one segment [0,5] with 8 s of blocks; gelu [8,10] x 3 -> 6 s.
    assert [segs.names[n] for n in segs.name] == ["matmul_forward", "gelu_forward"]
    assert (segs.start_ns / 1e9).tolist() == [0, 8]
    assert (segs.end_ns / 1e9).tolist() == [5, 10]
    assert (segs.busy_ns / 1e9).tolist() == [8, 6]
    # times 4.9 s and 8 s fall in segments 0 and 1; 6 s in none; a rank without segments in none.
    where = segs.locate(np.array([0, 0, 0, 1]), np.array([4.9e9, 6e9, 8e9, 1e9]).astype(np.int64))
    assert where.tolist() == [0, -1, 1, -1]
