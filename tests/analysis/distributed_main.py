"""Run under mpiexec by test_distributed.py: analyze TRACE in GROUPS rank groups over the processes of COMM_WORLD;
process 0 writes the JSON result to OUT. Each group loads the trace and keeps its ranks (as a reader of one rank
group would). FAIL_GROUP: that group's pass-2 read raises a TraceError (a file that breaks half-way); with
WARM_FAILS=1 in the environment, loading the replay's code ahead (`replay.warm`) raises; with COMBINE_FAILS=1,
process 0's combination raises; with PREFETCH=1, each process loads its next group in a thread."""
import json
import os
import sys

import numpy as np
from mpi4py import MPI

from analysis import distributed, replay
from analysis.distributed import analyze_comm
from analysis.rank_groups import PART_READS, subset
from analysis.records import threads
from gpt2trace.format.errors import TraceError
from gpt2trace.format.reader import load


def main(path: str, groups: int, out: str, steps: str | None = None, fail_group: int | None = None) -> None:
    ranks = np.unique(threads(load(path))["rank"].to_numpy())
    if os.environ.get("WARM_FAILS"):
        def fails():
            raise OSError("no room for Numba's cache")
        replay.warm = fails
    if os.environ.get("COMBINE_FAILS"):
        def fails(*args, **kwargs):
            raise TraceError("the combination failed")
        distributed.combine = fails

    def loader(reads, i, r):
        if i == fail_group and reads == PART_READS:
            raise TraceError(f"group {i} is unreadable in pass 2")
        return subset(load(path, reads=reads), r)

    loaders = [lambda reads, i=i, r=r: loader(reads, i, r) for i, r in enumerate(np.array_split(ranks, groups))]
    result = analyze_comm(loaders, MPI.COMM_WORLD, steps, prefetch=bool(os.environ.get("PREFETCH")))
    if MPI.COMM_WORLD.Get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] or None if len(sys.argv) > 4 else None,
         int(sys.argv[5]) if len(sys.argv) > 5 else None)
