"""Our traces as Paraver traces: the exact lines of a tiny trace, the strict checker on real and synthetic exports,
gzip, the external merge sort (what cannot be exported: test_validate.py)."""
from datetime import datetime
from pathlib import Path

import numpy as np
import prv_checker
import pyarrow as pa
import pytest

from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.interop.linesort import LineSorter
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_pcf import read_pcf
from gpt2trace.testing import synthetic as syn

US = 1e-6
DATE = datetime(2024, 2, 1, 3, 4)


def tiny() -> Trace:
    """2 ranks x 1 thread over 1000 ns: rank 0 Running [0,500] then MPI_Allreduce [500,1000] (Group
    Communication), kernel k (layer 2) [100,400] and a zero-length kernel z at 400; rank 1 Running [0,600] then
    the MPI_Allreduce [600,1000]; a 'forward' phase [0,1000] on both, the loss 2.5 at 1000 on rank 0."""
    recs = [syn.state(0, 0, 0, 0.5 * US, State.RUNNING), syn.state(0, 0, 0.5 * US, US, State.GROUP_COMMUNICATION),
            syn.state(1, 0, 0, 0.6 * US, State.RUNNING), syn.state(1, 0, 0.6 * US, US, State.GROUP_COMMUNICATION),
            syn.kernel(0, 0, 0.1 * US, 0.4 * US, "k", step=0, layer=2), syn.kernel(0, 0, 0.4 * US, 0.4 * US, "z"),
            syn.phase(0, 0, US, "forward", 0), syn.phase(1, 0, US, "forward", 0),
            syn.comm(0, 0.5 * US, US, "MPI_Allreduce", seq=0, nbytes=8, step=0),
            syn.comm(1, 0.6 * US, US, "MPI_Allreduce", seq=0, nbytes=8, step=0),
            syn.counter(0, US, "loss", 2.5, 0)]
    return Trace.from_table(syn.from_records(recs))


# Sorted by time; at one instant on one thread: ends of records with a duration (the latest-started first),
# then starts (the longest first), then ends of zero-length records. Attributes follow their record's start:
# 71000002 step, 71000001 layer, 71000004 seq, 71000006 bytes; Extrae's 50100001/2 sizes, 50100004 communicator.
TINY_PRV = """\
#Paraver (01/02/2024 at 03:04):1000_ns:1(2):1:2(1:1,1:1),1
c:1:1:2:1:2
1:1:1:1:1:0:500:1
1:2:1:2:1:0:600:1
2:1:1:1:1:0:71000010:1:71000002:0
2:2:1:2:1:0:71000010:1:71000002:0
2:1:1:1:1:100:60000019:1:71000002:0:71000001:2
2:1:1:1:1:400:60000019:0
2:1:1:1:1:400:60000019:2:71000002:0
2:1:1:1:1:400:60000019:0
1:1:1:1:1:500:1000:13
2:1:1:1:1:500:50000002:10:50100001:8:50100002:8:50100004:1:71000004:0:71000006:8:71000002:0
1:2:1:2:1:600:1000:13
2:2:1:2:1:600:50000002:10:50100001:8:50100002:8:50100004:1:71000004:0:71000006:8:71000002:0
2:2:1:2:1:1000:50000002:0
2:1:1:1:1:1000:50000002:0
2:1:1:1:1:1000:71000010:0
2:2:1:2:1:1000:71000010:0
2:1:1:1:1:1000:71001001:2500000000:71000002:0
"""


def test_tiny_trace_line_by_line(tmp_path):
    out = export_paraver(tiny(), tmp_path / "tiny", date=DATE)
    assert out.prv.read_text() == TINY_PRV
    assert (out.records, out.lines, out.messages) == (11, 17, 0)
    pcf = read_pcf(out.pcf)
    assert pcf.states[13] == "Group Communication"
    assert pcf.values[60000019] == {0: "End", 1: "k", 2: "z"}
    assert pcf.values[50000002] == {0: "End", 10: "MPI_Allreduce"}
    assert pcf.types[71001001] == "gpt2trace counter loss [value x 1e-9]"
    assert out.row.read_text().startswith("LEVEL CPU SIZE 2\n")
    assert prv_checker.check(out.prv) == []


def test_checker_passes_on_exports(tmp_path, real_trace, synthetic_path, mpi_zoo_path):
    for i, source in enumerate((real_trace(threads=2, steps=3).path, synthetic_path, mpi_zoo_path)):
        out = export_paraver(source, tmp_path / f"t{i}")
        assert prv_checker.check(out.prv) == [], source
    zoo = export_paraver(mpi_zoo_path, tmp_path / "zoo")
    assert zoo.messages == 1                           # MPI_Send on rank 0 -> MPI_Recv on rank 1
    message = [ln for ln in zoo.prv.read_text().splitlines() if ln.startswith("3:")]
    # sender cpu 1 (rank 0 thread 0), logical = physical send at 1 s; receiver cpu 3 (rank 1 thread 0), receive
    # posted at 0.5 s and done at 1.5 s; 1000 bytes, tag 7
    assert message == ["3:1:1:1:1:1000000000:1000000000:3:1:2:1:500000000:1500000000:1000:7"]


def test_gzip_and_external_merge_give_the_same_lines(tmp_path, synthetic_path):
    plain = export_paraver(synthetic_path, tmp_path / "a", date=DATE)
    merged = export_paraver(synthetic_path, tmp_path / "b.prv.gz", date=DATE, run_lines=500, batch_rows=700)
    import gzip
    assert gzip.decompress(merged.prv.read_bytes()) == plain.prv.read_bytes()
    assert merged.prv.name == "b.prv.gz" and merged.pcf.name == "b.pcf"
    assert prv_checker.check(merged.prv) == []


@pytest.mark.parametrize("fan_in", [16, 2])
def test_linesort_merges_runs_in_key_order(tmp_path, fan_in):
    """7 runs: merged at once (fan-in 16), or in passes (fan-in 2: 7 runs -> 4 -> 2 -> the output)."""
    rng = np.random.default_rng(0)
    sorter = LineSorter(tmp_path, run_lines=100, block_lines=16, fan_in=fan_in)
    times = rng.integers(0, 50, 1000)
    for part in np.array_split(np.arange(1000), 7):
        sorter.add(times[part], 0, np.zeros(len(part), np.int64), pa.array([f"{times[i]} {i}\n" for i in part]))
    assert sorter.runs == 7                            # each batch of 142-143 lines fills a run of 100
    with open(tmp_path / "out", "wb") as fh:
        assert sorter.write(fh) == 1000
    got = [tuple(map(int, ln.split())) for ln in (tmp_path / "out").read_text().splitlines()]
    assert got == sorted(got)                          # by time, then arrival order
    assert not list(tmp_path.glob("gpt2trace-sort-*"))     # runs and merged runs removed


def test_unrepresentable_counters_are_counted(tmp_path):
    recs = [syn.state(0, 0, 0, US, State.RUNNING), syn.counter(0, US, "loss", float("nan"), 0),
            syn.counter(0, US, "lr", 1e-3, 0)]
    out = export_paraver(Trace.from_table(syn.from_records(recs)), tmp_path / "c")
    assert out.dropped_counters == 1
    assert out.prv.read_text().splitlines()[-1] == "2:1:1:1:1:1000:71001002:1000000:71000002:0"


def test_missing_trace_is_one_line(tmp_path):
    with pytest.raises(TraceError, match="no such trace file"):
        export_paraver(Path(tmp_path / "none.parquet"), tmp_path / "x")
