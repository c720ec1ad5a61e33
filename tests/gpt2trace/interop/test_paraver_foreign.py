"""Paraver traces written by other tools (tests/data/paraver, SOURCES.md there), held against a minimal parse of the
.prv written here: counts and times of the import must equal what the lines say, and every command of the CLI
must take them. Then random corruptions of them, and the bound every imported call and function keeps: its
rank's span."""
from __future__ import annotations

import bisect
import json
import random
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.analyze import analyze
from gpt2trace import load
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import import_paraver
from gpt2trace.interop.paraver_stream import import_paraver_to

DATA = Path(__file__).resolve().parents[2] / "data" / "paraver"
SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"
FOREIGN = [DATA / "my-example.prv", DATA / "bt.B.models.prv"]
INS, CYC, SET_ID = 42000050, 42000059, 41999999
FUNCTIONS = {60000018, 60000019, 60000020, 60000023}
RUNNING = 1


# --- the minimal parse: the .prv's lines split on ':' ---------------------------------------------------------

@dataclass
class Minimal:
    end_ns: int = 0
    threads: list[int] = field(default_factory=list)                 # per task
    states: dict = field(default_factory=lambda: defaultdict(list))  # (task, thread) -> [(begin, end, state)]
    events: Counter = field(default_factory=Counter)                 # type -> pairs
    opens: Counter = field(default_factory=Counter)                  # type -> pairs with a value other than 0
    reads: list = field(default_factory=list)                        # (task, thread, time, type, value)
    times: dict = field(default_factory=lambda: defaultdict(list))   # task -> every time of its records
    comms: int = 0


def minimal(prv: Path) -> Minimal:
    lines = prv.read_text().splitlines()
    m = Minimal()
    # '#Paraver (date):<end>_ns:<nodes>(<cpus>):1:<tasks>(<threads>:<node>,...),<comms>'; the date holds ':'
    after = lines[0].split("):", 1)[1].split(":")
    m.end_ns = int(after[0].removesuffix("_ns"))
    tasks = lines[0].split("):", 1)[1].split(":", 3)[3]
    m.threads = [int(spec.split(":")[0]) for spec in tasks[tasks.index("(") + 1:tasks.index(")")].split(",")]
    for line in lines[1:]:
        f = line.split(":")
        if f[0] == "1":
            task, thread, begin, end, state = (int(x) for x in f[3:8])
            m.states[task, thread].append((begin, end, state))
            m.times[task] += [begin, end]
        elif f[0] == "2":
            task, thread, time = int(f[3]), int(f[4]), int(f[5])
            m.times[task].append(time)
            for typ, value in zip(map(int, f[6::2]), map(int, f[7::2])):
                m.events[typ] += 1
                m.opens[typ] += value != 0
                if 42000000 <= typ <= 42999999:
                    m.reads.append((task, thread, time, typ, value))
        elif f[0] == "3":
            m.comms += 1
    return m


def useful_ratios(m: Minimal) -> dict:
    """IPC and frequency by hand: a read closes the thread's state with begin < t <= end; a second read of a counter
    at the same instant is dropped, a value of 2**63 or more is no count; each ratio over the Running states where
    all its counters were read."""
    bursts = {lane: sorted(s) for lane, s in m.states.items()}
    sums, seen = defaultdict(lambda: defaultdict(float)), set()
    for task, thread, t, typ, value in m.reads:
        if typ not in (INS, CYC) or (task, thread, t, typ) in seen or value >= 2**63:
            continue
        seen.add((task, thread, t, typ))
        states = bursts.get((task, thread), [])
        i = bisect.bisect_left([b for b, _, _ in states], t) - 1
        if i >= 0 and states[i][1] >= t and states[i][2] == RUNNING:
            sums[task, thread, i][typ] += value
    with_cyc = [(k, v) for k, v in sums.items() if CYC in v]
    both = [v for _, v in with_cyc if INS in v]
    cyc_ns = sum(bursts[k[0], k[1]][k[2]][1] - bursts[k[0], k[1]][k[2]][0] for k, _ in with_cyc)
    return {"useful_instructions": sum(v.get(INS, 0) for v in sums.values()),
            "useful_cycles": sum(v.get(CYC, 0) for v in sums.values()),
            "ipc": sum(v[INS] for v in both) / sum(v[CYC] for v in both),
            "frequency_ghz": sum(v[CYC] for _, v in with_cyc) / cyc_ns}


@pytest.fixture(scope="module", params=FOREIGN, ids=lambda p: p.stem)
def foreign(request):
    return request.param, minimal(request.param), import_paraver(request.param)


def test_header_and_objects_are_the_lines(foreign):
    prv, m, imported = foreign
    df = imported.table.to_pandas()
    assert imported.header.end_ns == m.end_ns == df["end_ns"].max()
    assert df["rank"].nunique() == len(m.threads)
    assert df.groupby("rank")["thread"].nunique().tolist() == m.threads


def test_states_are_the_lines(foreign):
    """Per thread and state, the count and total time of the 1: records; Idle holds the padding besides, from 0 to
    the thread's first state and from its last to the header's end."""
    prv, m, imported = foreign
    want = Counter()
    got = Counter()
    for (task, thread), states in m.states.items():
        for begin, end, state in states:
            want[task - 1, thread - 1, state, "n"] += 1
            want[task - 1, thread - 1, state, "ns"] += end - begin
        first, last = min(b for b, _, _ in states), max(e for _, e, _ in states)
        want[task - 1, thread - 1, 0, "n"] += (first > 0) + (last < m.end_ns)
        want[task - 1, thread - 1, 0, "ns"] += first + m.end_ns - last
    df = imported.table.to_pandas()
    for r in df[df["kind"] == "state"].itertuples():
        got[r.rank, r.thread, r.state, "n"] += 1
        got[r.rank, r.thread, r.state, "ns"] += r.end_ns - r.start_ns
    assert +got == +want


def test_events_are_the_lines(foreign):
    """Counter records per counter type, functions per opening value, no MPI calls or messages (neither trace has
    them), and every other event counted in the notes."""
    prv, m, imported = foreign
    df = imported.table.to_pandas()
    hw = sum(n for typ, n in m.events.items() if 42000000 <= typ <= 42999999)
    wrapped = sum(v >= 2**63 for *_, v in m.reads)
    counters = df[df["kind"] == "counter"]
    assert len(counters) == hw - wrapped
    for typ, name in ((INS, "PAPI_TOT_INS"), (CYC, "PAPI_TOT_CYC")):
        assert (counters["name"] == name).sum() == m.events[typ] - sum(t == typ and v >= 2**63 for *_, t, v in m.reads)
    assert (df["kind"] == "kernel").sum() == sum(m.opens[t] for t in FUNCTIONS)
    assert (df["kind"] == "comm").sum() == 0 == m.comms
    other = sum(n for typ, n in m.events.items() if not (42000000 <= typ <= 42999999) and typ not in FUNCTIONS)
    assert any(note.startswith(f"{other} event(s) of ") for note in imported.notes), imported.notes


def test_counter_ratios_are_the_hand_computed_ones(foreign):
    prv, m, imported = foreign
    got = analyze(Trace.from_table(imported.table))["counters"]
    want = useful_ratios(m)
    assert got["useful_instructions"] == want["useful_instructions"]
    assert got["useful_cycles"] == want["useful_cycles"]
    assert got["ipc"] == pytest.approx(want["ipc"], rel=1e-12)
    assert got["frequency_ghz"] == pytest.approx(want["frequency_ghz"], rel=1e-12)


def _cli(*args, cwd):
    r = subprocess.run([sys.executable, "-m", "gpt2trace", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stdout[-2000:], r.stderr[-2000:])
    return r


@pytest.mark.parametrize("prv", FOREIGN, ids=lambda p: p.stem)
def test_every_command_takes_the_trace(prv, tmp_path):
    _cli("info", prv, cwd=tmp_path)
    _cli("analyze", prv, "--json", tmp_path / "a.json", cwd=tmp_path)
    counters = json.loads((tmp_path / "a.json").read_text())["counters"]
    want = useful_ratios(minimal(prv))
    assert counters["ipc"] == pytest.approx(want["ipc"], rel=1e-12)
    assert counters["frequency_ghz"] == pytest.approx(want["frequency_ghz"], rel=1e-12)
    _cli("report", prv, "-o", tmp_path / "x.html", cwd=tmp_path)
    _cli("import", prv, "-o", tmp_path / "x.parquet", cwd=tmp_path)
    for fmt in ("paraver", "chrome", "otf2"):
        _cli("export", tmp_path / "x.parquet", "-f", fmt, "-o", tmp_path / f"out-{fmt}", cwd=tmp_path)


# --- every call and function within its rank's span ---------------------------------------------------------------

# Rank 0's last record is at 260, the header's end at 4500: its Reduce (opened at 200, never closed) must not run on
# to 4500; rank 1's Allreduce and Alltoall are value changes (10 then 11, no 0 between).
UNCLOSED = """#Paraver (01/01/2024 at 10:00):4500_ns:1(2):1:2(1:1,1:1),0
1:1:1:1:1:0:200:1
1:2:1:2:1:0:100:1
2:2:1:2:1:100:50000002:10
1:2:1:2:1:100:4500:13
2:1:1:1:1:200:50000002:9
1:1:1:1:1:200:260:13
2:2:1:2:1:300:50000002:11
2:2:1:2:1:4000:50000002:0
"""


def _span_violations(prv: Path, table) -> list:
    m = minimal(prv)
    span = {task - 1: (min(t), max(t)) for task, t in m.times.items()}
    df = table.to_pandas()
    out = []
    for r in df[df["kind"].isin(["comm", "kernel", "phase", "task"])].itertuples():
        first, last = span[r.rank]
        if r.end_ns - r.start_ns > last - first or r.start_ns < first or r.end_ns > last:
            out.append((r.rank, r.name, r.start_ns, r.end_ns, first, last))
    return out


def _ours(tmp_path: Path) -> Path:
    return export_paraver(SAMPLES / "small_2ranks_tp2.parquet", tmp_path / "ours").prv


@pytest.mark.parametrize("which", ["my-example", "bt.B.models", "unclosed", "ours"])
def test_no_call_outlasts_its_rank(which, tmp_path):
    if which == "unclosed":
        prv = tmp_path / "unclosed.prv"
        prv.write_text(UNCLOSED)
    elif which == "ours":
        prv = _ours(tmp_path)
    else:
        prv = DATA / f"{which}.prv"
    assert _span_violations(prv, import_paraver(prv).table) == []
    streamed = import_paraver_to(prv, tmp_path / "s.parquet", tmp_path, window_lines=2)
    assert _span_violations(prv, load(streamed.path).table) == []


# --- random corruptions: a trace or a one-line TraceError, nothing else ------------------------------------------

REAL = (DATA / "my-example.prv").read_bytes()
PCF = (DATA / "my-example.pcf").read_bytes()
ROW = (DATA / "my-example.row").read_bytes()


def _truncate(data: bytes, r: random.Random) -> bytes:
    return data[:r.randrange(len(data))]


def _flip(data: bytes, r: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(r.randint(1, 8)):
        out[r.randrange(len(out))] = r.randrange(256)
    return bytes(out)


def _shuffle(data: bytes, r: random.Random) -> bytes:
    head, *body = data.split(b"\n")
    r.shuffle(body)
    return b"\n".join([head, *body])


def _unclosed(data: bytes, r: random.Random) -> bytes:
    lines = data.split(b"\n")
    at = r.randrange(1, len(lines))
    t = r.randrange(0, 5834977)
    lines.insert(at, f"2:1:1:1:{r.randint(1, 2)}:{t}:{r.choice([50000002, 60000020, 60000019])}:{r.randint(1, 9)}"
                 .encode())
    return b"\n".join(lines)


def _header(data: bytes, r: random.Random) -> bytes:
    head, rest = data.split(b"\n", 1)
    i = r.randrange(len(head))
    return head[:i] + r.choice([b"", b"x", b":", b"(", b"99", b",3", b"-1", b"9" * 20]) + head[i + 1:] + b"\n" + rest


CORRUPTIONS = {f.__name__.strip("_"): f for f in (_truncate, _flip, _shuffle, _unclosed, _header)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(sorted(CORRUPTIONS)), seed=st.integers(0, 2**32 - 1))
def test_a_corrupted_trace_imports_or_fails_in_one_line(kind, seed):
    data = CORRUPTIONS[kind](REAL, random.Random(seed))
    with tempfile.TemporaryDirectory() as tmp:
        prv = Path(tmp) / "t.prv"
        prv.write_bytes(data)
        (Path(tmp) / "t.pcf").write_bytes(PCF)
        (Path(tmp) / "t.row").write_bytes(ROW)
        try:
            imported = import_paraver(prv)
        except TraceError as exc:
            assert str(exc) and "\n" not in str(exc) and str(prv) in str(exc)
            return
        trace = Trace.from_table(imported.table, prv)
        df = trace.table.to_pandas()
        assert ((df["start_ns"] >= 0) & (df["start_ns"] <= df["end_ns"]) &
                (df["end_ns"] <= imported.header.end_ns)).all()


DAMAGED_HEADERS = [
    # an end time beyond 64 bits, or one whose ns overflow our sort keys
    (("5834977_ns", "99999999999999999999_ns"), "end time 99999999999999999999 is beyond"),
    (("5834977_ns", "9999999999999999999_ns"), "end time 9999999999999999999 is beyond"),
    # a thread count that would take the whole memory
    (("1:1(2:1)", "1:1(9999999999:1)"), "9999999999 threads in all"),
]


@pytest.mark.parametrize("change, message", DAMAGED_HEADERS)
def test_a_damaged_header_fails_in_one_line(change, message, tmp_path):
    prv = tmp_path / "t.prv"
    prv.write_bytes(REAL.replace(change[0].encode(), change[1].encode(), 1))
    with pytest.raises(TraceError) as err:
        import_paraver(prv)
    assert f"{prv}:1: malformed header: " in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)
