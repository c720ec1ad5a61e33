"""Reading part of a trace: load(path, ranks, reads) keeps the kinds and columns asked for, records unchanged, and
leaves out only the checks of the columns it does not read."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_reader_ranks import SAMPLE_FILES, SAMPLES, assert_same_records

from gpt2trace.format import schema as S
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import BASE, Reads, load
from gpt2trace.testing import synthetic as syn

READS = [
    Reads(columns=(S.NAME, S.STEP, S.BYTES, S.PEER, S.SEQ, S.VALUE, S.COMMUNICATOR, S.TAG, S.MICROSTEP)),
    Reads(columns=(S.STATE, S.NAME, S.STEP, S.LAYER, S.VALUE, S.TASK, S.BLOCK, S.PREDS),
          kinds=(S.Kind.STATE, S.Kind.KERNEL, S.Kind.COUNTER, S.Kind.TASK)),
    Reads(columns=(), kinds=(S.Kind.STATE,)),
]


@pytest.mark.parametrize("name", SAMPLE_FILES)
@pytest.mark.parametrize("reads", READS)
@pytest.mark.parametrize("ranks", [None, [1]])
def test_a_read_keeps_its_kinds_and_columns_with_the_records_unchanged(name, reads, ranks):
    whole, part = load(SAMPLES / name, ranks=ranks), load(SAMPLES / name, ranks=ranks, reads=reads)
    kinds = [k for k in whole.parts if reads.kinds is None or k in reads.kinds]
    assert list(part.parts) == kinds and kinds
    for kind in kinds:
        got = part.parts[kind]
        assert set(got.column_names) <= set(BASE) | set(reads.columns)
        assert_same_records(got, whole.parts[kind].select([c for c in whole.parts[kind].column_names
                                                           if c in BASE or c in reads.columns]))
    assert part.communicators == whole.communicators


def test_reads_together_need_what_each_needs():
    a, b = Reads(columns=(S.NAME,), kinds=(S.Kind.STATE,)), Reads(columns=(S.STEP, S.NAME), kinds=None)
    assert a | b == Reads(columns=(S.NAME, S.STEP), kinds=None)
    assert a | Reads() == Reads() and a | a == a


def _null_state_ids(tmp_path: Path, ids: list[int | None]) -> Path:
    records = [syn.state(0, 0, 10 * i, 10 * i + 10, S.State.RUNNING) for i in range(len(ids))]
    table = syn.from_records(records + [syn.counter(0, 0, "loss", 1.0, 5)])
    table = table.set_column(table.schema.get_field_index(S.STATE), S.STATE, pa.array(ids + [None], pa.int16()))
    path = tmp_path / "nulls.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("ids", [[1, None], [None, None]])       # the second: the column is not even decoded
def test_null_state_ids_fail_a_read_of_them_only(tmp_path, ids):
    path = _null_state_ids(tmp_path, ids)
    with pytest.raises(TraceError, match="null 'state' id"):
        load(path)
    with pytest.raises(TraceError, match="null 'state' id"):
        load(path, reads=Reads(columns=(S.STATE,), kinds=(S.Kind.STATE,)))
    assert load(path, reads=Reads(columns=(S.NAME,))).records(S.Kind.STATE).num_rows == 2
    assert load(path, reads=Reads(columns=(S.STATE,), kinds=(S.Kind.COUNTER,))).num_rows == 1
