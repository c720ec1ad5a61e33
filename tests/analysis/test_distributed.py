"""`analyze_comm` on real MPI processes (mpiexec -n 2 and 3) and on COMM_SELF, against `analyze` of the whole."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi4py import MPI
from test_rank_groups import SAMPLES, differences, plain

from analysis.analyze import analyze
from analysis.distributed import analyze_comm, block
from analysis.rank_groups import split
from gpt2trace.format.reader import load

MAIN = Path(__file__).with_name("distributed_main.py")


@pytest.mark.parametrize("groups,processes", [(5, 2), (4, 3), (2, 3), (1, 1)])
def test_blocks_cover_the_groups_in_order(groups, processes):
    blocks = [block(groups, p, processes) for p in range(processes)]
    assert [i for b in blocks for i in b] == list(range(groups))
    assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


@pytest.mark.parametrize("prefetch", [False, True], ids=["", "loading ahead"])
def test_one_process_gives_the_whole_result(prefetch):
    trace = load(SAMPLES / "small_8ranks_3d.parquet")
    loaders = [lambda reads, g=g: g for g in split(trace, 3)]
    result = analyze_comm(loaders, MPI.COMM_SELF, prefetch=prefetch)
    assert differences(plain(analyze(trace)), plain(result)) == []


def _mpiexec(processes: int, *args: str, timeout: int = 600, **extra_env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **extra_env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]),
                                                                     os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(["mpiexec", "-n", str(processes), sys.executable, str(MAIN), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("name,groups,processes,prefetch", [("small_8ranks_3d.parquet", 4, 2, ""),
                                                            ("small_8ranks_3d.parquet", 5, 3, ""),
                                                            ("small_2ranks_pp2_1f1b.parquet", 2, 3, ""),
                                                            ("small_8ranks_3d.parquet", 7, 2, "1")])
def test_mpiexec_gives_the_whole_result(tmp_path, name, groups, processes, prefetch):
    # with prefetch, each process loads its next group in a thread (as on a node with cores to spare)
    out = tmp_path / "result.json"
    run = _mpiexec(processes, str(SAMPLES / name), str(groups), str(out), PREFETCH=prefetch)
    assert run.returncode == 0, run.stderr[-3000:]
    whole = plain(analyze(load(SAMPLES / name)))
    assert differences(whole, json.loads(out.read_text())) == []


def test_mpiexec_raises_on_every_process_for_a_bad_window(tmp_path):
    out = tmp_path / "result.json"
    run = _mpiexec(2, str(SAMPLES / "small_8ranks_3d.parquet"), "4", str(out), "50:60")
    assert run.returncode != 0 and not out.exists()
    assert run.stderr.count("WindowError: --steps 50:60 selects no step") == 2, run.stderr[-3000:]


@pytest.mark.parametrize("group,prefetch", [(0, ""), (2, ""), (2, "1")],
                         ids=["on process 0", "on the helper", "on the helper, loading ahead"])
def test_an_error_in_pass_2_ends_the_job_with_it_on_process_0(tmp_path, group, prefetch):
    # groups 0 and 1 are process 0's, 2 and 3 process 1's (the helper), each loading the first of its two in pass 2
    # (ahead, in a thread, with prefetch): the other process and the helper still send what they have, and nobody
    # waits forever
    out = tmp_path / "result.json"
    run = _mpiexec(2, str(SAMPLES / "small_8ranks_3d.parquet"), "4", str(out), "", str(group), PREFETCH=prefetch)
    assert run.returncode != 0 and not out.exists()
    assert run.stderr.count(f"TraceError: group {group} is unreadable in pass 2") == 1, run.stderr[-3000:]


def test_a_failure_loading_the_replay_ahead_is_silent_and_changes_nothing(tmp_path):
    # process 0 loads the replay's code in a thread while it waits: a failure there (the replay itself then fails,
    # or not, on the main thread) prints no thread traceback, and the result is the whole trace's
    out = tmp_path / "result.json"
    run = _mpiexec(2, str(SAMPLES / "small_8ranks_3d.parquet"), "4", str(out), WARM_FAILS="1")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "warm-replay" not in run.stderr, run.stderr[-3000:]
    whole = plain(analyze(load(SAMPLES / "small_8ranks_3d.parquet")))
    assert differences(whole, json.loads(out.read_text())) == []


def test_an_error_in_process_0s_combination_ends_the_job(tmp_path):
    # the helper has sent its explanations by then and waits for process 0 to receive them: it must not wait
    # forever (mpiexec never returned before process 0 took them on its way out)
    out = tmp_path / "result.json"
    run = _mpiexec(2, str(SAMPLES / "small_8ranks_3d.parquet"), "4", str(out), timeout=120, COMBINE_FAILS="1")
    assert run.returncode != 0 and not out.exists()
    assert run.stderr.count("TraceError: the combination failed") == 1, run.stderr[-3000:]
