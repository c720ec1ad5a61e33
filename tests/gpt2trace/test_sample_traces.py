"""The committed sample traces (sample_traces/make_samples.py) pass the invariants and stay small."""
from __future__ import annotations

from pathlib import Path

import pytest
from trace_invariants import check_trace

from gpt2trace.reader import load

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
FILES = sorted(SAMPLES.glob("*.parquet"))
MAX_BYTES = 2_000_000


def test_the_samples_are_there():
    assert {f.name for f in FILES} >= {"tiny_1thread.parquet", "tiny_2threads.parquet"}
    readme = (SAMPLES / "README.md").read_text()
    assert all(f"`{f.name}`" in readme for f in FILES)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_sample_trace(path):
    assert path.stat().st_size < MAX_BYTES
    run = load(path).run
    train, par = run["train"], run["parallel"]
    check_trace(path, threads=par["threads"], steps=train["steps"], grad_accum=train["grad_accum"],
                n_layer=run["model"]["n_layer"], tokens=train["batch_size"] * train["seq_len"] * train["grad_accum"],
                lr=train["lr"])
