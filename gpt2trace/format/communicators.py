"""Communicators: which group of ranks each MPI call ran on (the `communicator` column and its metadata).

A trace names every communicator its `comm` records use in the metadata key META_COMMUNICATORS, as JSON
{"communicators": [{"id": 0, "name": "world", "ranks": [0, 1, 2, 3]}, {"id": 5, "name": "sp", "ranks": [0, 1]},
...]}; `ranks` are world ranks, in the communicator's own rank order. Id 0 is the world. A `seq` counts the
collectives of one communicator, so a collective instance is (communicator, seq).

Ids are assigned where communicators are created (gpt2trace.record.traced_comm), the same on every member with no
communication: the k-th communicator-creating call of the run (the world is k = 0) gives its groups the ids
k * world_size + the group's lowest world rank. A trace without the column (schema version 1, or another tool's)
ran everything on the world: `WORLD` over all its ranks.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from gpt2trace.format.schema import META_COMMUNICATORS

WORLD_ID = 0
WORLD_NAME = "world"


@dataclass(frozen=True)
class Communicator:
    id: int
    name: str
    ranks: tuple[int, ...]        # world ranks, in the communicator's rank order

    def as_json(self) -> dict:
        return {"id": self.id, "name": self.name, "ranks": list(self.ranks)}


# What the trainer's communicator names mean (trainer/parallel/grid.py names them; a test holds the two equal).
# A name not listed is described as is.
GROUP_WORDS = {WORLD_NAME: "the world communicator", "tp": "the tensor-parallel group", "sp": "the sequence group",
               "dp": "the data-parallel group", "pp": "the pipeline",
               "embed": "the embedding group (first and last stage)",
               "grad": "the gradient group (sequence x data-parallel)"}
TAIL = ">="      # "sp>=2": the ranks of a sequence group from index 2 on (the contiguous split's rooted reduces)


def describe(name: str) -> str:
    """A communicator's name in words: 'the sequence group', 'the sequence group's ranks >= 2', or the name."""
    base, tail, index = name.partition(TAIL)
    if base in GROUP_WORDS:
        return f"{GROUP_WORDS[base]}'s ranks {TAIL} {index}" if tail else GROUP_WORDS[base]
    return f"communicator {name}"


def world(ranks) -> Communicator:
    return Communicator(WORLD_ID, WORLD_NAME, tuple(int(r) for r in ranks))


def new_id(creation: int, world_size: int, ranks) -> int:
    """The id of one group of the `creation`-th communicator-creating call (see the module's docstring)."""
    return creation * world_size + min(ranks)


def to_metadata(comms) -> dict[bytes, bytes]:
    """The metadata entry for these communicators (sorted by id)."""
    table = sorted({c.id: c for c in comms}.values(), key=lambda c: c.id)
    return {META_COMMUNICATORS: json.dumps({"communicators": [c.as_json() for c in table]}).encode()}


def from_metadata(meta: dict | None) -> dict[int, Communicator] | None:
    """The communicators a schema's metadata names, by id; None when it names none. Raises ValueError when the
    entry is malformed."""
    raw = (meta or {}).get(META_COMMUNICATORS)
    if not raw:
        return None
    table = json.loads(raw)["communicators"]
    out = {}
    for c in table:
        comm = Communicator(int(c["id"]), str(c["name"]), tuple(int(r) for r in c["ranks"]))
        out[comm.id] = comm
    return out


def merged(tables) -> dict[int, Communicator]:
    """The union of several ranks' tables (each rank knows the communicators it belongs to)."""
    out: dict[int, Communicator] = {}
    for t in tables:
        for c in (t or {}).values():
            if c.id in out and out[c.id] != c:
                raise ValueError(f"communicator id {c.id} names two groups: {out[c.id]} and {c}")
            out[c.id] = c
    return out


def ids(column: np.ndarray) -> np.ndarray:
    """Communicator ids of records, a null (-1, or a column the trace lacks) read as the world."""
    return np.where(column < 0, WORLD_ID, column)
