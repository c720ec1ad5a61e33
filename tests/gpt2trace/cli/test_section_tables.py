"""The terminal tables of the declared sections (gpt2trace/cli/section_tables.py), drawn from their column specs:
the resident-memory table from a hand-built trace (gpt2trace/testing/synthetic_memory.py), and every unit from a
toy section."""
from rich.console import Console

from analysis.analyze import analyze
from analysis.sections import COUNT, MIB, MS, NUMBER, REPORT, SHARE, TEXT, Column, Section, Table
from gpt2trace.cli import section_tables
from gpt2trace.cli.section_tables import render_section, render_sections
from gpt2trace.testing.synthetic_memory import MB, memory_trace


def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.startswith("│")]


def test_peak_per_rank_in_mib_with_its_phase():
    out = Console(width=80, record=True)
    render_section(out, analyze(memory_trace(), steps="0:2"), "memory", top=10)
    text = out.export_text()
    assert text.startswith("Resident memory per rank (sampled at phase ends)")
    # 320 MB = 305.2 MiB after step 1's forward (micro-batch 0), lowest 100 MB = 95.4 MiB; rank 1: 400 MB = 381.5
    assert 320 * MB / 2**20 == 305.17578125 and 400 * MB / 2**20 == 381.4697265625
    assert [r[1:-1] for r in _rows(text) if r[1] in ("0", "1")] == [
        ["0", "│", "305.2", "│", "forward", "│", "1", "│", "0", "│", "95.4"],
        ["1", "│", "381.5", "│", "optimizer", "│", "1", "│", "0", "│", "95.4"]]
    assert max(len(line) for line in text.splitlines()) <= 80


def test_a_section_not_computed_or_not_asked_for_has_no_table():
    out = Console(width=80, record=True)
    render_section(out, {"memory": None}, "memory", top=10)
    render_section(out, {}, "memory", top=10)
    assert out.export_text() == ""


TOY = Section("toy", "toy", lambda inputs, parts: None, tables=(
    Table("Toy per rank", (Column("rank", "rank", TEXT, name=True), Column("n", "records", COUNT),
                           Column("t_s", "time ms", MS), Column("f", "share", SHARE), Column("b", "MiB", MIB),
                           Column("x", "ratio", NUMBER, missing="none"),
                           Column("names", "names", TEXT, name=True),
                           Column("note", "note", TEXT, only=REPORT)), rows="per_rank"),))


def test_every_unit_reads_as_its_header_says_and_top_limits_the_rows(monkeypatch):
    monkeypatch.setattr(section_tables, "SECTIONS", (TOY,))
    res = {"toy": {"per_rank": [
        # 12345.6 rounds to 12,346; 0.0123 s = 12.3 ms; 0.25 = 25.0%; 3 MiB; 2/3 in 4 digits; a list joined
        {"rank": 0, "n": 12345.6, "t_s": 0.0123, "f": 0.25, "b": 3 * 2**20, "x": 2 / 3, "names": ["a", "b"],
         "note": "only in the report"},
        {"rank": 1, "n": 7, "t_s": 12.5, "f": 1.0, "b": 0, "x": None, "names": [], "note": None},
        {"rank": 2, "n": 1, "t_s": 0.0, "f": 0.0, "b": 0, "x": 1.0, "names": ["c"], "note": None}]}}
    out = Console(width=100, record=True)
    render_sections(out, res, top=2)
    text = out.export_text()
    assert "note" not in text                   # a report-only column
    assert [[c for c in r if c != "│"] for r in _rows(text)] == [
        ["0", "12,346", "12.3", "25.0%", "3.0", "0.6667", "a,", "b"],
        ["1", "7", "12,500", "100.0%", "0.0", "none"]]      # 12.5 s: whole ms with separators; rank 2: past --top
    out = Console(width=100, record=True)
    render_sections(out, res, top=2, placed=("toy",))
    assert out.export_text() == ""
