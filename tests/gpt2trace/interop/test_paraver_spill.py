"""The spill files of the Paraver import's first pass: each rank's rows back in order, whole or a block at a time,
within the memory bound."""
import numpy as np

from gpt2trace.interop.paraver_spill import EVENT_ROWS, PAIR_ROWS, Spill


def test_spill_keeps_each_ranks_rows_in_order_within_its_memory_bound(tmp_path):
    """64 ranks' rows arriving interleaved, with room in memory for a few hundred: each rank reads back its rows in
    arrival order, numbered per rank, and the buffers never hold more than the bound after an add."""
    rng = np.random.default_rng(1)
    spill = Spill(tmp_path, limit=300 * 6 * 8)                    # 300 rows of 6 int64
    sent = {r: [] for r in range(64)}
    for step in range(20):
        rank = rng.integers(0, 64, 500)
        rows = np.column_stack([np.full((500, 5), step), np.arange(500)])
        local = spill.add(rank, EVENT_ROWS, rows)
        for r in range(64):
            mine = rank == r
            assert (local[mine] == len(sent[r]) + np.arange(mine.sum())).all()
            sent[r] += rows[mine].tolist()
        assert spill._total <= spill.limit
    for r in range(64):
        assert spill.rows(r, EVENT_ROWS).tolist() == sent[r]


def test_blocks_read_back_a_ranks_rows_after_flush(tmp_path):
    """After `flush`, the file holds all of a rank's rows: `count` and `block` see them, in order; `drop` forgets
    the rank's rows of the parts named, and only those."""
    spill = Spill(tmp_path, limit=1 << 20)                          # nothing written before flush
    rows = np.arange(40 * 3).reshape(40, 3)
    spill.add(np.repeat([0, 1], 20), PAIR_ROWS, rows)
    spill.add(np.zeros(5, np.int64), EVENT_ROWS, np.ones((5, 6)))
    assert spill.count(0, PAIR_ROWS) == 0
    spill.flush(0)
    assert spill.count(0, PAIR_ROWS) == 20 and spill.count(1, PAIR_ROWS) == 0
    assert spill.block(0, PAIR_ROWS, 3, 11).tolist() == rows[3:11].tolist()
    assert spill.block(0, PAIR_ROWS, 18, 25).tolist() == rows[18:20].tolist()
    assert spill.lines(0) == 5
    spill.drop(0, [PAIR_ROWS])
    assert spill.count(0, PAIR_ROWS) == 0 and spill.count(0, EVENT_ROWS) == 5
    assert spill.rows(1, PAIR_ROWS).tolist() == rows[20:].tolist()
