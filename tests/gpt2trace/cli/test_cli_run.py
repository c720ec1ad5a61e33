"""`gpt2trace run` through the Typer app: every bad input is one line naming the option or file, exit code 2, no
traceback, nothing written and every input intact, all found before anything is built or launched; outputs
written atomically; a full disk; an earlier run's parts folder; more threads than cores; non-UTF-8 names."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from gpt2trace.cli.main import app
from gpt2trace.format import raw_part
from gpt2trace.format import schema as S
from gpt2trace.format.raw_window import RankDecoder
from gpt2trace.format.writer import PartWriter, part_files, parts_dir
from gpt2trace.testing.invariants import check_trace
from trainer.checkpoint import write_checkpoint
from trainer.config import TrainConfig, model_config
from trainer.cpu import cores_available
from trainer.data import HEADER_BYTES, write_tokens
from trainer.params import init_params
from trainer.state_file import Fingerprint, state_path, write_state

TINY = ["--model", "tiny", "-B", "2", "-T", "16", "--threads", "2"]
RUN = [sys.executable, "-m", "gpt2trace", "run"]


def _run(*args):
    return CliRunner().invoke(app, ["run", *map(str, args)])


def _bad_tokens(tmp):
    path = tmp / "tokens.bin"
    path.write_bytes(np.zeros(HEADER_BYTES // 4 + 8, dtype=np.int32).tobytes())   # magic 0: not llm.c tokens
    return path


def _bad_checkpoint(tmp):
    path = tmp / "model.bin"
    path.write_bytes(b"not a checkpoint")
    return path


def _checkpoint(tmp):
    """The tiny model as an llm.c checkpoint: context (max_seq_len) 32, shorter than the default T of 64."""
    path = tmp / "ck.bin"
    write_checkpoint(path, model_config("tiny"), init_params(model_config("tiny"), 1))
    return path


def _saved(tmp, model=None, steps=3, **changes):
    """A checkpoint and its state file as `run *TINY --save ck.bin` writes them after `steps` steps (`changes`:
    other fingerprint fields, as if saved by a run with other settings)."""
    model = model or model_config("tiny")
    path = tmp / "ck.bin"
    crc = write_checkpoint(path, model, init_params(model, 1))
    tcfg = TrainConfig(batch_size=2, seq_len=16, lr=1e-3)                  # TINY's, and the CLI's defaults
    fingerprint = replace(Fingerprint.of(model, tcfg, 1, None), **changes)
    P = init_params(fingerprint.model, 1).size
    write_state(state_path(path), np.zeros(P, np.float32), np.zeros(P, np.float32), steps, steps, crc,
                fingerprint, {})
    return path


def _damaged_state(tmp, damage):
    path = _saved(tmp)
    state = state_path(path)
    state.write_bytes(damage(state.read_bytes()))
    return path


def _tokens(tmp):
    path = tmp / "tok.bin"
    write_tokens(path, np.arange(5000) % 200)
    return path


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


# (case, args from a temporary folder, what the one line says)
BAD = [
    ("unknown model", lambda tmp: ["--model", "d99"], "unknown model 'd99'; choose one of"),
    ("T above max_seq_len", lambda tmp: ["--model", "tiny", "-T", "64"],
     "-T/--seq-len 64: exceeds the model's context (max_seq_len 32); lower it"),
    ("malformed checkpoint", lambda tmp: [*TINY, "--init-from", _bad_checkpoint(tmp)], "model.bin: "),
    ("malformed tokens", lambda tmp: [*TINY, "--data", _bad_tokens(tmp)], "bad magic 0, not an llm.c token file"),
    ("negative seed", lambda tmp: [*TINY, "--seed", "-1"], "--seed -1: must be an integer >= 0"),
    ("vocabulary of 1", lambda tmp: [*TINY, "--vocab-size", "1"],
     "--vocab-size 1: a language model needs at least 2 tokens"),
    ("vocabulary too small for the corpus", lambda tmp: [*TINY, "--vocab-size", "4"],
     "--vocab-size 4: the built-in corpus needs at least 8 tokens"),
    ("lr nan", lambda tmp: [*TINY, "--lr", "nan"], "--lr nan: must be a finite number >= 0"),
    ("lr inf", lambda tmp: [*TINY, "--lr", "inf"], "--lr inf: must be a finite number >= 0"),
    ("negative weight decay", lambda tmp: [*TINY, "--weight-decay", "-1"], "--weight-decay -1.0: must be"),
    ("batch 0", lambda tmp: [*TINY, "-B", "0"], "-B/--batch-size 0: must be an integer >= 1"),
    ("negative steps", lambda tmp: [*TINY, "--steps", "-1"], "--steps -1: must be an integer >= 0"),
    ("threads 0", lambda tmp: [*TINY, "--threads", "0"], "--threads 0: must be an integer >= 1"),
    ("negative flush interval", lambda tmp: [*TINY, "--flush-every", "-1"], "--flush-every -1.0: must be"),
    ("memory interval inf", lambda tmp: [*TINY, "--memory-every", "inf"], "--memory-every inf: must be a finite"),
    ("heads do not divide channels", lambda tmp: [*TINY, "--n-head", "5"], "--n-head 5: must divide n_embd (32)"),
    # 26 TiB of activations: estimated (parameters, gradients, AdamW moments, activations) before allocating
    ("batch too big for memory", lambda tmp: [*TINY, "-B", "100000000"], "the run needs about "),
    # sequence parallelism: refused before any rank starts
    ("--sp not dividing --ranks", lambda tmp: ["--model", "tiny", "--ranks", "3", "--sp", "2"],
     "--sp 2: must divide the 3 ranks: each sequence group needs exactly 2 ranks"),
    ("-T not a multiple of --sp", lambda tmp: ["--model", "tiny", "--ranks", "4", "--sp", "4", "-T", "18"],
     "-T/--seq-len 18: must be a multiple of --sp 4"),
    ("--sp 0", lambda tmp: ["--model", "tiny", "--sp", "0"], "--sp 0: must be an integer >= 1"),
    ("layers too many for memory", lambda tmp: ["--model", "small", "--n-layer", "30000"], "the run needs about "),
    ("checkpoint with a short context, -T too large", lambda tmp: ["--init-from", _checkpoint(tmp), "-T", "64"],
     "-T/--seq-len 64: exceeds the model's context (max_seq_len 32 of "),
    ("checkpoint and --model", lambda tmp: ["--init-from", _checkpoint(tmp), "--model", "d12"],
     "sets the model (L=2 NH=4 C=32 V=200, context 32); drop --model"),
    ("checkpoint and a size option", lambda tmp: ["--init-from", _checkpoint(tmp), "--n-layer", "3"],
     "sets the model (L=2 NH=4 C=32 V=200, context 32); drop --n-layer"),
    ("trace over the checkpoint", lambda tmp: ["--init-from", _checkpoint(tmp), "--trace", tmp / "ck.bin"],
     "--trace {tmp}/ck.bin is also an input of this command"),
    ("checkpoint over the tokens", lambda tmp: [*TINY, "--data", _tokens(tmp), "--save", tmp / "tok.bin"],
     "--save {tmp}/tok.bin is also an input of this command"),
    ("two outputs, one file", lambda tmp: [*TINY, "--save", tmp / "x", "--metrics-json", tmp / "x"],
     "--save {tmp}/x and --metrics-json {tmp}/x name the same file"),
    ("trace is a directory", lambda tmp: [*TINY, "--trace", tmp], "--trace {tmp} is a directory"),
    ("trace under /proc", lambda tmp: [*TINY, "--trace", "/proc/self/x.parquet"], "--trace /proc/self/x.parquet: "
                                                                                  "cannot write in /proc/self"),
    ("metrics in a missing folder", lambda tmp: [*TINY, "--metrics-json", tmp / "no" / "m.jsonl"],
     "the folder {tmp}/no does not exist"),
    ("missing token file", lambda tmp: [*TINY, "--data", tmp / "none.bin"], "--data {tmp}/none.bin does not exist"),
    ("token file is a directory", lambda tmp: [*TINY, "--data", tmp], "--data {tmp} is a directory"),
    # checkpoints and resume
    ("--save-every without --save", lambda tmp: [*TINY, "--save-every", "2"],
     "--save-every 2 needs --save PATH, where the checkpoints go"),
    ("negative --save-every", lambda tmp: [*TINY, "--save", tmp / "x.bin", "--save-every", "-1"],
     "--save-every -1: must be an integer >= 0"),
    ("--resume and --init-from", lambda tmp: [*TINY, "--resume", tmp / "a.bin", "--init-from", tmp / "b.bin"],
     "--resume {tmp}/a.bin and --init-from {tmp}/b.bin: --resume continues a saved run"),
    ("missing --resume", lambda tmp: [*TINY, "--resume", tmp / "none.bin"], "--resume {tmp}/none.bin does not exist"),
    ("--resume without its state", lambda tmp: [*TINY, "--resume", _checkpoint(tmp)],
     "--resume {tmp}/ck.bin: its optimizer state {tmp}/ck.bin.state does not exist; resume from a checkpoint "
     "written by `gpt2trace run --save`"),
    ("--resume with another --lr", lambda tmp: [*TINY, "--resume", _saved(tmp), "--lr", "0.002"],
     "--resume {tmp}/ck.bin was saved by a run with other settings (--lr: saved 0.001, this run 0.002); resume "
     "with the saved run's settings: only --steps, the outputs and the layout"),
    ("--resume on other data and seed", lambda tmp: [*TINY, "--resume", _saved(tmp), "--data", _tokens(tmp),
                                                    "--seed", "2"],
     "(--seed: saved 1337, this run 2; --data: saved 'synthetic', this run '{tmp}/tok.bin'; the size of --data: "
     "saved 0, this run 11024)"),
    ("--resume with another global batch", lambda tmp: [*TINY, "--resume", _saved(tmp), "-B", "4"],
     "(the global batch (-B x --ranks/--sp x --grad-accum sequences): saved 2, this run 4)"),
    ("--resume with another model", lambda tmp: [*TINY[2:], "--model", "small", "--resume", _saved(tmp)],
     "(--n-layer: saved 2, this run 4; --n-embd: saved 32, this run 128; --vocab-size: saved 200, this run 512;"),
    ("--resume, --steps below the saved steps", lambda tmp: [*TINY, "--resume", _saved(tmp), "--steps", "2"],
     "--steps 2: is the total step count, and --resume {tmp}/ck.bin holds 3 steps already; give --steps 3 or more"),
    ("--resume, a truncated state", lambda tmp: [*TINY, "--resume", _damaged_state(tmp, lambda b: b[:-4])],
     "{tmp}/ck.bin.state: truncated, "),
    ("--resume, the state of another model", lambda tmp: [*TINY, "--resume", _saved(tmp, n_layer=3)],
     "{tmp}/ck.bin.state is the optimizer state of another model (L=3 C=32 V=200) than {tmp}/ck.bin (L=2"),
    ("--resume, a model file as its state", lambda tmp: [*TINY, "--resume", _damaged_state(
        tmp, lambda b: (tmp / "ck.bin").read_bytes())], "bad magic 20240326, not a gpt2trace optimizer state file"),
    ("trace over the resumed state", lambda tmp: [*TINY, "--resume", _saved(tmp), "--trace", tmp / "ck.bin.state"],
     "--trace {tmp}/ck.bin.state is also an input of this command"),
    ("metrics over the saved state", lambda tmp: [*TINY, "--save", tmp / "x", "--metrics-json", tmp / "x.state"],
     "--metrics-json {tmp}/x.state and --save's state file {tmp}/x.state name the same file"),
    ("save over the resumed state", lambda tmp: [*TINY, "--resume", _saved(tmp), "--save", tmp / "ck.bin.state"],
     "--save {tmp}/ck.bin.state is also an input of this command"),
    # --no-trace writes no trace: a --trace beside it would be dropped silently
    ("--no-trace and --trace", lambda tmp: [*TINY, "--no-trace"],
     "--no-trace and --trace {tmp}/trace.parquet: --no-trace writes no trace; drop one of them"),
]


@pytest.mark.parametrize("case,args,message", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2_and_nothing_is_touched(tmp_path, case, args, message):
    argv = ["--steps", "1", "--trace", tmp_path / "trace.parquet", *args(tmp_path)]
    before = _digests(tmp_path)
    r = _run(*argv)
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert message.format(tmp=tmp_path) in lines[0], lines[0]
    assert "Traceback" not in r.output and r.stdout == ""      # found before anything was built or printed
    assert _digests(tmp_path) == before                         # inputs intact, nothing written
    assert not (tmp_path / "trace.parquet").exists() and not parts_dir(tmp_path / "trace.parquet").exists()


# token file (written in the current folder as tok.bin) -> the run's options -> the one line, which names the file as
# given; tiny's vocabulary is 200 and TINY's batch 2 x 16 tokens, so one global batch needs 2 x 16 + 1 = 33
TOKEN_FILES = {
    "an id beyond the vocabulary": (lambda p: write_tokens(p, np.r_[np.arange(300) % 200, 600, 7]), [],
                                    "error: tok.bin: token id 600 (first bad id at position 300) is out of range for "
                                    "the model's vocab_size 200; tokenize with the model's tokenizer or use a model "
                                    "with a larger vocabulary"),
    "too few tokens": (lambda p: write_tokens(p, np.arange(15)), [],
                       "error: tok.bin: 15 tokens is too few for one global batch of 33 (world 1 x B 2 x T 16 + 1); "
                       "use more data or a smaller batch/sequence length"),
    "too few for two ranks": (lambda p: write_tokens(p, np.arange(40)), ["--ranks", "2"],
                              "error: tok.bin: 40 tokens is too few for one global batch of 65 (world 2 x B 2 x T 16 "
                              "+ 1); use more data or a smaller batch/sequence length"),
    "a truncated header": (lambda p: p.write_bytes(b"garbage"), [],
                           "error: tok.bin: 7 bytes is too short for the 1024-byte llm.c header; the file is truncated "
                           "or not an llm.c token file"),
}


@pytest.mark.parametrize("case", TOKEN_FILES)
def test_a_bad_token_file_is_said_before_the_model_is_built(tmp_path, monkeypatch, case):
    make, extra, message = TOKEN_FILES[case]
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "tok.bin")
    r = _run(*TINY, "--steps", "1", "--no-trace", "--data", "tok.bin", *extra)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert r.stderr.strip().splitlines() == [message]
    assert r.stdout == ""              # no model line, no progress bar, no "starting 2 ranks"


def test_a_read_only_folder_is_refused_before_training(tmp_path, readonly_dir):
    for option in ("--trace", "--save", "--metrics-json"):
        r = _run(*TINY, "--steps", "1", "--trace", tmp_path / "t.parquet", option, readonly_dir / "out")
        assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output
        assert f"error: {option} {readonly_dir}/out: cannot write in {readonly_dir} (Read-only file system)" \
            in r.stderr.strip(), r.stderr


def test_with_ranks_a_bad_option_is_found_before_mpiexec_and_said_once(tmp_path):
    r = subprocess.run([*RUN, "--ranks", "2", "--model", "nosuch", "--trace", str(tmp_path / "t.parquet")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "starting" not in r.stdout
    assert r.stderr.strip().splitlines() == ["error: unknown model 'nosuch'; choose one of d12, d24, d36, d48, small, "
                                             "tiny"]


def test_more_threads_than_cores_works_with_a_warning(tmp_path):
    threads = cores_available() + 1
    r = subprocess.run([*RUN, *TINY[:6], "--threads", str(threads), "--steps", "2", "--no-trace"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"warning: 1 rank(s) x {threads} thread(s) > {cores_available()} cores: oversubscribed" in r.stdout
    assert f"threads={threads}" in r.stdout


def test_a_checkpoint_with_a_short_context_sets_the_default_T(tmp_path):
    ck = _checkpoint(tmp_path)
    r = _run("--init-from", ck, "-B", "2", "--threads", "2", "--steps", "1", "--no-trace")
    assert r.exit_code == 0, r.output
    assert "T=32:" in r.stdout       # the checkpoint's context (32), not the default 64


def test_metrics_json_one_object_per_step_written_atomically(tmp_path):
    metrics, trace, ck = tmp_path / "metrics.jsonl", tmp_path / "trace.parquet", tmp_path / "ck.bin"
    r = _run(*TINY, "--steps", "3", "--metrics-json", metrics, "--trace", trace, "--save", ck)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        assert {"step", "loss", "ms", "tokens_per_s"} <= set(row)
        assert row["loss"] > 0 and row["ms"] > 0 and row["tokens_per_s"] > 0
    assert trace.is_file() and f"trace: {trace}" in r.stdout.replace("\n", "")
    assert ck.stat().st_size == 1024 + 4 * 34_688        # header + the tiny model's 34,688 parameters
    # beside it the AdamW state: header, its JSON, then m and v (8 bytes a parameter)
    json_bytes = int(np.fromfile(tmp_path / "ck.bin.state", dtype="<i4", count=6)[5])
    assert (tmp_path / "ck.bin.state").stat().st_size == 1024 + json_bytes + 8 * 34_688
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck.bin", "ck.bin.state", "metrics.jsonl",
                                                          "trace.parquet"]


def test_no_trace_writes_no_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # where the default trace.parquet would go
    r = _run(*TINY, "--steps", "1", "--no-trace")
    assert r.exit_code == 0, r.output
    assert list(tmp_path.iterdir()) == []


def test_an_empty_parts_folder_left_by_an_earlier_crash_does_not_block(tmp_path):
    trace = tmp_path / "trace.parquet"
    (parts_dir(trace) / "rank00000").mkdir(parents=True)      # what a crash at start-up used to leave
    (parts_dir(trace) / "rank00000" / ".00000000.raw.tmp").write_bytes(b"cut off")
    r = _run(*TINY, "--steps", "1", "--trace", trace)
    assert r.exit_code == 0, r.output
    assert trace.is_file() and not parts_dir(trace).exists()


def test_an_earlier_runs_parts_are_kept_and_block_with_a_hint(tmp_path):
    trace = tmp_path / "trace.parquet"
    PartWriter(trace, 0).write(S.arrow_schema().empty_table())
    r = _run(*TINY, "--steps", "1", "--trace", trace)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "holds the parts of an earlier run that did not finish; run `gpt2trace recover" in r.stderr
    assert len(part_files(parts_dir(trace))) == 1


def test_a_crash_in_step_0_leaves_nothing_that_blocks_the_next_run(tmp_path):
    trace = tmp_path / "trace.parquet"
    env = dict(os.environ, GPT2TRACE_INJECT_FAULT="0:0")    # rank 0 fails as step 0 starts
    r = subprocess.run([*RUN, *TINY, "--steps", "2", "--trace", str(trace)], cwd=tmp_path, capture_output=True,
                       text=True, env=env, timeout=600)
    assert r.returncode != 0 and "fault injected at step 0" in r.stderr
    assert "the trace keeps nothing: no complete step was traced" in r.stderr
    assert list(tmp_path.iterdir()) == []
    assert _run(*TINY, "--steps", "1", "--trace", trace).exit_code == 0


def test_a_full_disk_stops_the_run_with_one_line_and_keeps_whole_steps(small_fs):
    disk = small_fs(96)           # room for the first part (the set-up and step 0), not for the next
    trace, metrics = disk / "trace.parquet", disk / "metrics.jsonl"
    r = subprocess.run([*RUN, *TINY[:6], "--threads", "1", "--steps", "100000", "--flush-every", "0.05",
                        "--trace", str(trace), "--metrics-json", str(metrics)], cwd=disk, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 2 and "Traceback" not in r.stdout + r.stderr
    line = r.stderr.strip()
    # the trace's parts and the metrics lines fill the disk together: either may be the one that finds it full
    assert "\n" not in line and line.startswith((f"error: cannot write the trace part {parts_dir(trace)}/rank00000/",
                                                f"error: cannot write --metrics-json {metrics}")), line
    assert ": No space left on device;" in line and "; kept step" in line, line
    assert not [p.name for p in disk.rglob(".*")]               # no temporary anywhere
    if f"in {trace} (" in line:                                # merged: the failed part's room was enough
        trace_steps = pc.unique(pc.filter(pq.read_table(trace)[S.STEP], pc.equal(pq.read_table(trace)[S.KIND],
                                                                                    S.Kind.COUNTER))).to_pylist()
        check_trace(trace, threads=1, steps=len(trace_steps), tokens=2 * 16, closed=False)
    else:                                                      # or parts, for `recover` once there is room
        assert f"as parts in {parts_dir(trace)}" in line and part_files(parts_dir(trace))
        decoder = RankDecoder()            # the parts as the merge decodes them
        table = pa.concat_tables([raw_part.decoded(f, decoder) for f in part_files(parts_dir(trace))])
        trace_steps = pc.unique(pc.filter(table[S.STEP], pc.equal(table[S.KIND], S.Kind.COUNTER))).to_pylist()
    assert sorted(trace_steps) == list(range(len(trace_steps))) and trace_steps
    kept_metrics = [json.loads(x)["step"] for x in metrics.read_text().splitlines()]
    assert kept_metrics == list(range(len(kept_metrics)))      # whole steps from the first, as the trace's


def test_a_full_disk_when_saving_is_one_line_and_leaves_no_file(small_fs):
    disk = small_fs(64)           # the tiny checkpoint needs 139,776 bytes
    r = _run(*TINY, "--steps", "1", "--no-trace", "--save", disk / "ck.bin")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().count("\n") == 0 and f"cannot write {disk}/ck.bin: No space left on device" in r.stderr
    assert list(disk.iterdir()) == []


def test_a_full_disk_when_saving_the_optimizer_state_leaves_neither_file(small_fs):
    disk = small_fs(256)          # room for the tiny checkpoint (139,776 bytes), not for its state (278,920)
    r = _run(*TINY, "--steps", "1", "--no-trace", "--save", disk / "ck.bin")
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.strip().count("\n") == 0
    assert f"cannot write {disk}/ck.bin.state: No space left on device" in r.stderr
    assert list(disk.iterdir()) == []       # the model was not renamed into place without its state


def test_file_names_that_are_not_utf8(tmp_path):
    trace, metrics = tmp_path / os.fsdecode(b"caf\xe9.parquet"), tmp_path / os.fsdecode(b"m\xff.jsonl")
    r = subprocess.run([*RUN, *TINY, "--steps", "2", "--trace", os.fsencode(trace), "--metrics-json",
                        os.fsencode(metrics)], capture_output=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"trace: {tmp_path}/caf\ufffd.parquet (".encode() in r.stdout   # shown with U+FFFD, written as named
    assert sorted(os.listdir(os.fsencode(tmp_path))) == [b"caf\xe9.parquet", b"m\xff.jsonl"]
    with open(trace, "rb") as f:
        assert pq.read_table(f).num_rows > 0


def test_a_run_checks_once_and_splits_the_stages_once(tmp_path, monkeypatch):
    # the CLI's preflight is the run's: gpt2trace.run.runner.run takes its result instead of checking again, and
    # builds the stage from its split (before: the check twice, the split in the check and in build_stage)
    import gpt2trace.run.preflight as preflight
    import trainer.parallel.pipeline as pipeline
    import trainer.parallel.stages as stages
    calls = {"check_run": 0, "plan": 0}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(module, name, wrapper)
    counted(preflight, "check_run")
    counted(stages, "plan")
    monkeypatch.setattr(pipeline, "plan", stages.plan)       # build_stage's own import of it
    r = _run(*TINY, "--steps", "1", "--trace", tmp_path / "t.parquet")
    assert r.exit_code == 0, r.output
    assert calls == {"check_run": 1, "plan": 1}
