"""Acceptance 1 and 2 of OTF2: our trace -> OTF2 -> import gives the same analysis; Debian's otf2-print reads every
archive and counts the events we count; the OTF2 library's own reader (not our importer) recomputes a POP factor."""
import json
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import gpt2trace
from analysis.analyze import analyze
from analysis.window import select
from gpt2trace.format import mpi_calls
from gpt2trace.format.schema import NAME, Kind, State
from gpt2trace.interop.otf2_export import export_otf2
from gpt2trace.interop.otf2_import import import_otf2, load_otf2

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
ROUND_TRIP = ("tiny_1thread", "tiny_2threads", "tiny_2ranks_allreduce", "tiny_2ranks_overlap")


def _without_name(result: dict) -> dict:
    result = dict(result)
    result.pop("trace")                      # the file's name
    return result


@pytest.mark.parametrize("sample", ROUND_TRIP)
def test_round_trip_gives_the_same_analysis(tmp_path, sample):
    src = SAMPLES / f"{sample}.parquet"
    out = export_otf2(src, tmp_path / "arch")
    original, back = gpt2trace.load(src), load_otf2(out.anchor)
    a, b = _without_name(analyze(original)), _without_name(analyze(back))
    for key in ("pop", "imbalance", "waits", "root_causes", "summary", "occupancy"):
        assert a[key] == b[key], key
    assert a == b                            # every other key too, to the last bit
    assert back.num_rows == original.num_rows
    assert (back.run, back.machine, back.peak, back.clock) == (original.run, original.machine, original.peak,
                                                               original.clock)     # the archive's properties


@pytest.fixture
def zoo_path(tmp_path, mpi_zoo_path):
    """conftest's MPI zoo without its phases: there a kernel crosses a step's phase, which OTF2's one call stack
    per thread cannot hold (test_otf2_errors checks the refusal)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    table = pq.read_table(mpi_zoo_path)
    path = tmp_path / "zoo_without_phases.parquet"
    pq.write_table(table.filter(pc.not_equal(table.column("kind"), Kind.PHASE)), path)
    return path


def test_mpi_zoo_round_trips(tmp_path, zoo_path):
    """Send/Recv, rooted collectives, a nonblocking collective and its Waitall: every comm column comes back."""
    mpi_zoo_path = zoo_path
    out = export_otf2(mpi_zoo_path, tmp_path / "zoo")
    a = gpt2trace.load(mpi_zoo_path).records(Kind.COMM).sort_by([("rank", "ascending"), ("start_ns", "ascending")])
    b = load_otf2(out.anchor).records(Kind.COMM)
    assert b.select(a.column_names).to_pylist() == a.to_pylist()
    assert _without_name(analyze(gpt2trace.load(mpi_zoo_path))) == _without_name(analyze(load_otf2(out.anchor)))


def _otf2_print(anchor: Path) -> Counter:
    """Event counts by record name, from Debian's otf2-print (an independent reader, OTF2 3.0's C tools)."""
    r = subprocess.run(["otf2-print", "-Werror", str(anchor)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    counts = Counter()
    events = r.stdout.split("=== Events ===")[1].splitlines()[3:]          # after the title, header and rule
    for line in events:
        if line and not line.startswith(" "):                               # indented: an event's attributes
            counts[line.split()[0]] += 1
    return counts


def _expected_counts(trace) -> Counter:
    """What our export writes, counted from the trace's records (module docstring of otf2_export)."""
    n = {k: trace.records(k).num_rows for k in Kind.ALL}
    comm = trace.records(Kind.COMM).column(NAME).to_pylist()
    ops = Counter(mpi_calls.operation(c) for c in comm)
    regions = n[Kind.KERNEL] + n[Kind.PHASE] + n[Kind.COMM]
    # one state sample per state record, plus a -1 sample where each thread's states stop (no gaps here: once)
    threads = len({(r, t) for r, t in zip(trace.records(Kind.STATE).column("rank").to_pylist(),
                                          trace.records(Kind.STATE).column("thread").to_pylist())})
    expected = Counter({"ENTER": regions, "LEAVE": regions, "METRIC": n[Kind.STATE] + threads + n[Kind.COUNTER],
                        "MPI_COLLECTIVE_BEGIN": ops[mpi_calls.COLL], "MPI_COLLECTIVE_END": ops[mpi_calls.COLL],
                        "NON_BLOCKING_COLLECTIVE_REQUEST": ops[mpi_calls.COLL_POST],
                        "NON_BLOCKING_COLLECTIVE_COMPLETE": ops[mpi_calls.COLL_POST],
                        "MPI_SEND": ops[mpi_calls.SEND], "MPI_RECV": ops[mpi_calls.RECV]})
    return +expected                                                        # drop the zeros


@pytest.mark.parametrize("sample", ROUND_TRIP + ("tiny_2threads_accum2", "small_2threads"))
def test_otf2_print_reads_every_archive_and_counts_our_events(tmp_path, sample):
    src = SAMPLES / f"{sample}.parquet"
    out = export_otf2(src, tmp_path / "arch")
    counts = _otf2_print(out.anchor)
    assert counts == _expected_counts(gpt2trace.load(src))
    assert sum(counts.values()) == out.events


def test_otf2_print_counts_point_to_point_records(tmp_path, zoo_path):
    mpi_zoo_path = zoo_path
    out = export_otf2(mpi_zoo_path, tmp_path / "zoo")
    counts = _otf2_print(out.anchor)
    # by hand (tests/gpt2trace/interop/conftest.py): 1 Send, 1 Recv, 2x Bcast, Reduce and Allgatherv collectives,
    # 2 Iallreduce postings completed in the 2 Waitalls; 12 calls + 6 kernel records per rank and thread 0 ...
    assert (counts["MPI_SEND"], counts["MPI_RECV"], counts["MPI_COLLECTIVE_END"]) == (1, 1, 6)
    assert (counts["NON_BLOCKING_COLLECTIVE_REQUEST"], counts["NON_BLOCKING_COLLECTIVE_COMPLETE"]) == (2, 2)
    assert counts == _expected_counts(gpt2trace.load(mpi_zoo_path))


def _running_ns_from_the_library(anchor: Path, t0: int, t1: int) -> dict[str, int]:
    """Running nanoseconds per location in [t0, t1), from the `Paraver state` metric as the OTF2 library's
    Python reader delivers it: a sample holds until the location's next sample."""
    import otf2
    last: dict = {}
    running: dict[str, int] = {}
    with otf2.reader.open(str(anchor)) as reader:
        for location, event in reader.events:
            if not isinstance(event, otf2.events.Metric) or event.metric.member.name != "Paraver state":
                continue
            if location.name in last:
                start, state = last[location.name]
                if state == State.RUNNING:
                    running[location.name] = running.get(location.name, 0) + max(
                        0, min(event.time, t1) - max(start, t0))
            last[location.name] = (event.time, event.values[0])
    return running


@pytest.mark.parametrize("sample", ("tiny_2threads", "tiny_2ranks_allreduce"))
def test_the_otf2_library_recomputes_load_balance(tmp_path, sample):
    """POP's load balance = avg(useful) / max(useful), useful = Running time of each thread in the window."""
    src = SAMPLES / f"{sample}.parquet"
    out = export_otf2(src, tmp_path / "arch")
    trace = gpt2trace.load(src)
    window = select(trace, None)                              # the window analyze takes: which steps, not factors
    useful = np.array(list(_running_ns_from_the_library(out.anchor, window.t0_ns, window.t1_ns).values()), float)
    assert len(useful) == 2                                   # 2 threads, or 2 ranks of 1 thread
    assert useful.mean() / useful.max() == pytest.approx(analyze(trace)["pop"]["load_balance"], rel=1e-12)


def test_mpi_time_from_the_library_equals_the_comm_records(tmp_path):
    """Scalasca's view: time inside MPI regions (paradigm MPI, Enter to Leave) per rank, read by the library."""
    import otf2
    src = SAMPLES / "tiny_2ranks_overlap.parquet"
    out = export_otf2(src, tmp_path / "arch")
    inside: Counter = Counter()
    entered = {}
    with otf2.reader.open(str(out.anchor)) as reader:
        for location, event in reader.events:
            if isinstance(event, (otf2.events.Enter, otf2.events.Leave)) and \
                    event.region.paradigm == otf2.Paradigm.MPI:
                if isinstance(event, otf2.events.Enter):
                    entered[location.name] = event.time
                else:
                    inside[location.name] += event.time - entered.pop(location.name)
    comm = gpt2trace.load(src).records(Kind.COMM).to_pandas()
    per_rank = (comm.end_ns - comm.start_ns).groupby(comm["rank"]).sum()
    assert inside == Counter({f"rank {r} thread 0": int(v) for r, v in per_rank.items()})


def test_cli_export_import_analyze(tmp_path):
    from gpt2trace.cli.main import app
    src = SAMPLES / "tiny_2ranks_allreduce.parquet"
    runner = CliRunner()
    r = runner.invoke(app, ["export", str(src), "--format", "otf2", "-o", str(tmp_path / "arch")])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"{tmp_path / 'arch' / 'traces.otf2'}: ") and "(replaced)" not in r.stdout
    r = runner.invoke(app, ["export", str(src), "--format", "otf2", "-o", str(tmp_path / "arch")])
    assert r.exit_code == 0 and "(replaced)" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["arch"]           # no temporary folder left
    r = runner.invoke(app, ["import", str(tmp_path / "arch"), "-o", str(tmp_path / "back.parquet")])
    assert r.exit_code == 0, r.output
    a = json.loads(runner.invoke(app, ["analyze", str(src), "--json", "-"]).stdout)
    b = json.loads(runner.invoke(app, ["analyze", str(tmp_path / "back.parquet"), "--json", "-"]).stdout)
    c = json.loads(runner.invoke(app, ["analyze", str(tmp_path / "arch" / "traces.otf2"), "--json", "-"]).stdout)
    assert a["pop"] == b["pop"] == c["pop"] and a["waits"] == b["waits"] == c["waits"]
    assert gpt2trace.load(tmp_path / "arch").num_rows == gpt2trace.load(src).num_rows     # the folder loads too


def test_import_of_an_archive_without_our_state_metric(tmp_path):
    """A Score-P-like archive (regions and MPI records only): states come from the call stack, MPI calls from the
    MPI records inside them. Hand-written, in ticks of 1 ns: rank 0 runs `main` [1010, 1110] and waits in
    MPI_Allreduce [1050, 1100]; rank 1 runs `main` [1030, 1110], allreduces [1090, 1100]. The first timestamp
    (1010) is the archive's start: 0 ns."""
    import otf2
    path = tmp_path / "scorep"
    with otf2.writer.open(str(path), timer_resolution=1_000_000_000) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        locs = [d.location("Master thread", group=d.location_group(f"MPI Rank {r}", system_tree_parent=node))
                for r in range(2)]
        d.group("MPI", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        comm = d.comm("MPI_COMM_WORLD", group=d.group("MPI_COMM_WORLD", group_type=otf2.GroupType.COMM_GROUP,
                                                     paradigm=otf2.Paradigm.MPI, members=[0, 1]))
        main = d.region("main")
        allreduce = d.region("MPI_Allreduce", paradigm=otf2.Paradigm.MPI, region_role=otf2.RegionRole.COLL_ALL2ALL)
        for loc, begin, wait in zip(locs, (1010, 1030), (1050, 1090)):
            ev = w.event_writer_from_location(loc)
            ev.enter(begin, main)
            ev.enter(wait, allreduce)
            ev.mpi_collective_begin(wait)
            ev.mpi_collective_end(1100, otf2.CollectiveOp.ALLREDUCE, comm, otf2.Undefined.UINT32, 64, 64)
            ev.leave(1100, allreduce)
            ev.leave(1110, main)
    imported = import_otf2(path / "traces.otf2")
    t = imported.table.to_pandas()
    comm_rows = t[t.kind == "comm"].sort_values("rank")
    assert comm_rows[["rank", "start_ns", "end_ns", "name", "bytes", "seq"]].values.tolist() == [
        [0, 40, 90, "MPI_Allreduce", 64, 0], [1, 80, 90, "MPI_Allreduce", 64, 0]]
    states = t[t.kind == "state"].sort_values(["rank", "start_ns"])
    assert states[["rank", "start_ns", "end_ns", "state"]].values.tolist() == [
        [0, 0, 40, State.RUNNING], [0, 40, 90, State.GROUP_COMMUNICATION], [0, 90, 100, State.RUNNING],
        [1, 0, 20, State.IDLE], [1, 20, 80, State.RUNNING], [1, 80, 90, State.GROUP_COMMUNICATION],
        [1, 90, 100, State.RUNNING]]
    assert t[t.kind == "kernel"][["rank", "name", "start_ns", "end_ns"]].values.tolist() == [
        [0, "main", 0, 100], [1, "main", 20, 100]]
    # rank 1 came late: rank 0 waited 40 ns of its 50 in the allreduce
    assert analyze(gpt2trace.load(path))["waits"]


def test_message_tags_in_both_directions(tmp_path, zoo_path):
    """Our export writes the zoo's tag (7) in MpiSend/MpiRecv, which Debian's otf2-print reads back; a foreign
    archive's tags (no attribute of ours) come from those records. Hand-written, 1 ns ticks: rank 0 in MPI_Send
    [100, 110] to rank 1 with tag 5 and 16 bytes, rank 1 in MPI_Recv [90, 120] of it."""
    out = export_otf2(zoo_path, tmp_path / "zoo")
    printed = subprocess.run(["otf2-print", str(out.anchor)], capture_output=True, text=True, check=True).stdout
    lines = [ln for ln in printed.splitlines() if ln.startswith(("MPI_SEND", "MPI_RECV"))]
    assert len(lines) == 2 and all("Tag: 7, Length: 1000" in ln for ln in lines), lines
    import otf2
    path = tmp_path / "foreign"
    with otf2.writer.open(str(path), timer_resolution=1_000_000_000) as w:
        d = w.definitions
        node = d.system_tree_node("node")
        locs = [d.location("Master thread", group=d.location_group(f"MPI Rank {r}", system_tree_parent=node))
                for r in range(2)]
        d.group("MPI", group_type=otf2.GroupType.COMM_LOCATIONS, paradigm=otf2.Paradigm.MPI, members=locs)
        comm = d.comm("MPI_COMM_WORLD", group=d.group("MPI_COMM_WORLD", group_type=otf2.GroupType.COMM_GROUP,
                                                     paradigm=otf2.Paradigm.MPI, members=[0, 1]))
        send = d.region("MPI_Send", paradigm=otf2.Paradigm.MPI, region_role=otf2.RegionRole.POINT2POINT)
        recv = d.region("MPI_Recv", paradigm=otf2.Paradigm.MPI, region_role=otf2.RegionRole.POINT2POINT)
        ev = w.event_writer_from_location(locs[0])
        ev.enter(100, send)
        ev.mpi_send(100, 1, comm, 5, 16)
        ev.leave(110, send)
        ev = w.event_writer_from_location(locs[1])
        ev.enter(90, recv)
        ev.mpi_recv(120, 0, comm, 5, 16)
        ev.leave(120, recv)
    t = import_otf2(path / "traces.otf2").table.to_pandas()
    calls = t[t.kind == "comm"].sort_values("rank")
    assert calls[["rank", "name", "peer", "bytes", "tag"]].values.tolist() == [
        [0, "MPI_Send", 1, 16, 5], [1, "MPI_Recv", 0, 16, 5]]
