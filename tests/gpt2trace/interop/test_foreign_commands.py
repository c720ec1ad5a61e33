"""Every command on every trace another tool wrote (tests/data: Extrae and BSC Folding's Paraver, Score-P's OTF2,
the PyTorch profiler's Kineto JSON of CUDA, ROCm and CPU jobs and of PyTorch 1.9): `info`, `analyze --json`,
`report`, `import` and every `export` read it as given, exit 0 with no traceback, and the result holds the
invariants every result must (gpt2trace.testing.result_invariants). The numbers per format are checked against
the tools' own readings in test_kineto_foreign.py (HTA), test_otf2_foreign.py (otf2-print) and
test_paraver_foreign.py (a separate parse of the .prv text)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpt2trace.testing.result_invariants import check_result

DATA = Path(__file__).resolve().parents[2] / "data"


def _foreign() -> list[Path]:
    kineto = sorted(p for p in (DATA / "kineto").rglob("*") if p.name.endswith((".json", ".json.gz")))
    kineto.append(DATA / "kineto" / "trace_filter")                         # a folder: one file per rank
    otf2 = [d / "traces.otf2" for d in sorted((DATA / "otf2").iterdir()) if d.is_dir()]
    otf2.append(sorted(d for d in (DATA / "otf2").iterdir() if d.is_dir())[0])   # an archive's folder
    return sorted((DATA / "paraver").glob("*.prv")) + otf2 + kineto


TRACES = _foreign()
IDS = [str(p.relative_to(DATA)) for p in TRACES]


@pytest.fixture(scope="module")
def app():
    from gpt2trace.cli.main import app
    return app


def _ok(app, args: list) -> str:
    r = CliRunner().invoke(app, [str(a) for a in args], terminal_width=160)
    assert r.exception is None or (isinstance(r.exception, SystemExit) and r.exit_code == 0), (
        args, r.output, r.exception)
    assert r.exit_code == 0 and "Traceback" not in r.output, (args, r.output)
    return r.output


def test_every_trace_of_the_set_is_here():
    assert len(TRACES) >= 19 and all(p.exists() for p in TRACES)


@pytest.mark.parametrize("trace", TRACES, ids=IDS)
def test_every_command_reads_it(app, tmp_path, trace):
    _ok(app, ["info", trace])
    _ok(app, ["analyze", trace, "--json", tmp_path / "a.json"])
    result = json.loads((tmp_path / "a.json").read_text())
    check_result(result)
    tables = _ok(app, ["analyze", trace])
    assert "POP efficiencies" in tables or "not computed" in tables
    _ok(app, ["report", trace, "-o", tmp_path / "r.html"])
    assert (tmp_path / "r.html").stat().st_size > 0
    _ok(app, ["import", trace, "-o", tmp_path / "t.parquet"])
    imported = tmp_path / "t.parquet"
    _ok(app, ["analyze", imported, "--json", tmp_path / "b.json"])
    again = json.loads((tmp_path / "b.json").read_text())
    check_result(again)
    assert again["pop"] == result["pop"], "the import analyzes as the original does"
    noted = [w for w in result["warnings"] if w.startswith("import: ")]
    assert noted == [w for w in again["warnings"] if w.startswith("import: ")], "the import's notes travel with it"
    for fmt, out in (("paraver", tmp_path / "x"), ("chrome", tmp_path / "x.json"), ("otf2", tmp_path / "xo")):
        _ok(app, ["export", imported, "-f", fmt, "-o", out])
        _ok(app, ["export", trace, "-f", fmt, "-o", tmp_path / f"direct-{fmt}"])


@pytest.mark.parametrize("trace", [TRACES[0], DATA / "otf2" / "ping-pong-otf2-papi" / "traces.otf2",
                                   DATA / "kineto" / "amd_trace"], ids=["paraver", "otf2", "kineto"])
def test_a_real_process_prints_no_traceback(tmp_path, trace):
    if trace.is_dir():
        trace = next(p for p in trace.iterdir() if p.name.endswith(".json.gz"))
    r = subprocess.run([sys.executable, "-m", "gpt2trace", "analyze", str(trace)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "COLUMNS": "160"})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "POP efficiencies" in r.stdout


def test_info_of_an_otf2_archive_gives_the_whole_archives_size(app):
    archive = DATA / "otf2" / "ping-pong-otf2-papi"
    info = json.loads(_ok(app, ["info", archive / "traces.otf2", "--json"]))
    files = [p for p in archive.rglob("*") if p.is_file() and p.suffix in (".otf2", ".def", ".evt")]
    assert info["bytes"] == sum(p.stat().st_size for p in files) > (archive / "traces.otf2").stat().st_size
