"""`gpt2trace --help` starts fast because building the app loads none of the heavy modules: they load inside the
command that needs them. Checked by what a fresh interpreter has imported, not by a timing (the cores are shared):
numba's import alone is ~0.4 s, pandas ~0.3 s, pyarrow.parquet ~0.15 s."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# Modules that only a command's work needs. numpy is here too: every one of them pulls it in, and the help of
# the app and of every command must come from Typer and rich alone.
HEAVY = ("numba", "numpy", "pandas", "pyarrow", "pyarrow.parquet", "mpi4py", "analysis", "trainer.model",
         "trainer.kernels", "gpt2trace.interop", "gpt2trace.report", "gpt2trace.record", "gpt2trace.format.reader")

_PROBE = """
import json, sys
from typer.testing import CliRunner
from gpt2trace.cli.main import app
codes = {{c: CliRunner().invoke(app, [*c.split(), "--help"]).exit_code for c in {commands!r}}}
print(json.dumps({{"codes": codes, "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def _probe(*commands: str) -> dict:
    code = _PROBE.format(commands=list(commands), heavy=HEAVY)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def test_building_the_app_loads_no_heavy_module():
    assert _probe() == {"codes": {}, "loaded": []}


def test_the_help_of_every_command_loads_no_heavy_module():
    commands = ["", "run", "analyze", "report", "info", "recover", "export", "import"]
    got = _probe(*commands)
    assert got["codes"] == dict.fromkeys(commands, 0)
    assert got["loaded"] == []


def test_a_command_does_load_what_it_needs(tmp_path):
    # The probe can see a heavy module: `info` on a missing file still imports the reader before it fails.
    code = ("import sys; from typer.testing import CliRunner; from gpt2trace.cli.main import app; "
            f"CliRunner().invoke(app, ['info', {str(tmp_path / 'none.parquet')!r}]); "
            "print('pyarrow' in sys.modules, 'gpt2trace.format.reader' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.split() == ["True", "True"]


def _numba_loaded(args: list[str]) -> bool:
    """Whether `gpt2trace ARGS` imported Numba (-X importtime lists every module a process imports)."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "gpt2trace", *args], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    return any(line.split("|")[-1].strip() == "numba" for line in r.stderr.splitlines() if line.count("|") == 2)


@pytest.mark.parametrize("command", ["analyze", "info", "report"])
def test_a_parquet_trace_without_mpi_calls_is_read_without_numba(command, tmp_path):
    """Numba is for the replay of MPI calls and the Paraver parser: a one-rank Parquet trace needs neither."""
    out = {"analyze": ["--json", str(tmp_path / "a.json")], "info": ["--json"],
           "report": ["-o", str(tmp_path / "r.html")]}
    assert not _numba_loaded([command, str(ROOT / "sample_traces" / "tiny_2threads.parquet"), *out[command]])


def test_the_probe_sees_numba_where_a_replay_needs_it(tmp_path):
    assert _numba_loaded(["analyze", str(ROOT / "sample_traces" / "tiny_2ranks_allreduce.parquet"), "--json",
                          str(tmp_path / "a.json")])
