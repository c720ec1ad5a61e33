"""A hand-checkable trace with resident-memory samples, for the memory analysis, its table and its chart.

2 ranks, 2 steps of four phases each, the `rss_bytes` counter at every phase end (micro-batch 0), and a `loss`
counter per step that is not memory:
  step 0: dataload [0,1], forward [1,3], backward [3,5], optimizer [5,6]   (seconds)
  step 1: dataload [6,7], forward [7,9], backward [9,11], optimizer [11,12]
"""
from __future__ import annotations

from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import MICROSTEP, Counter
from gpt2trace.testing import synthetic as syn

MB = 1_000_000
PHASES = (("dataload", 0, 1), ("forward", 1, 3), ("backward", 3, 5), ("optimizer", 5, 6))
# MB at each phase end, per rank and step
RSS = {0: ((100, 300, 200, 250), (150, 320, 210, 260)),      # rank 0: highest after step 1's forward (320)
       1: ((100, 180, 170, 390), (100, 180, 170, 400))}      # rank 1: highest after step 1's optimizer (400)


def memory_trace(samples: bool = True) -> Trace:
    """The trace above; without its memory samples when `samples` is False."""
    recs = []
    for rank, steps in RSS.items():
        for step, values in enumerate(steps):
            for (name, start, end), mb in zip(PHASES, values):
                t0, t1 = start + 6 * step, end + 6 * step
                recs.append(syn.phase(rank, t0, t1, name, step))
                if samples:
                    recs.append({**syn.counter(rank, t1, Counter.RSS_BYTES, mb * MB, step), MICROSTEP: 0})
            recs.append(syn.counter(rank, 6 + 6 * step, Counter.LOSS, 4.0, step))
    return Trace.from_table(syn.from_records(recs))
