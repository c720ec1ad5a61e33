"""Traces for the CLI tests: a small synthetic Parquet trace, its Paraver export, and a trace whose names and
metadata look like rich markup, emoji codes and control characters."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

from gpt2trace.format import schema
from gpt2trace.testing import synthetic as syn

# The synthetic trace's kernel names -> names that look like rich markup, an emoji code, a NUL.
HOSTILE_KERNELS = {"matmul_backward": "matmul[/]backward", "matmul_forward": "gemm_bwd[i]",
                   "layernorm_forward": ":100:[bold]ln\x00"}
HOSTILE_MACHINE = {"hostname": "node[/]01", "cpu": "[red]Zen[/red] :fire:", "cores": 4}


@dataclass(frozen=True)
class HostileTrace:
    path: Path
    kernels: tuple[str, ...]        # the names in the trace
    machine: dict


@pytest.fixture(scope="session")
def app():
    from gpt2trace.cli.main import app
    return app


@pytest.fixture(scope="session")
def trace_file(tmp_path_factory) -> Path:
    """2 ranks x 2 threads, 3 steps, one layer; rank 1 late (an imbalance and MPI waits to report)."""
    path = tmp_path_factory.mktemp("traces") / "trace.parquet"
    syn.write(syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=3, layers=1, late_rank=(1, 1.5))), path)
    return path


@pytest.fixture(scope="session")
def prv_files(tmp_path_factory, trace_file) -> list[Path]:
    """The trace exported for Paraver: [run.prv, run.pcf, run.row, run.gpt2trace.json]."""
    from gpt2trace.interop.paraver_export import export_paraver
    out = export_paraver(trace_file, tmp_path_factory.mktemp("prv") / "run")
    return [out.prv, out.pcf, out.row, out.meta]


@pytest.fixture
def copy_prv(prv_files):
    """copy_prv(where, stem) copies the Paraver files into `where` as STEM.prv, STEM.pcf, ...; returns the .prv."""
    def copy(where: Path, stem: str = "run") -> Path:
        for f in prv_files:
            shutil.copy(f, where / (stem + f.name[len("run"):]))
        return where / f"{stem}.prv"
    return copy


@pytest.fixture(scope="session")
def hostile_trace(tmp_path_factory, trace_file) -> HostileTrace:
    """The synthetic trace with HOSTILE_KERNELS names and HOSTILE_MACHINE metadata."""
    import pyarrow.parquet as pq
    table = pq.read_table(trace_file)
    names = table.column(schema.NAME).combine_chunks()
    renamed = pa.array([HOSTILE_KERNELS.get(n, n) for n in names.dictionary.to_pylist()])
    table = table.set_column(table.schema.get_field_index(schema.NAME), schema.NAME,
                             pa.DictionaryArray.from_arrays(names.indices, renamed))
    meta = dict(table.schema.metadata)
    meta[schema.META_MACHINE] = json.dumps(HOSTILE_MACHINE).encode()
    path = tmp_path_factory.mktemp("hostile") / "trace.parquet"
    syn.write(table.replace_schema_metadata(meta), path)
    return HostileTrace(path, tuple(HOSTILE_KERNELS.values()), HOSTILE_MACHINE)


@pytest.fixture
def snapshot():
    """snapshot(folder): every file under `folder` with its bytes (to check that inputs are left as they were)."""
    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    return files
