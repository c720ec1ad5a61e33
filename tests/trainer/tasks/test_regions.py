"""OmpSs-2 dependency rules on hand-made regions (byte ranges), and the segment map against a per-byte oracle."""
from __future__ import annotations

import numpy as np
import pytest

from trainer.tasks.regions import IN, INOUT, OUT, DependencyMap, Region, byte_range


def _graph(accesses_per_task):
    """Submit tasks 0, 1, ... with their [(lo, hi, mode)] accesses; their predecessor sets, in order."""
    deps, out = DependencyMap(), []
    for t, accesses in enumerate(accesses_per_task):
        preds = set()
        deps.add(t, accesses, preds)
        out.append(preds)
    return out


@pytest.mark.parametrize("name,tasks,want", [
    # RAW: a reader follows the writer of the bytes it reads
    ("raw", [[(0, 8, OUT)], [(0, 8, IN)]], [set(), {0}]),
    # readers of the same bytes are not ordered among themselves
    ("readers", [[(0, 8, OUT)], [(0, 8, IN)], [(0, 8, IN)]], [set(), {0}, {0}]),
    # WAR: a writer follows every reader since the last write (not the writer: the readers already follow it)
    ("war", [[(0, 8, OUT)], [(0, 8, IN)], [(0, 8, IN)], [(0, 8, OUT)]], [set(), {0}, {0}, {1, 2}]),
    # WAW: a writer follows the last writer when nobody read in between
    ("waw", [[(0, 8, OUT)], [(0, 8, OUT)]], [set(), {0}]),
    # INOUT is both: it follows the writer (RAW) and is the next reader's writer
    ("inout chain", [[(0, 8, OUT)], [(0, 8, INOUT)], [(0, 8, INOUT)], [(0, 8, IN)]], [set(), {0}, {1}, {2}]),
    # partial overlap: bytes 4..8 of task 0's write are read by task 1
    ("overlap", [[(0, 8, OUT)], [(4, 12, IN)]], [set(), {0}]),
    # a whole read after block writes follows every block; a block write after it follows the whole read
    ("blocks then whole", [[(0, 4, OUT)], [(4, 8, OUT)], [(0, 8, IN)], [(4, 8, OUT)]], [set(), set(), {0, 1}, {2}]),
    # disjoint neighbours never depend on each other, whatever the modes
    ("disjoint", [[(0, 4, OUT)], [(4, 8, OUT)], [(8, 12, INOUT)], [(0, 4, IN)], [(4, 8, INOUT)]],
     [set(), set(), set(), {0}, {1}]),
    # a write inside a segment splits it: the untouched parts keep their writer
    ("split", [[(0, 12, OUT)], [(4, 8, OUT)], [(0, 4, IN)], [(4, 8, IN)], [(8, 12, IN)]],
     [set(), {0}, {0}, {1}, {0}]),
    # a read across never-touched bytes (a gap) creates no edge there
    ("gap", [[(0, 4, OUT)], [(8, 12, OUT)], [(0, 12, IN)], [(4, 8, OUT)]], [set(), set(), {0, 1}, {2}]),
    # a task does not depend on itself, even through two of its own accesses
    ("self", [[(0, 8, OUT), (4, 12, IN)], [(0, 12, IN)]], [set(), {0}]),
])
def test_dependency_rules(name, tasks, want):
    assert _graph(tasks) == want


def _oracle(accesses_per_task, nbytes):
    """The same rules byte by byte: last writer and readers since of every byte."""
    writer, readers, out = [None] * nbytes, [[] for _ in range(nbytes)], []
    for t, accesses in enumerate(accesses_per_task):
        preds = set()
        for lo, hi, mode in accesses:
            for b in range(lo, hi):
                if mode & OUT:
                    if readers[b]:
                        preds.update(readers[b])
                    elif writer[b] is not None:
                        preds.add(writer[b])
                elif writer[b] is not None:
                    preds.add(writer[b])
        for lo, hi, mode in accesses:
            for b in range(lo, hi):
                if mode & OUT:
                    writer[b], readers[b] = t, []
        for lo, hi, mode in accesses:
            for b in range(lo, hi):
                if not mode & OUT and t not in readers[b]:
                    readers[b].append(t)
        preds.discard(t)
        out.append(preds)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_segment_map_equals_the_per_byte_rules(seed):
    rng = np.random.default_rng(seed)
    tasks = []
    for _ in range(60):
        # one access per task, so the order of a task's own accesses (which the oracle fixes) does not matter
        lo = int(rng.integers(0, 60))
        hi = lo + int(rng.integers(1, 12))
        tasks.append([(lo, hi, int(rng.choice([IN, OUT, INOUT])))])
    assert _graph(tasks) == _oracle(tasks, 80)


def test_row_blocks_of_an_array_are_disjoint_regions():
    a = np.zeros((8, 5), dtype=np.float32)
    r = Region(a)
    assert r.whole(IN) == (*byte_range(a), IN)
    lo = byte_range(a)[0]
    # rows 2..4 of 5 float32: bytes 40..80 from the start
    assert r.rows(2, 4, OUT) == (lo + 40, lo + 80, OUT)
    assert r.rows(2, 4, OUT)[:2] == byte_range(a[2:4])
    # a strided view (a column) spans its bounding range: from its first to its last element
    col = a[:, 1]
    assert byte_range(col) == (lo + 4, lo + 4 + 7 * 20 + 4)
    assert Region(col).rows(0, 1, IN) == (lo + 4, lo + 148, IN)     # not contiguous: blocks are the whole


def test_taskwait_clears_the_map():
    deps = DependencyMap()
    deps.add("a", [(0, 8, OUT)], set())
    assert len(deps) == 1
    deps.clear()
    preds = set()
    deps.add("b", [(0, 8, IN)], preds)
    assert preds == set()
