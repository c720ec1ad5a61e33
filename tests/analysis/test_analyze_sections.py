"""No analysis takes `analyze` down: a section whose analysis raises on a trace is None in the result, named in its
warnings in one line ("critical path: not computed: ..."), and every other section is still computed, printed
and written; `report` draws the page from the same result."""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis import analyze as A

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
SAMPLE = SAMPLES / "tiny_2ranks_allreduce.parquet"

# (what to break, in analysis.analyze's namespace or a module of analysis (a declared section's, whose analysis
# analysis.analyze no longer imports); the title its warning starts with; the result's key path)
BROKEN = [
    ("critical_path_tables", "critical path", ("critical_path",)),
    ("comm_matrix", "communication matrix", ("comm_matrix",)),
    ("pipeline.pipeline", "pipeline", ("pipeline",)),
    ("summary", "summary", ("summary",)),
    ("tasks.from_parts", "tasks", ("tasks",)),
    ("delay.delay_costs", "delay costs", ("delay_costs",)),
    ("rootcause.table", "root causes", ("root_causes",)),
    ("counters.from_parts", "counters", ("counters",)),
    ("imbalance.from_parts", "load imbalance", ("imbalance",)),
    ("waits.per_call", "MPI calls", ("waits", "calls")),
    ("groups.per_communicator", "communicators", ("waits", "communicators")),
    ("comm_groups.per_group", "communication groups", ("waits", "groups")),
    ("comm_groups.per_dimension", "communication per dimension", ("comm_dimensions",)),
    ("memory.memory", "memory", ("memory",)),
    ("network_load.link_load", "network links", ("network_links",)),
    ("step_phases.step_phases", "step phases", ("step_phases",)),
    ("kernel_threads.from_cells", "kernel threads", ("kernel_threads",)),
    ("bursts.from_counts", "bursts", ("bursts",)),
    ("findings", "findings", ("findings",)),
]


def _break(monkeypatch, target: str) -> None:
    def fails(*args, **kwargs):
        raise ValueError("cannot handle this trace\nsecond line never shown")
    owner, _, name = target.rpartition(".")
    where = (A if not owner else getattr(A, owner) if hasattr(A, owner)
             else importlib.import_module(f"analysis.{owner}"))
    monkeypatch.setattr(where, name, fails)


def _at(result: dict, path: tuple[str, ...]):
    for key in path:
        result = result[key]
    return result


@pytest.fixture(scope="module")
def app():
    from gpt2trace.cli.main import app
    return app


@pytest.fixture(scope="module")
def whole() -> dict:
    from gpt2trace.format.reader import load
    return A.analyze(load(SAMPLE))


@pytest.mark.parametrize("target,title,path", BROKEN, ids=[b[0] for b in BROKEN])
def test_a_failing_section_is_named_and_the_others_are_computed(monkeypatch, tmp_path, app, whole, target, title,
                                                                 path):
    _break(monkeypatch, target)
    out = tmp_path / "a.json"
    r = CliRunner().invoke(app, ["analyze", str(SAMPLE), "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    said = [w for w in res["warnings"] if w.startswith(f"{title}: not computed:")]
    assert said == [f"{title}: not computed: ValueError: cannot handle this trace"]
    assert _at(res, path) in (None, [])
    # every section but the broken one (and what is made from it) is as in a whole run
    for key in ("pop", "states", "occupancy", "window"):
        assert res[key] == whole[key]
    if title not in ("summary", "findings", "delay costs", "root causes"):
        assert res["findings"], "the findings are still made"
    # the tables: exit 0, the warning in one line, the sections that were computed still printed
    r = CliRunner().invoke(app, ["analyze", str(SAMPLE)], terminal_width=200)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert f"warning: {title}: not computed: ValueError: cannot handle this trace\n" in r.output
    assert "POP efficiencies" in r.output and "Time per thread state" in r.output
    assert "second line" not in r.output


@pytest.mark.parametrize("target", ["critical_path_tables", "summary", "waits.per_call", "findings"])
def test_report_draws_the_page_without_the_failing_section(monkeypatch, tmp_path, app, target):
    _break(monkeypatch, target)
    page = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", str(SAMPLE), "-o", str(page)])
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "not computed: ValueError: cannot handle this trace" in page.read_text()


def test_whatif_without_its_critical_paths(monkeypatch, app):
    from analysis import whatif
    def fails(*args, **kwargs):
        raise ValueError("cannot handle this trace")
    monkeypatch.setattr(whatif, "critical_path", fails)
    r = CliRunner().invoke(app, ["whatif", str(SAMPLE), "--bandwidth", "1"], terminal_width=200)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "critical path: not computed: ValueError: cannot handle this trace" in r.output
    assert "step time" in r.output.lower()


def test_diff_without_the_pipeline_section(monkeypatch, app):
    from analysis import diff_summary
    def fails(*args, **kwargs):
        raise ValueError("cannot handle this trace")
    monkeypatch.setattr(diff_summary.pipeline, "pipeline", fails)
    a, b = SAMPLES / "small_2ranks_pp2_gpipe.parquet", SAMPLES / "small_2ranks_pp2_1f1b.parquet"
    r = CliRunner().invoke(app, ["diff", str(a), str(b)], terminal_width=200)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "warning: A: pipeline: not computed: ValueError: cannot handle this trace" in r.output
    assert "POP factors" in r.output


def test_a_trace_without_computation_says_why_pop_is_empty(tmp_path, app):
    # Two ranks that only call MPI_Allreduce (user code filtered out of the measurement): no Running time at all
    from gpt2trace.format.schema import State
    from gpt2trace.testing import synthetic as syn
    recs = []
    for r in (0, 1):
        recs += [syn.state(r, 0, 0, 1, State.IDLE), syn.state(r, 0, 1, 3, State.GROUP_COMMUNICATION),
                 syn.state(r, 0, 3, 4, State.IDLE), syn.comm(r, 1, 3, "MPI_Allreduce", seq=0, nbytes=8, step=0)]
    path = tmp_path / "mpi_only.parquet"
    syn.write(syn.from_records(recs), path)
    out = tmp_path / "a.json"
    r = CliRunner().invoke(app, ["analyze", str(path), "--json", str(out)])
    assert r.exit_code == 0, r.output
    res = json.loads(out.read_text())
    assert res["pop"]["parallel_efficiency"] is None
    assert any(w.startswith("no thread is Running in the analyzed window") for w in res["warnings"])
    assert res["findings"][0]["text"].startswith("Warning: no thread is Running")
    r = CliRunner().invoke(app, ["analyze", str(path)], terminal_width=200)
    assert "POP efficiencies: not defined: no thread is Running in the analyzed window" in r.output
    page = tmp_path / "r.html"
    assert CliRunner().invoke(app, ["report", str(path), "-o", str(page)]).exit_code == 0
    assert "not defined: no thread is Running in the analyzed window" in page.read_text()
