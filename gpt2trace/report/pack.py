"""Getting data into the page safely and compactly: typed arrays packed, deflated and base64-encoded (the page
inflates them with the browser's DecompressionStream), and JSON that cannot end its <script> element.
"""
from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field

import numpy as np

# Types the page knows how to view (JavaScript typed arrays).
_JS_TYPES = {np.dtype(np.float64): "f8", np.dtype(np.float32): "f4", np.dtype(np.int32): "i4",
             np.dtype(np.uint32): "u4", np.dtype(np.int16): "i2", np.dtype(np.uint16): "u2",
             np.dtype(np.uint8): "u1", np.dtype(np.int8): "i1"}


@dataclass
class Blobs:
    """The binary payloads of one page: each is an id the page's data refers to and its base64 text."""
    items: list[tuple[str, str]] = field(default_factory=list)

    def add(self, arrays: dict[str, np.ndarray]) -> dict:
        """Packs named arrays into one blob; returns {"blob": id, "arrays": {name: [type, offset, length]}}."""
        header, chunks, offset = {}, [], 0
        for name, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            if arr.dtype not in _JS_TYPES:
                raise TypeError(f"array {name!r} has dtype {arr.dtype}, which the page cannot view")
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes()
            header[name] = [_JS_TYPES[arr.dtype], offset, int(arr.size)]
            pad = -len(raw) % 8                              # every array starts 8-byte aligned
            chunks.append(raw + b"\0" * pad)
            offset += len(raw) + pad
        blob_id = f"blob-{len(self.items)}"
        self.items.append((blob_id, base64.b64encode(zlib.compress(b"".join(chunks), 6)).decode("ascii")))
        return {"blob": blob_id, "arrays": header}

    @property
    def nbytes(self) -> int:
        return sum(len(text) for _, text in self.items)


def unpack(text: str, header: dict) -> dict[str, np.ndarray]:
    """The inverse of `Blobs.add` (tests read pages back with it)."""
    raw = zlib.decompress(base64.b64decode(text))
    types = {v: k for k, v in _JS_TYPES.items()}
    return {name: np.frombuffer(raw, dtype=types[t].newbyteorder("<"), count=n, offset=off)
            for name, (t, off, n) in header["arrays"].items()}


def script_json(obj) -> str:
    """JSON for a <script type="application/json"> element: '<', '>' and '&' as \\u escapes, so no string from
    a trace can close the element or open a comment, and U+2028/2029 escaped for old parsers."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                         ("\u2029", "\\u2029")):
        text = text.replace(raw, escaped)
    return text
