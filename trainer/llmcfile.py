"""What llm.c's binary files share: a 256 x int32 little-endian header whose first int is a magic number."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trainer.errors import FileFormatError, TrainerError

MODEL_MAGIC = 20240326      # model checkpoints (trainer.checkpoint)
TOKENS_MAGIC = 20240520     # token files (trainer.data)
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
INT32 = np.dtype("<i4")     # llm.c writes little-endian; say so, so a big-endian host reads it right


def read_header(path: Path, what: str) -> np.ndarray:
    """The 256 header ints of `path` (a `what`: "checkpoint", "token file"), after checking the file exists and
    is long enough to hold them."""
    if not path.is_file():
        raise TrainerError(f"{path}: no such {what}; check the path")
    size = path.stat().st_size
    if size < HEADER_BYTES:
        raise FileFormatError(f"{path}: {size} bytes is too short for the {HEADER_BYTES}-byte llm.c header; "
                              f"the file is truncated or not an llm.c {what}")
    return np.fromfile(path, dtype=INT32, count=HEADER_INTS).astype(np.int64)
