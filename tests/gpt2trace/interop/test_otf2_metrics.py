"""OTF2 metrics as counter records: every metric mode and value type becomes what the schema's counters hold, the
amount of the interval (previous sample, t] at t (PAPI counts since the thread's previous read)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpt2trace.interop.otf2_import import import_otf2

END = 40
# mode -> (value type, samples at 10, 20, 30 ns, the counter records (t, value) the import makes): a running total
# (ACCUMULATED) gives its increases, from zero when it counts from the start, else from its first sample; a level
# (ABSOLUTE) or an increase (RELATIVE) is kept, and when it describes the time up to the next sample (NEXT) it is
# placed at that sample, the last one at the location's last event (40 ns)
MODES = {
    "ACCUMULATED_START": ("UINT64", [2**63, 2**63 + 5, 2**63 + 12], [(10, 2.0**63), (20, 5.0), (30, 7.0)]),
    "ACCUMULATED_POINT": ("INT64", [-5, 0, 10], [(20, 5.0), (30, 10.0)]),
    "ACCUMULATED_LAST": ("DOUBLE", [1.5, 2.0, 4.0], [(20, 0.5), (30, 2.0)]),
    "ACCUMULATED_NEXT": ("UINT64", [3, 4, 6], [(20, 1.0), (30, 2.0)]),
    "ABSOLUTE_POINT": ("DOUBLE", [3.0, 1.0, 2.0], [(10, 3.0), (20, 1.0), (30, 2.0)]),
    "ABSOLUTE_LAST": ("INT64", [-1, 4, 2], [(10, -1.0), (20, 4.0), (30, 2.0)]),
    "ABSOLUTE_NEXT": ("DOUBLE", [7.0, 8.0, 9.0], [(20, 7.0), (30, 8.0), (END, 9.0)]),
    "RELATIVE_POINT": ("INT64", [1, 2, 3], [(10, 1.0), (20, 2.0), (30, 3.0)]),
    "RELATIVE_LAST": ("DOUBLE", [0.25, 0.5, 0.75], [(10, 0.25), (20, 0.5), (30, 0.75)]),
    "RELATIVE_NEXT": ("UINT64", [4, 5, 6], [(20, 4.0), (30, 5.0), (END, 6.0)]),
}


def _archive(path: Path) -> Path:
    """One thread in region `work` [0, 40] ns, one metric per mode sampled at 10, 20 and 30 ns."""
    import otf2
    with otf2.writer.open(str(path), timer_resolution=1_000_000_000) as w:
        d = w.definitions
        loc = d.location("Master thread", group=d.location_group("MPI Rank 0",
                                                                 system_tree_parent=d.system_tree_node("node")))
        metrics = {mode: d.metric(mode, unit="#", metric_mode=getattr(otf2.MetricMode, mode),
                                  value_type=getattr(otf2.Type, vtype)) for mode, (vtype, _, _) in MODES.items()}
        work = d.region("work")
        ev = w.event_writer_from_location(loc)
        ev.enter(0, work)
        for i, t in enumerate((10, 20, 30)):
            for mode, (_, samples, _) in MODES.items():
                ev.metric(t, metrics[mode], samples[i])
        ev.leave(END, work)
    return path / "traces.otf2"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    return import_otf2(_archive(tmp_path_factory.mktemp("modes") / "arch"))


@pytest.mark.parametrize("mode", MODES)
def test_each_metric_mode_gives_the_amount_of_its_interval(imported, mode):
    t = imported.table.to_pandas()
    got = t[(t.kind == "counter") & (t.name == mode)].sort_values("start_ns")
    assert (got.start_ns == got.end_ns).all()
    assert list(zip(got.start_ns.tolist(), got.value.tolist())) == MODES[mode][2]


def test_first_samples_of_running_totals_are_noted(imported):
    # ACCUMULATED_POINT, _LAST and _NEXT: one first sample each without an earlier reading
    assert any(n.startswith("3 first sample(s) of running-total metrics") for n in imported.notes), imported.notes
