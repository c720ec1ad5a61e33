"""llm.c checkpoints: round trips and one-line errors for every kind of malformed file."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.checkpoint import HEADER_BYTES, make_header, read_checkpoint, write_checkpoint
from trainer.config import MODELS, ModelConfig
from trainer.errors import FileFormatError, TrainerError
from trainer.params import ParamLayout, init_params

TINY = MODELS["tiny"]   # L=2, NH=4, C=32, V=200 (Vp=256), maxT=32


def _params(cfg: ModelConfig = TINY) -> np.ndarray:
    return init_params(cfg, seed=0)


def test_round_trip_gives_identical_config_and_parameters(tmp_path: Path) -> None:
    path = tmp_path / "tiny.bin"
    flat = _params()
    flat[ParamLayout.for_model(TINY).offsets["lnfb"]:] = 0.5   # a non-default value survives too
    write_checkpoint(path, TINY, flat)
    cfg, back = read_checkpoint(path)
    assert cfg == TINY
    assert back.dtype == np.float32 and back.flags.writeable
    np.testing.assert_array_equal(back, flat)
    # 256 header ints + one float per parameter, nothing else
    assert path.stat().st_size == HEADER_BYTES + 4 * ParamLayout.for_model(TINY).size


def test_header_is_llmc_layout(tmp_path: Path) -> None:
    path = tmp_path / "tiny.bin"
    write_checkpoint(path, TINY, _params())
    header = np.fromfile(path, dtype="<i4", count=256)
    # magic, version, maxT, V, L, NH, C, Vp; the rest zero
    assert header[:8].tolist() == [20240326, 3, 32, 200, 2, 4, 32, 256]
    assert not header[8:].any()


def test_write_leaves_no_temporary_file(tmp_path: Path) -> None:
    write_checkpoint(tmp_path / "tiny.bin", TINY, _params())
    assert [p.name for p in tmp_path.iterdir()] == ["tiny.bin"]


def test_write_rejects_a_buffer_of_the_wrong_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="float32"):
        write_checkpoint(tmp_path / "x.bin", TINY, _params()[:-1])
    with pytest.raises(ValueError, match="float32"):
        write_checkpoint(tmp_path / "x.bin", TINY, _params().astype(np.float64))


def _set_header(index: int, value: int):
    def mutate(header: np.ndarray, body: bytes) -> tuple[np.ndarray, bytes]:
        header[index] = value
        return header, body
    return mutate


def _body(change):
    return lambda header, body: (header, change(body))


# (case id, how to damage a valid tiny checkpoint, words the one-line message must contain)
MALFORMED = [
    ("wrong magic", _set_header(0, 12345), ["bad magic 12345", "expected 20240326"]),
    ("token file as model", _set_header(0, 20240520), ["bad magic 20240520", "token file"]),
    ("version 1", _set_header(1, 1), ["unsupported checkpoint version 1", "without padded vocab"]),
    ("version 5 bf16", _set_header(1, 5), ["version 5", "bfloat16"]),
    ("unknown version", _set_header(1, 99), ["version 99"]),
    ("padded vocab", _set_header(7, 200), ["padded vocab Vp=200", "V=200", "256"]),
    ("zero layers", _set_header(4, 0), ["nonsense config", "L=0"]),
    ("negative maxT", _set_header(2, -1), ["nonsense config", "maxT=-1"]),
    ("C not multiple of NH", _set_header(5, 5), ["C=32", "NH=5"]),
    # V=1 padded to 128 is consistent, but no language model: the file is named, not the --vocab-size option
    ("vocabulary of 1", lambda h, b: _set_header(7, 128)(*_set_header(3, 1)(h, b)),
     ["header says vocab_size 1: a language model needs at least 2 tokens"]),
    ("truncated", _body(lambda b: b[:-4]), ["truncated"]),
    ("trailing bytes", _body(lambda b: b + b"\0" * 8), ["8 trailing bytes"]),
    ("header changed, body not", _set_header(6, 64), ["truncated", "C=64"]),
]


@pytest.mark.parametrize("mutate, words", [(m, w) for _, m, w in MALFORMED], ids=[c for c, _, _ in MALFORMED])
def test_malformed_checkpoint_is_a_one_line_error_naming_file_and_problem(tmp_path: Path, mutate, words) -> None:
    path = tmp_path / "broken.bin"
    header, body = mutate(make_header(TINY), _params().tobytes())
    path.write_bytes(header.tobytes() + body)
    with pytest.raises(FileFormatError) as err:
        read_checkpoint(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    for word in words:
        assert word in message


def test_file_shorter_than_header(tmp_path: Path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(b"\0" * 100)
    with pytest.raises(FileFormatError, match="100 bytes is too short") as err:
        read_checkpoint(path)
    assert str(path) in str(err.value)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.bin"
    with pytest.raises(TrainerError, match="no such checkpoint file") as err:
        read_checkpoint(path)
    assert str(path) in str(err.value)
