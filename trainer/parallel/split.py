"""Which positions of each sequence every rank of a sequence group holds (`--sp`, `--sp-split`): pure data, no
kernels, so the CLI can check a configuration before anything is compiled or launched."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainer.config import SPSplit
from trainer.errors import ConfigError


@dataclass(frozen=True)
class SequenceSplit:
    """Which positions of a length-T sequence each of the S ranks of a sequence group holds (pure)."""
    T: int
    S: int
    split: SPSplit = SPSplit.contiguous

    def __post_init__(self) -> None:
        if self.S < 1:
            raise ConfigError("sp", self.S, "must be an integer >= 1")
        if self.T % self.S:
            raise ConfigError("seq_len", self.T, f"must be a multiple of --sp {self.S}: every rank of a sequence "
                                                 f"group holds T/{self.S} positions")

    @property
    def local_len(self) -> int:
        return self.T // self.S

    def positions(self, index: int) -> np.ndarray:
        """(T/S,) int32, increasing: the positions rank `index` of the group holds."""
        if self.split == SPSplit.contiguous:
            return np.arange(index * self.local_len, (index + 1) * self.local_len, dtype=np.int32)
        return np.arange(index, self.T, self.S, dtype=np.int32)

    def table(self) -> np.ndarray:
        """(S, T/S) int32: row r = positions(r), the key positions of the gathered qkv's source blocks."""
        return np.stack([self.positions(r) for r in range(self.S)])


def scatter_shares(grid, split: SequenceSplit, B: int) -> list[tuple[int, np.ndarray]]:
    """For `--data-loading scatter`: (first row in the global batch, positions) of every rank's piece.

    The global batch holds the dp groups' B sequences in dp order, as TokenLoader's shards concatenated."""
    shares = []
    for r in range(grid.size):
        c = grid.layout.coords(r)
        shares.append((c["dp"] * B, split.positions(c["sp"])))
    return shares
