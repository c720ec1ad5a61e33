"""`gpt2trace report` and `gpt2trace analyze --html`: files written, one-line errors with exit code 2."""
import pytest
from typer.testing import CliRunner

from gpt2trace.testing import synthetic as syn


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("traces") / "trace.parquet"
    syn.write(syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=3, layers=1)), path)
    return path


def test_report_writes_the_page(app, trace_file, tmp_path):
    out = tmp_path / "report.html"
    r = CliRunner().invoke(app, ["report", str(trace_file), "-o", str(out), "--steps", "1:3"])
    assert r.exit_code == 0, r.output
    assert out.is_file() and "report: " in r.stdout and "every record is exact" in r.stdout
    assert "Plotly" in out.read_text()


def test_report_default_output_next_to_the_trace(app, trace_file):
    r = CliRunner().invoke(app, ["report", str(trace_file)])
    assert r.exit_code == 0, r.output
    assert trace_file.with_suffix(".html").is_file()


@pytest.mark.parametrize("args,message", [
    (["--window", "3:1"], "--window '3:1': needs 0 <= A < B"),
    (["--window", "a:b"], "expected A:B in seconds"),
    (["--steps", "7:9"], "selects no step"),
])
def test_report_errors_are_one_line(app, trace_file, tmp_path, args, message):
    r = CliRunner().invoke(app, ["report", str(trace_file), "-o", str(tmp_path / "x.html"), *args])
    assert r.exit_code == 2 and message in r.output and not (tmp_path / "x.html").exists()


def test_analyze_html(app, trace_file, tmp_path):
    out = tmp_path / "a.html"
    r = CliRunner().invoke(app, ["analyze", str(trace_file), "--html", str(out), "--top", "3"])
    assert r.exit_code == 0, r.output
    assert out.is_file() and "POP efficiencies" in r.stdout and f"report: {out}" in r.stdout


def test_analyze_html_takes_one_trace(app, trace_file, tmp_path):
    r = CliRunner().invoke(app, ["analyze", str(trace_file), str(trace_file), "--html", str(tmp_path / "a.html")])
    assert r.exit_code == 2 and "--html takes one trace" in r.output


def test_help_names_the_paraver_formats(app):
    r = CliRunner().invoke(app, ["report", "--help"], terminal_width=200)
    assert r.exit_code == 0 and ".prv/.prv.gz" in r.stdout


def test_a_window_past_the_trace_end_is_one_line_with_the_traces_time_range(app, trace_file, tmp_path):
    # this module's synthetic trace: records from 0 to 9,987,674 ns
    out = tmp_path / "x.html"
    r = CliRunner().invoke(app, ["report", str(trace_file), "-o", str(out), "--window", "1:2"])
    assert r.exit_code == 2 and (r.exception is None or isinstance(r.exception, SystemExit)), r.output
    assert r.stderr.splitlines() == ["error: --window 1:2 starts after the trace ends: the trace spans 0 s to "
                                     "0.00998767 s since its start; give A below 0.00998767"]
    assert not out.exists()
    # a window that reaches past the end is the part of it the trace holds
    r = CliRunner().invoke(app, ["report", str(trace_file), "-o", str(out), "--window", "0.005:2"])
    assert r.exit_code == 0 and out.is_file(), r.output
