"""Checkpoints and resume end to end: a run stopped after a save and continued with --resume equals the
uninterrupted run bit for bit (losses compared with ==, the final checkpoint and optimizer state byte for byte),
on one rank through the CLI and under real `mpiexec` for every --dp-sync and sequence parallelism; on another
layout within float32 rounding; and the traces show every save as a `checkpoint` phase with its bytes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from gpt2trace import load
from gpt2trace.cli.main import app
from gpt2trace.format import schema as S
from gpt2trace.testing.invariants import check_trace
from trainer.state_file import read_moment, read_state_header

SCRIPT = Path(__file__).parent / "mpi" / "resume_equivalence.py"
TINY = ["--model", "tiny", "-B", "2", "-T", "16", "--threads", "2", "--grad-accum", "2"]
# Another layout sums the same float32 gradients in another order: a few ulp, which AdamW amplifies to ~1e-8
# relative on these losses (measured 4e-9); a wrong moment or step count moves them by 1e-4 or more.
RTOL = 1e-6


def _run(*args):
    return CliRunner().invoke(app, ["run", *map(str, args)])


def _losses(path: Path) -> list[float]:
    return [json.loads(line)["loss"] for line in path.read_text().splitlines()]


def _steps(path: Path) -> list[int]:
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def _checkpoints(trace) -> pd.DataFrame:
    df = trace.to_pandas()
    return df[(df[S.KIND] == S.Kind.PHASE) & (df[S.NAME] == S.Phase.CHECKPOINT)].sort_values([S.STEP, S.RANK])


def _pair_bytes(path: Path) -> int:
    return path.stat().st_size + Path(f"{path}.state").stat().st_size


def test_one_rank_resumed_run_continues_bit_for_bit_and_its_trace_continues_the_steps(tmp_path):
    full, run = tmp_path / "full.bin", tmp_path / "run.bin"
    r = _run(*TINY, "--steps", "6", "--save", full, "--save-every", "2", "--metrics-json", tmp_path / "full.jsonl",
             "--trace", tmp_path / "full.parquet")
    assert r.exit_code == 0, r.output
    r = _run(*TINY, "--steps", "3", "--save", run, "--save-every", "3", "--metrics-json", tmp_path / "first.jsonl",
             "--trace", tmp_path / "first.parquet")
    assert r.exit_code == 0, r.output
    assert f"checkpoint: {run} and run.bin.state hold 3 step(s)" in r.stdout.replace("\n", "")
    # --save over --resume: the usual way to continue a run in place
    r = _run(*TINY, "--steps", "6", "--resume", run, "--save", run, "--metrics-json", tmp_path / "resumed.jsonl",
             "--trace", tmp_path / "resumed.parquet")
    assert r.exit_code == 0, r.output
    assert f"resuming {run} at step 3 (AdamW state of 3 steps); the saved run's layout: losses continue bit for " \
           "bit" in r.stdout.replace("\n", "")

    full_losses = _losses(tmp_path / "full.jsonl")
    assert _losses(tmp_path / "first.jsonl") == full_losses[:3]
    assert _losses(tmp_path / "resumed.jsonl") == full_losses[3:]          # bit for bit
    assert _steps(tmp_path / "resumed.jsonl") == [3, 4, 5]
    # the same parameters, moments, t and next step: the files are identical (the same layout wrote both)
    assert run.read_bytes() == full.read_bytes()
    assert Path(f"{run}.state").read_bytes() == Path(f"{full}.state").read_bytes()
    saved = read_state_header(f"{run}.state")
    assert (saved.t, saved.next_step) == (6, 6) and read_moment(saved, "v").min() >= 0

    # traces: every save a checkpoint phase inside its step with the bytes of both files; the full run saves
    # after every 2nd step (1, 3, 5), the first half after step 2, the resumed run after its last (5)
    trace = check_trace(tmp_path / "resumed.parquet", threads=2, steps=3, grad_accum=2, tokens=2 * 16 * 2)
    assert sorted(trace.to_pandas()[S.STEP].dropna().unique()) == [3, 4, 5]
    assert trace.run["train"]["start_step"] == 3 and trace.run["resume"] == str(run)
    for name, steps in (("full", [1, 3, 5]), ("first", [2]), ("resumed", [5])):
        ck = _checkpoints(load(tmp_path / f"{name}.parquet"))
        assert ck[S.STEP].tolist() == steps, name
        assert (ck[S.BYTES] == _pair_bytes(full)).all(), name      # 139,776 + 278,920 bytes on the tiny model
    assert _pair_bytes(full) == 139_776 + 1024 + read_state_header(f"{full}.state").json_bytes + 8 * 34_688


def test_an_interrupted_run_says_which_checkpoint_to_resume_from(tmp_path):
    run, metrics = tmp_path / "run.bin", tmp_path / "m.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "gpt2trace", "run", *TINY, "--steps", "100000", "--save", run,
                             "--save-every", "2", "--metrics-json", metrics, "--no-trace"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not run.exists():                      # the first save, after step 1: training is under way
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    held = read_state_header(f"{run}.state").next_step
    assert held % 2 == 0 and held >= 2           # saved after every 2nd step
    assert f"the checkpoint {run} holds {held} step(s) (continue with --resume {run})" in out.replace("\n", "")


@pytest.mark.mpi
def test_every_layout_resumes_bit_for_bit_under_mpiexec(tmp_path):
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    out = subprocess.run(["mpiexec", "-n", "2", sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name in ("allreduce", "reduce-bcast", "overlap", "zero1", "zero2", "sp2", "pp2"):
        r, folder = result[name], tmp_path / name
        assert len(r["full"]) == 6
        assert r["first"] == r["full"][:3] and r["resumed"] == r["full"][3:], name        # bit for bit
        assert (folder / "run.bin").read_bytes() == (folder / "full.bin").read_bytes(), name
        assert (folder / "run.bin.state").read_bytes() == (folder / "full.bin.state").read_bytes(), name

    # another layout continues the same training within float32 rounding: allreduce's state resumed with zero1
    # (its shards cut from the layout-free file), zero1's with zero2, zero1's gathered state resumed by one rank on
    # B=4 and the pipeline's state (both stages, the tied embedding once) resumed by one rank holding every layer
    for name, base in (("allreduce->zero1", "allreduce"), ("zero1->zero2", "zero1"), ("zero1->1 rank", "zero1"),
                       ("pp2->1 rank", "pp2")):
        got, want = np.array(result[name]), np.array(result[base]["full"][3:])
        assert np.abs(got - want).max() <= RTOL * np.abs(want).max(), (name, got, want)

    # zero1's traces: both ranks are in the checkpoint phase (rank 0 writes both files, rank 1 nothing), each
    # sending its half of m and of v to rank 0 with MPI_Gatherv (34,688 / 2 floats = 69,376 bytes each)
    for name, step in (("first", 2), ("resumed", 5)):
        trace = load(tmp_path / "zero1" / f"{name}.parquet")
        ck = _checkpoints(trace)
        assert ck[[S.RANK, S.STEP]].values.tolist() == [[0, step], [1, step]]
        assert ck[S.BYTES].tolist() == [_pair_bytes(tmp_path / "zero1" / "run.bin"), 0]
        df = trace.to_pandas()
        gathers = df[(df[S.KIND] == S.Kind.COMM) & (df[S.NAME] == "MPI_Gatherv")]
        assert gathers[S.RANK].tolist() == [0, 0, 1, 1] and (gathers[S.BYTES] == 69_376).all()
        assert (gathers[S.STEP] == step).all() and (gathers[S.PEER] == 0).all()
        for rank, phase in ck.groupby(S.RANK):
            mine = gathers[gathers[S.RANK] == rank]
            assert (mine[S.START_NS] >= phase[S.START_NS].iloc[0]).all()
            assert (mine[S.END_NS] <= phase[S.END_NS].iloc[0]).all()
    assert sorted(load(tmp_path / "zero1" / "resumed.parquet").to_pandas()[S.STEP].dropna().unique()) == [3, 4, 5]
