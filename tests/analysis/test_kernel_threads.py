"""Each thread's time per kernel against the kernel's mean over its threads, on hand-built traces (seconds)."""
from __future__ import annotations

import pytest

from analysis.analyze import analyze
from analysis.kernel_threads import kernel_threads
from analysis.segments import kernel_records
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn


def _table(trace: Trace):
    return kernel_threads(kernel_records(trace, select(trace)))


def test_slow_thread_team(slow_thread):
    out = _table(slow_thread)
    # matmul_forward: blocks 2, 2, 4 s, mean 8/3 -> 0.75, 0.75, 1.5; gelu_forward: 2, 2, 2 -> 1. matmul first
    # (8 s against 6 s).
    assert out[["kernel", "rank", "thread"]].to_numpy().tolist() == [
        ["matmul_forward", 0, 0], ["matmul_forward", 0, 1], ["matmul_forward", 0, 2],
        ["gelu_forward", 0, 0], ["gelu_forward", 0, 1], ["gelu_forward", 0, 2]]
    assert out["seconds"].tolist() == pytest.approx([2, 2, 4, 2, 2, 2])
    assert out["ratio"].tolist() == pytest.approx([0.75, 0.75, 1.5, 1, 1, 1])


def test_the_mean_spans_ranks(late_rank):
    # One thread per rank: matmul_forward 4 and 4 s (ratio 1); gelu_forward 2 and 5 s, mean 3.5 -> 4/7, 10/7.
    out = _table(late_rank)
    assert out["kernel"].tolist() == ["matmul_forward", "matmul_forward", "gelu_forward", "gelu_forward"]
    assert out["rank"].tolist() == [0, 1, 0, 1]
    assert out["ratio"].tolist() == pytest.approx([1, 1, 4 / 7, 10 / 7])


def test_threads_that_do_not_run_a_kernel_have_no_row_and_do_not_count():
    # encoder_forward only on thread 0 (1 s); matmul_forward on threads 0 and 1 (1 s and 3 s, mean 2).
    recs = [syn.kernel(0, 0, 0, 1, "encoder_forward"), syn.kernel(0, 0, 1, 2, "matmul_forward"),
            syn.kernel(0, 1, 1, 4, "matmul_forward"),
            syn.state(0, 0, 0, 4, State.RUNNING), syn.state(0, 1, 0, 4, State.RUNNING)]
    out = _table(Trace.from_table(syn.from_records(recs)))
    assert out[["kernel", "thread"]].to_numpy().tolist() == [["matmul_forward", 0], ["matmul_forward", 1],
                                                             ["encoder_forward", 0]]
    assert out["ratio"].tolist() == pytest.approx([0.5, 1.5, 1])


def test_in_analyze(slow_thread):
    rows = analyze(slow_thread)["kernel_threads"]
    assert rows[2] == {"kernel": "matmul_forward", "rank": 0, "thread": 2, "seconds": pytest.approx(4),
                       "ratio": pytest.approx(1.5)}
    assert kernel_threads(kernel_records(slow_thread, None).take(slice(0, 0))).empty     # no kernel records
