"""A trace as Extrae writes one for an OpenMP program with PAPI counters: unsigned 64-bit values (up to
18446744073709551615), OpenMP parallel regions (60000001), outlined functions (60000018) and tasks (60000023),
preset and native hardware counters (42000050, 42000059, 42000000, 42001000), the active counter set (42009999)
and sampled addresses. Hand-written .prv/.pcf/.row; every expected number is worked out in the comments."""
import pytest

from analysis.analyze import analyze
from gpt2trace.format.errors import TraceError
from gpt2trace.interop.paraver_import import import_paraver, load_paraver

U64_MAX = 18446744073709551615

PCF = """DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC
LOOK_BACK           100
SPEED               1
FLAG_ICONS          ENABLED
NUM_OF_STATE_COLORS 1000
YMAX_SCALE          37


DEFAULT_SEMANTIC

THREAD_FUNC          State As Is


STATES
0    Idle
1    Running
5    Synchronization
7    Scheduling and Fork/Join


STATES_COLOR
0    {117,195,255}
1    {0,0,255}
5    {179,0,0}
7    {255,255,0}


EVENT_TYPE
0    60000001    Parallel (OMP)
VALUES
0      close
1      DO (open)
2      SECTIONS (open)
3      REGION (open)


EVENT_TYPE
0    60000018    Executed OpenMP parallel function
VALUES
0      End
2      main._omp_fn.0 [main.c:12]


EVENT_TYPE
0    60000023    Executed OpenMP task function
VALUES
0      End
18446744073709551614      task_fn [main.c:20]


EVENT_TYPE
7  42000050 PAPI_TOT_INS [Instr completed]
7  42000059 PAPI_TOT_CYC [Total cycles]
7  42000000 PAPI_L1_DCM [Level 1 data cache misses]
7  42001000 ARITH:DIVIDER_ACTIVE [native]
7  42009999 Active hardware counter set


EVENT_TYPE
0    40000001    Application
VALUES
0      End
1      Begin


EVENT_TYPE
0    32000006    Sampled address (load)


GRADIENT_COLOR
0    {0,255,2}
1    {0,244,13}


GRADIENT_NAMES
0    Gradient 0
1    Grad. 1/MPI Events
"""

ROW = """LEVEL CPU SIZE 2
1.node1
2.node1

LEVEL NODE SIZE 1
node1

LEVEL THREAD SIZE 2
THREAD 1.1.1
THREAD 1.1.2
"""

# One task, two threads, 1000 ns. Master (thread 1): Running [0,100], Fork/Join [100,150], Running in
# main._omp_fn.0 [150,600], Synchronization [600,700], Running [700,1000]. Worker (thread 2): Idle [0,100],
# Fork/Join [100,200], Running [200,700] in main._omp_fn.0 with the task task_fn [300,400], Idle [700,1000].
# Each counter value is the count since the thread's previous read; the worker's instructions at 700 are
# 2**64 - 1 (what Extrae prints for a difference that went negative).
PRV = f"""#Paraver (21/03/2024 at 14:07):1000_ns:1(2):1:1(2:1)
1:1:1:1:1:0:100:1
1:2:1:1:2:0:100:0
2:1:1:1:1:0:40000001:1:42009999:1
1:1:1:1:1:100:150:7
1:2:1:1:2:100:200:7
2:1:1:1:1:100:60000001:1:42000050:1000:42000059:500
2:2:1:1:2:100:60000001:1
1:1:1:1:1:150:600:1
2:1:1:1:1:150:60000018:2
1:2:1:1:2:200:700:1
2:2:1:1:2:200:60000018:2:42000050:0:42000059:0
2:2:1:1:2:300:60000023:{U64_MAX - 1}
2:2:1:1:2:400:60000023:0
1:1:1:1:1:600:700:5
2:1:1:1:1:600:60000018:0:42000050:9000:42000059:4500:42000000:120:42001000:7
1:1:1:1:1:700:1000:1
1:2:1:1:2:700:1000:0
2:1:1:1:1:700:60000001:0:42000050:100:42000059:100
2:2:1:1:2:700:60000018:0:60000001:0:42000050:{U64_MAX}:42000059:750
2:1:1:1:1:800:32000006:140737488355328:32000006:{U64_MAX}
2:1:1:1:1:1000:40000001:0:42000050:2000:42000059:1000
"""


@pytest.fixture
def extrae(tmp_path):
    (tmp_path / "omp.pcf").write_text(PCF)
    (tmp_path / "omp.row").write_text(ROW)
    (tmp_path / "omp.prv").write_text(PRV)
    return tmp_path / "omp.prv"


def _rows(imported, kind):
    df = imported.table.to_pandas()
    return df[df["kind"] == kind].sort_values(["thread", "start_ns", "name"]).reset_index(drop=True)


def test_functions_and_tasks_become_kernels(extrae):
    imported = import_paraver(extrae)
    k = _rows(imported, "kernel")
    # the task's id 2**64 - 2 is named through the .pcf like any other
    assert k[["thread", "name", "start_ns", "end_ns"]].values.tolist() == [
        [0, "main._omp_fn.0 [main.c:12]", 150, 600], [1, "main._omp_fn.0 [main.c:12]", 200, 700],
        [1, "task_fn [main.c:20]", 300, 400]]


def test_counters_keep_the_counts_and_leave_out_the_wrapped_one(extrae):
    imported = import_paraver(extrae)
    c = _rows(imported, "counter")
    assert sorted(zip(c["thread"], c["start_ns"], c["name"], c["value"])) == [
        (0, 100, "PAPI_TOT_CYC", 500.0), (0, 100, "PAPI_TOT_INS", 1000.0),
        (0, 600, "ARITH:DIVIDER_ACTIVE", 7.0), (0, 600, "PAPI_L1_DCM", 120.0),
        (0, 600, "PAPI_TOT_CYC", 4500.0), (0, 600, "PAPI_TOT_INS", 9000.0),
        (0, 700, "PAPI_TOT_CYC", 100.0), (0, 700, "PAPI_TOT_INS", 100.0),
        (0, 1000, "PAPI_TOT_CYC", 1000.0), (0, 1000, "PAPI_TOT_INS", 2000.0),
        (1, 200, "PAPI_TOT_CYC", 0.0), (1, 200, "PAPI_TOT_INS", 0.0), (1, 700, "PAPI_TOT_CYC", 750.0)]
    notes = " | ".join(imported.notes)
    assert "1 hardware counter value(s) of 2**63 or more" in notes
    # what is not a record of our schema, named from the .pcf: 40000001 x2, 42009999 (the counter set: no
    # count), 60000001 x4, 32000006 x2 (one of them 2**64 - 1)
    assert ("9 event(s) of 4 type(s) are not records of our schema and were not imported: 32000006 (Sampled "
            "address (load): 2), 40000001 (Application: 2), 42009999 (Active hardware counter set: 1), "
            "60000001 (Parallel (OMP): 4)") in notes


def test_analyze_gives_pop_and_useful_ipc(extrae):
    result = analyze(load_paraver(extrae))
    pop = result["pop"]
    # useful (Running): master 100 + 450 + 300 = 850 ns, worker 500 ns; runtime 1000 ns
    # LB = mean / max = 675 / 850, communication efficiency = max / runtime = 0.85, parallel efficiency 0.675
    assert pop["load_balance"] == pytest.approx(675 / 850)
    assert pop["communication_efficiency"] == pytest.approx(0.85)
    assert pop["parallel_efficiency"] == pytest.approx(0.675)
    counters = result["counters"]
    # values that close a Running burst: master's at 100, 600, 1000 (not 700: it closes Synchronization), the
    # worker's at 700 (cycles only; its instructions were left out); the worker's at 200 close Fork/Join.
    # instructions 1000 + 9000 + 2000 = 12000; cycles 500 + 4500 + 1000 + 750 = 6750 over 1350 ns of useful time
    assert counters["useful_instructions"] == 12000 and counters["useful_cycles"] == 6750
    # IPC over the bursts with both counts: the worker's [200,700] has no instruction count, so its 750 cycles
    # are left out: 12000 / (500 + 4500 + 1000) = 2
    assert counters["ipc"] == pytest.approx(2.0)
    # every Running burst has cycles: 6750 cycles / 1350 ns
    assert counters["frequency_ghz"] == pytest.approx(5.0)
    # the outlined function ran 450 ns on the master and 500 ns on the worker: mean 475 ns, max 500 ns
    row = next(r for r in result["imbalance"] if r["kernel"] == "main._omp_fn.0 [main.c:12]")
    assert (row["count"], row["mean_s"], row["max_s"]) == (2, pytest.approx(475e-9), pytest.approx(500e-9))


def test_ids_without_a_label_are_named_unsigned(tmp_path):
    text = ("#Paraver (21/03/2024 at 14:07):100_ns:1(1):1:1(1:1)\n1:1:1:1:1:0:100:1\n"
            f"2:1:1:1:1:10:60000018:{U64_MAX}\n2:1:1:1:1:20:60000018:0\n"
            f"2:1:1:1:1:30:50000003:{2**63}\n2:1:1:1:1:40:50000003:0\n")
    (tmp_path / "t.prv").write_text(text)
    imported = import_paraver(tmp_path / "t.prv")
    names = sorted(_rows(imported, "kernel")["name"]) + sorted(_rows(imported, "comm")["name"])
    assert names == [f"Executed OpenMP parallel function {U64_MAX}", f"MPI call {2**63}"]


@pytest.mark.parametrize("value, fits", [(U64_MAX, True), (U64_MAX + 1, False), (-2**63, True),
                                         (-2**63 - 1, False)])
def test_values_beyond_64_bits_name_their_line(tmp_path, value, fits):
    text = f"#Paraver (21/03/2024 at 14:07):100_ns:1(1):1:1(1:1)\n1:1:1:1:1:0:100:1\n2:1:1:1:1:10:32000006:{value}\n"
    (tmp_path / "t.prv").write_text(text)
    if fits:
        assert any("32000006" in n for n in import_paraver(tmp_path / "t.prv").notes)
    else:
        with pytest.raises(TraceError, match=r"t\.prv:3: field 8 \(value\) does not fit in 64 bits"):
            import_paraver(tmp_path / "t.prv")


def test_our_attributes_out_of_range_are_left_empty(tmp_path):
    # 71000001 is our layer attribute (int16): 40000 does not fit, 3 does
    text = ("#Paraver (21/03/2024 at 14:07):100_ns:1(1):1:1(1:1)\n1:1:1:1:1:0:100:1\n"
            "2:1:1:1:1:10:60000019:1:71000001:40000\n2:1:1:1:1:20:60000019:0\n"
            "2:1:1:1:1:30:60000019:1:71000001:3\n2:1:1:1:1:40:60000019:0\n")
    (tmp_path / "t.prv").write_text(text)
    imported = import_paraver(tmp_path / "t.prv")
    k = _rows(imported, "kernel")
    assert k["layer"].isna().tolist() == [True, False] and k["layer"][1] == 3
    assert any("1 value(s) of event type 71000001 (layer) outside -32768..32767" in n for n in imported.notes)


def test_import_and_analyze_from_the_cli(extrae, tmp_path):
    import json

    from typer.testing import CliRunner

    from gpt2trace.cli.main import app
    out = tmp_path / "omp.parquet"
    r = CliRunner().invoke(app, ["import", str(extrae), "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["analyze", str(out), "--json", "-"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counters"]["useful_cycles"] == 6750


# Two counter sets, as Extrae rotates them (41999999 = the set now read): set 1 reads instructions and cycles,
# set 2 instructions and L1 misses (no cycles). One thread, 1000 ns: Running [0,100] (set 1), Synchronization
# [100,200], Running [200,400] (set 2), Synchronization [400,500], Running [500,1000] (set 1). Each value closes
# the burst that ends where it is written.
COUNTER_SETS = """#Paraver (21/03/2024 at 14:07):1000_ns:1(1):1:1(1:1)
1:1:1:1:1:0:100:1
2:1:1:1:1:0:41999999:1
2:1:1:1:1:100:42000050:1000:42000059:500
1:1:1:1:1:100:200:5
2:1:1:1:1:200:41999999:2:42000050:50:42000000:3
1:1:1:1:1:200:400:1
2:1:1:1:1:400:42000050:3000:42000000:10
1:1:1:1:1:400:500:5
2:1:1:1:1:500:41999999:1:42000050:5:42000059:5
1:1:1:1:1:500:1000:1
2:1:1:1:1:1000:42000050:2000:42000059:1000
"""


def test_counter_ratios_are_over_the_bursts_where_their_counters_were_read(tmp_path):
    (tmp_path / "sets.prv").write_text(COUNTER_SETS)
    counters = analyze(load_paraver(tmp_path / "sets.prv"))["counters"]
    # useful (Running) bursts: [0,100] ins 1000 cyc 500; [200,400] ins 3000, no cycles; [500,1000] ins 2000
    # cyc 1000. Totals: 6000 instructions, 1500 cycles
    assert (counters["useful_instructions"], counters["useful_cycles"]) == (6000, 1500)
    # frequency over the 100 + 500 ns where cycles were read: 1500 / 600 ns = 2.5 GHz (not 1500 / 800 ns)
    assert counters["frequency_ghz"] == pytest.approx(2.5)
    # IPC over the bursts with both: (1000 + 2000) / (500 + 1000) = 2 (not 6000 / 1500 = 4)
    assert counters["ipc"] == pytest.approx(2.0)
