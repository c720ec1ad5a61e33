"""The resident memory the tracer samples: the reader against /proc, and a real 2-rank pipeline run under mpiexec
sampling every step (`--memory-every 0`), whose trace has one positive sample per rank at each phase end, which
`analyze` summarizes per rank."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from analysis.analyze import analyze
from gpt2trace.format import schema as S
from gpt2trace.format.reader import load
from gpt2trace.record.resident import ResidentMemory
from gpt2trace.testing.invariants import records


def test_the_reader_follows_what_the_process_touches():
    rss = ResidentMemory.open()
    try:
        with open("/proc/self/statm") as f:                    # the second field, in pages
            expected = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        before = rss.bytes()
        assert abs(before - expected) < 16 * 2**20               # the same reading, give or take a few allocations
        block = np.ones(64 * 2**20, dtype=np.uint8)              # 64 MiB, every page written
        grown = rss.bytes() - before
        assert 60 * 2**20 <= grown <= 80 * 2**20, grown
        del block
    finally:
        rss.close()


@pytest.mark.mpi
def test_a_real_pipeline_run_samples_every_ranks_memory(tmp_path):
    path = tmp_path / "trace.parquet"
    run = subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--model", "tiny", "--ranks", "2", "--pp", "2",
                          "--grad-accum", "2", "--steps", "2", "--threads", "1", "-B", "2", "-T", "16",
                          "--memory-every", "0", "--trace", str(path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    trace = load(path)
    co = records(trace, S.Kind.COUNTER)
    rss = co[co[S.NAME] == S.Counter.RSS_BYTES]
    ph = records(trace, S.Kind.PHASE)
    ph = ph[ph[S.NAME] != S.Phase.TRACE_FLUSH]
    for rank in (0, 1):
        mine = rss[rss[S.RANK] == rank]
        # one sample at each of the rank's phase ends, with its step and micro-batch; a rank of a Python process
        # with NumPy and Numba holds tens of MB at least, and less than 100 GB
        ends = ph[ph[S.RANK] == rank]
        assert sorted(mine[S.END_NS]) == sorted(ends[S.END_NS]) and len(mine) > 0
        assert ((mine[S.VALUE] > 10e6) & (mine[S.VALUE] < 100e9)).all()
        assert set(mine[S.STEP].dropna()) == {0, 1} and set(mine[S.MICROSTEP].dropna()) == {0, 1}
    mem = analyze(trace, steps="0:2")["memory"]
    assert [r["rank"] for r in mem["per_rank"]] == [0, 1]
    assert mem["peak_bytes"] == max(r["peak_bytes"] for r in mem["per_rank"]) == rss[S.VALUE].max()
