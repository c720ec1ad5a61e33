import pytest

from analysis.analyze import analyze
from analysis.counters import counters
from analysis.scaling import modelfactors
from analysis.window import select
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import CYCLES, INSTRUCTIONS, STEP, State
from gpt2trace.testing import synthetic as syn

RUN, SYNC = State.RUNNING, State.SYNCHRONIZATION


def _counter(thread, t, name, value):
    rec = syn.counter(0, t, name, value, step=0)
    rec[STEP] = None                                  # as an Extrae import has them: no step
    rec["thread"] = thread
    return rec


@pytest.fixture
def with_counters() -> Trace:
    # thread 0: Running [0,4], Synchronization [4,6], Running [6,10]; thread 1: Running [0,10]  (seconds)
    # each value closes the burst that ends where it is written:
    #   t=4 on thread 0 closes Running [0,4]: 8000 instructions, 4000 cycles           useful
    #   t=6 on thread 0 closes Synchronization [4,6]: 999 instructions, 500 cycles     not useful
    #   t=10 on thread 0 closes Running [6,10]: 2000, 2000; on thread 1 Running [0,10]: 10000, 10000
    recs = [syn.state(0, 0, 0, 4, RUN), syn.state(0, 0, 4, 6, SYNC), syn.state(0, 0, 6, 10, RUN),
            syn.state(0, 1, 0, 10, RUN)]
    for thread, t, ins, cyc in ((0, 4, 8000, 4000), (0, 6, 999, 500), (0, 10, 2000, 2000), (1, 10, 10000, 10000)):
        recs += [_counter(thread, t, INSTRUCTIONS, ins), _counter(thread, t, CYCLES, cyc)]
    return Trace.from_table(syn.from_records(recs))


def test_useful_ipc_and_frequency(with_counters):
    out = counters(with_counters, select(with_counters))
    # useful instructions 8000 + 2000 + 10000 = 20000, cycles 4000 + 2000 + 10000 = 16000 -> IPC 1.25;
    # useful time 4 + 4 + 10 = 18 s -> frequency 16000 / 18 Hz
    assert out["useful_instructions"] == 20000
    assert out["useful_cycles"] == 16000
    assert out["ipc"] == pytest.approx(1.25)
    assert out["frequency_ghz"] == pytest.approx(16000 / 18 / 1e9)


def test_a_second_read_at_the_same_instant_is_dropped():
    # thread 0: Running [0,4], then a zero-duration MPI call at 4 (Running again [4,10]): Extrae reads the
    # counters at its entry and at its exit, both at t = 4. The first read closes Running (0,4]: 8000, 4000; the
    # second closes the empty burst (4,4] and is dropped as Paraver drops it (kept: 8050, 4040).
    # t = 10 closes Running (4,10]: 6000, 6000. Useful: 14000 instructions, 10000 cycles over 10 s.
    recs = [syn.state(0, 0, 0, 4, RUN), syn.state(0, 0, 4, 10, RUN)]
    for t, ins, cyc in ((4, 8000, 4000), (4, 50, 40), (10, 6000, 6000)):
        recs += [_counter(0, t, INSTRUCTIONS, ins), _counter(0, t, CYCLES, cyc)]
    trace = Trace.from_table(syn.from_records(recs))
    out = counters(trace, select(trace))
    assert (out["useful_instructions"], out["useful_cycles"]) == (14000, 10000)
    assert out["ipc"] == pytest.approx(1.4) and out["frequency_ghz"] == pytest.approx(10000 / 10 / 1e9)


def test_no_counters_gives_none(late_rank):
    out = analyze(late_rank)
    assert out["counters"] == {"useful_instructions": None, "useful_cycles": None, "ipc": None,
                               "frequency_ghz": None}


def _result(runtime, useful_avg, cpus, ins, cyc, useful_s):
    return {"trace": "x", "summary": {"steps": 1, "tokens_per_step": 100, "ranks": 1, "threads_per_rank": cpus},
            "pop": {"runtime_s": runtime, "useful_avg_s": useful_avg, "cpus": cpus, "parallel_efficiency": 0.5},
            "counters": {"useful_instructions": ins, "useful_cycles": cyc, "ipc": ins / cyc,
                         "frequency_ghz": cyc / useful_s / 1e9}}


def test_scaling_splits_computation_scalability():
    ref = _result(10, 8, 1, 1000, 500, 8)          # IPC 2, 62.5 Hz
    run = _result(6, 5, 2, 1200, 800, 10)          # IPC 1.5, 80 Hz; useful 10 s for the same 100 tokens
    row = modelfactors([ref, run]).iloc[1]
    # IPC 1.5 / 2 = 0.75; frequency 80 / 62.5 = 1.28; instructions 1000 / 1200 = 5/6;
    # product 0.75 x 1.28 x 5/6 = 0.8 = computation scalability 8 / 10
    assert row["ipc_scalability"] == pytest.approx(0.75)
    assert row["frequency_scalability"] == pytest.approx(1.28)
    assert row["instruction_scalability"] == pytest.approx(5 / 6)
    assert row["computation_scalability"] == pytest.approx(0.8)
    assert (row["ipc_scalability"] * row["frequency_scalability"] * row["instruction_scalability"]
            == pytest.approx(row["computation_scalability"]))
    # the run's own averages are in the row too
    assert (row["ipc"], row["frequency_ghz"]) == pytest.approx((1.5, 80 / 1e9))


def test_scaling_without_counters_leaves_them_empty(late_rank, serial):
    out = modelfactors([analyze(late_rank), analyze(serial)])
    assert out[["ipc_scalability", "instruction_scalability", "frequency_scalability", "ipc",
                "frequency_ghz"]].isna().all().all()
