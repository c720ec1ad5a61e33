"""`gpt2trace run` through the Typer app: bad inputs are one line and exit code 2; --metrics-json."""
from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from gpt2trace.cli.main import app
from trainer.data import HEADER_BYTES

TINY = ["--model", "tiny", "-B", "2", "-T", "16", "--threads", "2"]


def _run(*args):
    return CliRunner().invoke(app, ["run", *map(str, args)])


def _bad_tokens(path):
    path.write_bytes(np.zeros(HEADER_BYTES // 4 + 8, dtype=np.int32).tobytes())   # magic 0: not llm.c tokens
    return path


def _bad_checkpoint(path):
    path.write_bytes(b"not a checkpoint")
    return path


BAD = [
    ("unknown model", lambda tmp: ["--model", "d99"], "unknown model 'd99'; choose one of", None),
    ("T above max_seq_len", lambda tmp: ["--model", "tiny", "-T", "64"],
     "--seq-len 64 exceeds the model's max_seq_len 32", None),
    ("malformed checkpoint", lambda tmp: [*TINY, "--init-from", _bad_checkpoint(tmp / "model.bin")],
     "is too short for the", "model.bin"),
    ("malformed tokens", lambda tmp: [*TINY, "--data", _bad_tokens(tmp / "tokens.bin")],
     "bad magic 0, not an llm.c token file", "tokens.bin"),
    # sequence parallelism: refused before any rank starts
    ("--sp not dividing --ranks", lambda tmp: ["--model", "tiny", "--ranks", "3", "--sp", "2"],
     "--sp 2 does not divide --ranks 3", None),
    ("-T not divisible by --sp", lambda tmp: ["--model", "tiny", "--ranks", "4", "--sp", "4", "-T", "18"],
     "-T 18 is not divisible by --sp 4", None),
]


@pytest.mark.parametrize("case,args,message,file", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_and_exit_2(tmp_path, case, args, message, file):
    r = _run(*args(tmp_path), "--steps", "1", "--trace", tmp_path / "trace.parquet")
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert file is None or str(tmp_path / file) in lines[0]
    assert "Traceback" not in r.output
    assert not (tmp_path / "trace.parquet").exists()


def test_metrics_json_one_object_per_step(tmp_path):
    metrics, trace = tmp_path / "metrics.jsonl", tmp_path / "trace.parquet"
    r = _run(*TINY, "--steps", "3", "--metrics-json", metrics, "--trace", trace)
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    for row in rows:
        assert {"step", "loss", "ms", "tokens_per_s"} <= set(row)
        assert row["loss"] > 0 and row["ms"] > 0 and row["tokens_per_s"] > 0
    assert trace.is_file() and f"trace: {trace}" in r.stdout.replace("\n", "")


def test_no_trace_writes_no_trace(tmp_path):
    r = _run(*TINY, "--steps", "1", "--no-trace", "--trace", tmp_path / "trace.parquet")
    assert r.exit_code == 0, r.output
    assert list(tmp_path.iterdir()) == []
