"""Reading some ranks of a trace: load(path, ranks), trace_ranks, rank_records, rank_groups, on files in the
rank-ordered layout and on files whose row groups mix ranks (older traces, other writers)."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.errors import TraceError
from gpt2trace.format.rank_order import RankOrderedWriter, mixed_groups
from gpt2trace.format.reader import load, rank_groups, rank_records, trace_ranks
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).parents[3] / "sample_traces"
# 8 ranks with a communicator table; 2 ranks with every kind (tasks and their preds lists included)
SAMPLE_FILES = ("small_8ranks_3d.parquet", "tiny_2ranks_tasks.parquet")


def _decoded(column: pa.ChunkedArray) -> pa.ChunkedArray:
    column = column.combine_chunks() if column.num_chunks else pa.array([], column.type)
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def assert_same_records(part: pa.Table, expected: pa.Table) -> None:
    """Equal records, column by column (a column left out of one, null for all its records, is null in the
    other), in the same order."""
    assert part.num_rows == expected.num_rows
    for name in set(part.column_names) | set(expected.column_names):
        got = part.column(name) if name in part.column_names else pa.chunked_array([pa.nulls(part.num_rows,
                                                                                             S.FIELDS[name])])
        want = expected.column(name) if name in expected.column_names else pa.chunked_array(
            [pa.nulls(expected.num_rows, S.FIELDS[name])])
        assert _decoded(got).equals(_decoded(want)), name


def assert_subset(path: Path, ranks: list[int]) -> None:
    whole, sub = load(path), load(path, ranks=ranks)
    wanted = pa.array(ranks, pa.int32())
    kinds = [k for k, part in whole.parts.items() if pc.any(pc.is_in(part.column(S.RANK), wanted)).as_py()]
    assert list(sub.parts) == kinds
    for kind in kinds:
        part = whole.parts[kind]
        assert_same_records(sub.parts[kind], part.filter(pc.is_in(part.column(S.RANK), wanted)))
    for attr in ("path", "version", "run", "machine", "peak", "clock", "extra_columns"):
        assert getattr(sub, attr) == getattr(whole, attr), attr
    assert sub.communicators == whole.communicators       # the world of all ranks, not of those read


def _rank_ordered_copy(source: Path, target: Path, row_group: int) -> Path:
    syn.write(pq.read_table(source), target, row_group_size=row_group)
    return target


@pytest.mark.parametrize("name", SAMPLE_FILES)
def test_rank_subsets_equal_the_whole_trace_filtered(tmp_path, name):
    old = SAMPLES / name
    new = _rank_ordered_copy(old, tmp_path / name, row_group=1000)   # several groups per rank
    ranks = trace_ranks(old)
    for path in (old, new):
        for subset in ([ranks[0]], [ranks[-1]], ranks[::2], ranks):
            assert_subset(path, subset)
    assert mixed_groups(pq.ParquetFile(old).metadata) and not mixed_groups(pq.ParquetFile(new).metadata)
    counts = {r: n for r, n in zip(*(lambda v: (v.field("values").to_pylist(), v.field("counts").to_pylist()))(
        pc.value_counts(load(old).table.column(S.RANK))))}
    assert rank_records(old) == rank_records(new) == dict(sorted(counts.items()))


def test_a_file_whose_row_groups_span_ranks(tmp_path):
    """Another writer: ranks interleaved in time order, 700-row groups each holding several ranks."""
    table = syn.generate(syn.SyntheticConfig(ranks=3, threads=2, steps=2, layers=1, p2p=True, rss=True))
    table = table.take(pc.sort_indices(table, [(S.START_NS, "ascending")]))
    path = tmp_path / "foreign.parquet"
    pq.write_table(table, path, row_group_size=700)
    assert len(mixed_groups(pq.ParquetFile(path).metadata)) > 1
    for subset in ([0], [1], [2], [0, 2], [0, 1, 2]):
        assert_subset(path, subset)
    counts = pc.value_counts(table.column(S.RANK))
    assert rank_records(path) == dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))


def test_rank_groups_and_counts_from_the_footer(tmp_path):
    path = tmp_path / "t.parquet"
    with RankOrderedWriter(path, S.arrow_schema(), row_group=4) as w:
        for rank, n in ((0, 5), (1, 2), (2, 2), (4, 9), (7, 1)):
            w.write(syn.from_records([syn.counter(rank, i * 1e-6, S.Counter.LOSS, 1.0, step=i) for i in range(n)]))
    assert trace_ranks(path) == [0, 1, 2, 4, 7]
    assert rank_records(path) == {0: 5, 1: 2, 2: 2, 4: 9, 7: 1}
    # 5 | 2 + 2 | 9 (more than 5: alone) | 1
    assert rank_groups(path, 5) == [[0], [1, 2], [4], [7]]
    assert rank_groups(path, 100) == [[0, 1, 2, 4, 7]]
    assert rank_groups(path, 1) == [[0], [1], [2], [4], [7]]
    with pytest.raises(ValueError, match="max_records"):
        rank_groups(path, 0)


def test_bad_rank_requests_and_files(tmp_path):
    path = SAMPLES / "tiny_2ranks_allreduce.parquet"
    with pytest.raises(TraceError, match=r"no records of rank\(s\) 5; the trace holds ranks 0-1"):
        load(path, ranks=[1, 5])
    with pytest.raises(TraceError, match="no such trace file"):
        load(tmp_path / "missing.parquet", ranks=[0])
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(TraceError, match="not a Parquet file"):
        rank_records(tmp_path / "x.parquet")
    nulls = tmp_path / "nulls.parquet"
    table = syn.from_records([syn.counter(0, 0, "loss", 1, 0), syn.counter(1, 0, "loss", 1, 0)])
    table = table.set_column(1, S.RANK, pa.array([0, None], pa.int32()))
    pq.write_table(table, nulls)
    with pytest.raises(TraceError, match="'rank' has null values"):
        load(nulls, ranks=[0])


# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report this test process's peak
_PEAK = """
import json, sys
from gpt2trace.format.reader import load
load(sys.argv[1])                                    # a first load's fixed cost (kernels, pools), on a tiny trace
ranks = json.loads(sys.argv[3])
if ranks != "none":
    trace = load(sys.argv[2], ranks=ranks)
print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM")))
"""


def _peak_kb(path: Path, ranks) -> int:
    """The peak RSS of a fresh process loading `ranks` of `path` (None: all, "none": nothing) after a tiny trace.
    VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report this test process's peak."""
    out = subprocess.run([sys.executable, "-c", _PEAK, str(SAMPLES / "tiny_2ranks_allreduce.parquet"), str(path),
                          json.dumps(ranks)], check=True, capture_output=True, text=True)
    return int(out.stdout)


def test_one_rank_of_a_big_file_takes_a_fraction_of_the_memory(tmp_path):
    """5 M records over 16 ranks: one rank is 1/16 of the records. Measured (pyarrow 26, mimalloc): the whole file
    ~530 MB above a process that loaded a tiny trace, one rank ~130 MB: a row group's decode and the split by
    kind hold a few copies of a batch at once, which dominates for a single rank."""
    cfg = syn.SyntheticConfig(ranks=16, threads=4, layers=12, seed=3)
    cfg = replace(cfg, steps=-(-5_000_000 // syn.records_per_step(cfg)))
    path = tmp_path / "big.parquet"
    pieces = syn.generate_by_rank(cfg)
    first = next(pieces)
    with RankOrderedWriter(path, first.schema) as w:
        w.write(first)
        for table in pieces:
            w.write(table)
    assert w.records >= 5_000_000
    base, whole, one = _peak_kb(path, "none"), _peak_kb(path, None), _peak_kb(path, [7])
    assert (one - base) < 0.35 * (whole - base), (base, whole, one)
