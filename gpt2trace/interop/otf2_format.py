"""Our vocabulary in OTF2, shared by the export and the import: archive and property names, the attributes that
carry our columns, the metric that carries Paraver states, and what each MPI call is in OTF2's records.

The OTF2 library is the `otf2` package on PyPI (the official Score-P bindings, with the C library inside the
wheel); it is imported inside the functions that need it, so `import gpt2trace` stays light.
"""
from __future__ import annotations

import ctypes
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from gpt2trace.format import mpi_calls, schema
from gpt2trace.format.errors import TraceError
from gpt2trace.format.schema import BYTES, COMMUNICATOR, LAYER, MICROSTEP, PEER, SEQ, STEP, TAG

ARCHIVE_NAME = "traces"                  # Score-P's: DIR/traces.otf2 (anchor), DIR/traces.def, DIR/traces/
ANCHOR_SUFFIX = ".otf2"
TICKS_PER_SECOND = 1_000_000_000          # timestamps are our nanoseconds since the trace's start

# Archive properties (the anchor file's NAMESPACE::NAME = value pairs): our metadata, JSON text.
PROPERTY_VERSION = "GPT2TRACE::SCHEMA_VERSION"
PROPERTIES = {key: "GPT2TRACE::" + key.decode().split(".", 1)[1].upper()
              for key in (schema.META_RUN, schema.META_MACHINE, schema.META_PEAK, schema.META_CLOCK,
                          schema.META_COMMUNICATORS)}

# Our optional columns as event attributes: on Enter of kernels, phases and MPI calls, and on counter metrics.
ATTRIBUTES = {STEP: "the training step", LAYER: "the transformer block (0-based)",
              MICROSTEP: "the gradient-accumulation micro-step", SEQ: "the call's sequence number on its communicator",
              PEER: "the partner rank, or the root of a collective (a world rank)", BYTES: "bytes sent by the MPI call",
              COMMUNICATOR: "the communicator's id (the GPT2TRACE::COMMUNICATORS table)",
              TAG: "the point-to-point message's tag"}

# A thread's Paraver state, as a metric that holds from one sample to the next (OTF2's ABSOLUTE_NEXT mode):
# sampled where each state starts, and NO_STATE where the thread's states stop (its end, or a gap).
STATE_METRIC = "Paraver state"
NO_STATE = -1
STATE_DESCRIPTION = "the thread's Paraver state id, until the next sample (-1: no state); " + ", ".join(
    f"{int(s)} {n}" for s, n in schema.STATE_NAMES.items())

# Regions are grouped by what they are in our trace (OTF2 region groups, which tools may show as such).
PHASE_GROUP, KERNEL_GROUP = "gpt2trace phases", "gpt2trace kernels"
PAPI_COUNTERS = (schema.INSTRUCTIONS, schema.CYCLES)          # counts since the thread's previous read

LOCATION_NAME = "rank {rank} thread {thread}"
_LOCATION = re.compile(r"rank (\d+) thread (\d+)")
RANK_GROUP_NAME = "MPI Rank {rank}"                             # Score-P's name for an MPI process
WORLD = "MPI_COMM_WORLD"
SELF = "MPI_COMM_SELF"
COMM_NAME_TEMPLATE = "Comm ${id}"                               # Score-P's, when an archive defines none
# Calls that synchronize every process yet carry no MPI record (Score-P writes none for them): Scalasca analyses
# them as collectives over the world (its MPI init/finalize wait states), so they run on the world here too.
WORLD_CALLS = ("MPI_Init", "MPI_Init_thread", "MPI_Finalize")
UNDEFINED_RANK = 2**32 - 1                                      # OTF2's undefined uint32: no root, no peer


def location_ids(name: str) -> tuple[int, int] | None:
    """(rank, thread) of a location our export named, else None."""
    m = _LOCATION.fullmatch(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


# --- MPI calls --------------------------------------------------------------------------------------------------

def collective_op(name: str):
    """OTF2's CollectiveOp of a blocking collective's name (MPI_Iallreduce: its blocking name), else None."""
    import otf2
    base = mpi_calls.classify(name)[2]
    if base not in mpi_calls.COLLECTIVES:
        return None
    return getattr(otf2.CollectiveOp, base[len(mpi_calls.PREFIX):].upper(), None)


def collective_name(op) -> str:
    """MPI_Allreduce from OTF2's CollectiveOp.ALLREDUCE (for archives whose regions are not named after MPI)."""
    return mpi_calls.PREFIX + str(op).rsplit(".", 1)[-1].capitalize()      # "CollectiveOp.ALLREDUCE"


# --- metrics ----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MetricReading:
    """How one OTF2 metric member's samples become counter records, which hold what the interval (previous
    sample, t] gave (the schema's convention, Extrae's and Paraver's: a count since the thread's previous read)."""
    difference: bool        # a sample is a running total: its record is the increase since the previous sample
    from_zero: bool         # the total counts from the measurement's start, so the first sample is an increase too
    shifted: bool           # a sample describes the time up to the next sample: its record is at that one's time


def metric_reading(mode) -> MetricReading:
    """The reading of an OTF2 metric mode (a value kind ORed with a timing, as the C library defines them):
    accumulated values are running totals (ACCUMULATED_START: counted from the measurement's start, the others
    from an unknown origin); absolute values are levels and relative values increases, over the time to the
    sample (POINT, LAST) or from it to the next sample (NEXT)."""
    import _otf2
    value = mode.value & _otf2.METRIC_VALUE_MASK.value
    timing = mode.value & _otf2.METRIC_TIMING_MASK.value
    if value == _otf2.METRIC_VALUE_ACCUMULATED.value or timing == _otf2.METRIC_TIMING_START.value:
        return MetricReading(True, timing == _otf2.METRIC_TIMING_START.value, False)
    return MetricReading(False, False, timing == _otf2.METRIC_TIMING_NEXT.value)


# --- the library ------------------------------------------------------------------------------------------------

def library():
    """The `otf2` bindings, ready to use (their C library quiet); a TraceError saying how to install them when
    they are missing (PyPI has wheels for CPython 3.10 and 3.11 on Linux x86_64 only)."""
    try:
        import otf2
    except ImportError:
        raise TraceError("OTF2 export and import need the otf2 package (the OTF2 library's Python bindings): "
                         "pip install otf2, on CPython 3.10 or 3.11 on Linux x86_64; elsewhere build OTF2 3.x "
                         "with its Python bindings") from None
    _quiet()
    return otf2


@functools.cache
def _quiet():
    """Keeps the OTF2 C library from printing its own error lines on stderr (a truncated archive prints a dozen):
    the error still reaches Python as an exception, which we turn into one line. The bindings do not wrap
    OTF2_Error_RegisterCallback, so it is called through ctypes; the cache keeps the callback alive."""
    import _otf2.Config
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64,
                                     ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    callback = callback_type(lambda data, file, line, function, code, fmt, args: code)
    register = _otf2.Config.conf.lib.OTF2_Error_RegisterCallback
    register.argtypes = (callback_type, ctypes.c_void_p)
    register.restype = ctypes.c_void_p
    register(callback, None)
    return callback


# --- the archive on disk ----------------------------------------------------------------------------------------

def anchor_of(path: str | Path) -> Path:
    """The anchor file of an archive given as its anchor file or as its folder (one .otf2 inside), else a
    TraceError naming the path."""
    path = Path(path)
    if path.is_dir():
        anchors = sorted(path.glob("*" + ANCHOR_SUFFIX))
        if len(anchors) != 1:
            found = "no" if not anchors else f"{len(anchors)}"
            raise TraceError(f"{path}: {found} OTF2 anchor files (*.otf2) in the folder; give the anchor file")
        return anchors[0]
    if not path.exists():
        raise TraceError(f"{path}: no such trace file")
    if not path.name.endswith(ANCHOR_SUFFIX):
        raise TraceError(f"{path}: not an OTF2 archive (expected its anchor file, NAME.otf2, or its folder)")
    return path


def is_archive_dir(path: Path) -> bool:
    """A folder holding one OTF2 anchor file: an archive our export may replace."""
    return path.is_dir() and len(list(path.glob("*" + ANCHOR_SUFFIX))) == 1


def archive_bytes(path: str | Path) -> int:
    """The size of the archive at `path` (anchor or folder): its anchor, its .def and every file of its folder of
    event and local definition files, which `info` should show rather than the anchor's few hundred bytes."""
    anchor, definitions, events, _ = archive_files(path)
    files = [anchor, definitions, *(p for p in events.rglob("*") if p.is_file())]
    return sum(p.stat().st_size for p in files if p.is_file())


def archive_files(path: str | Path) -> tuple[Path, ...]:
    """What reading the archive at `path` (anchor or folder) opens, which no output may be: the anchor, its .def,
    its folder of event files and the archive's folder."""
    anchor = anchor_of(path)
    base = anchor.with_suffix("")
    return anchor, base.with_suffix(".def"), base, anchor.parent
