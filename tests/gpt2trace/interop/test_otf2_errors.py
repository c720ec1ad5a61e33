"""Acceptance 4 for OTF2: a damaged archive, a trace OTF2 cannot hold, an output that may not be written: one line
on stderr, exit code 2, nothing written, and an existing archive left as it was (a full disk on a real tmpfs)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpt2trace.interop.otf2_export import export_otf2

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
TINY = SAMPLES / "tiny_2ranks_allreduce.parquet"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("otf2") / "good"
    export_otf2(TINY, folder)
    return folder


def _cli(*args) -> subprocess.CompletedProcess:
    """The real command in its own process: the OTF2 C library writes to the process's stderr directly, which an
    in-process runner would not see."""
    return subprocess.run([sys.executable, "-m", "gpt2trace", *map(str, args)], capture_output=True, text=True,
                          check=False)


def _one_error_line(r, *words) -> None:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr + r.stdout
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    for w in words:
        assert w in lines[0], lines[0]


def _damage(folder: Path, how: str) -> None:
    if how == "truncated events":
        (folder / "traces" / "0.evt").write_bytes((folder / "traces" / "0.evt").read_bytes()[:5000])
    elif how == "truncated definitions":
        (folder / "traces.def").write_bytes((folder / "traces.def").read_bytes()[:300])
    elif how == "truncated anchor":
        (folder / "traces.otf2").write_bytes((folder / "traces.otf2").read_bytes()[:100])
    elif how == "missing event file":
        (folder / "traces" / "1.evt").unlink()
    elif how == "empty anchor":
        (folder / "traces.otf2").write_bytes(b"")


@pytest.mark.parametrize("how", ["truncated events", "truncated definitions", "truncated anchor",
                                 "missing event file", "empty anchor"])
def test_damaged_archive_is_one_line(tmp_path, archive, how):
    broken = tmp_path / "broken"
    shutil.copytree(archive, broken)
    _damage(broken, how)
    for args in (("import", broken, "-o", tmp_path / "out.parquet"), ("analyze", broken / "traces.otf2"),
                 ("export", broken / "traces.otf2", "-f", "chrome", "-o", tmp_path / "c")):
        _one_error_line(_cli(*args), str(broken / "traces.otf2"), "not a readable OTF2 archive")
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "c.json").exists()


def test_folder_without_an_anchor(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.json").write_text("{}")
    r = CliRunner().invoke(_app(), ["import", str(tmp_path / "empty"), "--from", "otf2", "-o",
                                    str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "no OTF2 anchor files" in r.output and len(r.output.strip().splitlines()) == 1


def _app():
    from gpt2trace.cli.main import app
    return app


@pytest.mark.parametrize("target, words", [
    ("file", "is a file"),
    ("folder", "is a folder that is not an OTF2 archive"),
    ("holds input", "holds an input of this command"),
])
def test_outputs_that_may_not_be_written(tmp_path, archive, target, words):
    if target == "file":
        out = tmp_path / "f"
        out.write_text("keep me")
        src = TINY
    elif target == "folder":
        out = tmp_path / "mine"
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
        src = TINY
    else:
        out = tmp_path / "arch"
        shutil.copytree(archive, out)
        src = out / "traces.otf2"                             # exporting an archive onto itself
    before = sorted(p.name for p in out.rglob("*")) if out.is_dir() else out.read_text()
    r = CliRunner().invoke(_app(), ["export", str(src), "-f", "otf2", "-o", str(out)])
    assert r.exit_code == 2 and words in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert (sorted(p.name for p in out.rglob("*")) if out.is_dir() else out.read_text()) == before


def test_records_that_cross_are_refused(tmp_path, mpi_zoo_path):
    """In conftest's MPI zoo, rank 1's matmul_forward [7, 8.5] s crosses the end of step 1's phase [4, 8] s."""
    r = CliRunner().invoke(_app(), ["export", str(mpi_zoo_path), "-f", "otf2", "-o", str(tmp_path / "zoo")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "rank 1 thread 0, the kernel 'matmul_forward' [7000000000, 8500000000] ns starts inside the phase " \
           "'forward' [4000000000, 8000000000] ns" in r.output
    assert not (tmp_path / "zoo").exists() and list(tmp_path.glob(".zoo*")) == []


def test_full_disk_keeps_the_previous_archive(small_fs):
    """small_2threads' archive takes about 380 KiB, tiny_1thread's about 70 KiB: on a 160 KiB file system the
    first fits and the second does not."""
    fs = small_fs(160)
    export_otf2(SAMPLES / "tiny_1thread.parquet", fs / "arch")
    before = {p.relative_to(fs): p.read_bytes() for p in (fs / "arch").rglob("*") if p.is_file()}
    r = CliRunner().invoke(_app(), ["export", str(SAMPLES / "small_2threads.parquet"), "-f", "otf2", "-o",
                                    str(fs / "arch")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert f"cannot write {fs / 'arch'}" in r.output and "nothing was written under that name" in r.output
    assert {p.relative_to(fs): p.read_bytes() for p in (fs / "arch").rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in fs.iterdir()) == ["arch"]                  # no temporary folder left


def test_without_the_bindings_the_commands_say_what_to_install(tmp_path, archive):
    """On a Python the otf2 wheels do not cover, the package is not installed: one line says what to do."""
    code = ("import sys; sys.modules['otf2'] = None; sys.argv[0] = 'gpt2trace'; "
            "from gpt2trace.cli.main import app; app()")
    for args in (["export", str(TINY), "-f", "otf2", "-o", str(tmp_path / "a")],
                 ["import", str(archive), "-o", str(tmp_path / "b.parquet")]):
        r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
        _one_error_line(r, "need the otf2 package", "pip install otf2")
    assert list(tmp_path.iterdir()) == []
