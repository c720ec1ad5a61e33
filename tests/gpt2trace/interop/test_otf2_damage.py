"""Score-P's archives damaged at random (an event, definition or anchor file cut short, bytes flipped, a file
deleted): the import gives a valid trace or one TraceError line, never another exception, a crash or a hang.
Each import runs in its own process, so an abort inside the OTF2 C library or a hang would show as such."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

DATA = Path(__file__).resolve().parents[2] / "data" / "otf2"
ARCHIVES = ("ping-pong-otf2", "ping-pong-otf2-papi")
# The import in a child: exit 0 with a valid trace (load_otf2 checks it as any trace), 2 with the TraceError.
CHILD = """import sys
from gpt2trace.format.errors import TraceError
from gpt2trace.interop.otf2_import import load_otf2
try:
    load_otf2(sys.argv[1])
except TraceError as exc:
    print(exc)
    sys.exit(2)
"""
TIMEOUT_S = 60


def _files(name: str) -> list[Path]:
    folder = DATA / name
    return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.suffix in (".otf2", ".def", ".evt"))


def _damage(path: Path, how: str, where: float, bits: list[int]) -> None:
    data = bytearray(path.read_bytes())
    if how == "delete":
        path.unlink()
    elif how == "truncate":
        path.write_bytes(data[:int(where * len(data))])
    else:
        for bit in bits:
            data[bit // 8 % len(data)] ^= 1 << bit % 8
        path.write_bytes(data)


@st.composite
def damages(draw):
    name = draw(st.sampled_from(ARCHIVES))
    return (name, draw(st.sampled_from(_files(name))), draw(st.sampled_from(["truncate", "flip", "delete"])),
            draw(st.floats(0, 1, exclude_max=True)), draw(st.lists(st.integers(0, 2**20), min_size=1, max_size=8)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=damages())
# the first byte of an event file, its record type, turned into a calling-context record naming no definition
@example(damage=("ping-pong-otf2", Path("traces/0.evt"), "flip", 0.0, [0]))
def test_a_damaged_archive_imports_or_is_one_error_line(tmp_path, damage):
    name, file, how, where, bits = damage
    folder = tmp_path / "arch"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(DATA / name, folder, copy_function=shutil.copyfile)      # writable copies of read-only files
    _damage(folder / file, how, where, bits)
    r = subprocess.run([sys.executable, "-c", CHILD, str(folder / "traces.otf2")], capture_output=True, text=True,
                       timeout=TIMEOUT_S, check=False)
    assert r.returncode in (0, 2), f"{how} {file}: exit code {r.returncode}\n{r.stderr}"
    assert "Traceback" not in r.stderr and not r.stderr.strip(), r.stderr
    if r.returncode == 2:
        lines = r.stdout.strip().splitlines()
        assert len(lines) == 1 and str(folder) in lines[0], r.stdout
