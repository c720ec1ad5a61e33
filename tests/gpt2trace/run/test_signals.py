"""SIGINT, SIGTERM and SIGKILL at a random step of a real `gpt2trace run` (a process of its own, real files).

SIGINT/SIGTERM: the run stops after the step in progress, merges, prints one line saying what it kept and exits
130/143; the trace holds exactly the steps the metrics file holds, all whole, and passes the invariants. Both at
once (a second signal): it stops inside the step, which the trace drops. SIGKILL: the parts hold whole steps,
`recover` merges them, and what is lost is within the tracer's bound: the open window, under --flush-every + one
step of completed steps (gpt2trace.record.tracer: parts are written on the loop's thread), on tiny ~1 ms steps.
With --ranks 2, a Ctrl-C to the launcher stops both ranks after the same step.

The step is chosen at random (the seed is in every assertion message); the test waits for it in the metrics
file that the run is writing (under its hidden temporary name until the run ends).
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpt2trace.cli.main import app
from gpt2trace.format import schema as S
from gpt2trace.format.reader import load
from gpt2trace.format.writer import part_files, parts_dir
from gpt2trace.run.runner import TraceConfig
from gpt2trace.testing.invariants import check_trace

TINY = ["--model", "tiny", "-B", "2", "-T", "16", "--threads", "1", "--steps", "10000000"]
TOKENS = 2 * 16
FLUSH_S = TraceConfig.flush_every_s    # the tracer's default --flush-every
STARTUP_S = 300             # a cold Numba cache compiles every kernel first
SEED = random.randrange(1 << 30)


def _start(tmp_path: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gpt2trace", "run", *TINY, "--trace", str(tmp_path / "trace.parquet"),
           "--metrics-json", str(tmp_path / "metrics.jsonl"), *extra]
    return subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _metrics_so_far(tmp_path: Path) -> list[dict]:
    """The steps the running process has finished, from its metrics file (hidden while it runs)."""
    live = sorted(tmp_path.glob(".metrics.jsonl.tmp-*"))
    if not live:
        return []
    lines = live[0].read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]


def _wait_for_step(proc: subprocess.Popen, tmp_path: Path, step: int, part: bool = False) -> None:
    """Until the run has finished `step` (and, with `part`, written its first trace part)."""
    deadline = time.monotonic() + STARTUP_S
    while len(_metrics_so_far(tmp_path)) <= step or part and not part_files(parts_dir(tmp_path / "trace.parquet")):
        if proc.poll() is not None:
            pytest.fail(f"the run ended early (seed {SEED}): {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"no step {step} after {STARTUP_S} s (seed {SEED})"
        time.sleep(0.005)


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _steps(path: Path) -> list[int]:
    counters = load(path).records(S.Kind.COUNTER)
    return sorted(set(counters.column(S.STEP).to_pylist()))


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_after_the_step_in_progress_and_keeps_whole_steps(tmp_path, sig, code):
    rng = random.Random(f"{SEED}-{sig}")
    k = rng.randrange(1, 300)
    proc = _start(tmp_path)
    _wait_for_step(proc, tmp_path, k)
    proc.send_signal(sig)
    returncode, out, err = _finish(proc)
    assert returncode == code, (SEED, err)
    assert "Traceback" not in out + err and err == "", (SEED, err)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = metrics[-1]["step"]
    assert last >= k and [m["step"] for m in metrics] == list(range(last + 1)), SEED
    # the last line of the output says what stopped the run and what it kept
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"interrupted by {sig.name} after step {last}; kept steps 0-{last} in "
                           f"{tmp_path / 'trace.parquet'} ("), (SEED, line)
    assert "metrics of the whole steps in" in line
    # the trace holds exactly those steps, whole: every step's phases, kernels and counters (invariants), and
    # one trace_flush per step, as a finished run's trace does
    assert _steps(tmp_path / "trace.parquet") == list(range(last + 1)), SEED
    check_trace(tmp_path / "trace.parquet", threads=1, steps=last + 1, tokens=TOKENS, closed=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "trace.parquet"]  # no parts, no temps


def test_a_second_signal_stops_inside_the_step_and_the_trace_drops_it(tmp_path):
    # SIGINT and SIGTERM at once: Python runs both handlers at the same point of the step in progress, the
    # first asks for a stop, the second stops now (as a second Ctrl-C does). Steps of ~0.1-0.3 s (`small`,
    # B=16, T=128, one thread) make "inside a step" certain, not likely.
    rng = random.Random(f"{SEED}-second")
    k = rng.randrange(1, 4)
    cmd = [sys.executable, "-m", "gpt2trace", "run", "--model", "small", "-B", "16", "-T", "128", "--threads", "1",
           "--steps", "100000", "--trace", str(tmp_path / "trace.parquet"),
           "--metrics-json", str(tmp_path / "metrics.jsonl")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_step(proc, tmp_path, k)
    time.sleep(rng.uniform(0.0, 0.05))
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    returncode, out, err = _finish(proc)
    assert returncode == 143 and "Traceback" not in out + err, (SEED, err)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = metrics[-1]["step"]
    line = out.strip().splitlines()[-1]
    assert line.startswith(f"interrupted by SIGTERM inside step {last + 1}; kept steps 0-{last} in "), (SEED, line)
    assert _steps(tmp_path / "trace.parquet") == list(range(last + 1)), SEED
    # dropped: the step in progress, and the last step's trace_flush phase (it belongs to the next window)
    trace = check_trace(tmp_path / "trace.parquet", threads=1, steps=last + 1, n_layer=4, tokens=16 * 128,
                        closed=False)
    assert max(trace.records(S.Kind.KERNEL).column(S.STEP).to_pylist()) == last


def test_sigkill_loses_at_most_the_bound_and_recover_keeps_whole_steps(tmp_path):
    rng = random.Random(f"{SEED}-kill")
    k = rng.randrange(300, 3000)            # ~1 ms steps: 0.3-3 s into training, a few parts
    proc = _start(tmp_path)
    _wait_for_step(proc, tmp_path, k, part=True)   # the first part is cut ~0.5 s in: else nothing to recover
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    done = _metrics_so_far(tmp_path)        # the steps that ended before the kill (the file stays hidden)
    assert len(done) > k and not (tmp_path / "trace.parquet").exists(), SEED
    assert part_files(parts_dir(tmp_path / "trace.parquet")), SEED

    result = CliRunner().invoke(app, ["recover", str(tmp_path / "trace.parquet")])
    assert result.exit_code == 0, result.output
    kept = _steps(tmp_path / "trace.parquet")
    # a step's metrics line is written just after its end_step: a kill in between keeps one step more than `done`
    assert kept == list(range(len(kept))) and len(kept) <= len(done) + 1, (SEED, kept[-3:], len(done))
    assert f"steps 0-{kept[-1]}" in result.stdout and not parts_dir(tmp_path / "trace.parquet").exists()
    check_trace(tmp_path / "trace.parquet", threads=1, steps=len(kept), tokens=TOKENS, closed=False)
    lost_s = sum(m["ms"] for m in done[len(kept):]) / 1e3
    # at most the open window: it is cut at the first step end after FLUSH_S, so it holds less than FLUSH_S + 1
    # step, plus the step the kill interrupted (and one step of slack for the metrics line written after end_step)
    bound_s = FLUSH_S + 3 * max(m["ms"] for m in done) / 1e3
    assert lost_s <= bound_s, f"seed {SEED}: lost {len(done) - len(kept)} steps, {lost_s:.3f} s > {bound_s:.3f} s"


@pytest.mark.mpi
def test_ctrl_c_to_a_two_rank_run_stops_both_ranks_after_the_same_step(tmp_path):
    rng = random.Random(f"{SEED}-mpi")
    k = rng.randrange(1, 100)
    proc = _start(tmp_path, "--ranks", "2")
    _wait_for_step(proc, tmp_path, k)
    proc.send_signal(signal.SIGINT)           # what a Ctrl-C at the terminal sends the launcher
    returncode, out, err = _finish(proc)
    assert returncode == 130 and "Traceback" not in out + err, (SEED, err[-2000:])
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    last = metrics[-1]["step"]
    assert f"interrupted by SIGINT after step {last}; kept steps 0-{last} in" in out, (SEED, out[-500:])
    counters = load(tmp_path / "trace.parquet").records(S.Kind.COUNTER).to_pandas()
    per_rank = counters.groupby(S.RANK)[S.STEP].apply(lambda s: sorted(set(s))).to_dict()
    assert per_rank == {0: list(range(last + 1)), 1: list(range(last + 1))}, SEED
    assert not parts_dir(tmp_path / "trace.parquet").exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]
