"""Traces of real sequence-parallel runs (`gpt2trace run --ranks 4 --sp S` under mpiexec, oversubscribed): the
communicator column.

Two runs cover every communicator the grid makes: S=2 with 2 data-parallel groups (world, two sp groups, two dp
groups; the interleaved split, reduce-scatter of dK/dV, the overlap gradient sync: nonblocking collectives and
Waitall), and S=4 contiguous with rooted reduces (the sp group is the whole world, plus its tails sp>=1, sp>=2).
Checked: the communicator table (ids by creation order x 4 + lowest rank, hand-computed below); every collective
instance (communicator, seq) has exactly its communicator's ranks, one call name, one byte count, one root that is a
member; states partition each thread's span; the column survives a Paraver export and import, both ours (ids and
names restored) and as Extrae would write it (no attribute of ours, no .gpt2trace.json: communicators from the
header's `c:` lines, the same groups).
"""
from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from gpt2trace.format import communicators as comms
from gpt2trace.format import schema as S
from gpt2trace.format.mpi_calls import ROOTED
from gpt2trace.format.reader import load
from gpt2trace.interop.loader import load as load_any
from gpt2trace.interop.paraver_export import export_paraver

RUNS = {
    "sp2_dp2": ["--sp", "2", "--sp-split", "interleaved", "--sp-reduce", "reduce-scatter", "--dp-sync", "overlap"],
    "sp4_tails": ["--sp", "4", "--sp-split", "contiguous", "--sp-reduce", "reduce"],
}
# (id, name, ranks): the world is 0; the k-th Split call of the run gives its groups k * 4 + lowest rank
TABLES = {
    "sp2_dp2": [(0, "world", (0, 1, 2, 3)), (4, "sp", (0, 1)), (6, "sp", (2, 3)), (8, "dp", (0, 2)),
                (9, "dp", (1, 3))],
    "sp4_tails": [(0, "world", (0, 1, 2, 3)), (4, "sp", (0, 1, 2, 3)), (9, "sp>=1", (1, 2, 3)),
                  (14, "sp>=2", (2, 3))],
}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}
    for name, options in RUNS.items():
        path = tmp_path_factory.mktemp(name) / "trace.parquet"
        out = subprocess.run([sys.executable, "-m", "gpt2trace", "run", "--model", "tiny", "-T", "16", "-B", "2",
                              "--steps", "2", "--threads", "1", "--ranks", "4", *options, "--trace", str(path)],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        made[name] = path
    return made


def _collectives(trace):
    c = trace.records(S.Kind.COMM).to_pandas()
    return c[c[S.SEQ].notna()]


@pytest.mark.mpi
@pytest.mark.parametrize("run", list(RUNS))
def test_the_communicator_table(traces, run):
    trace = load(traces[run])
    assert trace.version == S.SCHEMA_VERSION
    got = sorted((c.id, c.name, c.ranks) for c in trace.communicators.values())
    assert got == TABLES[run]


@pytest.mark.mpi
@pytest.mark.parametrize("run", list(RUNS))
def test_every_collective_matches_across_its_communicators_ranks(traces, run):
    trace = load(traces[run])
    table = trace.communicators
    coll = _collectives(trace)
    used = set()
    for (cid, seq), g in coll.groupby([S.COMMUNICATOR, S.SEQ]):
        members = table[int(cid)].ranks
        used.add(table[int(cid)].name)
        assert sorted(g[S.RANK]) == sorted(members), (table[int(cid)], seq)
        assert g[S.NAME].nunique() == 1 and g[S.BYTES].nunique() == 1, (cid, seq)
        if g[S.NAME].iloc[0] in ROOTED:
            assert g[S.PEER].nunique() == 1 and int(g[S.PEER].iloc[0]) in members, (cid, seq)
    if run == "sp4_tails":
        # contiguous rooted reduces: root 0 on sp, root i on sp>=i (world rank i), the last rank's alone
        tails = coll[coll[S.NAME] == "MPI_Reduce"].groupby(S.COMMUNICATOR)[S.PEER].unique()
        assert {int(k): sorted(int(p) for p in v) for k, v in tails.items()} == {4: [0], 9: [1], 14: [2]}
    assert used == {n for _, n, _ in TABLES[run]} - {"dp"}     # the dp groups carry no call in these runs


@pytest.mark.mpi
@pytest.mark.parametrize("run", list(RUNS))
def test_states_partition_each_threads_span(traces, run):
    st = load(traces[run]).records(S.Kind.STATE).to_pandas()
    assert sorted(st[S.RANK].unique()) == [0, 1, 2, 3]
    for (rank, thread), g in st.groupby([S.RANK, S.THREAD]):
        g = g.sort_values(S.START_NS)
        rank_states = st[st[S.RANK] == rank]
        s, e = g[S.START_NS].to_numpy(), g[S.END_NS].to_numpy()
        assert s[0] == rank_states[S.START_NS].min() and e[-1] == rank_states[S.END_NS].max()
        assert (s[1:] == e[:-1]).all(), (rank, thread)


def _calls(trace):
    """The MPI calls in (rank, start, name) order, with every column (the reader leaves out all-null ones)."""
    c = trace.records(S.Kind.COMM).to_pandas().sort_values([S.RANK, S.START_NS, S.NAME], kind="stable")
    return c.reset_index(drop=True).reindex(columns=[n for n in S.FIELDS if n != S.KIND])


@pytest.mark.mpi
@pytest.mark.parametrize("run", list(RUNS))
def test_the_communicator_column_survives_paraver_export_and_import(traces, run, tmp_path):
    original = load(traces[run])
    export_paraver(traces[run], tmp_path / "t")
    back = load_any(tmp_path / "t.prv")
    assert back.communicators == original.communicators
    a, b = _calls(original), _calls(back)
    assert len(a) == len(b)
    np.testing.assert_array_equal(a[S.COMMUNICATOR].fillna(-1), b[S.COMMUNICATOR].fillna(-1))
    np.testing.assert_array_equal(a[S.SEQ].fillna(-1), b[S.SEQ].fillna(-1))
    # The header lists each communicator as Extrae does: c:<appl>:<id + 1>:<n>:<tasks, 1-based>
    header = (tmp_path / "t.prv").read_text().splitlines()[1:1 + len(TABLES[run])]
    assert header == [f"c:1:{i + 1}:{len(r)}:" + ":".join(str(x + 1) for x in r) for i, _, r in TABLES[run]]


@pytest.mark.mpi
@pytest.mark.parametrize("run", list(RUNS))
def test_an_extrae_style_trace_gets_its_communicators_from_the_header(traces, run, tmp_path):
    original = load(traces[run])
    export_paraver(traces[run], tmp_path / "t")
    # As Extrae writes it: no attribute of ours for the communicator, no .gpt2trace.json beside the .prv
    prv = tmp_path / "t.prv"
    prv.write_text(re.sub(r":71000007:\d+", "", prv.read_text()))
    (tmp_path / "t.gpt2trace.json").unlink()
    back = load_any(prv)
    # the world keeps id 0; the others are numbered 1, 2, ... in the header's order and named after their
    # Paraver id (ours + 1); each has the same ranks as before
    expect = {0: ("world", TABLES[run][0][2])}
    expect.update({k: (f"comm{i + 1}", r) for k, (i, _, r) in enumerate(TABLES[run][1:], start=1)})
    assert {c.id: (c.name, c.ranks) for c in back.communicators.values()} == expect
    relabel = {i: k for k, (i, _, _) in enumerate(TABLES[run])}
    a, b = _calls(original), _calls(back)
    coll = a[S.SEQ].notna().to_numpy()
    # Extrae gives a communicator to collectives only; every one maps back to the same group
    np.testing.assert_array_equal(a[S.COMMUNICATOR][coll].map(relabel), b[S.COMMUNICATOR][coll])
    assert comms.WORLD_ID in set(b[S.COMMUNICATOR][coll])


@pytest.mark.mpi
@pytest.mark.parametrize("run", list(RUNS))
def test_the_communicator_column_survives_otf2_export_and_import(traces, run, tmp_path):
    from gpt2trace.interop.otf2_export import export_otf2
    original = load(traces[run])
    out = export_otf2(traces[run], tmp_path / "arch")
    back = load_any(out.anchor)
    assert back.communicators == original.communicators
    a, b = _calls(original), _calls(back)
    for col in (S.COMMUNICATOR, S.SEQ, S.PEER):
        np.testing.assert_array_equal(a[col].fillna(-1), b[col].fillna(-1))
    # In the archive a root is a rank of its communicator, as MPI numbers it: sp>=2 = {2, 3} reduces to its rank 0,
    # world rank 2 (otf2-print, Debian's reader of the OTF2 library, resolves it to that rank's location)
    if run == "sp4_tails":
        printed = subprocess.run(["otf2-print", str(out.anchor)], capture_output=True, text=True, check=True).stdout
        assert 'Operation: REDUCE, Communicator: "sp>=2" <3>, Root: 0 ("rank 2 thread 0" <2>)' in printed
