"""A raw window as the file the tracer writes at a cut: its buffers as they are in memory, behind a JSON header.

The layout (little-endian): MAGIC (8 bytes); the header's length (uint64); the header, JSON padded with spaces to
a multiple of 8 bytes: {"window": the window's numbers and its buffers' lengths (gpt2trace.format.raw_window
`pieces`), "metadata": the trace's metadata, keys and values as Latin-1 text (one character per byte, so any
bytes go through)}; then the buffers, with nothing between them: the kernels' times (int64), the other integer
buffers (int64, raw_window.INT_BUFFERS order), the counters' values (float64), the names (UTF-8, NUL between
names). Its size is exactly what the header says: a file cut short or grown is refused, not misread.

Why no Arrow here: the file is written on the training loop's thread, inside the steps, where an Arrow IPC
encoding of a `small` window (~0.5 MB) took ~5 ms of that thread against ~0.1 ms warm; the buffers handed to one
os.writev as they are (`buffers`) cost it ~3 ms in all there, ~0.6 ms warm (benchmarks/trace_overhead.py,
README). Nothing needs Arrow before the merge, which reads the file back (`read`) into the buffers the decoder
takes (raw_window.RankDecoder.window).
"""
from __future__ import annotations

import json
import os
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from gpt2trace.format.raw_window import RankDecoder, RawWindow, pieces, unpack

MAGIC = b"G2TRAW1\n"
SUFFIX = ".raw"
_ALIGN = 8


class RawPart(NamedTuple):
    """A raw part read back: what RankDecoder.window takes."""
    info: dict
    ints: dict[str, np.ndarray]
    names: dict[str, list[str]]
    metadata: dict[bytes, bytes]


def metadata_json(metadata: dict[bytes, bytes] | None) -> bytes:
    """The trace's metadata as a part's header holds it (the tracer keeps it from cut to cut: it rarely changes)."""
    return json.dumps({k.decode("latin-1"): v.decode("latin-1") for k, v in (metadata or {}).items()}).encode()


def buffers(w: RawWindow, metadata: bytes) -> list:
    """The file of window `w` as the buffers to write one after the other (os.writev): no copy of the window's
    arrays. `metadata`: `metadata_json` of the trace's. ValueError for a name holding NUL."""
    info, flat, text = pieces(w)
    names = text.encode("utf-8", "surrogateescape")
    times = np.ascontiguousarray(w.times, np.int64).reshape(-1)
    values = np.ascontiguousarray(w.counter_values, np.float64).reshape(-1)
    info |= {"times": len(times), "counter_values": len(values), "name_bytes": len(names)}
    header = b'{"window": ' + json.dumps(info).encode() + b', "metadata": ' + metadata + b"}"
    header += b" " * (-len(header) % _ALIGN)
    return [MAGIC + len(header).to_bytes(8, "little") + header, times, *flat, values, names]


def read(data: np.ndarray) -> RawPart:
    """A raw part's bytes (a uint8 array: NumPy's allocation keeps the int64 buffers aligned) read back; ValueError
    naming what does not fit."""
    at, info, metadata = _header(data[:16].tobytes(), lambda size: data[16:16 + size].tobytes(), len(data))
    try:
        counts = [int(info["times"]), sum(int(n) for n in info["ints"]), int(info["counter_values"])]
        name_bytes = int(info["name_bytes"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"its header is damaged ({type(exc).__name__}: {exc})") from None
    if min(counts + [name_bytes]) < 0 or at + 8 * sum(counts) + name_bytes != len(data):
        raise ValueError(f"it holds {len(data)} bytes where its header says "
                         f"{at + 8 * sum(counts) + name_bytes}: cut short, or not one part")
    arrays = []
    for count, dtype in zip(counts, (np.int64, np.int64, np.float64)):
        arrays.append(data[at:at + 8 * count].view(dtype))
        at += 8 * count
    text = data[at:].tobytes().decode("utf-8", "surrogateescape")
    ints, names = unpack(info, *arrays, text)
    return RawPart(info, ints, names, metadata)


def read_metadata(path) -> dict[bytes, bytes]:
    """The trace's metadata in the part at `path`, from its header alone."""
    with open(path, "rb") as f:
        return _header(f.read(16), f.read, os.fstat(f.fileno()).st_size)[2]


def _header(head: bytes, rest, total: int) -> tuple[int, dict, dict[bytes, bytes]]:
    """Where the buffers start, the window's `info` and the trace's metadata, from the first 16 bytes of a part of
    `total` bytes and `rest(size)`, the header's `size` bytes after them."""
    if len(head) < 16 or head[:8] != MAGIC:
        raise ValueError("it does not start as a raw trace part does")
    size = int.from_bytes(head[8:16], "little")
    if size % _ALIGN or 16 + size > total:
        raise ValueError("its header is cut short, or its length damaged")
    text = rest(size)
    try:
        header = json.loads(text)
        info = header["window"]
        metadata = {k.encode("latin-1"): v.encode("latin-1") for k, v in header["metadata"].items()}
    except (KeyError, TypeError, AttributeError, UnicodeEncodeError) as exc:
        raise ValueError(f"its header is damaged ({type(exc).__name__}: {exc})") from None
    return 16 + size, info, metadata


def read_file(path) -> RawPart:
    with open(path, "rb") as f:
        return read(np.fromfile(f, np.uint8))


def decoded(path, decoder: RankDecoder) -> pa.Table:
    """The raw part at `path` in the part layout (gpt2trace.format.parts), `decoder` holding its rank's earlier
    parts' thread numbering."""
    return decoder.window(*read_file(path))
