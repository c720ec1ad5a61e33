import pytest

from analysis import memory
from analysis.analyze import analyze
from analysis.window import select
from gpt2trace.testing.synthetic_memory import MB, RSS, memory_trace

# The trace: gpt2trace/testing/synthetic_memory.py (phases and the MB sampled at their ends, per rank and step).


def test_peak_per_rank_and_which_phase_reaches_it():
    trace = memory_trace()
    out = memory.memory(trace, select(trace, "0:2"))
    assert out["peak_bytes"] == 400 * MB
    per_rank = out["per_rank"]
    # rank 0 peaks at 320 MB at the end of step 1's forward (t = 9 s), its lowest 100 MB; rank 1 at 400 MB at the
    # end of step 1's optimizer (t = 12 s: the window's end, which closes that phase), lowest 100 MB; 8 samples
    # each (4 phases x 2 steps)
    assert per_rank[["rank", "peak_bytes", "phase", "step", "microstep", "t_s", "min_bytes", "samples"]
                    ].values.tolist() == [[0, 320 * MB, "forward", 1, 0, 9.0, 100 * MB, 8],
                                          [1, 400 * MB, "optimizer", 1, 0, 12.0, 100 * MB, 8]]
    per_phase = out["per_phase"].set_index(["rank", "phase"])
    # rank 0's forward ends at 300 and 320 MB: peak 320, mean 310; rank 1's optimizer 390 and 400: mean 395
    assert per_phase.loc[(0, "forward"), ["peak_bytes", "mean_bytes", "samples"]].tolist() == [320 * MB, 310 * MB, 2]
    assert per_phase.loc[(1, "optimizer"), ["peak_bytes", "mean_bytes"]].tolist() == [400 * MB, 395 * MB]
    assert out["per_phase"].groupby("rank").head(1)["phase"].tolist() == ["forward", "optimizer"]   # highest first


def test_the_window_limits_the_samples():
    trace = memory_trace()
    # the default window leaves out step 0 (warm-up): rank 0's step-1 samples are 150, 320, 210, 260 MB
    out = memory.memory(trace, select(trace))
    assert out["per_rank"][["rank", "min_bytes", "samples"]].values.tolist() == [[0, 150 * MB, 4], [1, 100 * MB, 4]]
    # step 0 alone: rank 1 reaches 390 MB after its optimizer at 6 s, the end of step 0's window
    out = memory.memory(trace, select(trace, "0"))
    assert out["per_rank"][["rank", "peak_bytes", "t_s"]].values.tolist() == [[0, 300 * MB, 3.0],
                                                                            [1, 390 * MB, 6.0]]


def test_the_timeline_keeps_each_slices_highest_sample():
    trace = memory_trace()
    window = select(trace, "0:2")                          # 12 s
    full = memory.memory(trace, window)["timeline"]
    assert [r["rank"] for r in full] == [0, 1]
    assert full[0]["t_s"] == [1.0, 3.0, 5.0, 6.0, 7.0, 9.0, 11.0, 12.0]
    assert full[0]["bytes"] == [v * MB for step in RSS[0] for v in step]
    # 3 slices of 4 s, [0,4), [4,8), [8,12] (the window's end in the last). Rank 0's samples: 100 (1 s), 300 (3)
    # | 200 (5), 250 (6), 150 (7) | 320 (9), 210 (11), 260 (12): the highest of each is 300 at 3, 250 at 6, 320 at 9
    thin = memory.memory(trace, window, points=3)["timeline"][0]
    assert list(zip(thin["t_s"], thin["bytes"])) == [(3.0, 300 * MB), (6.0, 250 * MB), (9.0, 320 * MB)]


def test_no_samples_no_memory(serial):
    assert memory.memory(serial, select(serial)) is None
    assert analyze(serial)["memory"] is None


def test_analyze_reports_memory():
    result = analyze(memory_trace(), steps="0:2")
    assert result["memory"]["peak_bytes"] == pytest.approx(400 * MB)
    assert [(r["rank"], r["phase"], r["step"]) for r in result["memory"]["per_rank"]] == [(0, "forward", 1),
                                                                                          (1, "optimizer", 1)]
