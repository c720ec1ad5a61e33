"""The declared sections (analysis/sections.py, analysis/registry.py): how a column's unit reads, the registry,
and `analyze(trace, sections=[...])` computing only the sections asked for, the same on one process and group by
group."""
import json
from pathlib import Path

import pytest
from test_rank_groups import differences

from analysis import rank_groups, registry
from analysis.analyze import analyze, analyze_groups
from analysis.sections import COUNT, MIB, MS, NUMBER, SHARE, TEXT, Column, Table, text
from gpt2trace.format.reader import load

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SAMPLE = SAMPLES / "small_8ranks_3d.parquet"


@pytest.mark.parametrize("value,unit,shown", [
    (12345.6, COUNT, "12,346"), (7, COUNT, "7"),
    (2 / 3, NUMBER, "0.6667"), (4.0, NUMBER, "4"),
    (0.0123, MS, "12.3"), (12.5, MS, "12,500"),                 # from 10 s up: whole ms with separators
    (0.25, SHARE, "25.0%"), (3 * 2**20 + 2**19, MIB, "3.5"),
    (["tp", "dp"], TEXT, "tp, dp"), (3, TEXT, "3"),
    (None, SHARE, "n/a"),
])
def test_a_value_reads_in_its_unit(value, unit, shown):
    assert text(value, unit) == shown


def test_a_column_refuses_an_unknown_unit_or_renderer():
    with pytest.raises(ValueError, match="unit 'seconds' is not one of text, count"):
        Column("t", "time", "seconds")
    with pytest.raises(ValueError, match="only 'html'"):
        Column("t", "time", only="html")


def test_a_table_finds_its_rows_and_the_columns_of_each_renderer():
    table = Table("t", (Column("a", "a"), Column("b", "b", only="report")), rows="per_rank")
    assert table.of(None) == [] and table.of({"per_rank": None}) == [] and table.of({"per_rank": [{}]}) == [{}]
    assert [c.key for c in table.shown("terminal")] == ["a"] and [c.key for c in table.shown("report")] == ["a", "b"]
    assert Column("x", "x", value=lambda r: r["a"] + r["b"]).of({"a": 1, "b": 2}) == 3


def test_the_registry_has_one_section_per_key_and_refuses_an_unknown_one():
    assert len(set(registry.KEYS)) == len(registry.KEYS)
    assert [s.key for s in registry.chosen(["memory", "counters"])] == ["counters", "memory"]    # registry order
    with pytest.raises(ValueError, match="no analysis section 'memroy'; the sections are counters, "):
        registry.chosen(["memroy"])
    # pass 2 reads what every declared section's part reads
    for s in registry.SECTIONS:
        assert (rank_groups.PART_READS | s.reads) == rank_groups.PART_READS, s.key


@pytest.fixture(scope="module")
def trace():
    return load(SAMPLE)


@pytest.fixture(scope="module")
def whole(trace) -> dict:
    return json.loads(json.dumps(analyze(trace)))


@pytest.mark.parametrize("keys", [["memory"], ["bursts", "kernel_threads"], ["comm_dimensions", "network_links"], []])
def test_only_the_sections_asked_for_are_computed_as_in_a_whole_run(trace, whole, keys):
    res = json.loads(json.dumps(analyze(trace, sections=keys)))
    assert [k for k in registry.KEYS if k in res] == [s.key for s in registry.chosen(keys)]
    assert {k: res[k] for k in keys} == {k: whole[k] for k in keys}
    # the sections not declared yet are all there; the findings read the declared ones computed (the costliest
    # dimension is one of them)
    kept = [k for k in whole if k not in registry.KEYS and k != "findings"]
    assert {k: res[k] for k in kept} == {k: whole[k] for k in kept}


def test_group_by_group_the_parts_are_those_of_the_sections_asked_for(trace, whole, monkeypatch):
    parts = []
    part = rank_groups.part
    monkeypatch.setattr(rank_groups, "part", lambda *a, **k: parts.append(part(*a, **k)) or parts[-1])
    res = json.loads(json.dumps(analyze_groups(rank_groups.split(trace, 3), sections=["bursts", "memory"])))
    assert len(parts) == 3 and all(set(p.sections) == {"bursts"} for p in parts)     # memory has no part
    assert [k for k in registry.KEYS if k in res] == ["memory", "bursts"]
    assert differences({k: whole[k] for k in ("memory", "bursts")}, {k: res[k] for k in ("memory", "bursts")}) == []
