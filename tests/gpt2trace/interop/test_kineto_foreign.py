"""Every PyTorch profiler trace of tests/data/kineto (other people's runs, see SOURCES.md there) imports, exports to
Paraver, Chrome and OTF2, and holds the numbers Holistic Trace Analysis computes from the same file: rank and
world size, the profiler steps kept and their durations, and per CPU op name its count and total time. Random
corruptions of a real file import as a valid trace or fail with one TraceError line."""
from __future__ import annotations

import gzip
import json
import logging
import random
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.interop.chrome_export import export_chrome
from gpt2trace.interop.kineto_events import ANNOTATION, CPU_CATEGORIES, mpi_twin
from gpt2trace.interop.kineto_import import STEP_PHASE, import_kineto
from gpt2trace.interop.otf2_export import export_otf2
from gpt2trace.interop.paraver_export import export_paraver

DATA = Path(__file__).resolve().parents[2] / "data" / "kineto"
FILES = sorted(p for p in DATA.rglob("*") if p.name.endswith((".json", ".json.gz")))
REDISPATCH = re.compile(r"(\d+) CPU ops that are their parent's only child")


def _hta(path: Path):
    """HTA's reading of one file, as TraceAnalysis loads it (the last ProfilerStep left out by default): its
    metadata and its CPU events with names decoded, times in HTA's integer microseconds."""
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis
    t = TraceAnalysis(trace_files={0: str(path)}, trace_dir="/").t
    df = t.get_trace(0).copy()
    table = t.symbol_table.get_sym_table()
    df["name"], df["cat"] = df["name"].map(lambda i: table[i]), df["cat"].map(lambda i: table[i])
    return t.meta_data[0], t.get_iterations(0), df[df["cat"].isin(CPU_CATEGORIES)]


def _exact(path: Path) -> bool:
    """Whether the file's times are whole microseconds: then HTA keeps them as written, else it rounds each
    event inwards to whole microseconds (ceil of ts, floor of ts + dur)."""
    text = (gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)).read()
    return not re.search(r'"(ts|dur)":\s*-?\d+\.', text)


@pytest.fixture(scope="module", params=FILES, ids=lambda p: str(p.relative_to(DATA)))
def pair(request):
    path = request.param
    imp = import_kineto(path)
    return path, imp, Trace.from_table(imp.table), _hta(path)


def test_rank_and_world_size_are_htas(pair):
    path, _, trace, (meta, _, _) = pair
    info = meta.get("distributedInfo") or {}
    assert set(trace.to_pandas()["rank"]) == {info.get("rank", 0)}
    assert (trace.run or {}).get("parallel", {}).get("ranks") == info.get("world_size")


def test_steps_and_their_durations_are_htas(pair):
    path, _, trace, (_, iterations, hta) = pair
    df = trace.to_pandas()
    ours = df[(df.kind == "phase") & (df.name == STEP_PHASE)].sort_values("step")
    theirs = hta[hta.name.str.match(r"ProfilerStep#\d+$")].copy()
    theirs["step"] = theirs.name.str.slice(len("ProfilerStep#")).astype(int)
    theirs = theirs.sort_values("step")
    assert ours.step.astype(int).tolist() == theirs.step.tolist() == [int(i) for i in iterations if i >= 0]
    slack = 0 if _exact(path) else 2000                 # HTA's rounding inwards to whole microseconds
    for (s, e), dur in zip(ours[["start_ns", "end_ns"]].values, theirs["dur"].values):
        assert abs((e - s) - dur * 1000) <= slack
    if len(ours) > 1:                                    # step starts relative to the first, one time axis
        rel_ours = ours.start_ns - ours.start_ns.iloc[0]
        rel_theirs = (theirs.ts - theirs.ts.iloc[0]) * 1000
        assert (abs(rel_ours.to_numpy() - rel_theirs.to_numpy()) <= slack).all()


def test_cpu_op_counts_and_totals_are_htas(pair):
    """Per name (collectives by their MPI twin): HTA's count and total time; the import leaves out only the ops
    recorded twice (an op that is its same-named parent's only child), which its notes count."""
    path, imp, trace, (_, _, hta) = pair
    df = trace.to_pandas()
    mine = df[df.kind.isin(("kernel", "phase", "comm"))]
    key = [STEP_PHASE if k == "phase" and n == STEP_PHASE else n for k, n in zip(mine.kind, mine.name)]
    ours_n = Counter(key)
    ours_t = defaultdict(int)
    for k, d in zip(key, (mine.end_ns - mine.start_ns)):
        ours_t[k] += int(d)
    names = [STEP_PHASE if re.match(r"ProfilerStep#\d+$", n) else
             (mpi_twin(n) if c == ANNOTATION and mpi_twin(n) else n) for n, c in zip(hta.name, hta.cat)]
    theirs_n = Counter(names)
    theirs_t = defaultdict(int)
    for k, d in zip(names, hta.dur):
        theirs_t[k] += int(d) * 1000
    dropped = sum(int(m) for note in imp.notes for m in REDISPATCH.findall(note))
    assert sum(theirs_n.values()) - sum(ours_n.values()) == dropped
    assert set(ours_n) == set(theirs_n)
    for name, n in theirs_n.items():
        assert ours_n[name] <= n, name
        if ours_n[name] == n:
            slack = 0 if _exact(path) else 2000 * n
            assert abs(ours_t[name] - theirs_t[name]) <= slack, name


def test_exports_to_paraver_chrome_and_otf2(pair, tmp_path):
    _, _, trace, _ = pair
    assert check_states(trace) == []
    export_paraver(trace, tmp_path / "trace")
    export_chrome(trace, tmp_path / "trace")
    export_otf2(trace, tmp_path / "otf2")


# --- corruptions ----------------------------------------------------------------------------------------------

SOURCE = DATA / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
TEXT = gzip.open(SOURCE, "rt").read()
EVENTS = json.loads(TEXT)["traceEvents"]


def _truncated(data: st.DataObject) -> bytes:
    raw = TEXT.encode()
    return raw[: data.draw(st.integers(0, len(raw) - 1))]


def _flipped(data: st.DataObject) -> bytes:
    raw = bytearray(TEXT.encode())
    for at in data.draw(st.lists(st.integers(0, len(raw) - 1), min_size=1, max_size=8)):
        raw[at] = data.draw(st.integers(0, 255))
    return bytes(raw)


def _shuffled_lines(data: st.DataObject) -> bytes:
    lines = TEXT.splitlines()
    random.Random(data.draw(st.integers(0, 2**32))).shuffle(lines)
    return "\n".join(lines).encode()


def _shuffled_events(data: st.DataObject) -> bytes:
    doc = json.loads(TEXT, parse_float=str)         # times then written as decimal strings, which Kineto reads too
    random.Random(data.draw(st.integers(0, 2**32))).shuffle(doc["traceEvents"])
    return json.dumps(doc).encode()


def _missing_fields(data: st.DataObject) -> bytes:
    doc = json.loads(TEXT)
    for i in data.draw(st.lists(st.integers(0, len(EVENTS) - 1), min_size=1, max_size=6)):
        event = doc["traceEvents"][i]
        field = data.draw(st.sampled_from(("ts", "dur", "name", "cat", "ph", "tid", "pid", "args")))
        if data.draw(st.booleans()):
            event.pop(field, None)
        else:
            event[field] = data.draw(st.sampled_from((None, "", "x", -5, [1], {"a": 1}, True, 1e308, "1e999")))
    return json.dumps(doc).encode()


CORRUPTIONS = [_truncated, _flipped, _shuffled_lines, _shuffled_events, _missing_fields]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), how=st.sampled_from(CORRUPTIONS), zipped=st.booleans())
def test_a_corrupted_trace_imports_or_is_one_trace_error(data, how, zipped):
    raw = how(data)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("bad.json.gz" if zipped else "bad.json")
        path.write_bytes(gzip.compress(raw) if zipped else raw)
        try:
            imp = import_kineto(path)
        except TraceError as exc:
            message = str(exc)
            assert message.startswith(str(path)) and "\n" not in message
            return
        trace = Trace.from_table(imp.table)
        assert check_states(trace) == []
        export_chrome(trace, Path(tmp) / "out")
