"""Fixtures every test folder may use: small and read-only file systems (real tmpfs mounts) for the
nothing-is-lost checks. CI runs as root; without the right to mount, these tests fail rather than skip."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def _mount(where: Path, options: str) -> None:
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot mount a tmpfs at {where} ({r.stderr.strip()}); these tests need root")


@pytest.fixture
def small_fs(tmp_path):
    """A factory: small_fs(kib) mounts a tmpfs of that size and returns its folder (unmounted afterwards)."""
    mounted = []

    def make(kib: int) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        _mount(where, f"size={kib}k")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def readonly_dir(tmp_path):
    """A folder on a read-only file system (root ignores permission bits, so chmod would not do)."""
    where = tmp_path / "ro"
    _mount(where, "ro,size=64k")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)
