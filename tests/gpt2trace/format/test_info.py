"""gpt2trace.format.info: `file_info` (rank group by rank group) gives `trace_info` of the whole trace."""
from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.errors import TraceError
from gpt2trace.format.info import file_info, trace_info
from gpt2trace.format.reader import load
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).parents[3] / "sample_traces"


@pytest.mark.parametrize("name", ["small_8ranks_3d.parquet", "tiny_2ranks_tasks.parquet", "tiny_2threads.parquet"])
@pytest.mark.parametrize("group_records", [1, 5_000, 10**9])      # one rank per group, a few, all at once
def test_file_info_equals_the_in_memory_summary(name, group_records):
    path = SAMPLES / name
    advanced = []
    assert file_info(path, group_records, advanced.append) == trace_info(load(path))
    assert sum(advanced) == pq.read_metadata(path).num_rows


def test_file_info_of_a_foreign_layout(tmp_path):
    """Ranks interleaved in time order, row groups holding several ranks."""
    table = syn.generate(syn.SyntheticConfig(ranks=3, threads=2, steps=2, layers=1, p2p=True, rss=True))
    path = tmp_path / "foreign.parquet"
    pq.write_table(table.take(pc.sort_indices(table, [(S.START_NS, "ascending")])), path, row_group_size=500)
    info = file_info(path, group_records=1)
    assert info == trace_info(load(path))
    assert info["ranks"] == 3 and info["threads_per_rank"] == {"0": 2, "1": 2, "2": 2} and info["steps"] == 2


def test_file_info_errors_are_the_readers(tmp_path):
    empty = tmp_path / "empty.parquet"
    pq.write_table(S.arrow_schema().empty_table(), empty)
    with pytest.raises(TraceError, match="the trace is empty"):
        file_info(empty)
