"""Acceptance 3 and 4 for PyTorch profiler traces: two real ranks (torch.distributed over gloo, two processes) profile
a small MLP with torch.profiler; the import's steps, threads and per-op totals match what the profiler itself
reports (key_averages, its events' threads), the ranks share one time axis, and bad input is one line, exit 2."""
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.analyze import analyze
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.interop.kineto_events import mpi_twin
from gpt2trace.interop.kineto_import import STEP_PHASE, import_kineto

# Run by each rank in its own process: 4 steps (the first a warm-up, so 3 recorded, the last of them left out as
# HTA leaves it out), record_shapes for the bytes
# of the collectives, acc_events so that key_averages still holds the recorded steps after the trace is written.
PROFILE = r"""
import json, sys
import torch, torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, record_function, schedule
out, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo", init_method=f"file://{out}/store", rank=rank, world_size=world)
torch.manual_seed(rank)
torch.set_num_threads(2)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(8, 32)
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, acc_events=True,
             schedule=schedule(wait=0, warmup=1, active=3),
             on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank{rank}.json")) as prof:
    for _ in range(4):
        with record_function("forward"):
            loss = model(x).pow(2).mean()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
        opt.step()
        opt.zero_grad()
        prof.step()
# the profiler's own totals over the events before the last step, the window HTA (and the import) keeps
# (key_averages' count and cpu_time_total per key, over those events)
events = prof.events()
last = max(e.time_range.start for e in events if e.name.startswith("ProfilerStep"))
averages = {}
for e in events:
    if e.time_range.start < last:
        avg = averages.setdefault(e.key, {"count": 0, "cpu_time_total_us": 0.0})
        avg["count"] += 1
        avg["cpu_time_total_us"] += e.cpu_time_total
threads = len({e.thread for e in prof.events()})
json.dump({"key_averages": averages, "threads": threads}, open(f"{out}/rank{rank}.expected", "w"))
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """The two ranks' trace files (and what their profilers reported), in one folder."""
    out = tmp_path_factory.mktemp("kineto")
    procs = [subprocess.Popen([sys.executable, "-c", PROFILE, str(out), str(r), "2"], stderr=subprocess.PIPE,
                              text=True) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    (out / "store").unlink(missing_ok=True)
    expected = [json.loads((out / f"rank{r}.expected").read_text()) for r in range(2)]
    for r in range(2):
        (out / f"rank{r}.expected").rename(out / f"rank{r}.expected.txt")     # not a .json: not a trace file
    return out, expected


def _trace(folder) -> Trace:
    return Trace.from_table(import_kineto(folder).table)


@pytest.mark.torch
def test_steps_threads_and_op_totals_match_the_profiler(profiled):
    folder, expected = profiled
    trace = _trace(folder)
    df = trace.to_pandas()
    for rank, reported in enumerate(expected):
        mine = df[df["rank"] == rank]
        averages = reported["key_averages"]
        # steps: key_averages groups the ProfilerStep#k spans as "ProfilerStep*"; step 0 was the warm-up
        step_rows = mine[(mine.kind == "phase") & (mine.name == STEP_PHASE)]
        assert averages["ProfilerStep*"]["count"] == step_rows.step.nunique() == 2
        assert sorted(step_rows.step.astype(int)) == [1, 2]
        # threads: main, and gloo's two worker threads (that run the collectives)
        assert mine["thread"].nunique() == reported["threads"] == 3
        # per op: count exactly, total time within 1% (both are the profiler's own events; ns vs us rounding)
        totals, counts = defaultdict(int), defaultdict(int)
        for kind, name, start, end in mine[mine.kind != "state"][["kind", "name", "start_ns", "end_ns"]].values:
            key = name if kind in ("kernel", "phase") else (kind, name)          # ops and annotations by name
            totals[key] += end - start
            counts[key] += 1
        for key, avg in averages.items():
            if key == "ProfilerStep*":
                ours_us, ours_n = (step_rows.end_ns - step_rows.start_ns).sum() / 1e3, len(step_rows)
            elif key.startswith("gloo:"):
                twin = ("comm", mpi_twin(key))
                ours_us, ours_n = totals[twin] / 1e3, counts[twin]
            else:
                ours_us, ours_n = totals[key] / 1e3, counts[key]
            assert ours_n == avg["count"], key
            assert ours_us == pytest.approx(avg["cpu_time_total_us"], rel=0.01), key


@pytest.mark.torch
def test_collectives_ranks_and_one_time_axis(profiled):
    folder, _ = profiled
    trace = _trace(folder)
    assert check_states(trace) == []                           # every thread's states partition the run
    df = trace.to_pandas()
    assert df.start_ns.min() == 0                              # HTA's alignment: the earliest event of both at 0
    comm = df[df.kind == "comm"].sort_values(["rank", "seq"])
    # 4 parameters (2 weights, 2 biases) all-reduced in each of the 2 steps kept, on each rank
    assert comm.groupby("rank").size().tolist() == [8, 8]
    assert set(comm.name) == {"MPI_Allreduce"}
    r0, r1 = (comm[comm["rank"] == r] for r in range(2))
    assert r0.seq.tolist() == r1.seq.tolist() == list(range(8))
    # bytes from the shapes, float32, in the parameters' order: weight 64x32, bias 64, weight 32x64, bias 32
    assert r0.bytes.astype(int).tolist() == r1.bytes.astype(int).tolist() == [8192, 256, 8192, 128] * 2
    result = analyze(trace)
    assert 0 < result["pop"]["parallel_efficiency"] <= 1


@pytest.mark.torch
def test_cli_import_a_folder_then_analyze(profiled, tmp_path):
    from gpt2trace.cli.main import app
    folder, _ = profiled
    runner = CliRunner()
    r = runner.invoke(app, ["import", str(folder), "--from", "kineto", "-o", str(tmp_path / "torch.parquet")])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["analyze", str(tmp_path / "torch.parquet"), "--json", "-"])
    assert r.exit_code == 0 and json.loads(r.stdout)["window"]["steps"]


@pytest.mark.parametrize("content, words", [
    ("{not json", "not valid JSON"),
    ("[1, 2, 3]", "not a Chrome trace (no traceEvents list)"),
    ('{"traceEvents": [{"ph": "X", "name": "matmul_forward", "cat": "kernel", "ts": 1, "dur": 2, "pid": 0, '
     '"tid": 0}]}', "a Chrome trace, but not a PyTorch profiler (Kineto) trace"),
])
def test_bad_input_is_one_line(tmp_path, content, words):
    from gpt2trace.cli.main import app
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    r = CliRunner().invoke(app, ["import", str(bad), "--from", "kineto", "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith(f"error: {bad}: {words}") and "Traceback" not in r.output
    assert not (tmp_path / "x.parquet").exists()


def test_our_own_chrome_export_is_not_taken_for_a_profiler_trace(tmp_path):
    from pathlib import Path

    from gpt2trace.cli.main import app
    from gpt2trace.interop.chrome_export import export_chrome
    sample = Path(__file__).resolve().parents[3] / "sample_traces" / "tiny_1thread.parquet"
    export_chrome(sample, tmp_path / "ours.json")
    r = CliRunner().invoke(app, ["import", str(tmp_path / "ours.json"), "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and "not a PyTorch profiler (Kineto) trace" in r.output


@pytest.mark.torch
def test_a_truncated_gzip_is_one_line(tmp_path, profiled):
    import gzip

    from gpt2trace.cli.main import app
    folder, _ = profiled
    data = gzip.compress((folder / "rank0.json").read_bytes())
    (tmp_path / "rank0.json.gz").write_bytes(data[: len(data) // 2])
    r = CliRunner().invoke(app, ["import", str(tmp_path / "rank0.json.gz"), "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "rank0.json.gz" in r.output, r.output


# --- hand-built traces, one per construct the profiler writes -----------------------------------------------------

def _kineto(tmp_path, events, name="trace.json", **top) -> Path:
    """A Kineto JSON file of `events` (ts/dur given as the JSON text Kineto writes: numbers with decimals)."""
    body = ", ".join(events)
    extra = "".join(f', "{k}": {json.dumps(v)}' for k, v in top.items())
    path = tmp_path / name
    path.write_text(f'{{"schemaVersion": 1{extra}, "traceEvents": [{body}]}}')
    return path


def _x(name, ts, dur, cat="cpu_op", tid=1, args=None) -> str:
    return (f'{{"ph": "X", "cat": "{cat}", "name": "{name}", "pid": 1, "tid": {tid}, "ts": {ts}, "dur": {dur}, '
            f'"args": {json.dumps(args or {})}}}')


def _rows(path):
    return Trace.from_table(import_kineto(path).table).to_pandas()


def test_epoch_microseconds_with_decimals_are_exact_nanoseconds(tmp_path, ):
    # a float holds 1695835535123456.789 to 0.25 us: the child (0.2 us in, ending with its parent) came out crossing
    path = _kineto(tmp_path, [_x("aten::linear", "1695835535123456.789", "10.000"),
                              _x("aten::mm", "1695835535123456.989", "9.800"),
                              _x("aten::relu", "1695835535123467", "0.001")])
    df = _rows(path)
    k = df[df.kind == "kernel"].set_index("name")
    assert k.loc["aten::linear", "start_ns"] == 0 and k.loc["aten::linear", "end_ns"] == 10_000
    assert k.loc["aten::mm", "start_ns"] == 200 and k.loc["aten::mm", "end_ns"] == 10_000
    assert k.loc["aten::relu", "start_ns"] == 10_211 and k.loc["aten::relu", "end_ns"] == 10_212
    from gpt2trace.interop.chrome_export import export_chrome
    export_chrome(Trace.from_table(import_kineto(path).table), tmp_path / "out")


def test_ops_that_cross_their_parent_are_clipped_to_it_and_counted(tmp_path):
    path = _kineto(tmp_path, [_x("aten::linear", 100, 10), _x("aten::mm", 105, 8)])      # mm ends 3 us late
    imp = import_kineto(path)
    k = Trace.from_table(imp.table).to_pandas().query("kind == 'kernel'").set_index("name")
    assert k.loc["aten::mm", "end_ns"] == k.loc["aten::linear", "end_ns"] == 10_000
    assert "1 ends of CPU events that crossed their enclosing event's end (clipped to it)" in imp.notes[0]


@pytest.mark.parametrize("call, twin", [
    ("nccl:_all_gather_base", "MPI_Iallgather"), ("nccl:all_gather_into_tensor", "MPI_Iallgather"),
    ("nccl:all_gather_into_tensor_coalesced", "MPI_Iallgather"), ("gloo:_allgather_base", "MPI_Allgather"),
    ("gloo:all_gather", "MPI_Allgather"), ("nccl:_reduce_scatter_base", "MPI_Ireduce_scatter"),
    ("nccl:reduce_scatter_tensor", "MPI_Ireduce_scatter"), ("nccl:reduce_scatter_tensor_coalesced",
                                                             "MPI_Ireduce_scatter"),
    ("nccl:all_to_all", "MPI_Ialltoall"), ("gloo:alltoall_base", "MPI_Alltoall"), ("mpi:alltoall", "MPI_Alltoall"),
    ("gloo:all_reduce", "MPI_Allreduce"), ("gloo:allreduce_coalesced", "MPI_Allreduce"),
    ("nccl:allreduce_coalesced", "MPI_Iallreduce"), ("nccl:broadcast", "MPI_Ibcast"), ("gloo:broadcast", "MPI_Bcast"),
    ("gloo:reduce", "MPI_Reduce"), ("gloo:gather", "MPI_Gather"), ("gloo:scatter", "MPI_Scatter"),
    ("gloo:barrier", "MPI_Barrier"), ("nccl:send", "MPI_Isend"), ("nccl:recv", "MPI_Irecv"),
    ("gloo:recv_anysource", "MPI_Recv"), ("nccl:recv_any_source", "MPI_Irecv"),
])
def test_every_spelling_of_a_collective_is_its_mpi_twin(tmp_path, call, twin):
    path = _kineto(tmp_path, [_x(call, 100, 10, cat="user_annotation")])
    comm = _rows(path).query("kind == 'comm'")
    assert comm.name.tolist() == [twin]


def test_the_last_profiler_step_is_left_out_as_hta_leaves_it(tmp_path):
    # steps 1 and 2 of 100 us, then the closing step 3 of 49 us with one op
    steps = [_x(f"ProfilerStep#{k}", 1000 + 100 * (k - 1), 100 if k < 3 else 49, cat="user_annotation")
             for k in (1, 2, 3)]
    ops = [_x("aten::mm", 1010 + 100 * (k - 1), 20) for k in (1, 2, 3)]
    imp = import_kineto(_kineto(tmp_path, steps + ops))
    df = Trace.from_table(imp.table).to_pandas()
    phases = df.query("kind == 'phase' and name == @STEP_PHASE")
    assert sorted(phases.step.astype(int)) == [1, 2]
    assert len(df.query("kind == 'kernel'")) == 2 and df.end_ns.max() == 200_000
    assert "2 CPU events of the last ProfilerStep, the profiler's closing step (as HTA leaves it out)" in imp.notes[0]


def test_a_one_rank_file_of_a_bigger_job_keeps_its_world_size(tmp_path):
    from analysis.groups import parallel
    from gpt2trace.format import grid
    path = _kineto(tmp_path, [_x("ProfilerStep#5", 100, 50, cat="user_annotation"), _x("aten::mm", 110, 20)],
                   distributedInfo={"backend": "gloo", "rank": 34, "world_size": 300})
    imp = import_kineto(path)
    trace = Trace.from_table(imp.table)
    assert set(trace.to_pandas()["rank"]) == {34}
    assert trace.run["parallel"]["ranks"] == 300
    assert grid.from_run(trace.run, 300).degree(grid.DP) == 300
    assert parallel(trace)["dp"] == 300 and parallel(trace)["ranks"] == 300
    assert "1 of the job's 300 ranks were profiled" in imp.notes


@pytest.mark.parametrize("dtype, size", [
    ("long", 8), ("long int", 8), ("int", 4), ("short", 2), ("short int", 2), ("signed char", 1),
    ("unsigned char", 1), ("bool", 1), ("float", 4), ("double", 8), ("c10::Half", 2), ("c10::BFloat16", 2),
    ("c10::complex<float>", 8), ("c10::complex<double>", 16), ("c10::complex<c10::Half>", 4),
])
def test_every_dtype_the_profiler_names_has_bytes(tmp_path, dtype, size):
    args = {"Input Dims": [[3, 5]], "Input type": [dtype]}
    comm = _rows(_kineto(tmp_path, [_x("gloo:all_reduce", 100, 10, cat="user_annotation", args=args)]))
    assert comm.query("kind == 'comm'").bytes.tolist() == [15 * size]


@pytest.mark.parametrize("args", [{}, {"Input Dims": [], "Input type": []}, {"Input Dims": [[4]],
                                                                              "Input type": ["Scalar"]}])
def test_a_collective_without_shapes_has_unknown_bytes(tmp_path, args):
    comm = _rows(_kineto(tmp_path, [_x("gloo:all_reduce", 100, 10, cat="user_annotation", args=args)]))
    assert comm.query("kind == 'comm'").bytes.isna().all()


def test_a_pytorch_1_9_trace_with_operator_events_is_read(tmp_path):
    # PyTorch 1.9: ops and ProfilerStep as cat "Operator", tid as a string, GPU work as Runtime/Kernel
    events = [_x("ProfilerStep#5", 100, 50, cat="Operator", tid='"5555"'),
              _x("aten::conv2d", 110, 20, cat="Operator", tid='"5555"'),
              _x("cudaLaunchKernel", 115, 2, cat="Runtime", tid=5555), _x("sgemm", 120, 5, cat="Kernel", tid=7)]
    imp = import_kineto(_kineto(tmp_path, events))
    df = Trace.from_table(imp.table).to_pandas()
    assert df.query("kind == 'phase'").name.tolist() == [STEP_PHASE]
    assert df.query("kind == 'kernel'").name.tolist() == ["aten::conv2d"]
    assert df.query("kind == 'kernel'").step.tolist() == [5]
    assert "1 Kernel events" in imp.notes[0] and "1 Runtime events" in imp.notes[0]


def test_nccl_collectives_are_postings_whose_duration_is_not_the_transfer(tmp_path):
    from analysis import mpi, waits
    from gpt2trace.format import mpi_calls
    # two ranks enqueue one all-reduce, rank 1 300 us later: a blocking twin would show a 300 us Wait at NxN
    for rank in (0, 1):
        _kineto(tmp_path, [_x("nccl:all_reduce", 100 + 300 * rank, 400, cat="user_annotation",
                              args={"Input Dims": [[1024]], "Input type": ["float"]})],
                name=f"rank{rank}.json", distributedInfo={"rank": rank, "world_size": 2})
    trace = Trace.from_table(import_kineto(tmp_path).table)
    comm = trace.to_pandas().query("kind == 'comm'")
    assert comm.name.tolist() == ["MPI_Iallreduce"] * 2 and comm.bytes.tolist() == [4096, 4096]
    assert mpi_calls.operation("MPI_Iallreduce") == mpi_calls.COLL_POST
    assert waits.wait_states(mpi.calls(trace)).empty
