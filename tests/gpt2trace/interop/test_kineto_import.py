"""Acceptance 3 and 4 for PyTorch profiler traces: two real ranks (torch.distributed over gloo, two processes) profile
a small MLP with torch.profiler; the import's steps, threads and per-op totals match what the profiler itself
reports (key_averages, its events' threads), the ranks share one time axis, and bad input is one line, exit 2."""
import json
import subprocess
import sys
from collections import defaultdict

import pytest
from typer.testing import CliRunner

from analysis.analyze import analyze
from gpt2trace.format.reader import Trace, check_states
from gpt2trace.interop.kineto_import import MPI_TWINS, STEP_PHASE, import_kineto

# Run by each rank in its own process: 4 steps (the first a warm-up, so 3 recorded), record_shapes for the bytes
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
averages = {e.key: {"count": e.count, "cpu_time_total_us": e.cpu_time_total} for e in prof.key_averages()}
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


def test_steps_threads_and_op_totals_match_the_profiler(profiled):
    folder, expected = profiled
    trace = _trace(folder)
    df = trace.to_pandas()
    for rank, reported in enumerate(expected):
        mine = df[df["rank"] == rank]
        averages = reported["key_averages"]
        # steps: key_averages groups the ProfilerStep#k spans as "ProfilerStep*"; step 0 was the warm-up
        step_rows = mine[(mine.kind == "phase") & (mine.name == STEP_PHASE)]
        assert averages["ProfilerStep*"]["count"] == step_rows.step.nunique() == 3
        assert sorted(step_rows.step.astype(int)) == [1, 2, 3]
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
                twin = ("comm", MPI_TWINS[key[len("gloo:"):]])
                ours_us, ours_n = totals[twin] / 1e3, counts[twin]
            else:
                ours_us, ours_n = totals[key] / 1e3, counts[key]
            assert ours_n == avg["count"], key
            assert ours_us == pytest.approx(avg["cpu_time_total_us"], rel=0.01), key


def test_collectives_ranks_and_one_time_axis(profiled):
    folder, _ = profiled
    trace = _trace(folder)
    assert check_states(trace) == []                           # every thread's states partition the run
    df = trace.to_pandas()
    assert df.start_ns.min() == 0                              # HTA's alignment: the earliest event of both at 0
    comm = df[df.kind == "comm"].sort_values(["rank", "seq"])
    # 4 parameters (2 weights, 2 biases) all-reduced in each of the 3 recorded steps, on each rank
    assert comm.groupby("rank").size().tolist() == [12, 12]
    assert set(comm.name) == {"MPI_Allreduce"}
    r0, r1 = (comm[comm["rank"] == r] for r in range(2))
    assert r0.seq.tolist() == r1.seq.tolist() == list(range(12))
    # bytes from the shapes, float32, in the parameters' order: weight 64x32, bias 64, weight 32x64, bias 32
    assert r0.bytes.astype(int).tolist() == r1.bytes.astype(int).tolist() == [8192, 256, 8192, 128] * 3
    result = analyze(trace)
    assert 0 < result["pop"]["parallel_efficiency"] <= 1


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


def test_a_truncated_gzip_is_one_line(tmp_path, profiled):
    import gzip

    from gpt2trace.cli.main import app
    folder, _ = profiled
    data = gzip.compress((folder / "rank0.json").read_bytes())
    (tmp_path / "rank0.json.gz").write_bytes(data[: len(data) // 2])
    r = CliRunner().invoke(app, ["import", str(tmp_path / "rank0.json.gz"), "-o", str(tmp_path / "x.parquet")])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1 and "rank0.json.gz" in r.output, r.output
