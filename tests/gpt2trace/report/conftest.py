"""Traces for the report tests: a real sample trace, a 2-rank synthetic trace with MPI calls, a pipeline, a large
synthetic trace, and a trace whose every string is an attempt at script injection. Browser fixtures: Debian's chromium
driven by Playwright (a missing chromium is a failure, not a skip: `make install-test` installs it), and a
screenshot folder whose path the run prints at the end."""
from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from report_traces import FILE_EVIL, KERNEL_EVIL, META_EVIL, MPI_EVIL, PHASE_EVIL

from gpt2trace.format import schema
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp
from gpt2trace.testing import synthetic_tasks as tk

SCREENSHOTS = pytest.StashKey[Path]()
REPO = Path(__file__).resolve().parents[3]
SAMPLE = REPO / "sample_traces" / "tiny_2threads.parquet"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

@pytest.fixture(scope="session")
def sample_trace(request) -> Path:
    """sample_traces/tiny_2threads.parquet, or a tiny 2-thread run made here when the samples are not there."""
    if SAMPLE.is_file():
        return SAMPLE
    return request.getfixturevalue("real_trace")(threads=2, steps=5).path


@pytest.fixture(scope="session")
def two_rank_trace(tmp_path_factory) -> Path:
    """2 ranks x 2 threads, 4 steps, one MPI_Allreduce per step; rank 1 is 30 % slower (rank 0 waits)."""
    path = tmp_path_factory.mktemp("two_rank") / "two_rank.parquet"
    syn.write(syn.generate(syn.SyntheticConfig(ranks=2, threads=2, steps=4, layers=2, late_rank=(1, 1.3))), path)
    return path


@pytest.fixture(scope="session")
def pipeline_trace(tmp_path_factory) -> Path:
    """4 pipeline stages, 1F1B, 4 micro-batches, 3 steps; stage 1 twice as slow as the others."""
    path = tmp_path_factory.mktemp("pipeline") / "pipeline.parquet"
    syn.write(sp.generate(sp.PipelineConfig(stages=4, micro_batches=4, slow_stage=(1, 2.0))), path)
    return path


@pytest.fixture(scope="session")
def task_trace(tmp_path_factory) -> Path:
    """A task run: 2 ranks x 3 threads, 3 steps, each a random graph of 30 tasks (seeded)."""
    import numpy as np
    rng = np.random.default_rng(7)
    cfg = tk.TaskTraceConfig(threads=3, ranks=2)
    tasks = [t for rank in (0, 1) for t in tk.run_steps([tk.random_dag(rng, 30) for _ in range(3)], cfg, rank)]
    path = tmp_path_factory.mktemp("tasks") / "tasks.parquet"
    syn.write(tk.task_table(tasks, cfg), path)
    return path


@pytest.fixture(scope="session")
def large_trace(tmp_path_factory) -> Path:
    """About a million records: 8 ranks x 4 threads, 12 layers (more than the exact-record budget)."""
    path = tmp_path_factory.mktemp("large") / "large.parquet"
    cfg = syn.SyntheticConfig(ranks=8, threads=4, layers=12, steps=1, seed=1, late_rank=(3, 1.1),
                              slow_thread=(5, 3, 1.3))
    steps = -(-1_000_000 // syn.records_per_step(cfg))
    syn.write(syn.generate(replace(cfg, steps=steps)), path)
    return path


@pytest.fixture(scope="session")
def malicious_trace(tmp_path_factory) -> Path:
    """2 ranks x 2 threads; the kernel, phase and MPI names, the run metadata and the file name are markup."""
    recs = []
    for rank in (0, 1):
        recs += [syn.state(rank, 0, 0, 4, State.RUNNING), syn.state(rank, 0, 4, 6, State.GROUP_COMMUNICATION),
                 syn.state(rank, 1, 0, 1, State.SCHEDULING_FORK_JOIN), syn.state(rank, 1, 1, 4, State.RUNNING),
                 syn.state(rank, 1, 4, 6, State.IDLE),
                 syn.kernel(rank, 0, 0, 4, KERNEL_EVIL, 0, 0), syn.kernel(rank, 1, 1, 4, KERNEL_EVIL, 0, 0),
                 syn.phase(rank, 0, 4, PHASE_EVIL, 0), syn.phase(rank, 4, 6, "grad_sync", 0),
                 syn.comm(rank, 4 + rank, 6, MPI_EVIL, seq=0, nbytes=1024, step=0)]
    run = {"model": {"n_layer": META_EVIL, "n_head": 1, "n_embd": 8, "vocab_size": 16, "max_seq_len": 8},
           "train": {"batch_size": 1, "seq_len": 8, "steps": 1}, "parallel": {"ranks": 2, "threads": 2},
           "data": META_EVIL}
    machine = {"cpu": META_EVIL, "cores": 2, "hostname": KERNEL_EVIL, "packages": {META_EVIL: "1"}}
    meta = {schema.META_RUN: json.dumps(run).encode(), schema.META_MACHINE: json.dumps(machine).encode()}
    path = tmp_path_factory.mktemp("evil") / FILE_EVIL
    syn.write(syn.from_records(recs, meta), path)
    return path


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory, request) -> Path:
    """The folder screenshots go to ($GPT2TRACE_SCREENSHOTS, else under pytest's tmp dir); printed at the end."""
    chosen = os.environ.get("GPT2TRACE_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("report_screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    request.config.stash[SCREENSHOTS] = folder
    return folder


def pytest_terminal_summary(terminalreporter):
    folder = terminalreporter.config.stash.get(SCREENSHOTS, None)
    if folder is not None:
        terminalreporter.write_line(f"report screenshots: {folder}")


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium through Playwright. Missing chromium fails the test: run `make install-test`."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: browser tests need Debian's chromium; `make install-test` installs it "
                    "(apt-get install chromium)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()

