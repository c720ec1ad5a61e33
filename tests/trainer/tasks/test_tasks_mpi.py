"""`--schedule tasks` with 2 MPI ranks (real mpiexec): the numbers (tests/trainer/mpi/tasks_equivalence.py) and the
trace of `gpt2trace run --ranks 2 --schedule tasks` (one MPI_Iallreduce per layer and one for the non-layer
tensors, each completed by a recorded MPI_Test of the same collective sequence number).

Tolerances as tests/trainer/test_dp.py's (RTOL 1e-5 on losses and norms, PARAM_ATOL 5e-5 on parameters after 4
AdamW steps): the 2-rank sum of two 2-sequence gradients is another float32 order than one 4-sequence gradient.
Measured: losses <= 2.8e-9 relative, norms <= 1.9e-7, parameters <= 2.2e-6 (against forkjoin on 2 ranks: 3.2e-6).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpt2trace.format import mpi_calls
from gpt2trace.format import schema as S
from gpt2trace.format.reader import load
from gpt2trace.testing.invariants import check_tasks

SCRIPT = Path(__file__).parent.parent / "mpi" / "tasks_equivalence.py"
RTOL, PARAM_ATOL = 1e-5, 5e-5


@pytest.mark.mpi
def test_two_ranks_match_one_rank_on_the_global_batch_and_forkjoin():
    out = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(SCRIPT)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["ranks"] == 2 and set(result["cases"]) == {"1", "2"}
    for threads, r in result["cases"].items():
        assert r["replica_err"] == 0.0, threads             # the replicas stay bit-identical
        assert r["rel_loss_vs_alone"] <= RTOL, (threads, r["losses"])
        assert r["rel_norm_vs_alone"] <= RTOL, threads
        assert r["param_err_vs_alone"] <= PARAM_ATOL, threads
        assert r["rel_loss_vs_forkjoin"] <= RTOL, threads
        assert r["param_err_vs_forkjoin"] <= PARAM_ATOL, threads


@pytest.mark.mpi
def test_the_trace_records_each_reduction_and_its_completing_test(tmp_path):
    trace = tmp_path / "tasks.parquet"
    out = subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--model", "tiny", "--steps", "2", "--ranks", "2",
                          "--threads", "1", "--schedule", "tasks", "--task-block", "16", "--trace", str(trace)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    t = pq.read_table(trace, columns=["kind", "rank", "name", "seq", "step", "bytes"]).to_pandas()
    comm = t[t["kind"] == "comm"]
    for rank in (0, 1):
        mine = comm[(comm["rank"] == rank) & (comm["step"] == 1)]
        posts = mine[mine["name"] == "MPI_Iallreduce"]
        tests = mine[mine["name"] == mpi_calls.TEST]
        # tiny: 2 layers of 12,704 parameters x 4 bytes (qkvw 3,072 + fcw 4,096 + fcprojw 4,096 + attprojw 1,024
        # + biases and LayerNorms 416), and wte/wpe/lnf: 256 x 32 + 32 x 32 + 64 = 9,280 parameters
        assert sorted(posts["bytes"].tolist()) == [37_120, 50_816, 50_816]
        assert sorted(tests["seq"].tolist()) == sorted(posts["seq"].tolist())
    run = json.loads(pq.read_schema(trace).metadata[b"gpt2trace.run"])
    assert run["parallel"]["schedule"] == "tasks" and run["parallel"]["task_block"] == 16
    # the task graph as traced: ids, predecessors ending first, bodies, the runtime's states, critical paths
    loaded = load(trace)
    check_tasks(loaded)
    tasks = loaded.records(S.Kind.TASK).to_pandas()
    assert set(tasks[S.RANK]) == {0, 1} and (tasks[S.PREDS].map(len) > 0).any()
    # each reduction is a task of its own, on the main thread (MPI stays FUNNELED)
    iar = tasks[tasks[S.NAME] == "MPI_Iallreduce"]
    assert len(iar) == 2 * 2 * 3 and (iar[S.THREAD] == 0).all()
