"""The report's resident-memory chart draws analysis.memory's timeline: a line per rank, in MiB."""
from analysis.analyze import analyze
from gpt2trace.report import colors
from gpt2trace.report.build import build
from gpt2trace.report.memory_figure import memory_per_rank
from gpt2trace.testing.synthetic_memory import MB, RSS, memory_trace


def test_a_line_per_rank_in_mib():
    fig = memory_per_rank(analyze(memory_trace(), steps="0:2"))
    lines = fig["data"]
    assert [t["name"] for t in lines] == ["rank 0", "rank 1"]
    assert [t["line"]["color"] for t in lines] == [colors.rank_color(0), colors.rank_color(1)]
    # rank 0's 8 samples at 1, 3, 5, 6, 7, 9, 11, 12 s, in MiB
    assert lines[0]["x"] == [1.0, 3.0, 5.0, 6.0, 7.0, 9.0, 11.0, 12.0]
    assert lines[0]["y"] == [v * MB / 2**20 for step in RSS[0] for v in step]


def test_the_page_holds_the_chart_or_says_there_is_no_data():
    bare = memory_trace(samples=False)
    assert memory_per_rank(analyze(bare)) is None
    page = build(memory_trace(), steps="0:2").html
    assert 'id="fig-memory"' in page and "Resident memory per rank" in page
    page = build(bare).html
    assert 'id="fig-memory"' not in page and "Resident memory per rank" in page     # its heading, and no data
