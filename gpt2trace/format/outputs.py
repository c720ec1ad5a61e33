"""Outputs that never destroy anything: checked before the work starts, written under a temporary name, renamed
only when complete.

Every command that writes files goes through here, so the rules hold everywhere: an output may not be one of
the command's inputs; its folder must exist and be writable (checked by creating a file there, which also
catches read-only file systems and /proc, where permission bits say nothing); an existing output is replaced,
and the command says so. A failure while writing (a full disk, a signal) leaves the previous file, if any,
untouched and no half-written file under the final name.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from gpt2trace.format.errors import OutputError


def _label(path: Path, option: str | None) -> str:
    return f"{option} {path}" if option else str(path)


def same_file(a: Path, b: Path) -> bool:
    """Whether two existing paths name one file (through links, relative parts or hard links)."""
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (),
                 option: str | None = None) -> Path:
    """`path` as a Path when it may be written; else an OutputError naming it. Call before any long work."""
    path = Path(path)
    label = _label(path, option)
    for src in inputs:
        if src is not None and (same_file(path, Path(src)) or path.resolve() == Path(src).resolve()):
            raise OutputError(f"{label} is also an input of this command; choose another output name "
                              "(nothing was written)")
    if path.is_dir():
        raise OutputError(f"{label} is a directory; give a file name")
    check_folder(path, label)
    return path


def check_folder(path: Path, label: str) -> None:
    """OutputError naming `label` (the user's path, not a hidden name written first) unless the folder `path`
    goes in exists and a file can be created there (a read-only file system says so)."""
    parent = path.parent
    if not parent.is_dir():
        raise OutputError(f"{label}: the folder {parent} does not exist; create it or choose another path")
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".gpt2trace-probe-"):
            pass
    except OSError as exc:
        raise OutputError(f"{label}: cannot write in {parent} ({exc.strerror or exc}); choose another path") from None


_SEPARATORS = tuple(sep for sep in (os.sep, os.altsep) if sep)


def check_name(name: str | os.PathLike, suffixes: Sequence[str] = (), folder: bool = False) -> str:
    """An export's NAME (`gpt2trace export -o NAME`, or the same argument of the export's function) as a str, if
    it names a file; else an OutputError, in the words `export` uses for its --output. NAME names no file when it
    is empty, names a folder (ends in '/', '.' or '..', or is an existing folder), or is only one of the
    `suffixes` the export appends ('.prv', 'runs/.json'): the export would write hidden files such as `.prv`.
    With `folder` (an OTF2 archive is a folder) only an empty NAME is refused."""
    name = os.fspath(name)
    if not name.strip():
        raise OutputError(f"--output {name!r}: give a name, for example -o run (paraver: run.prv, run.pcf, ...; "
                          "chrome: run.json; otf2: the folder run)")
    if folder:
        return name
    if name.endswith(_SEPARATORS) or Path(name).name in (".", "..") or Path(name).is_dir():
        raise OutputError(f"--output {name}: names a folder, not a file; give a file name in it, for example "
                          f"-o {os.path.join(name, 'run')}")
    suffix = next((s for s in suffixes if name.endswith(s)), "")
    base = name[: len(name) - len(suffix)]
    if not base or base.endswith(_SEPARATORS):
        raise OutputError(f"--output {name}: no name before {suffix}; give one, for example -o {base}run{suffix}")
    return name


def temp_name(path: Path) -> Path:
    """A hidden name beside `path` (same file system, so the final rename is atomic)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextlib.contextmanager
def atomic_outputs(paths: Sequence[str | os.PathLike]) -> Iterator[list[Path]]:
    """Temporary paths to write instead of `paths`; all renamed onto them when the block ends normally.

    On any exception every temporary file is removed and the final paths are left as they were; an OSError
    (a full disk, a vanished folder) becomes an OutputError with one line naming the path."""
    finals = [Path(p) for p in paths]
    temps = [temp_name(p) for p in finals]
    try:
        yield temps
        for tmp, final in zip(temps, finals):
            if tmp.exists():
                os.replace(tmp, final)
    except OSError as exc:
        _remove(temps)
        where = exc.filename or finals[0]
        raise OutputError(f"cannot write {_final_of(where, temps, finals)}: {exc.strerror or exc}; "
                          "nothing was written under that name") from None
    except BaseException:
        _remove(temps)
        raise


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """`atomic_outputs` for one file."""
    with atomic_outputs([path]) as (tmp,):
        yield tmp


def _final_of(where, temps: list[Path], finals: list[Path]) -> Path:
    for tmp, final in zip(temps, finals):
        if str(tmp) == str(where):
            return final
    return Path(where)


def _remove(paths: Iterable[Path]) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            p.unlink()
