"""The runner API end to end on the built-in corpus: the demo learns, and a seed makes a run reproducible; the
memory check before a run counts the strategy's buffers; the run metadata holds the rank grid, which a real 4-rank
run's trace and its analysis read."""
from __future__ import annotations

import math
import subprocess
import sys

import pytest

import trainer.memory as memory
from analysis.analyze import analyze
from gpt2trace.format import grid
from gpt2trace.format.reader import load
from gpt2trace.run.preflight import check_run
from gpt2trace.run.runner import RunConfig, TraceConfig, prepare_process, run, run_config_json
from trainer.config import DPSync, ParallelConfig, TrainConfig, model_config
from trainer.errors import TrainerError
from trainer.parallel.grid import GridLayout
from trainer.params import ParamLayout


def _losses(steps: int, threads: int, seed: int = 1337) -> list[float]:
    prepare_process(threads)
    cfg = RunConfig(model_config("small"), TrainConfig(batch_size=4, seq_len=64, steps=steps, lr=1e-3, seed=seed),
                    ParallelConfig(threads=threads), TraceConfig(None))
    return [m.loss for m in run(cfg).history]


def test_demo_loss_falls_well_below_ln_v_on_the_built_in_corpus():
    losses = _losses(steps=40, threads=2)
    ln_v = math.log(model_config("small").vocab_size)   # 6.238: what a model that ignores context scores
    assert abs(losses[0] - ln_v) < 0.15                # the untrained model starts there
    # the corpus' entropy rate is ln 4 = 1.386 (trainer.data.synthetic_corpus); 40 steps at lr 1e-3 get a
    # small GPT-2 far below ln V (measured: 6.28 at step 0, 3.82 after 40 steps, 2.81 after 60)
    assert losses[-1] < ln_v - 1.0


def test_same_seed_same_run_other_seed_other_run():
    a, b = _losses(steps=3, threads=2), _losses(steps=3, threads=2)
    assert a == b                                       # bit-identical: fixed blocks, fixed summation orders
    assert _losses(steps=3, threads=2, seed=7) != a


def test_the_memory_check_before_a_run_counts_zero2s_sharded_gradients(monkeypatch):
    # tiny, B=2 T=16 on 2 ranks of this node: activations 382,336 bytes a rank (tests/trainer/test_memory.py);
    # training buffers zero1 485,632, zero2 434,816 (tests/trainer/test_dp.py), beside each process's baseline. A
    # machine with room for 2 x zero2 but not 2 x zero1 takes the one and refuses the other.
    layout = ParamLayout.for_model(model_config("tiny"))
    zero1, zero2 = (memory.training_bytes(layout, s, 2) + 382_336 for s in (DPSync.zero1, DPSync.zero2))
    room = memory.estimate(model_config("tiny"), 2, 16, dp_sync=DPSync.zero2, grad_ranks=2).on_node(2)
    monkeypatch.setattr(memory, "available_bytes", lambda: room)   # the node's two ranks of zero2, nothing more

    def cfg(sync: DPSync) -> RunConfig:
        return RunConfig(model_config("tiny"), TrainConfig(batch_size=2, seq_len=16, steps=1),
                         ParallelConfig(ranks=2, dp_sync=sync), TraceConfig(None))

    check_run(cfg(DPSync.zero2), processes_here=2)
    with pytest.raises(TrainerError, match="the run needs about 2 ranks x "):
        check_run(cfg(DPSync.zero1), processes_here=2)
    assert 2 * zero1 > 2 * zero2


@pytest.mark.parametrize("par", [ParallelConfig(), ParallelConfig(ranks=4), ParallelConfig(ranks=8, sp=2, pp=2),
                                 ParallelConfig(ranks=6, pp=2), ParallelConfig(ranks=4, sp=4)],
                         ids=lambda p: f"ranks{p.ranks}_sp{p.sp}_pp{p.pp}")
def test_the_run_metadata_carries_the_grid_the_ranks_are_split_by(par):
    # the trace format reads each rank's coordinates from the key; they must be the trainer's (RankGrid.build)
    meta = run_config_json(RunConfig(model_config("tiny"), TrainConfig(), par), 1)
    layout = GridLayout.from_config(par)
    assert meta["grid"] == {"dims": [[n, d] for n, d in layout.dims]}
    g = grid.from_run(meta, par.ranks)
    assert g.source == grid.FROM_GRID and all(g.coords(r) == layout.coords(r) for r in range(par.ranks))


def test_a_real_3_dimensional_run_gets_its_coordinates_and_communication_per_dimension(tmp_path):
    # 4 ranks under the real mpiexec (oversubscribed on 2 cores): sp 2 x pp 2 x dp 1, so rank = pp x 2 + sp
    trace_path = tmp_path / "t.parquet"
    r = subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--ranks", "4", "--sp", "2", "--pp", "2",
                        "--model", "tiny", "-B", "2", "-T", "16", "--steps", "3", "--grad-accum", "2",
                        "--threads", "1", "--trace", str(trace_path)], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    trace = load(trace_path)
    g = grid.of_trace(trace)                 # checked against the communicators the ranks created
    assert (g.dims, g.source, g.note) == ((("tp", 1), ("sp", 2), ("pp", 2), ("dp", 1)), grid.FROM_GRID, None)
    assert [g.label(rank) for rank in range(4)] == ["pp 0 sp 0", "pp 0 sp 1", "pp 1 sp 0", "pp 1 sp 1"]
    result = analyze(trace)
    assert result["summary"]["degrees"] == "dp 1 x tp 1 x pp 2 x sp 2" and result["warnings"] == []
    dims = {d["dimension"]: d for d in result["comm_dimensions"]}
    # dp is 1: the gradient sync runs on the sp group (the trainer's grad communicator is the sp one); the
    # embedding group (each pipeline's first and last stage) is pipeline communication
    assert {k: d["communicators"] for k, d in dims.items()} == {"sp": ["sp"], "pp": ["embed", "pp"]}
    # per step and rank, 2 micro-batches: 2 MPI_Isend, their 2 MPI_Wait and 2 MPI_Recv (an activation or a
    # gradient each way), the pipeline's MPI_Allreduce and MPI_Bcast, and the embedding group's MPI_Allreduce: 9
    assert (dims["pp"]["calls_per_step"], dims["pp"]["ranks"]) == (9, 4)
