"""Nothing is lost: the export and import functions never write one of their inputs, refuse an unwritable folder
before any work, and write all their files or none (a full disk on a real small tmpfs leaves the previous files
as they were and no temporary file behind)."""
import re

import chrome_checker
import prv_checker
import pytest

from gpt2trace.format.errors import OutputError
from gpt2trace.interop.chrome_export import export_chrome
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import import_paraver, write_parquet

PARAVER = ("x.prv", "x.pcf", "x.row", "x.gpt2trace.json")


@pytest.fixture
def prv(tmp_path, synthetic_path):
    """An exported .prv with its companions, and their bytes to check they stay intact."""
    out = export_paraver(synthetic_path, tmp_path / "t")
    files = (out.prv, out.pcf, out.row, out.meta)
    return out.prv, {f: f.read_bytes() for f in files}


def _intact(files: dict) -> bool:
    return all(f.read_bytes() == data for f, data in files.items())


@pytest.mark.parametrize("name", ["t", "t.prv", "t.prv.gz"])
def test_export_never_writes_its_prv_or_companions(prv, name):
    src, files = prv
    # t and t.prv name the .prv itself; t.prv.gz would write t.pcf, t.row and t.gpt2trace.json, which it reads
    with pytest.raises(OutputError, match=r"t\.(prv|pcf) is also an input"):
        export_paraver(src, src.parent / name)
    assert _intact(files)


def test_chrome_never_writes_its_input(tmp_path, synthetic_path):
    src = tmp_path / "trace.json"                         # a Parquet trace that happens to end in .json
    src.write_bytes(synthetic_path.read_bytes())
    with pytest.raises(OutputError, match=r"trace\.json is also an input"):
        export_chrome(src, tmp_path / "trace")
    assert src.read_bytes() == synthetic_path.read_bytes()


@pytest.mark.parametrize("out", ["t.prv", "t.pcf", "t.row", "t.gpt2trace.json"])
def test_import_never_writes_its_files(prv, out):
    src, files = prv
    imported = import_paraver(src)
    with pytest.raises(OutputError, match="is also an input"):
        write_parquet(imported, src.parent / out)
    assert _intact(files)


def test_unwritable_folders_are_refused_before_any_work(readonly_dir, tmp_path, synthetic_path):
    for export in (export_paraver, export_chrome):
        with pytest.raises(OutputError, match="cannot write in .*Read-only file system"):
            export(synthetic_path, readonly_dir / "x")
        with pytest.raises(OutputError, match="does not exist"):
            export(synthetic_path, tmp_path / "missing" / "x")


def test_existing_outputs_are_replaced_all_together(tmp_path, synthetic_path):
    for f in PARAVER:
        (tmp_path / f).write_text("old")
    out = export_paraver(synthetic_path, tmp_path / "x")
    assert all((tmp_path / f).read_text() != "old" for f in PARAVER)
    assert prv_checker.check(out.prv) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PARAVER)


# The synthetic trace's exports: .prv 138 KB (the others 0.2-2.4 KB), JSON 345 KB, gzipped JSON 39 KB, Parquet
# 28 KB: a 32 KiB file system takes the small files but none of the large ones.
def test_full_disk_paraver_keeps_the_previous_export(small_fs, synthetic_path):
    fs = small_fs(32)
    for f in PARAVER:
        (fs / f).write_text("previous")
    with pytest.raises(OutputError) as err:
        export_paraver(synthetic_path, fs / "x")
    assert str(err.value) == (f"cannot write {fs / 'x.prv'}: No space left on device; nothing was written under "
                              "that name")
    assert sorted(p.name for p in fs.iterdir()) == sorted(PARAVER)
    assert all((fs / f).read_text() == "previous" for f in PARAVER)


@pytest.mark.parametrize("name", ["x.json", "x.json.gz"])
def test_full_disk_chrome_leaves_nothing(small_fs, synthetic_path, name):
    fs = small_fs(16 if name.endswith(".gz") else 32)
    with pytest.raises(OutputError, match=rf"cannot write {fs / name}: No space left on device"):
        export_chrome(synthetic_path, fs / name)
    assert list(fs.iterdir()) == []


def test_full_disk_import_leaves_nothing(small_fs, prv):
    fs = small_fs(16)
    imported = import_paraver(prv[0])
    with pytest.raises(OutputError, match=r"cannot write .*back\.parquet: No space left on device"):
        write_parquet(imported, fs / "back.parquet")
    assert list(fs.iterdir()) == []


def test_exports_that_fit_pass_the_checkers(small_fs, synthetic_path):
    fs = small_fs(512)
    assert prv_checker.check(export_paraver(synthetic_path, fs / "x").prv) == []
    assert chrome_checker.check(export_chrome(synthetic_path, fs / "x").path) == []
    assert sorted(p.name for p in fs.iterdir()) == sorted(PARAVER + ("x.json",))


def test_full_disk_under_the_sort_names_it(small_fs, tmp_path, synthetic_path):
    # runs of 500 lines spilled to a 16 KiB file system: the first run or two fit, a later one does not
    fs = small_fs(16)
    with pytest.raises(OutputError, match=rf"cannot write {fs}/gpt2trace-sort-\w+/run\d+\.arrow: No space left"):
        export_paraver(synthetic_path, tmp_path / "x", tmpdir=fs, run_lines=500)
    assert list(fs.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["fs0"]


# NAME -> what the OutputError says, as `gpt2trace export -o NAME` says it: a name that names no file would write
# hidden files (.prv, .pcf, ... or .json) in the current folder, or in the folder named
NO_FILE_NAMES = {
    "": "--output '': give a name, for example -o run (paraver: run.prv",
    " ": "--output ' ': give a name",
    "{d}/adir/": "--output {d}/adir/: names a folder, not a file; give a file name in it, for example -o {d}/adir/run",
    "{d}/adir": "names a folder, not a file",
    "{d}/.": "names a folder, not a file",
    "SUFFIX": "--output SUFFIX: no name before SUFFIX; give one, for example -o runSUFFIX",
    "{d}/adir/SUFFIX": "no name before SUFFIX",
}


@pytest.mark.parametrize("export,suffix", [(export_paraver, ".prv"), (export_chrome, ".json")],
                         ids=["paraver", "chrome"])
@pytest.mark.parametrize("name", NO_FILE_NAMES)
def test_export_to_a_name_that_is_no_file_is_refused(tmp_path, synthetic_path, monkeypatch, export, suffix, name):
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    says = NO_FILE_NAMES[name].format(d=tmp_path).replace("SUFFIX", suffix)
    with pytest.raises(OutputError, match=re.escape(says)):
        export(synthetic_path, name.format(d=tmp_path).replace("SUFFIX", suffix))
    assert [p.name for p in tmp_path.rglob("*")] == ["adir"]


def test_otf2_export_to_an_empty_name_is_refused(tmp_path, synthetic_path, monkeypatch):
    from gpt2trace.interop.otf2_export import export_otf2
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputError, match=re.escape("--output '': give a name")):
        export_otf2(synthetic_path, "")
    assert list(tmp_path.iterdir()) == []
