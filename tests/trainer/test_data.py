"""Token files, the synthetic corpus and the data loader (windows worked out by hand)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.data import HEADER_BYTES, TokenLoader, read_tokens, synthetic_corpus, synthetic_entropy_rate, write_tokens
from trainer.errors import FileFormatError, TrainerError

# ----------------------------------------------------------------------------------------------------------------
# token files


def test_token_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tok.bin"
    tokens = np.array([0, 1, 65535, 50256, 7], dtype=np.int64)
    write_tokens(path, tokens)
    back = read_tokens(path)
    assert back.dtype == np.uint16 and isinstance(back, np.memmap)
    np.testing.assert_array_equal(back, tokens)
    assert path.stat().st_size == HEADER_BYTES + 2 * 5
    assert np.fromfile(path, dtype="<i4", count=4).tolist() == [20240520, 1, 5, 0]
    assert [p.name for p in tmp_path.iterdir()] == ["tok.bin"]   # no temporary left behind


@pytest.mark.parametrize("tokens", [np.array([], dtype=np.int32), np.array([1, -1]), np.array([70000]),
                                    np.zeros((2, 2), dtype=np.int32), np.array([1.0])])
def test_write_tokens_rejects_what_uint16_cannot_hold(tmp_path: Path, tokens: np.ndarray) -> None:
    with pytest.raises(ValueError):
        write_tokens(tmp_path / "tok.bin", tokens)


def _token_file(magic: int = 20240520, version: int = 1, ntok: int = 4, n_written: int = 4) -> bytes:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, ntok)
    return header.tobytes() + np.arange(n_written, dtype="<u2").tobytes()


# (case id, file bytes, words the one-line message must contain)
MALFORMED = [
    ("wrong magic", _token_file(magic=7), ["bad magic 7", "expected 20240520"]),
    ("model as tokens", _token_file(magic=20240326), ["bad magic 20240326", "model checkpoint"]),
    ("version 2 uint32", _token_file(version=2), ["unsupported token file version 2", "uint32"]),
    ("unknown version", _token_file(version=9), ["version 9"]),
    ("empty", _token_file(ntok=0, n_written=0), ["0 tokens", "empty"]),
    ("negative count", _token_file(ntok=-3, n_written=0), ["-3 tokens"]),
    ("truncated", _token_file(ntok=4, n_written=3), ["truncated", "1030 bytes", "4 tokens need 1032"]),
    ("trailing bytes", _token_file(ntok=4, n_written=5), ["2 trailing bytes"]),
    ("short header", b"\0" * 10, ["10 bytes is too short"]),
]


@pytest.mark.parametrize("content, words", [(c, w) for _, c, w in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_malformed_token_file_is_a_one_line_error_naming_file_and_problem(tmp_path: Path, content, words) -> None:
    path = tmp_path / "broken_tokens.bin"
    path.write_bytes(content)
    with pytest.raises(FileFormatError) as err:
        read_tokens(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    for word in words:
        assert word in message


def test_missing_token_file(tmp_path: Path) -> None:
    with pytest.raises(TrainerError, match="no such token file"):
        read_tokens(tmp_path / "nope.bin")


def test_loader_reports_token_id_beyond_vocab_with_file_name(tmp_path: Path) -> None:
    path = tmp_path / "big_ids.bin"
    write_tokens(path, np.array([3, 1, 4, 1, 300, 9, 2]))
    with pytest.raises(FileFormatError) as err:
        TokenLoader(read_tokens(path), B=1, T=2, vocab_size=256)
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    assert "token id 300" in message and "position 4" in message and "vocab_size 256" in message
    TokenLoader(read_tokens(path), B=1, T=2, vocab_size=301)   # 300 < 301: fine


# ----------------------------------------------------------------------------------------------------------------
# the loader


def test_windows_and_wrapping_by_hand() -> None:
    # 11 tokens whose values are their positions; B=2, T=2: windows of B*T+1 = 5 tokens advance by 4,
    # so (11 - 1) // 4 = 2 windows fit: [0..4] and [4..8]; the next one, [8..12], would not.
    loader = TokenLoader(np.arange(11, dtype=np.uint16), B=2, T=2)
    assert loader.num_windows == 2
    x, y = loader.batch(0)
    assert x.dtype == np.int32 and y.dtype == np.int32 and x.shape == y.shape == (2, 2)
    assert x.tolist() == [[0, 1], [2, 3]] and y.tolist() == [[1, 2], [3, 4]]
    x, y = loader.batch(1)
    assert x.tolist() == [[4, 5], [6, 7]] and y.tolist() == [[5, 6], [7, 8]]
    x, y = loader.batch(2)                       # wrapped to the start
    assert x.tolist() == [[0, 1], [2, 3]] and y.tolist() == [[1, 2], [3, 4]]
    assert loader.batch(7)[0].tolist() == [[4, 5], [6, 7]]    # 7 % 2 = 1


def test_last_window_may_end_on_the_last_token() -> None:
    # 9 tokens: (9 - 1) // 4 = 2 windows, the second is [4..8] and its last target is token 8
    loader = TokenLoader(np.arange(9), B=2, T=2)
    assert loader.num_windows == 2
    assert loader.batch(1)[1].tolist() == [[5, 6], [7, 8]]


def test_two_ranks_by_hand() -> None:
    # world=2, B=1, T=2: global windows of 2*1*2 = 4 tokens (+1); (13 - 1) // 4 = 3 windows
    r0 = TokenLoader(np.arange(13), B=1, T=2, rank=0, world=2)
    r1 = TokenLoader(np.arange(13), B=1, T=2, rank=1, world=2)
    assert r0.batch(0)[0].tolist() == [[0, 1]] and r0.batch(0)[1].tolist() == [[1, 2]]
    assert r1.batch(0)[0].tolist() == [[2, 3]] and r1.batch(0)[1].tolist() == [[3, 4]]
    assert r0.batch(2)[0].tolist() == [[8, 9]] and r1.batch(2)[1].tolist() == [[11, 12]]
    assert r1.batch(3)[0].tolist() == [[2, 3]]          # wrapped


@pytest.mark.parametrize("k", [0, 1, 5, 17])          # 17 wraps around the 1000-token corpus
def test_ranks_concatenated_equal_the_single_rank_batch_of_size_world_times_B(k: int) -> None:
    tokens = synthetic_corpus(50, 1000, seed=3)
    B, T = 3, 8
    whole_x, whole_y = TokenLoader(tokens, 2 * B, T).batch(k)
    parts = [TokenLoader(tokens, B, T, rank=r, world=2).batch(k) for r in range(2)]
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), whole_x)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), whole_y)


def test_next_replays_batch_and_reset_resumes() -> None:
    loader = TokenLoader(np.arange(50), B=2, T=3)
    seen = [loader.next()[0].tolist() for _ in range(5)]
    assert seen == [loader.batch(k)[0].tolist() for k in range(5)]
    loader.reset(3)
    assert loader.next()[0].tolist() == seen[3]


def test_targets_do_not_alias_inputs() -> None:
    x, y = TokenLoader(np.arange(20), B=1, T=4).batch(0)
    x[0, 1] = -7
    assert y[0, 0] == 1


def test_too_few_tokens_for_one_global_window(tmp_path: Path) -> None:
    path = tmp_path / "small.bin"
    write_tokens(path, np.arange(8))
    # world 2 x B 2 x T 2 + 1 = 9 tokens needed, 8 available
    with pytest.raises(TrainerError) as err:
        TokenLoader(read_tokens(path), B=2, T=2, rank=1, world=2)
    message = str(err.value)
    assert str(path) in message and "8 tokens" in message and "9" in message and "\n" not in message


@pytest.mark.parametrize("kwargs", [dict(B=0, T=2), dict(B=1, T=2, rank=2, world=2), dict(B=1, T=2, rank=-1)])
def test_bad_loader_arguments(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        TokenLoader(np.arange(100), **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# the synthetic corpus


def test_synthetic_corpus_is_deterministic_and_in_range() -> None:
    a = synthetic_corpus(200, 5000, seed=1)
    assert a.dtype == np.int32 and a.shape == (5000,)
    np.testing.assert_array_equal(a, synthetic_corpus(200, 5000, seed=1))
    assert not np.array_equal(a, synthetic_corpus(200, 5000, seed=2))
    assert a.min() >= 0 and a.max() < 200
    assert len(np.unique(a)) == 200          # the whole vocabulary is used


def test_synthetic_corpus_structure_matches_its_entropy_rate() -> None:
    V = 200                                   # 50 groups of 4: entropy rate ln 4
    tokens = synthetic_corpus(V, 200_000, seed=0)
    assert synthetic_entropy_rate(V) == pytest.approx(np.log(4))
    counts = np.zeros((V, V))
    np.add.at(counts, (tokens[:-1], tokens[1:]), 1)
    # every token has exactly 4 successors, shared by the 4 tokens of its group
    assert ((counts > 0).sum(axis=1) == 4).all()
    rows = counts / counts.sum(axis=1, keepdims=True)
    freq = counts.sum(axis=1) / counts.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        empirical = -np.nansum(freq[:, None] * rows * np.log(rows))
    assert empirical == pytest.approx(np.log(4), abs=0.01)     # 1.3836 measured vs 1.3863
    assert freq.max() < 1.5 / V                                # near-uniform: no unigram shortcut


def test_entropy_rate_with_uneven_groups() -> None:
    # V=10, group_size=4: 2 groups of 5 -> ln 5; V=50257: 12563 groups of 4 and one of 5
    assert synthetic_entropy_rate(10, 4) == pytest.approx(np.log(5))
    expected = (12563 * np.log(4) + np.log(5)) / 12564
    assert synthetic_entropy_rate(50257) == pytest.approx(expected)
    assert synthetic_corpus(10, 100, seed=0, group_size=4).max() < 10


@pytest.mark.parametrize("V, n, group_size", [(10, 100, 0), (10, 100, 6), (10, 0, 2)])
def test_synthetic_corpus_rejects_bad_arguments(V: int, n: int, group_size: int) -> None:
    with pytest.raises(ValueError):
        synthetic_corpus(V, n, seed=0, group_size=group_size)
