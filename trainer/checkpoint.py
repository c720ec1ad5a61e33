"""llm.c's model checkpoint: a 256 x int32 header, then the flat float32 parameter buffer (params.py's order).

Header (little-endian int32):
    [0] 20240326 magic   [1] 3 version (float32, padded vocab)   [2] maxT   [3] V   [4] L   [5] NH   [6] C
    [7] Vp (V padded to a multiple of 128)                        [8:256] zero
The body is exactly ParamLayout.for_model(cfg).size float32 values, so file size = 1024 + 4 * size bytes, in
llm.c's tensor order (our in-memory buffer is grouped by layer: read/write convert, see trainer.params).
"""
from __future__ import annotations

import os
import zlib
from pathlib import Path

import numpy as np

from trainer.config import ModelConfig, pad_vocab
from trainer.errors import ConfigError, FileFormatError
from trainer.llmcfile import HEADER_BYTES, HEADER_INTS, INT32, MODEL_MAGIC, TOKENS_MAGIC
from trainer.llmcfile import read_header as llmc_header
from trainer.params import ParamLayout

MODEL_VERSION = 3
_FLOAT32 = np.dtype("<f4")

# Versions llm.c has used; a hint per version tells the user which llm.c tool made the file and what to do.
_VERSION_HINTS = {
    1: "an old llm.c float32 file without padded vocab; re-export it with a current llm.c train_gpt2.py",
    2: "an old llm.c file from before the padded vocab (version 3); re-export it with llm.c's train_gpt2.py",
    5: "an llm.c bfloat16 checkpoint (train_gpt2.cu); re-export it as float32 (version 3)",
}


def _magic_hint(magic: int) -> str:
    if magic == TOKENS_MAGIC:
        return "this is an llm.c token file (magic 20240520), pass it as data, not as a model"
    return f"expected {MODEL_MAGIC}; is this an llm.c model checkpoint (e.g. gpt2_124M.bin)?"


def crc32(llmc: np.ndarray) -> int:
    """CRC-32 of a checkpoint body: float32 parameters in llm.c's order, as the file stores them after its header
    (trainer.state_file pairs a state file with its model file by it)."""
    return zlib.crc32(memoryview(np.ascontiguousarray(llmc, dtype=_FLOAT32)).cast("B"))


def read_header(path: str | Path) -> np.ndarray:
    """The 256 header ints of the checkpoint `path` (existence and length checked)."""
    return llmc_header(Path(path), "checkpoint file")


def _config_from_header(path: Path, header: np.ndarray) -> ModelConfig:
    magic, version = int(header[0]), int(header[1])
    if magic != MODEL_MAGIC:
        raise FileFormatError(f"{path}: bad magic {magic}, not an llm.c model checkpoint; {_magic_hint(magic)}")
    if version != MODEL_VERSION:
        hint = _VERSION_HINTS.get(version, "unknown version; write it with gpt2trace or llm.c's train_gpt2.py")
        raise FileFormatError(f"{path}: unsupported checkpoint version {version} (we read {MODEL_VERSION}): {hint}")
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    fields = {"maxT": maxT, "V": V, "L": L, "NH": NH, "C": C}
    bad = {k: v for k, v in fields.items() if v <= 0}
    if bad:
        shown = ", ".join(f"{k}={v}" for k, v in bad.items())
        raise FileFormatError(f"{path}: nonsense config in header ({shown}), sizes must be positive; "
                              "the file is corrupt, re-export it")
    if C % NH:
        raise FileFormatError(f"{path}: header says C={C} is not a multiple of NH={NH}; "
                              "the file is corrupt, re-export it")
    if Vp != pad_vocab(V):
        raise FileFormatError(f"{path}: padded vocab Vp={Vp} does not match V={V} padded to 128 ({pad_vocab(V)}); "
                              "the file was written with a different padding rule, re-export it with llm.c's rule")
    try:
        return ModelConfig(n_layer=L, n_head=NH, n_embd=C, vocab_size=V, max_seq_len=maxT)
    except ConfigError as exc:    # the header's value, not an option's: name the file
        raise FileFormatError(f"{path}: header says {exc}; the file is corrupt, re-export it") from None


def _check_size(path: Path, cfg: ModelConfig, n_params: int) -> None:
    # Python ints: a corrupt header cannot overflow this arithmetic, and we compare before allocating anything.
    expected = checkpoint_nbytes(cfg)
    actual = path.stat().st_size
    if actual < expected:
        raise FileFormatError(f"{path}: truncated, {actual} bytes but the header's model (L={cfg.n_layer}, "
                              f"C={cfg.n_embd}, V={cfg.vocab_size}) needs {expected}; re-copy or re-export the file")
    if actual > expected:
        raise FileFormatError(f"{path}: {actual - expected} trailing bytes after the {n_params} parameters "
                              f"({actual} bytes, expected {expected}); the header does not describe this file")


def read_checkpoint_config(path: str | Path) -> ModelConfig:
    """The model config of an llm.c version-3 checkpoint, from its header, with the file's size checked against
    it; reads 1 KiB (the CLI takes its defaults from it before anything is allocated)."""
    path = Path(path)
    cfg = _config_from_header(path, read_header(path))
    _check_size(path, cfg, ParamLayout.for_model(cfg).size)
    return cfg


def read_checkpoint(path: str | Path) -> tuple[ModelConfig, np.ndarray]:
    """(config, flat float32 parameters) from an llm.c version-3 checkpoint; validates header and size first."""
    cfg, layout, llmc = _read_body(path)
    return cfg, layout.from_llmc(llmc)


def read_checkpoint_crc(path: str | Path) -> tuple[ModelConfig, np.ndarray, int]:
    """`read_checkpoint` plus the CRC-32 of the file's body (what trainer.state_file pairs a state file with)."""
    cfg, layout, llmc = _read_body(path)
    return cfg, layout.from_llmc(llmc), crc32(llmc)


def _read_body(path: str | Path) -> tuple[ModelConfig, ParamLayout, np.ndarray]:
    path = Path(path)
    cfg = read_checkpoint_config(path)
    layout = ParamLayout.for_model(cfg)
    # One bulk read (a 124M model is 500 MB: no per-tensor Python loops); the callers convert to our order.
    return cfg, layout, np.fromfile(path, dtype=_FLOAT32, count=layout.size, offset=HEADER_BYTES)


def checkpoint_nbytes(cfg: ModelConfig) -> int:
    """The size of the checkpoint file of `cfg`."""
    return HEADER_BYTES + 4 * ParamLayout.for_model(cfg).size


def make_header(cfg: ModelConfig) -> np.ndarray:
    header = np.zeros(HEADER_INTS, dtype=INT32)
    header[:8] = (MODEL_MAGIC, MODEL_VERSION, cfg.max_seq_len, cfg.vocab_size,
                  cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.padded_vocab_size)
    return header


def write_checkpoint(path: str | Path, cfg: ModelConfig, flat: np.ndarray) -> int:
    """Write `flat` (float32[ParamLayout.size]) as an llm.c version-3 checkpoint; returns the CRC-32 of its body.

    Written to a temporary file and renamed, so a crash mid-write never leaves a half checkpoint at `path`; a
    failed write (a full disk) removes the temporary file and raises the OSError.
    """
    path = Path(path)
    layout = ParamLayout.for_model(cfg)
    if flat.shape != (layout.size,) or flat.dtype != np.float32:
        raise ValueError(f"flat buffer must be float32[{layout.size}] for this config, got "
                         f"{flat.dtype}{list(flat.shape)}")
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            # file.write rather than ndarray.tofile: a full disk is then an OSError with its errno (ENOSPC)
            f.write(make_header(cfg).tobytes())
            llmc = np.ascontiguousarray(layout.to_llmc(flat), dtype=_FLOAT32)
            f.write(memoryview(llmc).cast("B"))
        os.replace(tmp, path)
        return crc32(llmc)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
