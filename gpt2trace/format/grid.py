"""The rank grid of a traced run: its parallel dimensions, each rank's coordinates in them, and the dimensions a group
of ranks spans. Analyses and the report read coordinates here, never from the trainer.

`gpt2trace run` writes the grid into the run metadata (META_RUN's JSON), as the trainer lays the ranks out
(trainer/parallel/grid.py), fastest-varying first:

    "grid": {"dims": [["tp", T], ["sp", S], ["pp", P], ["dp", D]]}     rank = ((dp * P + pp) * S + sp) * T + tp

It travels with the run metadata through every export and import that keeps it. A trace without the key gets its
grid from the run's parallel degrees (`parallel`: ranks, sp, pp, tp when present; dp the rest, in the trainer's
order), so traces written before the key still get their coordinates; a trace without either (another tool's) is
one dp dimension of all its ranks. A grid is not used when its product is not the trace's number of ranks, or when
a communicator named after one of its dimensions (`pp`, `sp>=1`, ...) spans other dimensions of it: the next
source is, and `Grid.note` says why.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from gpt2trace.format.communicators import TAIL, Communicator
from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import RANK

GRID_KEY = "grid"                 # in the run metadata
TP, SP, PP, DP = "tp", "sp", "pp", "dp"
# How summaries and labels list the dimensions: the 3D-parallelism order of the literature ("DP x TP x PP"), then
# sequence parallelism; a dimension this module does not know follows in the grid's order.
DISPLAY = (DP, TP, PP, SP)
WORDS = {TP: "tensor-parallel", SP: "sequence-parallel", PP: "pipeline", DP: "data-parallel"}

FROM_GRID, FROM_DEGREES, FROM_RANKS = "run metadata grid", "run metadata degrees", "one dp dimension of all ranks"


@dataclass(frozen=True)
class Grid:
    """The parallel dimensions as (name, degree), fastest-varying first; `source` says where they were read."""
    dims: tuple[tuple[str, int], ...]
    source: str = FROM_GRID
    note: str | None = None       # why the trace's own grid (or degrees) could not be used

    @property
    def size(self) -> int:
        return math.prod(d for _, d in self.dims)

    def degree(self, dim: str) -> int:
        return dict(self.dims).get(dim, 1)

    def shown(self) -> list[tuple[str, int]]:
        """The dimensions in display order (DISPLAY, then any other in grid order)."""
        known = [d for d in DISPLAY if d in dict(self.dims)]
        return [(n, self.degree(n)) for n in known] + [(n, d) for n, d in self.dims if n not in DISPLAY]

    def text(self) -> str:
        """The degrees of the run: 'dp 2 x tp 2 x pp 1'."""
        return " x ".join(f"{n} {d}" for n, d in self.shown())

    def coords(self, rank: int) -> dict[str, int]:
        """Rank -> its index along every dimension."""
        if not 0 <= rank < self.size:
            raise ValueError(f"rank {rank} is outside the grid of {self.size} ranks")
        out = {}
        for name, degree in self.dims:
            out[name], rank = rank % degree, rank // degree
        return out

    def label(self, rank: int) -> str:
        """'dp 1 tp 1 pp 0': the rank's coordinates along the dimensions that tell ranks apart (degree > 1), in
        display order; '' for a grid of one rank."""
        c = self.coords(rank)
        return " ".join(f"{n} {c[n]}" for n, d in self.shown() if d > 1)

    def spanned(self, ranks) -> tuple[str, ...]:
        """The dimensions along which these ranks' coordinates differ, in display order: ('tp',) for a
        tensor-parallel group, ('dp', 'sp') for a gradient group over sequence x data-parallel ranks, () for one
        rank."""
        r = np.asarray(list(ranks), dtype=np.int64)
        if not len(r):
            return ()
        if r.min() < 0 or r.max() >= self.size:
            raise ValueError(f"ranks {r.min()}..{r.max()} are outside the grid of {self.size} ranks")
        out, stride = set(), 1
        for name, degree in self.dims:
            index = (r // stride) % degree
            if (index != index[0]).any():
                out.add(name)
            stride *= degree
        return tuple(n for n, _ in self.shown() if n in out)


def as_json(dims) -> dict:
    """The run metadata's entry for a grid of (name, degree) dimensions, fastest-varying first."""
    return {"dims": [[str(n), int(d)] for n, d in dims]}


def from_run(run: dict | None, ranks: int, communicators: Iterable[Communicator] = ()) -> Grid:
    """The grid of a trace of `ranks` ranks (numbered 0..ranks-1) from its run metadata, checked against the
    trace's `communicators` (see the module's docstring for the order of the sources)."""
    run = run if isinstance(run, dict) else {}
    notes = []
    for source, read in ((FROM_GRID, _dims_of_grid), (FROM_DEGREES, _dims_of_degrees)):
        try:
            dims = read(run)
        except (KeyError, TypeError, ValueError) as exc:
            notes.append(f"the {source} is malformed ({exc})")
            continue
        if dims is None:
            continue
        grid = Grid(dims, source)
        if grid.size != ranks and not (grid.size > ranks and grid.size == _job_ranks(run)):
            notes.append(f"the {source} ({grid.text()}) has {grid.size} ranks, the trace {ranks}")
            continue
        astray = _astray(grid, communicators)
        if astray is not None:
            notes.append(f"the {source} ({grid.text()}) {astray}")
            continue
        return Grid(dims, source, "; ".join(notes) or None)
    return Grid(((DP, max(ranks, 1)),), FROM_RANKS, "; ".join(notes) or None)


def _job_ranks(run: dict) -> int | None:
    """The job's rank count the run metadata states: a trace may hold some of them only (a profiler's file of one
    rank of a 300-rank job), and its grid is then the job's."""
    parallel = run.get("parallel")
    ranks = parallel.get("ranks") if isinstance(parallel, dict) else None
    return ranks if isinstance(ranks, int) and not isinstance(ranks, bool) else None


def _astray(grid: Grid, communicators: Iterable[Communicator]) -> str | None:
    """How a communicator named after a dimension of the grid contradicts it; None when none does."""
    names = dict(grid.dims)
    for c in communicators:
        dim = c.name.partition(TAIL)[0]
        if dim in names and len(c.ranks) > 1:
            try:
                spans = grid.spanned(c.ranks)
            except ValueError:
                return f"does not hold the ranks of communicator {c.name}"
            if spans != (dim,):
                return (f"puts communicator {c.name} (ranks {', '.join(map(str, c.ranks[:8]))}"
                        f"{', ...' if len(c.ranks) > 8 else ''}) along {' x '.join(spans) or 'no dimension'}")
    return None


def of_trace(trace: Trace) -> Grid:
    """The grid of a trace, its ranks counted from its records."""
    top = max((pc.max(p.column(RANK)).as_py() for p in trace.parts.values() if p.num_rows), default=None)
    return from_run(trace.run, top + 1 if top is not None else 1, (trace.comm_table or {}).values())


def _dims_of_grid(run: dict) -> tuple[tuple[str, int], ...] | None:
    entry = run.get(GRID_KEY)
    if entry is None:
        return None
    dims = tuple((str(n), int(d)) for n, d in entry["dims"])
    if not dims or any(d < 1 for _, d in dims) or len({n for n, _ in dims}) < len(dims):
        raise ValueError("dimensions must be named once each with a degree >= 1")
    return dims


def _dims_of_degrees(run: dict) -> tuple[tuple[str, int], ...] | None:
    """The trainer's layout from the run's degrees: tp (only when the run records it), sp, pp, then dp."""
    par = run.get("parallel")
    if not isinstance(par, dict) or "ranks" not in par:
        return None
    ranks = int(par["ranks"])
    inner = (((TP, int(par[TP])),) if TP in par else ()) + ((SP, int(par.get(SP, 1))), (PP, int(par.get(PP, 1))))
    per_replica = math.prod(d for _, d in inner)
    if per_replica < 1 or any(d < 1 for _, d in inner) or ranks % per_replica:
        raise ValueError(f"tp x sp x pp = {per_replica} does not divide the {ranks} ranks")
    return (*inner, (DP, ranks // per_replica))
