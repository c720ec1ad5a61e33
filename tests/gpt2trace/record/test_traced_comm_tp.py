"""The trace of a real 3D run (`gpt2trace run --ranks 8 --tp 2 --pp 2`, 2 data-parallel replicas under ZeRO-1,
oversubscribed): every communicator of the grid, every collective matched across its communicator's ranks, the
tensor-parallel all-reduces where Megatron's f and g operators sit, and states partitioning each thread's span."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.reader import load

# rank = (dp * 2 + pp) * 2 + tp. Ids: the k-th Split of the run gives its groups k * 8 + lowest rank: tp (k=1),
# pp (k=2), dp (k=3), embed (k=4: first and last stage of each pipeline, one per tensor-parallel rank)
TABLE = [(0, "world", tuple(range(8))),
         (8, "tp", (0, 1)), (10, "tp", (2, 3)), (12, "tp", (4, 5)), (14, "tp", (6, 7)),
         (16, "pp", (0, 2)), (17, "pp", (1, 3)), (20, "pp", (4, 6)), (21, "pp", (5, 7)),
         (24, "dp", (0, 4)), (25, "dp", (1, 5)), (26, "dp", (2, 6)), (27, "dp", (3, 7)),
         (32, "embed", (0, 2)), (33, "embed", (1, 3)), (36, "embed", (4, 6)), (37, "embed", (5, 7))]


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("tp") / "trace.parquet"
    out = subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--model", "tiny", "-T", "16", "-B", "2",
                          "--steps", "2", "--threads", "1", "--ranks", "8", "--tp", "2", "--pp", "2",
                          "--grad-accum", "2", "--dp-sync", "zero1", "--trace", str(path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return load(path)


def _calls(trace):
    c = trace.records(S.Kind.COMM).to_pandas()
    c["group"] = c[S.COMMUNICATOR].map({cid: comm.name for cid, comm in trace.communicators.items()})
    return c


@pytest.mark.mpi
def test_the_grid_makes_every_communicator(trace):
    assert sorted((c.id, c.name, c.ranks) for c in trace.communicators.values()) == TABLE


@pytest.mark.mpi
def test_every_collective_matches_across_its_communicators_ranks(trace):
    coll = _calls(trace)
    coll = coll[coll[S.SEQ].notna()]
    for (cid, seq), g in coll.groupby([S.COMMUNICATOR, S.SEQ]):
        assert sorted(g[S.RANK]) == sorted(trace.communicators[int(cid)].ranks), (cid, seq)
        assert g[S.NAME].nunique() == 1 and g[S.BYTES].nunique() == 1, (cid, seq)
    assert set(coll["group"]) == {"tp", "pp", "dp", "embed"}


@pytest.mark.mpi
def test_tensor_parallel_all_reduces_sit_where_megatron_puts_them(trace):
    # tiny: 2 layers, one per stage; 2 micro-batches of 2 x 16 tokens, C = 32: each all-reduce is 2*16*32 floats
    # (4 KiB) except the cross-entropy's (2*16 maxima: 128 B; 2*16 x (sum, target logit): 256 B) and the norm's 8 B.
    # Per step: stage 0 = per micro-batch (embedding 1 + layer forward 2 + layer backward 2) x 2 + norm 1 = 11;
    # stage 1 = (layer forward 2 + cross-entropy 2 + head backward 1 + layer backward 2) x 2 + norm 1 = 15
    c = _calls(trace)
    tp = c[(c["group"] == "tp") & (c[S.STEP] == 1)]
    assert set(tp[S.NAME]) == {"MPI_Allreduce"}
    per_rank = tp.groupby(S.RANK).size().to_dict()
    assert per_rank == {0: 11, 1: 11, 2: 15, 3: 15, 4: 11, 5: 11, 6: 15, 7: 15}
    sizes = tp[tp[S.RANK] == 2][S.BYTES].value_counts().to_dict()
    assert sizes == {4096: 10, 128: 2, 256: 2, 8: 1}


@pytest.mark.mpi
def test_states_partition_each_threads_span(trace):
    st = trace.records(S.Kind.STATE).to_pandas()
    assert sorted(st[S.RANK].unique()) == list(range(8))
    for (rank, thread), g in st.groupby([S.RANK, S.THREAD]):
        g = g.sort_values(S.START_NS)
        rank_states = st[st[S.RANK] == rank]
        s, e = g[S.START_NS].to_numpy(), g[S.END_NS].to_numpy()
        assert s[0] == rank_states[S.START_NS].min() and e[-1] == rank_states[S.END_NS].max()
        assert (s[1:] == e[:-1]).all(), (rank, thread)
