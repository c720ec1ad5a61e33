"""`gpt2trace export`, `gpt2trace import`, `gpt2trace analyze` on .prv, and `gpt2trace.load`."""
import json
import subprocess
import sys

import chrome_checker
import prv_checker
import pytest
from typer.testing import CliRunner

import gpt2trace
from gpt2trace.format.schema import SCHEMA_VERSION


@pytest.fixture(scope="module")
def app():
    from gpt2trace.cli.main import app
    return app


def run(app, *args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_export_both_formats(app, tmp_path, synthetic_path):
    r = run(app, "export", synthetic_path, "--format", "paraver", "-o", tmp_path / "p")
    assert r.exit_code == 0, r.output
    assert prv_checker.check(tmp_path / "p.prv") == []
    r = run(app, "export", synthetic_path, "--format", "chrome", "-o", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert chrome_checker.check(tmp_path / "c.json") == []


def test_import_then_analyze(app, tmp_path, synthetic_path):
    run(app, "export", synthetic_path, "-o", tmp_path / "p")
    r = run(app, "import", tmp_path / "p.prv", "-o", tmp_path / "back.parquet")
    assert r.exit_code == 0, r.output
    assert "importing ranks" not in r.output          # progress bars only on a terminal
    a = json.loads(run(app, "analyze", synthetic_path, "--json", "-").stdout)
    b = json.loads(run(app, "analyze", tmp_path / "back.parquet", "--json", "-").stdout)
    c = json.loads(run(app, "analyze", tmp_path / "p.prv", "--json", "-").stdout)
    assert a["pop"] == b["pop"] == c["pop"]
    b.pop("trace"), c.pop("trace")
    assert b == c                     # the streamed import (rank by rank) analyzes as the .prv loaded whole
    r = run(app, "analyze", tmp_path / "p.prv")                       # the tables, straight from the .prv
    assert r.exit_code == 0 and "POP efficiencies" in r.stdout


def test_errors_are_one_line_and_exit_2(app, tmp_path, synthetic_path):
    bad = tmp_path / "bad.prv"
    bad.write_text("#Paraver (01/01/2024 at 10:00):100_ns:1(1):1:1(1:1),0\n1:1:1:1:1:0:oops:1\n")
    for args in (("import", bad, "-o", tmp_path / "x.parquet"), ("analyze", bad),
                 ("export", bad, "-o", tmp_path / "y")):
        r = run(app, *args)
        assert r.exit_code == 2
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and "bad.prv:2:" in lines[0], r.output
    r = run(app, "export", synthetic_path, "--format", "svg", "-o", tmp_path / "z")
    assert r.exit_code == 2


def test_load_reads_every_format(tmp_path, synthetic_path):
    run_export = CliRunner().invoke
    from gpt2trace.cli.main import app
    run_export(app, ["export", str(synthetic_path), "-o", str(tmp_path / "p.prv.gz")])
    a, b = gpt2trace.load(synthetic_path), gpt2trace.load(tmp_path / "p.prv.gz")
    assert a.num_rows == b.num_rows
    assert list(b.to_pandas().columns) == list(a.to_pandas().columns)
    assert b.table.schema.metadata[b"gpt2trace.schema_version"] == str(SCHEMA_VERSION).encode()


def test_import_gpt2trace_stays_light():
    code = "import sys, gpt2trace; print(sorted(m for m in ('pyarrow', 'numba', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
