"""What one PyTorch profiler (Kineto) event says, read as the profiler writes it: its times, its category, the MPI
twin of a backend's collective, and the bytes of its tensors.

Times. Kineto writes `ts` and `dur` in microseconds, since 2023 with three decimals (nanoseconds) on epoch
timestamps: 1695835535123456.789 is 19 significant digits, more than a float holds (its step there is 256 ns),
so the JSON is parsed with floats kept as their text and each time converted exactly.
"""
from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from gpt2trace.format import mpi_calls

CPU_OP, ANNOTATION = "cpu_op", "user_annotation"
# PyTorch 1.8/1.9 wrote every CPU op and record_function range as "Operator" (no user_annotation yet).
LEGACY_OP = "Operator"
CPU_CATEGORIES = (CPU_OP, ANNOTATION, LEGACY_OP)
BACKENDS = ("gloo:", "nccl:", "mpi:", "ucc:")
# NCCL runs a collective asynchronously on a GPU stream: the CPU range only enqueues it, so it is the posting of a
# nonblocking collective, and its duration says nothing about the transfer.
ENQUEUING = ("nccl:",)
# A time with more digits before the point than this is not one (epoch microseconds have 16).
_MAX_DIGITS = 19

# A backend call's root (its name without underscores and variant suffixes) -> its MPI twin. The suffixes are the
# spellings c10d uses for one operation: _all_gather_base, _allgather_base, all_gather_into_tensor(_coalesced),
# _reduce_scatter_base, reduce_scatter_tensor(_coalesced), alltoall_base, allreduce_coalesced, ...
_ROOTS = {"allreduce": "MPI_Allreduce", "broadcast": "MPI_Bcast", "bcast": "MPI_Bcast",
          "allgather": "MPI_Allgather", "reducescatter": "MPI_Reduce_scatter", "alltoall": "MPI_Alltoall",
          "reduce": "MPI_Reduce", "gather": "MPI_Gather", "scatter": "MPI_Scatter", "barrier": "MPI_Barrier",
          "allreducebarrier": "MPI_Barrier", "send": "MPI_Send", "recv": "MPI_Recv", "recvanysource": "MPI_Recv"}
_SUFFIXES = ("_coalesced", "_sparse", "_base", "_into_tensor", "_tensor")
# The immediate forms of the enqueued point-to-point calls (a collective's is mpi_calls.nonblocking).
_POSTED = {"MPI_Send": "MPI_Isend", "MPI_Recv": "MPI_Irecv"}

# Element sizes of every dtype name the profiler writes in "Input type" (c10's scalar type names as C++ spells
# them, and the short names newer versions write).
DTYPE_BYTES = {
    **dict.fromkeys(("bool", "unsigned char", "signed char", "char", "c10::Float8_e4m3fn", "c10::Float8_e5m2",
                     "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz", "c10::qint8", "c10::quint8",
                     "c10::quint4x2", "c10::quint2x4", "uint8", "int8"), 1),
    **dict.fromkeys(("short", "short int", "unsigned short", "c10::Half", "c10::BFloat16", "half", "bfloat16",
                     "int16", "uint16"), 2),
    **dict.fromkeys(("int", "unsigned int", "float", "c10::qint32", "c10::complex<c10::Half>", "int32",
                     "uint32", "float32"), 4),
    **dict.fromkeys(("long", "long int", "long long", "long long int", "unsigned long", "unsigned long int",
                     "double", "c10::complex<float>", "int64", "uint64", "float64"), 8),
    "c10::complex<double>": 16,
}


def time_ns(value) -> int:
    """Microseconds as the JSON holds them (an integer, or a number's text when floats are kept as text) -> exact
    nanoseconds, rounded half to even below the nanosecond. ValueError for anything else."""
    if isinstance(value, bool) or value is None:
        raise ValueError("not a number")
    if isinstance(value, int):
        return value * 1000
    try:
        us = Decimal(value) if isinstance(value, str) else Decimal(repr(float(value)))
    except (InvalidOperation, TypeError, ValueError):
        raise ValueError("not a number") from None
    if not us.is_finite() or us.adjusted() > _MAX_DIGITS:
        raise ValueError("not a finite time")
    return int(us.scaleb(3).to_integral_value())


def mpi_twin(name: str) -> str | None:
    """The MPI twin of a backend's collective or point-to-point range (`nccl:_all_gather_base` ->
    MPI_Iallgather, `gloo:all_reduce` -> MPI_Allreduce); None for anything else."""
    prefix = next((p for p in BACKENDS if name.startswith(p)), None)
    if prefix is None:
        return None
    call = name[len(prefix):].strip("_")
    for suffix in _SUFFIXES:
        if call.endswith(suffix) and len(call) > len(suffix):
            call = call[: -len(suffix)]
    twin = _ROOTS.get(call.replace("_", ""))
    if twin is None or prefix not in ENQUEUING:
        return twin
    return _POSTED.get(twin) or mpi_calls.nonblocking(twin)


def tensor_bytes(args: dict) -> int | None:
    """Bytes of a call's tensors from its recorded shapes and dtypes; None when unknown (profiled without
    record_shapes, or a dtype or shape we cannot size)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or len(dims) != len(types):
        return None
    total = 0
    for shape, dtype in zip(dims, types):
        size = DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        if (size is None or not isinstance(shape, list)
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            return None
        total += math.prod(shape) * size
    return total
