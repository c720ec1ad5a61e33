"""The optimizer state file written beside an llm.c checkpoint (`--save X` writes X and X.state).

It holds what the llm.c model file lacks to continue a run bit for bit: both AdamW moments of every parameter, the
AdamW step count t and the next step's index, plus a fingerprint of everything that must match when a run resumes
from it. The moments are in llm.c's tensor order, like the model file, so the file does not depend on the rank
layout that wrote it (ZeRO-1's shards are gathered first; any layout can resume from it).

Layout (little-endian):
    header   256 x int32 (1 KiB)
             [0] 20261123 magic   [1] 1 version   [2] t (AdamW updates done)   [3] next step index
             [4] CRC-32 of the model file's parameter bytes (its body after the 1 KiB header; uint32 bits)
             [5] J, the bytes of the JSON that follows (a multiple of 4)       [6:256] zero
    JSON     J bytes of UTF-8, padded with spaces: {"fingerprint": {...}, "saved_by": {...}}; `fingerprint` is
             `Fingerprint` below (its model fields give P, the parameter count); `saved_by` the layout of the run
             that wrote it (ranks, sp, dp_sync, threads, batch_size, data_loading: informative, not checked)
    m        P x float32, llm.c's tensor order (trainer.params.PARAM_NAMES)
    v        P x float32, the same order
File size = 1024 + J + 8 P bytes exactly: 8 bytes of optimizer state per parameter, next to the model's 4.

The CRC pairs the two files: the model file is renamed into place first and the state file last, so a crash
between the two renames (or a state file copied next to another model) is caught when resuming, not trained on.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from trainer.config import ModelConfig, TrainConfig
from trainer.errors import ConfigError, FileFormatError, TrainerError
from trainer.llmcfile import HEADER_BYTES, HEADER_INTS, INT32, MODEL_MAGIC, TOKENS_MAGIC, read_header
from trainer.params import ParamLayout

STATE_MAGIC = 20261123
STATE_VERSION = 1
LLMC_STATE_MAGIC = 20240527      # llm.c's train_gpt2.cu state files: one per rank, sharded, not ours
SUFFIX = ".state"
_FLOAT32 = np.dtype("<f4")
_T, _NEXT_STEP, _CRC, _JSON = 2, 3, 4, 5     # header indices


def state_path(model_path: str | os.PathLike) -> Path:
    """The state file beside the model checkpoint `model_path`: the same name plus `.state`."""
    model_path = Path(model_path)
    return model_path.with_name(model_path.name + SUFFIX)


@dataclass(frozen=True)
class Fingerprint:
    """What a resumed run must share with the run that saved, or it would not continue the same training.

    The global batch (sequences per optimizer step over all ranks, B x data-parallel groups x grad_accum) must
    match, not B: 2 ranks of B=2 read exactly the sequences 1 rank of B=4 reads (trainer.data.TokenLoader), so a run
    may resume on another number of ranks. With grad_accum and T equal too, step s reads the same tokens."""
    n_layer: int
    n_head: int
    n_embd: int
    vocab_size: int
    max_seq_len: int
    seq_len: int
    grad_accum: int
    global_batch: int
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float
    seed: int
    data: str              # the token file's absolute path, or "synthetic" (the built-in corpus of `seed`)
    data_bytes: int        # its size (0 for the built-in corpus)

    @classmethod
    def of(cls, model: ModelConfig, train: TrainConfig, dp_groups: int, data: str | os.PathLike | None
           ) -> Fingerprint:
        """The fingerprint of a run of `model` with `train`, `dp_groups` data-parallel groups, on `data` (a token
        file, or None for the built-in corpus)."""
        if data is None:
            name, size = "synthetic", 0
        else:
            name, size = os.path.realpath(data), Path(data).stat().st_size
        return cls(**asdict(model), seq_len=train.seq_len, grad_accum=train.grad_accum,
                   global_batch=train.batch_size * dp_groups * train.grad_accum, lr=train.lr, beta1=train.beta1,
                   beta2=train.beta2, eps=train.eps, weight_decay=train.weight_decay, seed=train.seed,
                   data=name, data_bytes=size)

    @property
    def model(self) -> ModelConfig:
        return ModelConfig(self.n_layer, self.n_head, self.n_embd, self.vocab_size, self.max_seq_len)

    def differences(self, other: Fingerprint) -> list[tuple[str, object, object]]:
        """(field, ours, theirs) for every field that differs; floats compare exactly (a JSON float
        round-trips)."""
        return [(f.name, getattr(self, f.name), getattr(other, f.name)) for f in fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]


class ResumeMismatch(TrainerError):
    """A run resumed with settings other than the saved run's; `differences` lists (field, saved, this run)."""

    def __init__(self, path: Path, differences: list[tuple[str, object, object]]):
        self.path, self.differences = path, differences
        super().__init__(self.describe({}))

    def describe(self, labels: dict[str, str]) -> str:
        """The one-line message; `labels` names a field as the user set it (the CLI passes its options)."""
        shown = "; ".join(f"{labels.get(f, f)}: saved {_show(saved)}, this run {_show(now)}"
                          for f, saved, now in self.differences)
        return (f"--resume {self.path} was saved by a run with other settings ({shown}); resume with the saved "
                "run's settings: only --steps, the outputs and the layout (--ranks, --sp, -B at the same global "
                "batch, --threads, --dp-sync, --data-loading) may change")


def _show(value) -> str:
    return repr(value) if isinstance(value, str) else f"{value}"


@dataclass(frozen=True)
class StateHeader:
    """All of a state file but its moments (read those with `read_moment`)."""
    path: Path
    t: int
    next_step: int
    model_crc32: int
    fingerprint: Fingerprint
    saved_by: dict
    json_bytes: int

    @property
    def model(self) -> ModelConfig:
        return self.fingerprint.model


def _json(fingerprint: Fingerprint, saved_by: dict) -> bytes:
    text = json.dumps({"fingerprint": asdict(fingerprint), "saved_by": saved_by}, sort_keys=True).encode()
    return text + b" " * (-len(text) % 4)


def _json_bytes(fingerprint: Fingerprint, saved_by: dict) -> int:
    return len(_json(fingerprint, saved_by))


def state_nbytes(fingerprint: Fingerprint, saved_by: dict) -> int:
    """The size of the state file `write_state` writes for these (known before writing: the trace's bytes)."""
    return HEADER_BYTES + _json_bytes(fingerprint, saved_by) + 8 * ParamLayout.for_model(fingerprint.model).size


def write_state(path: str | os.PathLike, m: np.ndarray, v: np.ndarray, t: int, next_step: int, model_crc32: int,
                fingerprint: Fingerprint, saved_by: dict) -> int:
    """Write the state file at `path` (the caller makes it atomic: gpt2trace.format.outputs); returns its bytes.

    `m`, `v`: float32[P] in the flat buffer's order (trainer.params), converted here to llm.c's."""
    layout = ParamLayout.for_model(fingerprint.model)
    for name, x in (("m", m), ("v", v)):
        if x.shape != (layout.size,) or x.dtype != np.float32:
            raise ValueError(f"{name} must be float32[{layout.size}] for this model, got {x.dtype}{list(x.shape)}")
    text = _json(fingerprint, saved_by)
    header = np.zeros(HEADER_INTS, dtype=INT32)
    header[:6] = (STATE_MAGIC, STATE_VERSION, t, next_step, np.uint32(model_crc32).view(np.int32), len(text))
    try:
        with open(path, "wb") as f:
            # file.write, not ndarray.tofile: a full disk is then an OSError with its errno (ENOSPC)
            f.write(header.tobytes())
            f.write(text)
            for x in (m, v):
                f.write(memoryview(np.ascontiguousarray(layout.to_llmc(x), dtype=_FLOAT32)).cast("B"))
    except OSError as exc:
        exc.filename = exc.filename or os.fspath(path)    # a failed write() names no file: say which one
        raise
    return HEADER_BYTES + len(text) + 8 * layout.size


def _magic_hint(magic: int) -> str:
    if magic == MODEL_MAGIC:
        return "this is an llm.c model checkpoint; its state file is beside it, named like it plus .state"
    if magic == TOKENS_MAGIC:
        return "this is an llm.c token file"
    if magic == LLMC_STATE_MAGIC:
        return ("this is an llm.c train_gpt2.cu state file (one per GPU, sharded); gpt2trace resumes only from "
                "the state files it writes")
    return f"expected {STATE_MAGIC}; write it with `gpt2trace run --save`"


def read_state_header(path: str | os.PathLike) -> StateHeader:
    """The header and JSON of the state file `path`, with magic, version and size checked (reads 1 KiB + J)."""
    path = Path(path)
    header = read_header(path, "optimizer state file")
    magic, version = int(header[0]), int(header[1])
    if magic != STATE_MAGIC:
        raise FileFormatError(f"{path}: bad magic {magic}, not a gpt2trace optimizer state file; "
                              f"{_magic_hint(magic)}")
    if version != STATE_VERSION:
        raise FileFormatError(f"{path}: unsupported state file version {version} (we read {STATE_VERSION}); "
                              "write it again with this gpt2trace's `run --save`")
    t, next_step, n_json = int(header[_T]), int(header[_NEXT_STEP]), int(header[_JSON])
    if t < 0 or next_step < 0 or n_json <= 0 or n_json % 4:
        raise FileFormatError(f"{path}: nonsense header (t={t}, next step={next_step}, JSON bytes={n_json}); "
                              "the file is corrupt")
    size = path.stat().st_size
    if size < HEADER_BYTES + n_json:
        raise FileFormatError(f"{path}: truncated, {size} bytes but the header announces {n_json} bytes of JSON "
                              "after it; re-copy the file")
    with open(path, "rb") as f:
        f.seek(HEADER_BYTES)
        raw = f.read(n_json)
    fingerprint, saved_by = _parse_json(path, raw)
    n_params = ParamLayout.for_model(fingerprint.model).size
    expected = HEADER_BYTES + n_json + 8 * n_params
    if size != expected:
        what = "truncated" if size < expected else f"{size - expected} trailing bytes"
        raise FileFormatError(f"{path}: {what}, {size} bytes but its model (L={fingerprint.n_layer}, "
                              f"C={fingerprint.n_embd}, V={fingerprint.vocab_size}) needs {expected}; "
                              "re-copy the file")
    crc = int(np.int32(header[_CRC]).view(np.uint32))
    return StateHeader(path, t, next_step, crc, fingerprint, saved_by, n_json)


def _parse_json(path: Path, raw: bytes) -> tuple[Fingerprint, dict]:
    try:
        doc = json.loads(raw.decode())
        given = doc["fingerprint"]
        names = {f.name: f.type for f in fields(Fingerprint)}
        if set(given) != set(names):
            raise ValueError(f"fingerprint fields {sorted(set(given) ^ set(names))} missing or unknown")
        for name, value in given.items():
            want = {"int": int, "float": (int, float), "str": str}[names[name]]
            if isinstance(value, bool) or not isinstance(value, want):
                raise ValueError(f"fingerprint field {name} is {value!r}")
        fingerprint = Fingerprint(**given)
        if not isinstance(doc["saved_by"], dict):
            raise ValueError("saved_by is not an object")
        fingerprint.model          # noqa: B018  (a ConfigError for a nonsense model)
        if not all(math.isfinite(getattr(fingerprint, n)) for n in ("lr", "beta1", "beta2", "eps", "weight_decay")):
            raise ValueError("a non-finite hyperparameter")
    except (UnicodeDecodeError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise FileFormatError(f"{path}: corrupt JSON after the header ({exc}); the file is damaged, save again"
                              ) from None
    return fingerprint, doc["saved_by"]


def read_moment(header: StateHeader, which: str) -> np.ndarray:
    """Moment `which` ("m" or "v") of the whole model, float32[P] in the flat buffer's order (one read)."""
    layout = ParamLayout.for_model(header.model)
    index = ("m", "v").index(which)
    offset = HEADER_BYTES + header.json_bytes + 4 * layout.size * index
    return layout.from_llmc(np.fromfile(header.path, dtype=_FLOAT32, count=layout.size, offset=offset))


def check_pair(model_path: Path, model: ModelConfig, model_crc32: int, saved: StateHeader) -> None:
    """The checkpoint `model_path` (its config and body CRC) is the one `saved` was written with."""
    check_same_model(model_path, model, saved)
    if model_crc32 != saved.model_crc32:
        raise FileFormatError(f"{model_path} is not the model {saved.path} was saved with (CRC-32 {model_crc32:08x}, "
                              f"the state expects {saved.model_crc32:08x}): a save interrupted between the two "
                              "files, or files of different saves; resume from a pair written together")


def check_same_model(model_path: Path, model: ModelConfig, saved: StateHeader) -> None:
    """The checkpoint `model_path`'s config (from its header) is the one of `saved`: a check before reading it."""
    if model != saved.model:
        raise FileFormatError(f"{saved.path} is the optimizer state of another model (L={saved.model.n_layer} "
                              f"C={saved.model.n_embd} V={saved.model.vocab_size}) than {model_path} "
                              f"(L={model.n_layer} C={model.n_embd} V={model.vocab_size}); resume from a model "
                              "and the state file saved with it")
