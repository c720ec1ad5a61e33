"""One cheap pass over a trace before exporting it: ranks and threads, time span, the names of each kind in order
of first appearance, and the (few) MPI call records, which exporters match across ranks; on the way, every record
goes through the checks of `validate` (what the formats cannot hold is refused before anything is written).

Only a handful of narrow columns are read, batch by batch, so the pass is fast and its memory is that of the
comm records.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gpt2trace.format.errors import TraceError
from gpt2trace.format.lanes import distinct_lanes
from gpt2trace.format.matching import match_messages
from gpt2trace.format.mpi_calls import LOCAL, operation
from gpt2trace.format.schema import (
    BYTES,
    COMMUNICATOR,
    END_NS,
    FIELDS,
    KIND,
    NAME,
    PEER,
    RANK,
    SEQ,
    START_NS,
    STEP,
    TAG,
    THREAD,
    Kind,
)
from gpt2trace.interop.source import Source
from gpt2trace.interop.validate import COLUMNS as CHECKED
from gpt2trace.interop.validate import RecordCheck

COMM_COLUMNS = (RANK, THREAD, START_NS, END_NS, NAME, BYTES, PEER, SEQ, STEP, COMMUNICATOR, TAG)


@dataclass(frozen=True)
class Layout:
    threads: np.ndarray                 # threads of each rank (index = rank; a rank without records has 1)
    t0_ns: int
    end_ns: int
    names: dict[str, list[str]]         # kind -> names, in order of first appearance
    comms: pa.Table                     # the comm records, COMM_COLUMNS
    records: int
    kind_threads: dict[str, set]        # kind -> the (rank, thread) pairs that have records of it

    @property
    def ranks(self) -> int:
        return len(self.threads)

    @property
    def offsets(self) -> np.ndarray:
        """Global index (0-based, rank-major) of each rank's thread 0: Paraver's thread order, our CPU ids."""
        return np.concatenate([[0], np.cumsum(self.threads)[:-1]]).astype(np.int64)

    @property
    def total_threads(self) -> int:
        return int(self.threads.sum())


def scan(source: Source, rows: int = 1 << 18) -> Layout:
    max_thread: dict[int, int] = {}
    kind_threads: dict[str, set] = {k: set() for k in Kind.ALL}
    names: dict[str, dict[str, None]] = {k: {} for k in Kind.ALL}
    comms, lo, hi, n = [], None, None, 0
    cols = (KIND,) + COMM_COLUMNS
    check = RecordCheck(source.name)
    for batch in source.batches(cols, rows=rows):
        if not batch.num_rows:
            continue
        n += batch.num_rows
        for col in (KIND, RANK, THREAD, START_NS, END_NS):
            if batch.column(col).null_count:
                raise TraceError(f"{source.name}: column {col!r} has null values; every record needs one")
        rank, thread = batch.column(RANK).to_numpy(), batch.column(THREAD).to_numpy()
        if rank.min() < 0 or thread.min() < 0:
            raise TraceError(f"{source.name}: negative rank or thread ids; ids are 0-based")
        check.add(batch)
        s_min, e_max = pc.min(batch.column(START_NS)).as_py(), pc.max(batch.column(END_NS)).as_py()
        lo = s_min if lo is None else min(lo, s_min)
        hi = e_max if hi is None else max(hi, e_max)
        kind = batch.column(KIND).combine_chunks()
        kcodes = kind.indices.to_numpy(zero_copy_only=False)
        name = batch.column(NAME).combine_chunks()
        ncodes = pc.fill_null(name.indices, -1).to_numpy(zero_copy_only=False)
        ndict = name.dictionary.to_pylist()
        for kc, k in enumerate(kind.dictionary.to_pylist()):
            mask = kcodes == kc
            if not mask.any():
                continue
            pairs = list(zip(*(a.tolist() for a in distinct_lanes(rank[mask], thread[mask]))))
            kind_threads[k].update(pairs)
            for r, t in pairs:
                max_thread[r] = max(max_thread.get(r, -1), t)
            if k != Kind.STATE:
                codes = ncodes[mask]
                if codes.min() < 0:
                    raise TraceError(f"{source.name}: {k} records without a name")
                first, where = np.unique(codes, return_index=True)
                for c in first[np.argsort(where)]:
                    names[k].setdefault(ndict[c], None)
            if k == Kind.COMM:
                comms.append(batch.filter(pa.array(mask)).select(list(COMM_COLUMNS)))
    if not n:
        raise TraceError(f"{source.name}: the trace is empty (no records)")
    check.finish(lambda: source.batches(CHECKED, rows=rows))
    ranks = max(max_thread) + 1
    threads = np.ones(ranks, dtype=np.int64)
    for r, t in max_thread.items():
        threads[r] = t + 1
    table = (pa.concat_tables(comms).unify_dictionaries() if comms
             else pa.table({c: pa.array([], type=FIELDS[c]) for c in COMM_COLUMNS}))
    return Layout(threads, int(lo), int(hi), {k: list(v) for k, v in names.items()}, table, n, kind_threads)


def messages(lay: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Point-to-point messages as rows of `lay.comms`: (send rows, receive rows), as `gpt2trace.format.matching`
    pairs them (the analyses use the same matching)."""
    c = lay.comms
    if not c.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    name = c.column(NAME).combine_chunks()
    op_of = np.array([operation(n) for n in name.dictionary.to_pylist()] + [LOCAL], dtype=np.int64)
    op = op_of[pc.fill_null(name.indices, -1).to_numpy(zero_copy_only=False)]
    peer = pc.fill_null(c.column(PEER), -1).to_numpy()
    peer = np.where(peer < lay.ranks, peer, -1)                       # a rank the trace does not have: no message
    return match_messages(c.column(RANK).to_numpy(), peer, op, c.column(START_NS).to_numpy(),
                          c.column(END_NS).to_numpy())
