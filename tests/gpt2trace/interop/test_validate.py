"""What an export refuses before writing anything (`interop.validate`), and what it accepts: both formats, from a
Parquet file (streamed, batch by batch) and from a trace in memory. Times are in ns (US = 1000 ns)."""
import chrome_checker
import prv_checker
import pytest
from typer.testing import CliRunner

from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.interop.chrome_export import export_chrome
from gpt2trace.interop.layout import scan
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.source import open_source
from gpt2trace.testing import synthetic as syn

US = 1e-6
RUN, IDLE = State.RUNNING, State.IDLE


def _base(rank=0, thread=0):
    return syn.state(rank, thread, 0, 4 * US, RUN)


REFUSED = [
    ("kernel ends before it starts",
     [_base(), syn.kernel(0, 0, 1.5 * US, 1 * US, "k")],
     "a kernel record 'k' on rank 0 thread 0 ends before it starts (start 1500 ns, end 1000 ns)"),
    ("negative time",
     [syn.state(0, 0, -1 * US, 4 * US, RUN)],
     "a state record on rank 0 thread 0 starts at -1000 ns"),
    ("states overlap",
     [_base(), syn.state(1, 1, 0, 2 * US, RUN), syn.state(1, 1, 1 * US, 4 * US, IDLE)],
     "state records overlap on rank 1 thread 1: the one over [1000, 4000] ns starts before the one over "
     "[0, 2000] ns ends"),
    ("a zero-length state inside another",
     [syn.state(0, 0, 0, 4 * US, RUN), syn.state(0, 0, 2 * US, 2 * US, IDLE)],
     "state records overlap on rank 0 thread 0: the one over [2000, 2000] ns starts before the one over "
     "[0, 4000] ns ends"),
    ("kernels cross",
     [_base(), syn.kernel(0, 0, 1 * US, 2 * US, "a"), syn.kernel(0, 0, 1.5 * US, 3 * US, "b\nc")],
     "kernel records overlap without nesting on rank 0 thread 0: 'b\\nc' [1500, 3000] ns starts inside 'a' "
     "[1000, 2000] ns and ends after it"),
    ("MPI calls cross",
     [_base(), syn.comm(0, 0, 2 * US, "MPI_Isend"), syn.comm(0, 1 * US, 3 * US, "MPI_Wait")],
     "comm records overlap without nesting on rank 0 thread 0: 'MPI_Wait' [1000, 3000] ns starts inside "
     "'MPI_Isend' [0, 2000] ns"),
    ("phases cross",
     [_base(), syn.phase(0, 0, 2 * US, "forward", 0), syn.phase(0, 1 * US, 3 * US, "backward", 0)],
     "phase records overlap without nesting on rank 0 thread 0: 'backward' [1000, 3000] ns starts inside "
     "'forward' [0, 2000] ns"),
]


@pytest.mark.parametrize("case, recs, message", REFUSED, ids=[c[0] for c in REFUSED])
@pytest.mark.parametrize("export", [export_paraver, export_chrome])
def test_refused_before_anything_is_written(tmp_path, case, recs, message, export):
    src = tmp_path / "in" / "t.parquet"
    src.parent.mkdir()
    syn.write(syn.from_records(recs), src)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(TraceError) as err:
        export(src, out / "x")
    text = str(err.value)
    assert text.startswith(f"{src}: cannot export: ") and message in text and "\n" not in text, text
    assert list(out.iterdir()) == []


# The reader refuses a record that ends before it starts itself; the others reach the exporters' checks.
@pytest.mark.parametrize("case, recs, message", REFUSED[1:], ids=[c[0] for c in REFUSED[1:]])
@pytest.mark.parametrize("export", [export_paraver, export_chrome])
def test_refused_from_a_trace_in_memory(tmp_path, case, recs, message, export):
    with pytest.raises(TraceError) as err:
        export(Trace.from_table(syn.from_records(recs)), tmp_path / "x")
    assert message in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_says_it_in_one_line(tmp_path):
    from gpt2trace.cli.main import app
    src = tmp_path / "t.parquet"
    syn.write(syn.from_records(REFUSED[4][1]), src)
    for fmt in ("paraver", "chrome"):
        r = CliRunner().invoke(app, ["export", str(src), "--format", fmt, "-o", str(tmp_path / "x")])
        lines = [ln for ln in r.output.splitlines() if ln.strip()]
        assert r.exit_code == 2 and len(lines) == 1 and "kernel records overlap without nesting" in lines[0], r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


ACCEPTED = [
    # a [0,4000] holds b [1000,2000], b holds a zero-length c at 1000; d duplicates b; e is zero-length at a's end
    [_base(), syn.kernel(0, 0, 0, 4 * US, "a"), syn.kernel(0, 0, 1 * US, 2 * US, "b"),
     syn.kernel(0, 0, 1 * US, 1 * US, "c"), syn.kernel(0, 0, 1 * US, 2 * US, "d"),
     syn.kernel(0, 0, 4 * US, 4 * US, "e")],
    # back-to-back states with a zero-length one at their boundary
    [syn.state(0, 0, 0, 2 * US, RUN), syn.state(0, 0, 2 * US, 2 * US, IDLE), syn.state(0, 0, 2 * US, 4 * US, IDLE)],
    # records of different kinds or threads may cross: a kernel across a phase's end, another thread's kernel
    [_base(), syn.state(0, 1, 0, 4 * US, RUN), syn.phase(0, 0, 2 * US, "forward", 0),
     syn.kernel(0, 0, 1 * US, 3 * US, "k"), syn.kernel(0, 1, 1.5 * US, 2.5 * US, "k")],
]


@pytest.mark.parametrize("recs", ACCEPTED)
def test_nesting_and_touching_records_export(tmp_path, recs):
    src = tmp_path / "t.parquet"
    syn.write(syn.from_records(recs), src)
    assert prv_checker.check(export_paraver(src, tmp_path / "p").prv) == []
    assert chrome_checker.check(export_chrome(src, tmp_path / "c").path) == []


def _ordered(recs, rows):
    """Writes the records in the given order and scans them `rows` at a time (the streaming check's batches)."""
    return lambda path: (syn.write(syn.from_records(recs), path), scan(open_source(path), rows=rows))


def test_a_crossing_split_over_batches_is_found(tmp_path):
    # rank 0's kernel a [0,2000] in the first batch of 2 rows, its crossing b [1000,3000] in the third: a is
    # carried over as still open at the end of the batch, b is checked against it
    recs = [_base(), syn.kernel(0, 0, 0, 2 * US, "a"), syn.state(1, 0, 0, 4 * US, RUN),
            syn.kernel(1, 0, 0, 1 * US, "x"), syn.kernel(0, 0, 1 * US, 3 * US, "b")]
    with pytest.raises(TraceError, match=r"'b' \[1000, 3000\] ns starts inside 'a' \[0, 2000\] ns"):
        _ordered(recs, rows=2)(tmp_path / "t.parquet")


def test_records_out_of_time_order_across_batches_are_checked_whole(tmp_path):
    # b comes two batches before a, which starts earlier: the streaming check cannot carry a back, notices the
    # order, and checks the whole trace at once, finding the same crossing
    recs = [_base(), syn.kernel(0, 0, 1 * US, 3 * US, "b"), syn.state(1, 0, 0, 4 * US, RUN),
            syn.kernel(1, 0, 0, 1 * US, "x"), syn.kernel(0, 0, 0, 2 * US, "a")]
    with pytest.raises(TraceError, match=r"'b' \[1000, 3000\] ns starts inside 'a' \[0, 2000\] ns"):
        _ordered(recs, rows=2)(tmp_path / "t.parquet")
    # the same out-of-order file with nesting records passes, and the layout is that of the whole trace
    recs[1] = syn.kernel(0, 0, 1 * US, 2 * US, "b")
    _, lay = _ordered(recs, rows=2)(tmp_path / "u.parquet")
    assert (lay.records, lay.ranks, lay.end_ns) == (5, 2, 4000)
