"""The Paraver export's nodes: one per emulated node of a --emulate-network run (gpt2trace.record.network), its
ranks' threads as that node's CPUs; else the machine as one node."""
from __future__ import annotations

import json
from datetime import datetime

import numpy as np

from gpt2trace.format import schema as S
from gpt2trace.interop.layout import Layout
from gpt2trace.interop.paraver_export import _nodes, _row_levels, header


def test_paraver_export_has_one_node_per_emulated_node():
    lay = Layout(threads=np.array([2, 2, 1]), t0_ns=0, end_ns=10, names={}, comms=None, records=0, kind_threads={})
    run = {"network": {"node_of_rank": [0, 0, 1]}}
    meta = {S.META_RUN: json.dumps(run).encode()}
    assert _nodes(lay, meta) == [("node1", 4), ("node2", 1)]
    first = header(lay, datetime(2026, 1, 1), [], _nodes(lay, meta)).splitlines()[0]
    assert first.endswith(":2(4,1):1:3(2:1,2:1,1:2),0")
    assert _row_levels(lay, meta)["NODE"] == ["node1", "node2"]
    assert _nodes(lay, {}) == [("node1", 5)]
