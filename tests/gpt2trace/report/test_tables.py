"""The report's HTML text: every value from a trace is escaped; communication per parallel dimension."""
import pytest
from report_traces import KERNEL_EVIL, META_EVIL

from analysis.analyze import analyze
from gpt2trace.format.reader import Trace
from gpt2trace.report import tables
from gpt2trace.testing import grid_trace


def test_table_escapes_cells_and_aligns_numbers():
    out = tables.table([{"kernel": KERNEL_EVIL, "lost_s": 0.5}], [("kernel", "kernel", str),
                                                                  ("lost_s", "time lost", tables.seconds)])
    assert "<img" not in out and "&lt;img src=x onerror=&quot;window.__pwned=1;alert(1)&quot;&gt;" in out
    assert '<td class="num">500 ms</td>' in out


@pytest.mark.parametrize("value,text", [(1.5, "1.5 s"), (0.0025, "2.5 ms"), (3e-6, "3 µs"), (4e-9, "4 ns"),
                                        (None, "n/a")])
def test_seconds_pick_a_readable_unit(value, text):
    assert tables.seconds(value) == text


def test_metadata_is_escaped():
    run = {"model": {"n_layer": META_EVIL, "num_parameters": 10}, "train": {}, "parallel": {"ranks": META_EVIL}}
    out = tables.pairs(tables.run_config(run) + tables.machine({"cpu": KERNEL_EVIL, "packages": {META_EVIL: 1}},
                                                               None))
    assert "<iframe" not in out and "<img" not in out and "&lt;iframe" in out


def test_findings_are_escaped():
    out = tables.findings({"findings": [{"text": KERNEL_EVIL, "metric": "<b>x</b>"}]}, 5)
    assert "<img" not in out and "<b>" not in out


def test_pop_shows_the_openmp_model_and_the_times():
    # One rank of four threads and no MPI: the OpenMP factors, and in the times "no MPI to replay" where the
    # ideal-network numbers would be.
    level = {"parallel_efficiency": 0.5, "load_balance": 0.6, "communication_efficiency": 0.8}
    pop = {**level, "serialization_efficiency": None, "transfer_efficiency": None,
           "mpi": {**level, "serialization_efficiency": None, "transfer_efficiency": None}, "threads": level,
           "openmp": {"thread_efficiency": 0.5625, "serial_region_efficiency": 0.75, "region_efficiency": 0.8125,
                      "region_load_balance": 0.85, "region_scheduling_efficiency": 0.96, "regions": 2},
           "runtime_s": 12.0, "ideal_runtime_s": None, "useful_total_s": 23.0, "useful_max_s": 10.0,
           "useful_ideal_max_s": None}
    page = tables.pop({"pop": pop})
    for text in ("POP&#x27;s OpenMP model", "Serial region efficiency", "75.0%", "Scheduling efficiency in regions",
                 "2 region executions", "useful duration (ideal, max)", "no MPI to replay", "23 s"):
        assert text in page, text
    assert "Serialization efficiency</td><td class=\"txt\"></td>" in page.replace("    ", "")


def test_communication_per_dimension_and_the_degrees():
    # gpt2trace/testing/grid_trace.py: tp 2 x dp 2 (hand-checked in tests/analysis/test_comm_groups.py)
    res = analyze(Trace.from_table(grid_trace.tp_dp_trace(tp_s=0.5)), steps="0:2")
    out = tables.waits(res, 10)
    dims = out[out.index("Communication per parallel dimension"):]
    dims = dims[:dims.index("</table>")]
    rows = [r.split("</tr>")[0] for r in dims.split("<tbody>")[1].split("<tr>")[1:]]
    assert [r.split("</td>")[0].rsplit(">", 1)[1] for r in rows] == ["tp", "dp", "dp x tp"]
    # the terminal's columns (analysis/comm_groups.py's SECTION), the costliest call in a sentence: tp: 4 calls a
    # step, 1 MB each, 2 s = 2000 ms of a mean rank's 10 s step, nobody waits
    head = dims[dims.index("<thead>"):dims.index("</thead>")]
    assert [h.split("</th>")[0] for h in head.split("<th>")[1:]] == [
        "dimension", "communicators", "calls/step", "bytes/call (median)", "MPI ms/step", "wait ms/step",
        "share of step", "costliest call"]
    assert ('<td class="num">4</td><td class="num">1,000,000</td><td class="num">2000</td><td class="num">0</td>'
            '<td class="num">20.0%</td><td class="txt">MPI_Allreduce on tp: 4 per step of 1,000,000 bytes, 20.0% '
            'of the step</td>') in rows[0]
    # the world's barrier moves no bytes
    assert '<td class="txt">n/a</td><td class="num">500</td>' in rows[2]
    assert rows[2].endswith('<td class="txt">MPI_Barrier on world: 1 per step, 5.0% of the step</td>')
    assert "<dt>parallel dimensions</dt><dd>dp 2 x tp 2 x pp 1 x sp 1</dd>" in tables.summary(res)


def test_declared_sections_are_drawn_from_their_column_specs(monkeypatch):
    from analysis.sections import COUNT, TERMINAL, TEXT, Column, Section, Table
    from gpt2trace.testing.synthetic_memory import memory_trace

    # resident memory per rank (tests/gpt2trace/cli/test_section_tables.py): 320 MB = 305.2 MiB on rank 0
    out = tables.sections(analyze(memory_trace(), steps="0:2"), 10, placed=("comm_dimensions",))
    assert out.startswith('<table class=""><caption>Resident memory per rank (sampled at phase ends)</caption>')
    assert ('<tr><td class="num">0</td><td class="num">305.2</td><td class="txt">forward</td><td class="num">1</td>'
            '<td class="num">0</td><td class="num">95.4</td></tr>') in out
    toy = Section("toy", "toy", lambda inputs, parts: None, tables=(
        Table("Toy", (Column("name", "name", TEXT, name=True), Column("n", "records", COUNT),
                      Column("n", "terminal only", only=TERMINAL)), empty="no toy rows"),))
    monkeypatch.setattr(tables, "SECTIONS", (toy,))
    page = tables.sections({"toy": [{"name": KERNEL_EVIL, "n": 1234}]}, 10)
    assert "<img" not in page and "&lt;img" in page and "terminal only" not in page
    assert '<td class="num">1,234</td>' in page
    assert tables.sections({"toy": []}, 10) == '<p class="empty">Toy: no toy rows</p>'
    assert tables.sections({"toy": []}, 10, placed=("toy",)) == ""
