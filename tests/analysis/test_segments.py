import numpy as np
import pytest

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


def test_a_function_nested_in_itself_counts_once_per_thread():
    # A profiled function that calls itself (Score-P, Extrae user functions) or an op inside an op of the same name
    # (Kineto): thread 0 runs f [0,10] and in it f [2,8]; thread 1 runs f [1,3] and f [2,5], which overlap. The
    # segment is [0,10]; thread 0 is in f 10 s (not 16), thread 1 4 s (its union [1,5]): 14 thread-seconds,
    # a mean occupancy of 1.4 on two threads (2.1 when each record counted).
    from analysis.analyze import analyze
    from gpt2trace.format.reader import Trace
    from gpt2trace.format.schema import State
    from gpt2trace.testing import synthetic as syn
    recs = [syn.state(0, th, 0, 10, State.RUNNING) for th in (0, 1)]
    recs += [syn.kernel(0, 0, 0, 10, "f", 0, 0), syn.kernel(0, 0, 2, 8, "f", 0, 0), syn.kernel(0, 1, 1, 3, "f", 0, 0),
             syn.kernel(0, 1, 2, 5, "f", 0, 0), syn.phase(0, 0, 10, "forward", 0)]
    res = analyze(Trace.from_table(syn.from_records(recs)))
    (row,) = res["occupancy"]["per_kernel"]
    assert row["wall_s"] == pytest.approx(10.0) and row["mean_occupancy"] == pytest.approx(1.4)
