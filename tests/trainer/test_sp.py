"""Sequence parallelism under real `mpiexec`: every split, reduce variant and gradient strategy equals a 1-rank run
on the global batch, and the replicas stay bit-identical.

Tolerance RTOL = 1e-5 relative on every step's loss and gradient norm, as for data parallelism: the same float32
sums are taken in another order (attention's softmax-weighted values summed source by source, each rank's partial
parameter gradient over T/S positions then summed over ranks, vs one BLAS sum over all positions). That differs by a
few ulp (~1e-7), which AdamW's first steps amplify to ~1e-6 at most. Measured: losses <= 2e-8, gradient norms
<= 4.3e-7 relative. A real bug is orders of magnitude off: a wrong position (a token embedded at its local index),
a missing dk/dv contribution of another rank, or a missing 1/S in the gradient scale move the loss by 1e-3 or more.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainer.config import ParallelConfig, SPReduce, SPSplit
from trainer.errors import ConfigError
from trainer.parallel.grid import GridLayout, RankGrid
from trainer.parallel.split import SequenceSplit

SCRIPT = Path(__file__).parent / "mpi" / "sp_equivalence.py"
RTOL = 1e-5


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,threads", [(2, 2), (4, 1)])   # 4 ranks oversubscribe the 2-core machine on purpose
def test_sequence_parallel_matches_one_rank_on_the_global_batch(ranks, threads):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")            # as `gpt2trace run` sets when oversubscribed
    out = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(SCRIPT), str(threads)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    cases = result["cases"]
    # S=2 (and S=4 on 4 ranks, and S=2 x 2 data-parallel groups) x both splits x three reduces, plus every other
    # --dp-sync, grad_accum 2 and the scatter loader once
    assert len(cases) == (6 if ranks == 2 else 12) + 6
    assert {c.split("sp_split=")[1].split()[0] for c in cases} == {s.value for s in SPSplit}
    assert {c.split("sp_reduce=")[1].split()[0] for c in cases} == {r.value for r in SPReduce}
    for name, r in cases.items():
        assert r["max_param_diff_across_ranks"] == 0.0, name      # every rank holds the same parameters
        assert r["max_rel_loss_err"] <= RTOL, (name, r["losses"], r["reference"])
        assert r["max_rel_norm_err"] <= RTOL, name
    # an overflowing step: every rank re-runs it alone and names the first kernel with NaN/inf (the final
    # layernorm, whose weight is 3e38), rather than hanging in an exchange the others do not join
    overflow = result["overflow"]
    assert len(overflow) == ranks
    for message in overflow:
        assert message.startswith("step 0: the loss is not finite; NaN/inf first appears in kernel "
                                  "layernorm_forward (outside the layers)"), message


def test_the_grid_lays_sequence_groups_out_on_adjacent_ranks():
    # 8 ranks, sp=4: sp groups {0..3}, {4..7}; dp groups pair the same sp index: {0,4}, {1,5}, {2,6}, {3,7}
    layout = GridLayout.from_config(ParallelConfig(ranks=8, sp=4))
    assert layout.coords(6) == {"tp": 0, "sp": 2, "pp": 0, "dp": 1}
    assert layout.rank_of({"tp": 0, "sp": 2, "pp": 0, "dp": 1}) == 6
    assert layout.groups(("sp",)) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert layout.groups(("dp",)) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert layout.group(5, ("sp", "dp")) == tuple(range(8))


def test_one_process_has_a_grid_of_one():
    grid = RankGrid.build(ParallelConfig(), None)
    assert grid.size == 1 and grid.coords == {"tp": 0, "sp": 0, "pp": 0, "dp": 0}
    assert grid.comm("sp") is None and grid.grad_comm is None


@pytest.mark.parametrize("split,want", [
    ("contiguous", [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10, 11]]),
    ("interleaved", [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]),
])
def test_positions_of_each_rank(split, want):
    s = SequenceSplit(12, 4, SPSplit(split))
    np.testing.assert_array_equal(s.table(), want)
    assert sorted(s.table().reshape(-1)) == list(range(12))   # a partition of the sequence


@pytest.mark.parametrize("kwargs,field,message", [
    (dict(ranks=3, sp=2), "sp", "sp 2: must divide the 3 ranks"),
    (dict(ranks=2, sp=0), "sp", "sp 0: must be an integer >= 1"),
])
def test_bad_parallel_config_names_the_field(kwargs, field, message):
    # the CLI turns the field into the option: "--sp 2: must divide the 3 ranks: ..."
    with pytest.raises(ConfigError, match=message) as err:
        ParallelConfig(**kwargs)
    assert err.value.field == field


def test_sequence_length_must_be_a_multiple_of_the_group():
    with pytest.raises(ConfigError, match="seq_len 10: must be a multiple of --sp 4") as err:
        SequenceSplit(10, 4)
    assert err.value.field == "seq_len"

