"""Data-parallel strategies under real `mpiexec`: each one equals a 1-rank run on the global batch."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.dp import DPSync, shard_bounds

SCRIPT = Path(__file__).parent / "mpi" / "dp_equivalence.py"


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])   # 3 ranks x 2 threads oversubscribe the 2-core machine on purpose
def test_every_strategy_matches_one_rank_on_the_global_batch(ranks):
    out = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(SCRIPT)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ranks"] == ranks
    assert set(result["strategies"]) == {s.value for s in DPSync} | {"allreduce+scatter"}
    for name, r in result["strategies"].items():
        assert r["max_param_diff_across_ranks"] == 0.0, name      # replicas stay bit-identical
        assert r["max_rel_loss_err"] <= 1e-5, (name, r["losses"], r["reference"])
        assert r["max_rel_norm_err"] <= 1e-5, name
        assert r["ok"], name


@pytest.mark.parametrize("n,ranks", [(10, 3), (2, 3), (7, 1), (12, 4)])
def test_shards_partition_the_buffer(n, ranks):
    bounds = [shard_bounds(n, ranks, r) for r in range(ranks)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1      # e.g. 10 over 3 ranks: 3, 3, 4
