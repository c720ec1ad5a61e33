"""`gpt2trace --help` starts fast because building the app loads none of the heavy modules: they load inside the
command that needs them. Checked by what a fresh interpreter has imported, not by a timing (the cores are shared):
numba's import alone is ~0.4 s, pandas ~0.3 s, pyarrow.parquet ~0.15 s."""
from __future__ import annotations

import json
import subprocess
import sys

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
