"""Outputs are checked before work starts and written atomically: nothing is ever lost."""
from __future__ import annotations

import os

import pytest

from gpt2trace.format.errors import OutputError
from gpt2trace.format.outputs import atomic_output, atomic_outputs, check_output


def test_an_input_is_never_an_output(tmp_path):
    src = tmp_path / "a.parquet"
    src.write_bytes(b"data")
    for same in (src, tmp_path / "." / "a.parquet", tmp_path / "sub" / ".." / "a.parquet"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        with pytest.raises(OutputError, match="is also an input"):
            check_output(same, inputs=[src], option="--json")
    link = tmp_path / "link.parquet"
    os.link(src, link)                                  # a hard link is the same file under another name
    with pytest.raises(OutputError, match="--json .*link.parquet is also an input"):
        check_output(link, inputs=[src], option="--json")
    assert src.read_bytes() == b"data"


def test_folders_that_cannot_take_the_output(tmp_path, readonly_dir):
    with pytest.raises(OutputError, match="is a directory"):
        check_output(tmp_path)
    with pytest.raises(OutputError, match="does not exist"):
        check_output(tmp_path / "missing" / "out.html", option="-o")
    with pytest.raises(OutputError, match="cannot write in .*Read-only"):
        check_output(readonly_dir / "out.html", option="-o")
    with pytest.raises(OutputError, match="cannot write in"):
        check_output("/proc/gpt2trace-out.html", option="-o")
    assert check_output(tmp_path / "new.html") == tmp_path / "new.html"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".gpt2trace-probe")]


def test_atomic_output_replaces_only_on_success(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_output(out) as tmp:
            tmp.write_text("half")
            raise RuntimeError("interrupted")
    assert out.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_output(out) as tmp:
        tmp.write_text("new")
        assert out.read_text() == "old"                 # nothing under the final name until the end
    assert out.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_full_disk_leaves_nothing_half_written(small_fs):
    fs = small_fs(64)
    outs = [fs / "run.prv", fs / "run.pcf"]
    outs[0].write_text("previous")
    with pytest.raises(OutputError, match=r"cannot write .*run\.\w+: No space left on device"):
        with atomic_outputs(outs) as (a, b):
            b.write_text("small")
            a.write_bytes(b"x" * 200_000)
    assert outs[0].read_text() == "previous" and not outs[1].exists()
    assert sorted(p.name for p in fs.iterdir()) == ["run.prv"]
