"""The communicator table of a trace: ids, metadata, union across ranks, names in words; the trainer's names."""
from __future__ import annotations

import numpy as np
import pytest

from gpt2trace.format import communicators as comms
from gpt2trace.format.schema import META_COMMUNICATORS
from trainer.parallel import grid


def test_ids_are_the_same_on_every_member_without_communication():
    # 4 ranks; the 1st Split makes sp groups {0,1} and {2,3}: ids 1*4 + 0 = 4 and 1*4 + 2 = 6;
    # the 2nd makes {1,2,3}: 2*4 + 1 = 9
    assert [comms.new_id(1, 4, (0, 1)), comms.new_id(1, 4, (2, 3)), comms.new_id(2, 4, (1, 2, 3))] == [4, 6, 9]


def test_metadata_round_trip_and_union():
    a = [comms.world(range(4)), comms.Communicator(4, "sp", (0, 1))]      # what rank 0 knows
    b = [comms.world(range(4)), comms.Communicator(6, "sp", (2, 3))]      # what rank 2 knows
    ta, tb = (comms.from_metadata(comms.to_metadata(x)) for x in (a, b))
    assert ta == {0: a[0], 4: a[1]}
    assert sorted(comms.merged([ta, tb])) == [0, 4, 6]
    assert comms.from_metadata({}) is None


def test_one_id_for_two_groups_is_refused():
    with pytest.raises(ValueError, match="communicator id 4 names two groups"):
        comms.merged([{4: comms.Communicator(4, "sp", (0, 1))}, {4: comms.Communicator(4, "sp", (2, 3))}])


def test_metadata_is_json_in_one_key():
    meta = comms.to_metadata([comms.Communicator(9, "sp>=1", (1, 2, 3))])
    assert meta[META_COMMUNICATORS] == b'{"communicators": [{"id": 9, "name": "sp>=1", "ranks": [1, 2, 3]}]}'


def test_null_ids_are_the_world():
    np.testing.assert_array_equal(comms.ids(np.array([-1, 0, 4])), [0, 0, 4])


@pytest.mark.parametrize("name,words", [
    ("world", "the world communicator"), ("sp", "the sequence group"), ("dp", "the data-parallel group"),
    ("sp>=2", "the sequence group's ranks >= 2"), ("tp", "the tensor-parallel group"), ("xy", "communicator xy")])
def test_names_in_words(name, words):
    assert comms.describe(name) == words


def test_the_trainers_communicator_names_are_described():
    # trainer/parallel/grid.py names the communicators; the trace format must know what they mean
    assert {grid.TP, grid.SP, grid.DP} <= set(comms.GROUP_WORDS) and grid.TAIL == comms.TAIL
