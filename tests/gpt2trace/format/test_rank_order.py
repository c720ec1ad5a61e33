"""The rank-ordered layout: RankOrderedWriter's row groups and index, and the footer readers of rank_order."""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.errors import OutputError, TraceError
from gpt2trace.format.rank_order import RANK_INDEX, RankOrderedWriter, mixed_groups, rank_counts, rank_row_groups
from gpt2trace.format.reader import load, trace_ranks
from gpt2trace.testing.synthetic import counter, from_records


def _counters(rank: int, n: int, t0: int = 0) -> pa.Table:
    return from_records([counter(rank, (t0 + i) * 1e-6, S.Counter.LOSS, i, step=i) for i in range(n)])


def test_rank_groups_never_mix_and_the_index_names_them(tmp_path):
    path = tmp_path / "t.parquet"
    with RankOrderedWriter(path, S.arrow_schema(), row_group=4) as w:
        w.write(_counters(0, 3))
        w.write(_counters(0, 3, t0=3))              # rank 0 continues: 6 rows -> groups of 4 and 2
        w.write(pa.concat_tables([_counters(2, 1), _counters(5, 9)]))   # two ranks in one call
    meta = pq.ParquetFile(path).metadata
    groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    assert groups == [4, 2, 1, 4, 4, 1]
    assert json.loads(meta.metadata[RANK_INDEX]) == {"row_groups": {"0": [0, 1], "2": [2, 2], "5": [3, 5]},
                                                     "records": {"0": 6, "2": 1, "5": 9}}
    assert rank_row_groups(meta) == {0: [0, 1], 2: [2], 5: [3, 4, 5]}
    assert rank_counts(meta) == {0: 6, 2: 1, 5: 9} and mixed_groups(meta) == set()
    table = pq.read_table(path)
    assert table.column(S.RANK).to_pylist() == [0] * 6 + [2] + [5] * 9
    # order within a rank kept: rank 0's values 0..2 then 0..2 again
    assert table.column(S.VALUE).to_pylist()[:6] == [0, 1, 2, 0, 1, 2]
    assert not (tmp_path / ".t.parquet.tmp").exists()


def test_a_lower_rank_after_a_higher_one_is_an_error_and_leaves_the_old_file(tmp_path):
    path = tmp_path / "t.parquet"
    path.write_bytes(b"the previous trace")
    with pytest.raises(ValueError, match="records of rank 1 after records of rank 3"):
        with RankOrderedWriter(path, S.arrow_schema()) as w:
            w.write(_counters(3, 2))
            w.write(_counters(1, 2))
    assert path.read_bytes() == b"the previous trace" and not (tmp_path / ".t.parquet.tmp").exists()
    with pytest.raises(ValueError, match="rank 0 after records of rank 4"):
        with RankOrderedWriter(path, S.arrow_schema()) as w:
            w.write(pa.concat_tables([_counters(4, 1), _counters(0, 1)]))


def test_files_without_the_index_are_read_by_statistics(tmp_path):
    path = tmp_path / "old.parquet"
    table = pa.concat_tables([_counters(r, 3) for r in (0, 1, 1, 2, 4)])
    pq.write_table(table, path, row_group_size=4)     # groups: ranks 0-1, 1, 1-2 (+2), 2-4 ... spanning ranks
    meta = pq.ParquetFile(path).metadata
    assert rank_counts(meta) is None
    lo_hi = [(meta.row_group(g).column(1).statistics.min, meta.row_group(g).column(1).statistics.max)
             for g in range(meta.num_row_groups)]
    assert lo_hi == [(0, 1), (1, 1), (1, 2), (4, 4)]
    assert rank_row_groups(meta) == {0: [0], 1: [0, 1, 2], 2: [2], 4: [3]}
    assert mixed_groups(meta) == {0, 2}


def test_a_damaged_index_is_a_trace_error(tmp_path):
    path = tmp_path / "t.parquet"
    with RankOrderedWriter(path, S.arrow_schema()) as w:
        w.write(_counters(0, 2))
    good = pq.ParquetFile(path)
    table = good.read()
    bad = tmp_path / "bad.parquet"
    with pq.ParquetWriter(bad, table.schema) as w:
        w.write_table(table)
        w.add_key_value_metadata({RANK_INDEX: b'{"row_groups": {"0": [0, 7]}, "records": {"0": 2}}'})
    with pytest.raises(TraceError, match="names row groups the file does not have"):
        rank_row_groups(pq.ParquetFile(bad).metadata, bad)
    assert np.array_equal(rank_row_groups(good.metadata)[0], [0])


def test_names_that_are_not_utf8_and_unwritable_places(tmp_path):
    path = tmp_path / os.fsdecode(b"trace-\xff.parquet")
    with RankOrderedWriter(path, S.arrow_schema()) as w:
        w.write(pa.concat_tables([_counters(0, 2), _counters(3, 1)]))
    assert trace_ranks(path) == [0, 3] and load(path, ranks=[3]).num_rows == 1
    with pytest.raises(OutputError, match="cannot write .*missing"):
        with RankOrderedWriter(tmp_path / "missing" / "t.parquet", S.arrow_schema()) as w:
            w.write(_counters(0, 1))
