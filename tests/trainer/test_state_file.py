"""The optimizer state file: round trips, its documented layout, the fingerprint, and one-line errors for every
kind of malformed file or mismatched pair."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trainer.checkpoint import read_checkpoint_crc, write_checkpoint
from trainer.config import MODELS, TrainConfig
from trainer.errors import FileFormatError, TrainerError
from trainer.params import ParamLayout, init_params
from trainer.state_file import (
    Fingerprint,
    ResumeMismatch,
    check_pair,
    read_moment,
    read_state_header,
    state_nbytes,
    state_path,
    write_state,
)

TINY = MODELS["tiny"]                   # 34,688 parameters
P = ParamLayout.for_model(TINY).size
TRAIN = TrainConfig(batch_size=2, seq_len=16, grad_accum=2, lr=1e-3, seed=5)
SAVED_BY = {"ranks": 2, "sp": 1, "dp_sync": "zero1", "threads": 1, "batch_size": 2, "data_loading": "local"}


def _fingerprint(**changes) -> Fingerprint:
    return replace(Fingerprint.of(TINY, TRAIN, 2, None), **changes)


def _moments() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=P).astype(np.float32), rng.random(P).astype(np.float32)


def _write(path: Path, **changes) -> Path:
    m, v = _moments()
    write_state(path, m, v, t=7, next_step=9, model_crc32=0xDEADBEEF, fingerprint=_fingerprint(**changes),
                saved_by=SAVED_BY)
    return path


def test_round_trip(tmp_path):
    path = _write(tmp_path / "x.state")
    saved = read_state_header(path)
    m, v = _moments()
    np.testing.assert_array_equal(read_moment(saved, "m"), m)
    np.testing.assert_array_equal(read_moment(saved, "v"), v)
    assert (saved.t, saved.next_step, saved.model_crc32) == (7, 9, 0xDEADBEEF)   # the CRC keeps its 32 bits
    assert saved.fingerprint == _fingerprint() and saved.saved_by == SAVED_BY and saved.model == TINY
    # header, the JSON (a multiple of 4 bytes), then 8 bytes a parameter; state_nbytes knew it before writing
    assert path.stat().st_size == 1024 + saved.json_bytes + 8 * P == state_nbytes(_fingerprint(), SAVED_BY)
    assert saved.json_bytes % 4 == 0


def test_layout_is_the_documented_one(tmp_path):
    path = _write(tmp_path / "x.state")
    header = np.fromfile(path, dtype="<i4", count=256)
    # magic, version, t, next step, CRC-32 (as int32 bits), JSON bytes; the rest zero
    assert header[:4].tolist() == [20261123, 1, 7, 9] and header[4] == np.uint32(0xDEADBEEF).view(np.int32)
    assert not header[6:].any()
    body = np.fromfile(path, dtype="<f4", offset=1024 + int(header[5]))
    layout = ParamLayout.for_model(TINY)
    m, v = _moments()
    # m then v, each in llm.c's tensor order (the model file's), not our layer-major memory order
    np.testing.assert_array_equal(body[:P], layout.to_llmc(m))
    np.testing.assert_array_equal(body[P:], layout.to_llmc(v))
    assert not np.array_equal(layout.to_llmc(m), m)      # the orders differ, so the check above means something


def test_fingerprint_counts_the_global_batch_and_names_the_data(tmp_path):
    f = Fingerprint.of(TINY, TRAIN, 3, None)
    assert f.global_batch == 2 * 3 * 2 and (f.data, f.data_bytes) == ("synthetic", 0)   # B x groups x grad_accum
    tokens = tmp_path / "tok.bin"
    tokens.write_bytes(b"x" * 100)
    link = tmp_path / "link.bin"
    link.symlink_to(tokens)
    f = Fingerprint.of(TINY, TRAIN, 1, link)
    assert (f.data, f.data_bytes) == (str(tokens), 100)      # the file itself, however it is named
    # 2 ranks of B=2 read what 1 rank of B=4 reads: the same fingerprint
    assert Fingerprint.of(TINY, TRAIN, 2, None) == Fingerprint.of(TINY, replace(TRAIN, batch_size=4), 1, None)


def test_a_mismatch_names_every_differing_setting():
    saved, now = _fingerprint(), _fingerprint(lr=3e-4, seed=6)
    err = ResumeMismatch(Path("ck.bin"), saved.differences(now))
    assert err.differences == [("lr", 1e-3, 3e-4), ("seed", 5, 6)]
    line = err.describe({"lr": "--lr"})
    assert "\n" not in line and line.startswith("--resume ck.bin was saved by a run with other settings (--lr: "
                                                "saved 0.001, this run 0.0003; seed: saved 5, this run 6)")
    assert saved.differences(_fingerprint()) == []


def _damage_header(index: int, value: int):
    def damage(raw: bytes) -> bytes:
        header = np.frombuffer(raw[:1024], dtype="<i4").copy()
        header[index] = value
        return header.tobytes() + raw[1024:]
    return damage


def _damage_json(old: bytes, new: bytes):
    return lambda raw: raw.replace(old, new, 1)


# (case, how to damage a valid state file, words the one-line message must contain)
MALFORMED = [
    ("too short for a header", lambda raw: raw[:100], ["100 bytes is too short for the 1024-byte llm.c header"]),
    ("wrong magic", _damage_header(0, 12345), ["bad magic 12345", "expected 20261123"]),
    ("an llm.c model", _damage_header(0, 20240326), ["bad magic 20240326", "llm.c model checkpoint", ".state"]),
    ("an llm.c token file", _damage_header(0, 20240520), ["llm.c token file"]),
    ("llm.c's own state file", _damage_header(0, 20240527), ["train_gpt2.cu state file", "sharded"]),
    ("another version", _damage_header(1, 2), ["unsupported state file version 2 (we read 1)"]),
    ("negative t", _damage_header(2, -1), ["nonsense header (t=-1"]),
    ("JSON length not a multiple of 4", _damage_header(5, 5), ["JSON bytes=5"]),
    ("JSON beyond the file", _damage_header(5, 1 << 30), ["truncated", "bytes of JSON"]),
    ("JSON garbage", _damage_json(b'{"fingerprint"', b'#"fingerprint"'), ["corrupt JSON after the header"]),
    ("a fingerprint field missing", _damage_json(b'"seed"', b'"sEed"'), ["corrupt JSON", "['sEed', 'seed']"]),
    ("a field of the wrong type", _damage_json(b'"seq_len": 16', b'"seq_len": "a"'), ["seq_len is 'a'"]),
    ("a nonsense model", _damage_json(b'"n_head": 4', b'"n_head": 5'), ["corrupt JSON", "n_head 5"]),
    ("truncated moments", lambda raw: raw[:-4], ["truncated", "needs"]),
    ("trailing bytes", lambda raw: raw + b"\0" * 8, ["8 trailing bytes"]),
]


@pytest.mark.parametrize("case,damage,words", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_malformed_files_are_one_line_errors_naming_the_file(tmp_path, case, damage, words):
    path = _write(tmp_path / "x.state")
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(FileFormatError) as info:
        read_state_header(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    for w in words:
        assert w in message, message


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(TrainerError, match="no such optimizer state file"):
        read_state_header(tmp_path / "none.state")


def test_the_pair_must_be_written_together(tmp_path):
    model = tmp_path / "ck.bin"
    crc = write_checkpoint(model, TINY, init_params(TINY, 1))
    m, v = _moments()
    write_state(state_path(model), m, v, 1, 1, crc, _fingerprint(), SAVED_BY)
    cfg, _, read_crc = read_checkpoint_crc(model)
    assert read_crc == crc
    check_pair(model, cfg, read_crc, read_state_header(state_path(model)))      # a pair: no error
    # another save's model beside this state: the CRC tells
    write_checkpoint(model, TINY, init_params(TINY, 2))
    cfg, _, read_crc = read_checkpoint_crc(model)
    with pytest.raises(FileFormatError, match=f"{model} is not the model {state_path(model)} was saved with"):
        check_pair(model, cfg, read_crc, read_state_header(state_path(model)))
    # another model altogether
    small = MODELS["small"]
    with pytest.raises(FileFormatError, match="is the optimizer state of another model .L=2 C=32 V=200. than"):
        check_pair(model, small, read_crc, read_state_header(state_path(model)))


def test_state_path_is_beside_the_model():
    assert state_path(Path("/a/b/model.bin")) == Path("/a/b/model.bin.state")
