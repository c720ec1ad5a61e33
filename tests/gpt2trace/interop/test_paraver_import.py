"""Hand-written Paraver traces: states, events named from the .pcf, messages, communicators, gzip, malformed lines.
Times are in ns; every expected number is worked out in the comments."""
import gzip
import json

import pytest
from typer.testing import CliRunner

from analysis.analyze import analyze
from gpt2trace import load
from gpt2trace.format.errors import TraceError
from gpt2trace.format.schema import META_IMPORT_NOTES, State
from gpt2trace.interop.paraver_import import import_paraver, load_paraver

HEAD = "#Paraver (01/01/2024 at 10:00):"

PCF = """DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC

STATES
0    Idle
1    Running

EVENT_TYPE
0    60000019    User function
VALUES
0      End
1      solve
2      kernel_a [a.c:3]

EVENT_TYPE
0    60000018    Executed OpenMP parallel function
VALUES
0      End
7      omp_fn

EVENT_TYPE
0    40000001    Application
7    42000050    PAPI_TOT_INS [Instr completed]
7    42000059    PAPI_TOT_CYC [Total cycles]
"""


def write(tmp_path, text: str, pcf: str | None = None, name: str = "t.prv", row: str | None = None):
    path = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    base = str(path)[:-7] if name.endswith(".gz") else str(path)[:-4]
    if pcf is not None:
        (tmp_path / (base + ".pcf")).write_text(pcf)
    if row is not None:
        (tmp_path / (base + ".row")).write_text(row)
    return path


def rows(imported, kind):
    df = imported.table.to_pandas()
    return df[df["kind"] == kind].sort_values(["rank", "thread", "start_ns"]).reset_index(drop=True)


STATES = HEAD + """1000_ns:1(2):1:1(2:1),0
1:1:1:1:1:0:600:1
1:2:1:1:2:100:900:1
1:1:1:1:1:600:1000:5
"""


def test_states_padded_to_the_header_end(tmp_path):
    imported = import_paraver(write(tmp_path, STATES, PCF))
    st = rows(imported, "state")
    # thread 0 as written; thread 1 Idle [0,100] and [900,1000] around its Running [100,900]
    assert st[["thread", "start_ns", "end_ns", "state"]].values.tolist() == [
        [0, 0, 600, 1], [0, 600, 1000, 5], [1, 0, 100, 0], [1, 100, 900, 1], [1, 900, 1000, 0]]
    assert any("padded with Idle" in n for n in imported.notes)
    pop = analyze(load_paraver(tmp_path / "t.prv"))["pop"]
    # BasicAnalysis: runtime = header end 1000 ns; useful 600 and 800 ns -> LB 700/800, CommE 800/1000
    assert pop["runtime_s"] == pytest.approx(1e-6)
    assert pop["load_balance"] == pytest.approx(0.875)
    assert pop["communication_efficiency"] == pytest.approx(0.8)
    assert pop["parallel_efficiency"] == pytest.approx(0.7)


EVENTS = HEAD + """1000_ns:1(2):1:1(2:1),0
1:1:1:1:1:0:1000:1
1:2:1:1:2:0:1000:1
2:1:1:1:1:100:60000019:1
2:1:1:1:1:200:60000019:2:42000050:5000:42000059:2500
2:1:1:1:1:300:60000019:0
2:2:1:1:2:300:60000018:7
# a comment line
2:1:1:1:1:400:60000019:0:42000050:1000
2:2:1:1:2:500:60000018:0:40000001:3
"""


def test_functions_named_from_the_pcf_and_counters(tmp_path):
    imported = import_paraver(write(tmp_path, EVENTS, PCF))
    k = rows(imported, "kernel")
    # nested user functions pair as a stack: solve [100,400] holds kernel_a [200,300]; omp_fn on thread 1
    assert k[["thread", "name", "start_ns", "end_ns"]].values.tolist() == [
        [0, "solve", 100, 400], [0, "kernel_a [a.c:3]", 200, 300], [1, "omp_fn", 300, 500]]
    c = rows(imported, "counter")
    assert sorted(zip(c["name"], c["start_ns"], c["value"])) == [
        ("PAPI_TOT_CYC", 200, 2500.0), ("PAPI_TOT_INS", 200, 5000.0), ("PAPI_TOT_INS", 400, 1000.0)]
    assert any("40000001 (Application: 1)" in n for n in imported.notes)
    out = analyze(load_paraver(tmp_path / "t.prv"))["counters"]
    # both threads Running throughout: useful instructions 6000, cycles 2500 -> IPC 2.4; the cycles were read on
    # thread 0 only, so the frequency is over its 1000 ns of useful time (thread 1's were not counted): 2.5 GHz
    assert out["ipc"] == pytest.approx(2.4)
    assert out["frequency_ghz"] == pytest.approx(2.5)


MESSAGE = HEAD + """2000_ns:1(2):1:2(1:1,1:1),0
1:1:1:1:1:0:1000:1
1:2:1:2:1:0:500:1
2:2:1:2:1:500:50000001:2
1:2:1:2:1:500:1600:3
1:1:1:1:1:1000:1500:4
2:1:1:1:1:1000:50000001:1
3:1:1:1:1:1000:1000:2:1:2:1:500:1600:4096:7
1:1:1:1:1:1500:2000:1
2:1:1:1:1:1500:50000001:0
1:2:1:2:1:1600:2000:1
2:2:1:2:1:1600:50000001:0
"""


def test_messages_give_bytes_and_peers(tmp_path):
    imported = import_paraver(write(tmp_path, MESSAGE))            # no .pcf: Extrae's names are built in
    c = rows(imported, "comm")
    assert c[["rank", "name", "start_ns", "end_ns", "bytes", "peer"]].values.tolist() == [
        [0, "MPI_Send", 1000, 1500, 4096, 1], [1, "MPI_Recv", 500, 1600, 4096, 0]]
    assert any("no t.pcf" in n for n in imported.notes)
    waits = analyze(load_paraver(tmp_path / "t.prv"))["waits"]
    # the receive was posted at 500, the send entered at 1000: Late Sender of 500 ns
    recv = next(r for r in waits["calls"] if r["name"] == "MPI_Recv")
    assert recv["wait_state"] == "Late Sender"
    assert recv["wait_s"] == pytest.approx(500e-9)


def _coll(t, task, value, size, comm, root=False):
    extra = ":50100003:1" if root else ""
    return (f"2:{task}:1:{task}:1:{t}:50000002:{value}:50100001:{size}:50100002:{size}:50100004:{comm}{extra}\n")


def _end(t, task):
    return f"2:{task}:1:{task}:1:{t}:50000002:0\n"


COLLECTIVES = HEAD + "1000_ns:1(3):1:3(1:1,1:1,1:1),2\nc:1:1:3:1:2:3\nc:1:2:2:2:3\n" + "".join([
    # states: Running outside the calls, Group Communication inside
    "1:1:1:1:1:0:100:1\n", "1:2:1:2:1:0:300:1\n", "1:3:1:3:1:0:200:1\n",
    _coll(100, 1, 7, 64, 1), "1:1:1:1:1:100:400:13\n",
    _coll(200, 3, 7, 64, 1), "1:3:1:3:1:200:400:13\n",
    _coll(300, 2, 7, 64, 1, root=True), "1:2:1:2:1:300:400:13\n",
    _end(400, 1), _end(400, 2), _end(400, 3),
    "1:1:1:1:1:400:800:1\n", "1:2:1:2:1:400:500:1\n", "1:3:1:3:1:400:600:1\n",
    _coll(500, 2, 10, 8, 2), "1:2:1:2:1:500:700:13\n",
    _coll(600, 3, 10, 8, 2), "1:3:1:3:1:600:700:13\n",
    _end(700, 2), _end(700, 3), "1:2:1:2:1:700:800:1\n", "1:3:1:3:1:700:800:1\n",
    _coll(800, 1, 10, 8, 1), _coll(800, 2, 10, 8, 1), _coll(800, 3, 10, 8, 1),
    "1:1:1:1:1:800:900:13\n", "1:2:1:2:1:800:900:13\n", "1:3:1:3:1:800:900:13\n",
    _end(900, 1), _end(900, 2), _end(900, 3),
    "1:1:1:1:1:900:1000:1\n", "1:2:1:2:1:900:1000:1\n", "1:3:1:3:1:900:1000:1\n"])


def test_communicators_roots_and_sequence_numbers(tmp_path):
    imported = import_paraver(write(tmp_path, COLLECTIVES))
    assert imported.header.communicators == {(1, 1): (1, 2, 3), (1, 2): (2, 3)}
    c = rows(imported, "comm").sort_values(["start_ns", "rank"]).fillna(-1).astype({"peer": int, "seq": int})
    # two communicators: seq = communicator id << 32 | order of the call among its rank's collectives on it
    one, two = 1 << 32, 2 << 32
    assert c[["rank", "name", "seq", "peer", "bytes"]].values.tolist() == [
        [0, "MPI_Bcast", one, 1, 64], [2, "MPI_Bcast", one, 1, 64], [1, "MPI_Bcast", one, 1, 64],
        [1, "MPI_Allreduce", two, -1, 8], [2, "MPI_Allreduce", two, -1, 8],
        [0, "MPI_Allreduce", one + 1, -1, 8], [1, "MPI_Allreduce", one + 1, -1, 8],
        [2, "MPI_Allreduce", one + 1, -1, 8]]
    waits = analyze(load_paraver(tmp_path / "t.prv"))["waits"]
    by_name = {r["name"]: r for r in waits["calls"]}
    # Bcast: root (rank 1) enters at 300; rank 0 waits 200 ns, rank 2 100 ns (Late Broadcast)
    assert by_name["MPI_Bcast"]["wait_state"] == "Late Broadcast"
    assert by_name["MPI_Bcast"]["wait_s"] == pytest.approx(300e-9)
    # Allreduce on communicator 2: rank 1 enters at 500, rank 2 at 600 -> 100 ns; on 1 all enter at 800
    allreduces = sorted(r["wait_s"] for r in waits["calls"] if r["name"] == "MPI_Allreduce")   # one per group
    assert allreduces == pytest.approx([0.0, 100e-9], abs=1e-12)


def test_gzip_reads_like_plain(tmp_path):
    plain = import_paraver(write(tmp_path, MESSAGE, PCF))
    gz = import_paraver(write(tmp_path, MESSAGE, PCF, name="g.prv.gz"))
    assert gz.table.equals(plain.table)


def test_unclosed_and_stray_events_are_noted(tmp_path):
    text = HEAD + "100_ns:1(1):1:1(1:1),0\n1:1:1:1:1:0:100:1\n2:1:1:1:1:10:60000019:0\n2:1:1:1:1:20:60000019:1\n"
    imported = import_paraver(write(tmp_path, text, PCF))
    assert rows(imported, "kernel")[["name", "start_ns", "end_ns"]].values.tolist() == [["solve", 20, 100]]
    assert any("never closed" in n for n in imported.notes)
    assert any("without an open one" in n for n in imported.notes)


OK_HEAD = HEAD + "1000_ns:1(2):1:2(1:1,1:1),0\n"
MALFORMED = [
    ("#Paraver garbage\n", 1, "not a Paraver header"),
    (HEAD + "1000_ns:1(2):1:2(1:1),0\n", 1, "declares 2 tasks but lists 1"),
    (HEAD + "1000_ns:1(2):1:1(1:1),1\nx:1:1:1:1\n", 2, "expected a communicator line"),
    (OK_HEAD + "1:1:1:1:1:0:x:1\n", 2, "field 7 (end) is not an integer"),
    (OK_HEAD + "1:1:1:1:1:0:10:1\n1:1:1:1:1:0:5\n", 3, "wrong number of fields"),
    (OK_HEAD + "2:1:1:1:1:5:60000019\n", 2, "wrong number of fields"),
    (OK_HEAD + "2:1:1:1:1:5:60000019:1:\n", 2, "is not an integer"),
    (OK_HEAD + "3:1:1:1:1:0:0:1:1:2:1:0\n", 2, "wrong number of fields"),
    (OK_HEAD + "9:1:1:1:1:0:5:1\n", 2, "unknown record type"),
    (OK_HEAD + "1:1:1:1:1:0:12345678901234567890:1\n", 2, "too many digits"),
    (OK_HEAD + "1:1:1:1:1:0:10:1\n1:1:1:3:1:0:5:1\n", 3, "task 3 is out of range"),
    (OK_HEAD + "1:1:1:2:2:0:5:1\n", 2, "thread 2 is out of range"),
    (OK_HEAD + "1:3:1:1:1:0:5:1\n", 2, "cpu 3 is out of range"),
    (OK_HEAD + "1:1:1:1:1:0:5000:1\n", 2, "end time 5000 is outside the trace"),
    (OK_HEAD + "1:1:1:1:1:50:10:1\n", 2, "ends (10) before it begins (50)"),
    (OK_HEAD + "1:1:1:1:1:0:10:1\n2:1:1:1:1:2000:60000019:1\n", 3, "event time 2000 is outside"),
    # messages are checked whether or not an MPI call takes them (these traces have none)
    (OK_HEAD + "1:1:1:1:1:0:10:1\n3:1:1:1:1:1:1:2:1:2:1:2:3:-8:1\n", 3, "message size -8 is negative"),
    (OK_HEAD + "1:1:1:1:1:0:10:1\n3:1:1:1:1:1:1:2:1:2:1:2:3000:8:1\n", 3, "physical receive 3000 is outside"),
    (OK_HEAD + "1:1:1:1:1:0:10:1\n3:1:1:1:1:1:1:2:1:2:2:2:3:8:1\n", 3, "receiver thread 2 is out of range"),
]


@pytest.mark.parametrize("text, line, message", MALFORMED)
def test_malformed_lines_name_their_line(tmp_path, text, line, message):
    path = write(tmp_path, text, PCF)
    with pytest.raises(TraceError) as err:
        import_paraver(path)
    text = str(err.value)
    assert f"{path}:{line}: " in text and message in text and "\n" not in text


@pytest.mark.parametrize("text, line, message", MALFORMED[::4])
def test_malformed_import_exits_2_with_one_line(tmp_path, text, line, message):
    from gpt2trace.cli.main import app
    path = write(tmp_path, text, PCF)
    r = CliRunner().invoke(app, ["import", str(path), "-o", str(tmp_path / "out.parquet")])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and f":{line}:" in lines[0]


def test_malformed_pcf_names_its_line(tmp_path):
    path = write(tmp_path, STATES, "EVENT_TYPE\n0 notatype label\n")
    with pytest.raises(TraceError, match=r"t\.pcf:2: expected 2 number"):
        import_paraver(path)


def test_row_with_other_thread_count_is_noted(tmp_path):
    imported = import_paraver(write(tmp_path, STATES, PCF, row="LEVEL THREAD SIZE 1\nTHREAD 1.1.1\n"))
    assert any("names 1 threads; the header declares 2" in n for n in imported.notes)


def test_microsecond_headers_scale_times(tmp_path):
    text = HEAD + "10:1(1):1:1(1:1),0\n1:1:1:1:1:0:10:1\n"       # no unit: microseconds
    st = rows(import_paraver(write(tmp_path, text)), "state")
    assert st[["start_ns", "end_ns", "state"]].values.tolist() == [[0, 10_000, State.RUNNING]]


# An old MPItrace trace: collectives as value changes (Allreduce 10, then Alltoall 11 with no 0 between), and a
# Reduce (9) never closed. The header's end (4500 ns) is far beyond the rank's run: its last record is at 260.
VALUE_CHANGES = HEAD + """4500_ns:1(2):1:2(1:1,1:1),0
1:1:1:1:1:0:10:1
2:1:1:1:1:10:50000002:10
1:1:1:1:1:10:80:13
2:1:1:1:1:50:50000002:11
2:1:1:1:1:80:50000002:0
1:1:1:1:1:80:200:1
2:1:1:1:1:200:50000002:9
1:1:1:1:1:200:260:13
1:2:1:2:1:0:4500:1
"""


def test_a_value_change_closes_the_open_call_and_an_unclosed_one_ends_at_its_thread(tmp_path):
    imported = import_paraver(write(tmp_path, VALUE_CHANGES))
    c = rows(imported, "comm")
    # Allreduce [10, 50] is closed by Alltoall's value at 50, which the 0 at 80 closes; the Reduce opened at 200
    # is never closed: cut at rank 0's last record, the state ending at 260 (not at the header's 4500)
    assert c[["name", "start_ns", "end_ns"]].values.tolist() == [
        ["MPI_Allreduce", 10, 50], ["MPI_Alltoall", 50, 80], ["MPI_Reduce", 200, 260]]
    notes = " | ".join(imported.notes)
    assert "1 MPI call(s) closed by the next call's event of their type (a value change" in notes
    assert "warning: 1 event(s) never closed (value 0); each is cut at its thread's last record" in notes
    assert "without an open one" not in notes
    # the notes travel with the trace, for the analysis to show
    stored = json.loads(imported.table.schema.metadata[META_IMPORT_NOTES])
    assert any(n.startswith("warning: 1 event(s) never closed") for n in stored)


def test_a_value_change_in_a_streamed_import_by_windows(tmp_path):
    from gpt2trace.interop.paraver_stream import import_paraver_to
    prv = write(tmp_path, VALUE_CHANGES)
    done = import_paraver_to(prv, tmp_path / "out.parquet", tmp_path, window_lines=1)
    c = load(done.path).records("comm").to_pandas().sort_values("start_ns")
    assert c[["start_ns", "end_ns"]].values.tolist() == [[10, 50], [50, 80], [200, 260]]


# Constructs of old traces that Paraver reads: a communicator of task -1 (MPItrace), global communication
# records (4:), comment lines
OLD_CONSTRUCTS = HEAD + """1000_ns:1(2):1:2(1:1,1:1),2
c:1:1:2:1:2
c:1:92:1:-1
1:1:1:1:1:0:1000:1
4:1:1:1:1:100:1:64:64:10
1:2:1:2:1:0:1000:1
#a comment
4:2:1:2:1:100:1:64:64:10
"""


def test_old_constructs_are_read_and_what_is_skipped_is_noted(tmp_path):
    imported = import_paraver(write(tmp_path, OLD_CONSTRUCTS))
    # the communicator of both tasks is kept; the one of task -1 is left out with a note naming its line
    assert imported.header.communicators == {(1, 1): (1, 2)}
    assert len(rows(imported, "state")) == 2
    notes = " | ".join(imported.notes)
    assert "communicator line left out (line 3: communicator 92 names task -1; application 1 has 2)" in notes
    assert "2 global communication record(s) (4: lines, of old Paraver traces) were skipped" in notes


def test_old_constructs_import_from_the_cli(tmp_path):
    from gpt2trace.cli.main import app
    path = write(tmp_path, OLD_CONSTRUCTS)
    r = CliRunner().invoke(app, ["import", str(path), "-o", str(tmp_path / "out.parquet")])
    assert r.exit_code == 0, r.output
    assert "2 global communication record(s)" in r.output


def test_analyze_warns_of_the_events_never_closed(tmp_path):
    # the import's notes reach `analyze`: of the .prv itself and of the Parquet trace `import` writes from it
    from typer.testing import CliRunner

    from gpt2trace.cli.main import app
    prv = write(tmp_path, VALUE_CHANGES)
    for source in (prv, tmp_path / "imported.parquet"):
        if source.suffix == ".parquet":
            assert CliRunner().invoke(app, ["import", str(prv), "-o", str(source)]).exit_code == 0
        r = CliRunner().invoke(app, ["analyze", str(source), "--json", str(tmp_path / "a.json")])
        assert r.exit_code == 0, r.output
        warned = json.loads((tmp_path / "a.json").read_text())["warnings"]
        assert "import: warning: 1 event(s) never closed (value 0); each is cut at its thread's last record" in warned
