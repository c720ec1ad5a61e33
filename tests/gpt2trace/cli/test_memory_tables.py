"""The resident-memory table `gpt2trace analyze` prints, from a hand-built trace
(gpt2trace/testing/synthetic_memory.py)."""
from rich.console import Console

from analysis.analyze import analyze
from gpt2trace.cli.memory_tables import render_memory
from gpt2trace.testing.synthetic_memory import MB, memory_trace


def test_peak_per_rank_in_mib_with_its_phase():
    out = Console(width=80, record=True)
    render_memory(out, analyze(memory_trace(), steps="0:2")["memory"], top=10)
    text = out.export_text()
    # 320 MB = 305.2 MiB after step 1's forward (micro-batch 0), lowest 100 MB = 95.4 MiB; rank 1: 400 MB = 381.5
    assert 320 * MB / 2**20 == 305.17578125 and 400 * MB / 2**20 == 381.4697265625
    rows = [line.split() for line in text.splitlines() if line.startswith("│")]
    assert [r[1:-1] for r in rows if r[1] in ("0", "1")] == [
        ["0", "│", "305.2", "│", "forward", "│", "1", "│", "0", "│", "95.4"],
        ["1", "│", "381.5", "│", "optimizer", "│", "1", "│", "0", "│", "95.4"]]
    assert max(len(line) for line in text.splitlines()) <= 80


def test_no_samples_no_table():
    out = Console(width=80, record=True)
    render_memory(out, None, top=10)
    assert out.export_text() == ""
