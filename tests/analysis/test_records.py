import numpy as np

from analysis.records import decode, extent, records, threads
from analysis.window import select
from gpt2trace.format.schema import END_NS, START_NS, Kind


def test_records_clip_to_the_window(three_steps):
    w = select(three_steps, "1:2")          # [5, 6]
    rec = records(three_steps, Kind.STATE, (), w)
    assert (rec[START_NS].tolist(), rec[END_NS].tolist()) == ([5e9], [6e9])


def test_extent_and_threads(three_steps):
    assert extent(three_steps) == (0, 7.5e9)
    assert threads(three_steps).values.tolist() == [[0, 0]]      # one rank, one thread


def test_decode():
    assert decode(np.array([1, -1, 0]), ("a", "b")).tolist() == ["b", None, "a"]
