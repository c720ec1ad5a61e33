"""The committed sample traces (sample_traces/make_samples.py) pass the invariants and stay small."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.mpi_calls import COMPLETIONS, TEST
from gpt2trace.format.reader import load
from gpt2trace.testing.invariants import check_messages, check_tasks, check_trace

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
FILES = sorted(SAMPLES.glob("*.parquet"))
ONE_RANK = [f for f in FILES if "ranks" not in f.name]
MPI = [f for f in FILES if "ranks" in f.name]
MAX_BYTES = 2_000_000
# Samples made before schema version 2 (no `communicator` column): kept as they are, to test reading old traces.
VERSION_1 = {"tiny_1thread.parquet", "tiny_2threads.parquet", "tiny_2threads_accum2.parquet",
             "small_2threads.parquet", "tiny_2ranks_allreduce.parquet", "tiny_2ranks_overlap.parquet"}


def test_the_samples_are_there():
    assert {f.name for f in FILES} >= {"tiny_1thread.parquet", "tiny_2threads.parquet",
                                       "tiny_2ranks_allreduce.parquet"}
    readme = (SAMPLES / "README.md").read_text()
    assert all(f"`{f.name}`" in readme for f in FILES)


@pytest.mark.parametrize("path", ONE_RANK, ids=[f.name for f in ONE_RANK])
def test_sample_trace(path):
    assert path.stat().st_size < MAX_BYTES
    run = load(path).run
    train, par = run["train"], run["parallel"]
    check_trace(path, threads=par["threads"], steps=train["steps"], grad_accum=train["grad_accum"],
                n_layer=run["model"]["n_layer"], tokens=train["batch_size"] * train["seq_len"] * train["grad_accum"],
                lr=train["lr"], version=1 if path.name in VERSION_1 else S.SCHEMA_VERSION,
                rss=path.name not in VERSION_1)       # those were recorded before the tracer sampled memory


@pytest.mark.parametrize("path", MPI, ids=[f.name for f in MPI])
def test_mpi_sample_trace(path):
    """Every rank traced, each (rank, thread) partitioning its rank's span, every collective on all its
    communicator's ranks, every point-to-point send received on its peer (the pipeline samples' activations and
    gradients)."""
    assert path.stat().st_size < MAX_BYTES
    trace = load(path)
    ranks = trace.run["parallel"]["ranks"]
    assert ranks == int(path.name.split("_")[1].removesuffix("ranks")) and trace.clock["ranks"] == ranks
    st = trace.records(S.Kind.STATE).to_pandas()
    assert sorted(st[S.RANK].unique()) == list(range(ranks))
    for (rank, thread), g in st.groupby([S.RANK, S.THREAD]):
        g = g.sort_values(S.START_NS)
        assert (g[S.START_NS].to_numpy()[1:] == g[S.END_NS].to_numpy()[:-1]).all(), (rank, thread)
    comm = trace.records(S.Kind.COMM).to_pandas()
    if S.COMMUNICATOR not in comm:                   # version 1: every call on the world
        comm[S.COMMUNICATOR] = 0
    # collectives and their postings; a completion (a Wait, a successful Test) names the seq of what it completed
    coll = comm[comm[S.SEQ].notna() & ~comm[S.NAME].isin([TEST, *COMPLETIONS])]
    per_seq = coll.groupby([comm[S.COMMUNICATOR].fillna(0), S.SEQ])[S.RANK].apply(sorted)
    assert len(per_seq) > 0
    for (cid, _), ranks in per_seq.items():
        assert ranks == sorted(trace.communicators[int(cid)].ranks)
    check_messages(trace)
    check_tasks(trace)          # a task-based sample: its graph, bodies and runtime states (else nothing to check)


@pytest.mark.parametrize("name", ["small_2ranks_pp2_1f1b.parquet", "small_2ranks_pp2_gpipe.parquet"])
def test_pipeline_samples_carry_each_micro_batchs_messages(name):
    # 2 stages, 4 micro-batches, 8 steps: rank 1 receives 4 activations a step (tag 2m), rank 0 4 gradients
    # (tag 2m + 1), each MPI_Recv with the micro-batch m it carries, on the `pp` communicator, from the other rank
    trace = load(SAMPLES / name)
    comm = trace.records(S.Kind.COMM).to_pandas()
    recv = comm[comm[S.NAME] == "MPI_Recv"]
    pp = next(c.id for c in trace.communicators.values() if c.name == "pp")
    assert (recv[S.COMMUNICATOR] == pp).all()
    for rank, kind in ((1, 0), (0, 1)):
        mine = recv[recv[S.RANK] == rank]
        assert len(mine) == 8 * 4 and (mine[S.PEER] == 1 - rank).all()
        assert (mine[S.TAG] == 2 * mine[S.MICROSTEP] + kind).all()
        assert sorted(mine[S.MICROSTEP].value_counts().to_dict().items()) == [(m, 8) for m in range(4)]
