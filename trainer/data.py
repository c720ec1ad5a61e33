"""Training data: llm.c token files, the built-in synthetic corpus, and llm.c's plain sequential data loader.

Token file (little-endian): 256 x int32 header [0] 20240520 magic, [1] 1 version (uint16 tokens), [2] ntok,
then ntok x uint16 tokens; file size = 1024 + 2 * ntok bytes exactly.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from trainer.errors import FileFormatError, TrainerError
from trainer.llmcfile import HEADER_BYTES, HEADER_INTS, INT32, MODEL_MAGIC, TOKENS_MAGIC, read_header

TOKENS_VERSION = 1
_UINT16 = np.dtype("<u2")


# ----------------------------------------------------------------------------------------------------------------
# token files

def _magic_hint(magic: int) -> str:
    if magic == MODEL_MAGIC:
        return "this is an llm.c model checkpoint (magic 20240326), pass it as the model, not as data"
    return f"expected {TOKENS_MAGIC}; make token files with llm.c's dev/data scripts or `write_tokens`"


def _read_token_header(path: Path) -> int:
    """Check the header of `path` and return its token count."""
    magic, version, ntok = (int(x) for x in read_header(path, "token file")[:3])
    size = path.stat().st_size
    if magic != TOKENS_MAGIC:
        raise FileFormatError(f"{path}: bad magic {magic}, not an llm.c token file; {_magic_hint(magic)}")
    if version != TOKENS_VERSION:
        hint = ("llm.c's version 2 holds uint32 (LLaMA-3) tokens; re-tokenize for GPT-2 (uint16)"
                if version == 2 else "re-create it with llm.c's dev/data scripts or `write_tokens`")
        raise FileFormatError(f"{path}: unsupported token file version {version} (we read {TOKENS_VERSION}); {hint}")
    if ntok <= 0:
        raise FileFormatError(f"{path}: header says {ntok} tokens; an empty token file cannot be trained on, "
                              "re-create it")
    expected = HEADER_BYTES + 2 * ntok
    if size < expected:
        raise FileFormatError(f"{path}: truncated, {size} bytes but the header's {ntok} tokens need {expected}; "
                              "re-copy or re-create the file")
    if size > expected:
        raise FileFormatError(f"{path}: {size - expected} trailing bytes after the header's {ntok} tokens "
                              f"({size} bytes, expected {expected}); the header does not describe this file")
    return ntok


def read_tokens(path: str | Path) -> np.memmap:
    """The tokens of an llm.c token file as a read-only uint16 memmap (nothing is read until it is indexed).

    The memmap keeps the file name (`.filename`), so TokenLoader can name the file in its errors.
    """
    path = Path(path)
    ntok = _read_token_header(path)
    return np.memmap(path, dtype=_UINT16, mode="r", offset=HEADER_BYTES, shape=(ntok,))


def write_tokens(path: str | Path, tokens: np.ndarray) -> None:
    """Write a 1-D array of token ids in [0, 65535] as an llm.c token file (temporary file, then rename)."""
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.size == 0 or not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be a non-empty 1-D integer array, got {tokens.dtype}{list(tokens.shape)}")
    if tokens.min() < 0 or tokens.max() > np.iinfo(np.uint16).max:
        raise ValueError(f"token ids must fit uint16, got range [{tokens.min()}, {tokens.max()}]")
    header = np.zeros(HEADER_INTS, dtype=INT32)
    header[:3] = (TOKENS_MAGIC, TOKENS_VERSION, tokens.size)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        header.tofile(f)
        tokens.astype(_UINT16).tofile(f)
    os.replace(tmp, path)


# ----------------------------------------------------------------------------------------------------------------
# the built-in corpus

GROUP_SIZE = 4                       # tokens per hidden group of the built-in corpus (entropy rate ln 4)
SYNTHETIC_MIN_VOCAB = 2 * GROUP_SIZE  # at least 2 groups


def _group_sizes(vocab_size: int, group_size: int) -> np.ndarray:
    """Sizes of the corpus' token groups: G = V // group_size groups, the V % G first ones one token larger."""
    if not 1 <= group_size <= vocab_size // 2:
        raise ValueError(f"group_size must be in [1, vocab_size // 2] (at least 2 groups), "
                         f"got {group_size} for vocab_size {vocab_size}")
    G = vocab_size // group_size
    return vocab_size // G + (np.arange(G) < vocab_size % G)


def synthetic_corpus(vocab_size: int, n_tokens: int, seed: int, group_size: int = GROUP_SIZE) -> np.ndarray:
    """The built-in corpus: a deterministic, learnable Markov chain over the whole vocabulary (no download).

    A seeded random permutation splits the V tokens into G = V // group_size hidden groups of group_size tokens
    (the first V % G groups get one more). The stream visits the groups in a fixed cyclic order 0, 1, ..., G-1,
    0, ... from a random start, and at each step emits a uniformly random member of the current group. So the
    previous token fixes the next group, and the next token is uniform over that group's members:

    * entropy rate = mean over groups of ln(group size) nats/token (`synthetic_entropy_rate`); when group_size
      divides V it is exactly ln(group_size) = ln 4 = 1.386 by default. It is the best achievable mean loss,
      at every position of every window, because the previous token is always in the model's context;
    * all tokens are (almost exactly) equally frequent, so a model that ignores context stays at ln(V)
      (6.238 for V=512, 5.298 for V=200): any loss below ln(V) is learned structure;
    * every token of a group has the same successors, so the structure is low-rank and a small GPT-2 learns it
      fast (measured with the PyTorch reference, model `small`, B=4, T=64, AdamW): loss 6.26 -> 4.3 after 30
      steps and 1.9 after 100 at lr 1e-3; 6.26 -> 5.3 after 30 and 3.9 after 100 at lr 3e-4.

    Returns int32 tokens of shape (n_tokens,), all in [0, vocab_size).
    """
    sizes = _group_sizes(vocab_size, group_size)
    if n_tokens <= 0:
        raise ValueError(f"n_tokens must be positive, got {n_tokens}")
    G = len(sizes)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(vocab_size)
    group = (rng.integers(G) + np.arange(n_tokens)) % G
    member = rng.integers(0, sizes[group])
    # position q holds member q // G of group q % G, so perm[q] is the token (no Python loop)
    return perm[group + G * member].astype(np.int32)


def synthetic_entropy_rate(vocab_size: int, group_size: int = GROUP_SIZE) -> float:
    """Entropy rate of `synthetic_corpus` in nats/token, i.e. its best achievable mean cross-entropy loss."""
    return float(np.mean(np.log(_group_sizes(vocab_size, group_size))))


# ----------------------------------------------------------------------------------------------------------------
# the data loader

class TokenLoader:
    """llm.c's plain DataLoader, with data-parallel sharding: batch k is a pure function of k.

    The token stream is cut into consecutive global windows of world*B*T tokens (plus 1 for the last target);
    window w starts at w*world*B*T. Rank r takes tokens [start + r*B*T, start + (r+1)*B*T + 1) of it:
    inputs = those[:-1], targets = those[1:], both reshaped to (B, T). When the next window would not fit,
    we wrap to the start, so batch k uses window k % num_windows. With world=1 this is llm.c's loader; with
    world=N the N ranks' batches concatenated are the world=1 batch of size N*B.
    """

    def __init__(self, tokens: np.ndarray, B: int, T: int, rank: int = 0, world: int = 1,
                 vocab_size: int | None = None, name: str | os.PathLike | None = None) -> None:
        if B <= 0 or T <= 0:
            raise ValueError(f"B and T must be positive, got B={B}, T={T}")
        if not 0 <= rank < world:
            raise ValueError(f"rank must be in [0, world), got rank={rank}, world={world}")
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be 1-D, got shape {list(tokens.shape)}")
        self.tokens, self.B, self.T, self.rank, self.world = tokens, B, T, rank, world
        # A memmap from read_tokens knows its file; plain arrays are named by the caller or not at all.
        self.name = str(name if name is not None else getattr(tokens, "filename", None) or "the token array")
        self.global_tokens = world * B * T
        self.num_windows = (len(tokens) - 1) // self.global_tokens
        self._check_size()
        if vocab_size is not None:
            self._check_vocab(vocab_size)
        self._next = 0

    def _check_size(self) -> None:
        need = self.global_tokens + 1
        if self.num_windows < 1:
            raise TrainerError(f"{self.name}: {len(self.tokens)} tokens is too few for one global batch of "
                               f"{need} (world {self.world} x B {self.B} x T {self.T} + 1); "
                               "use more data or a smaller batch/sequence length")

    def _check_vocab(self, vocab_size: int) -> None:
        # One vectorised pass; only on failure do we look for where the bad id is.
        low, top = int(self.tokens.min()), int(self.tokens.max())
        if low < 0:
            raise FileFormatError(f"{self.name}: negative token id {low}; token ids must be in [0, {vocab_size})")
        if top >= vocab_size:
            where = int(np.argmax(np.asarray(self.tokens) >= vocab_size))
            raise FileFormatError(f"{self.name}: token id {top} (first bad id at position {where}) is out of "
                                  f"range for the model's vocab_size {vocab_size}; tokenize with the model's "
                                  "tokenizer or use a model with a larger vocabulary")

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets), int32 (B, T) each, for batch k >= 0 on this rank."""
        if k < 0:
            raise ValueError(f"batch index must be >= 0, got {k}")
        start = (k % self.num_windows) * self.global_tokens + self.rank * self.B * self.T
        window = np.asarray(self.tokens[start:start + self.B * self.T + 1], dtype=np.int32)
        # targets get their own buffer: overlapping views would let a caller's write to one change the other
        return window[:-1].reshape(self.B, self.T), window[1:].reshape(self.B, self.T).copy()

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        """The batch after the previous `next()` (starting at 0); `reset(k)` resumes at batch k."""
        out = self.batch(self._next)
        self._next += 1
        return out

    def reset(self, k: int = 0) -> None:
        self._next = k
