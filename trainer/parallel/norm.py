"""The whole model's gradient norm when its parameters are spread over model-parallel ranks.

Each rank counts the squared norm of what no other rank of its tensor-parallel group and pipeline counts: its own
shards, the tensors replicated across the tensor-parallel group on that group's rank 0 only, and the tied token
embedding on the first stage only (the last stage holds a copy of it). The sums then go over the tensor-parallel
group and along the pipeline. The data-parallel strategy (trainer.dp) has already summed over its own ranks.
"""
from __future__ import annotations

import numpy as np

from trainer.parallel.tensor import SHARDED
from trainer.params import PARAM_NAMES


def counted_elsewhere(model) -> tuple[tuple[int, int], ...]:
    """The ranges of `model`'s flat buffer that another rank counts."""
    names = []
    if model.tp.shard.index > 0:
        names += [n for n in PARAM_NAMES if n not in SHARDED]
    if model.stage.count > 1 and model.stage.is_last:
        names.append("wte")
    return model.layout.ranges(names)


def grad_norm(dp, model, pipeline_comm=None) -> float | None:
    """sqrt of the squared norms summed over the tensor-parallel group and the pipeline (`pipeline_comm`); None on a
    rank whose strategy does not hold the summed gradients (reduce-bcast's non-roots: their whole group is)."""
    sq = dp.grad_norm_sq(model, counted_elsewhere(model))
    if sq is None:
        return None
    total = np.array([sq], dtype=np.float64)
    for comm in (model.tp.comm, pipeline_comm):
        if comm is not None:
            from mpi4py import MPI
            comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
    return float(np.sqrt(total[0]))
