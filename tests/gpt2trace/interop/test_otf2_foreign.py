"""Score-P's archives (tests/data/otf2/, see SOURCES.md there) held against otf2-print, OTF2's own reader: what
our import makes of each is what otf2-print shows, and every command reads the imported trace.

otf2-print is Debian's otf2-tools; it is the reference, so a machine without it fails these tests."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from analysis.counters import counters
from analysis.window import select
from gpt2trace.format import mpi_calls
from gpt2trace.format.reader import Trace
from gpt2trace.interop import otf2_format as F
from gpt2trace.interop.otf2_import import import_otf2

DATA = Path(__file__).resolve().parents[2] / "data" / "otf2"
ARCHIVES = ("ping-pong-otf2", "ping-pong-otf2-papi")
NS = 10**9

_EVENT = re.compile(r"^(\w+)\s+(\d+)\s+(\d+)\s+(.*)$")
_REGION = re.compile(r'Region: "(.*)" <\d+>')
_LENGTH = re.compile(r"Length: (\d+)")
_VALUE = re.compile(r'\("([^"]*)" <\d+>; \w+; (-?[\d.e+]+)\)')
_CLOCK = re.compile(r"Ticks per Seconds: (\d+), Global Offset: (\d+)")
_LOCATION = re.compile(r'^LOCATION\s+(\d+)\s+Name: .*Type: CPU_THREAD, .*Group: "(.*)" <\d+>$')


def _otf2_print(*args) -> list[str]:
    tool = shutil.which("otf2-print")
    assert tool, "otf2-print (Debian's otf2-tools) is the reference reader of these tests: apt-get install otf2-tools"
    return subprocess.run([tool, *map(str, args)], capture_output=True, text=True, check=True).stdout.splitlines()


class Printed:
    """What otf2-print shows of an archive: its clock, CPU-thread locations and events per location."""

    def __init__(self, anchor: Path):
        defs = _otf2_print("-G", anchor)
        self.resolution, self.offset = map(int, next(m.groups() for m in map(_CLOCK.search, defs) if m))
        self.locations = dict(m.groups() for m in map(_LOCATION.match, defs) if m)    # id -> process name
        self.events = defaultdict(list)                                               # location -> [(event, t, text)]
        for line in _otf2_print(anchor):
            m = _EVENT.match(line)
            if m and m.group(1) != "Event":
                self.events[m.group(2)].append((m.group(1), int(m.group(3)), m.group(4)))

    def ns(self, ticks: int) -> int:
        return (ticks - self.offset) * NS // self.resolution

    def count(self, event: str) -> Counter:
        """ENTER or LEAVE records per region name."""
        return Counter(_REGION.search(text).group(1) for evs in self.events.values() for e, _, text in evs
                       if e == event)

    def messages(self, event: str) -> tuple[int, int]:
        lengths = [int(_LENGTH.search(text).group(1)) for evs in self.events.values() for e, _, text in evs
                   if e == event]
        return len(lengths), sum(lengths)

    def metric_values(self) -> Counter:
        return Counter(name for evs in self.events.values() for e, _, text in evs if e == "METRIC"
                       for name, _ in _VALUE.findall(text))

    def span_ns(self, location: str) -> tuple[int, int]:
        """First and last time of the location's events our schema has records for (regions and metrics)."""
        times = [t for e, t, _ in self.events[location] if e in ("ENTER", "LEAVE", "METRIC")]
        return self.ns(min(times)), self.ns(max(times))

    def region_ns(self) -> dict[str, int]:
        """Total time per region: each Leave minus its Enter, innermost first, in ns."""
        total: dict[str, int] = defaultdict(int)
        for evs in self.events.values():
            stack = []
            for e, t, text in evs:
                if e == "ENTER":
                    stack.append(t)
                elif e == "LEAVE":
                    total[_REGION.search(text).group(1)] += self.ns(t) - self.ns(stack.pop())
        return dict(total)

    def useful_ghz(self) -> float:
        """Cycles per second of computation: PAPI_TOT_CYC's increase (ACCUMULATED_START: a running total) from
        one sample to the next while the innermost region is not an MPI call, over the time between them."""
        cycles = ticks = 0
        for evs in self.events.values():
            stack, last = [], None
            for e, t, text in evs:
                if e == "METRIC":
                    value = int(dict(_VALUE.findall(text))["PAPI_TOT_CYC"])
                    if last is not None and stack and not stack[-1].startswith("MPI_"):
                        cycles, ticks = cycles + value - last[1], ticks + t - last[0]
                    last = (t, value)
                elif e == "ENTER":
                    stack.append(_REGION.search(text).group(1))
                elif e == "LEAVE":
                    stack.pop()
        return cycles / (ticks / self.resolution) / 1e9


@pytest.fixture(scope="module", params=ARCHIVES)
def archive(request):
    anchor = DATA / request.param / "traces.otf2"
    return anchor, Printed(anchor), import_otf2(anchor).table.to_pandas()


def test_locations_and_ranks(archive):
    _, printed, t = archive
    lanes = t[["rank", "thread"]].drop_duplicates()
    assert len(lanes) == len(printed.locations) == 2
    assert t["rank"].nunique() == len(set(printed.locations.values())) == 2


def test_regions_entered_and_left(archive):
    _, printed, t = archive
    regions = t[t.kind.isin(["kernel", "phase", "comm"])]
    ours = Counter(regions["name"].astype(str))
    assert ours == printed.count("ENTER") == printed.count("LEAVE")
    assert ours["MPI_Send"] == ours["MPI_Recv"] == 16 and ours["int main(int, char**)"] == 2


def test_messages_count_and_bytes(archive):
    _, printed, t = archive
    calls = t[t.kind == "comm"]
    ops = calls["name"].astype(str).map(mpi_calls.operation)
    for event, kinds in (("MPI_SEND", mpi_calls.SENDING), ("MPI_RECV", mpi_calls.RECEIVING)):
        mine = calls[ops.isin(kinds)]
        assert (len(mine), int(mine["bytes"].sum())) == printed.messages(event)
    assert printed.messages("MPI_SEND") == (16, 8_355_840)


def test_metric_values_are_counted(archive):
    _, printed, t = archive
    assert Counter(t[t.kind == "counter"]["name"].astype(str)) == printed.metric_values()


def test_first_and_last_times_per_location(archive):
    _, printed, t = archive
    records = t[t.kind != "state"]
    rank_of = {loc: int(group.rsplit(" ", 1)[1]) for loc, group in printed.locations.items()}   # "MPI Rank 1"
    for loc, rank in rank_of.items():
        mine = records[records["rank"] == rank]
        assert (int(mine["start_ns"].min()), int(mine["end_ns"].max())) == printed.span_ns(loc)


def test_total_time_per_region(archive):
    _, printed, t = archive
    regions = t[t.kind.isin(["kernel", "phase", "comm"])]
    ours = (regions["end_ns"] - regions["start_ns"]).groupby(regions["name"].astype(str)).sum()
    assert {k: int(v) for k, v in ours.items()} == printed.region_ns()


def test_useful_frequency_from_accumulated_cycles():
    anchor = DATA / "ping-pong-otf2-papi" / "traces.otf2"
    reference = Printed(anchor).useful_ghz()
    trace = Trace.from_table(import_otf2(anchor).table, anchor)
    got = counters(trace, select(trace))["frequency_ghz"]
    assert 0.40 < reference < 0.45                      # a 2 GHz core that spends most of main in MPI calls
    assert got == pytest.approx(reference, rel=1e-6)    # the times' rounding to ns only


def test_archive_bytes_are_every_file_of_the_archive():
    folder = DATA / "ping-pong-otf2-papi"
    files = [folder / "traces.otf2", folder / "traces.def", *(folder / "traces").iterdir()]
    assert F.archive_bytes(folder / "traces.otf2") == sum(p.stat().st_size for p in files) == 14128


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpt2trace", *map(str, args)], capture_output=True, text=True,
                          check=False)


@pytest.mark.parametrize("name", ARCHIVES)
def test_every_command_reads_the_archive(tmp_path, name):
    anchor = DATA / name / "traces.otf2"
    parquet = tmp_path / "p.parquet"
    runs = [("import", anchor, "-o", parquet), ("info", anchor), ("analyze", parquet, "--json", tmp_path / "a.json"),
            ("report", parquet, "-o", tmp_path / "x.html")]
    runs += [("export", anchor, "-f", f, "-o", tmp_path / f) for f in ("paraver", "chrome", "otf2")]
    for args in runs:
        r = _cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)
    assert (tmp_path / "a.json").stat().st_size and (tmp_path / "x.html").stat().st_size
    again = import_otf2(tmp_path / "otf2").table
    assert again.num_rows == import_otf2(anchor).table.num_rows      # our export of it reads back whole
