"""Names from a trace (kernels, phases, MPI calls, counters, hosts) written into formats that cannot hold any text.

Paraver's .pcf and .row are line-based, with space-separated fields: a label ends at the end of its line and loses
the spaces at its ends. `escape` writes what they cannot hold as backslash sequences; `unescape` gives the name back
exactly:

    backslash -> \\\\     newline -> \\n     carriage return -> \\r     tab -> \\t
    any other control character (NUL, U+0001..U+001F, U+007F, U+0080..U+009F) -> \\xHH
    white space at either end (which a reader strips) -> \\x20, \\xa0, \\u3000, ...      the empty name -> \\e

A name without any of these is written as it is, so ordinary names read the same in Paraver. The import unescapes
the labels of our own exports only (their NAME.gpt2trace.json says they are escaped): a label another tool wrote
is kept as written.

Chrome's Trace Event JSON holds any text (JSON escapes it), but an event carries its name, so a long name would be
repeated in every event: `shorten` keeps the first SHORT_KEEP characters of a name longer than LONG_NAME and adds
a hash of the whole name, which keeps different names different; the exporter lists each full name once.
"""
from __future__ import annotations

import hashlib
import re

ESCAPED = "backslash"           # the value of NAME.gpt2trace.json's LABELS_KEY for escaped labels
LABELS_KEY = "labels"
LONG_NAME = 256                 # characters
SHORT_KEEP = 200

_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSHORT = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}
_CONTROL = re.compile(r"[\\\x00-\x1f\x7f-\x9f]")
_SEQUENCE = re.compile(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)", re.DOTALL)


def escape(name: str) -> str:
    """`name` as one line that keeps its spaces at the ends: control characters and backslashes escaped."""
    if not name:
        return "\\e"
    out = _CONTROL.sub(lambda m: _SHORT.get(m[0]) or _code(m[0]), name)
    if out[0].isspace():
        out = _code(out[0]) + out[1:]
    if out[-1].isspace():
        out = out[:-1] + _code(out[-1])
    return out


def unescape(label: str) -> str:
    """The name `escape` wrote as `label`; a backslash followed by anything else stands for itself."""
    if label == "\\e":
        return ""
    if "\\" not in label:
        return label

    def one(m: re.Match) -> str:
        seq = m[1]
        if len(seq) > 1:
            return chr(int(seq[1:], 16))
        return _UNSHORT.get(seq, m[0])
    return _SEQUENCE.sub(one, label)


def _code(char: str) -> str:
    return f"\\x{ord(char):02x}" if ord(char) < 256 else f"\\u{ord(char):04x}"


def shorten(name: str) -> str:
    """`name` when it has at most LONG_NAME characters; else its first SHORT_KEEP, '…' and 12 hex digits of its
    SHA-1 (what Chrome events carry; the full name is listed once)."""
    if len(name) <= LONG_NAME:
        return name
    digest = hashlib.sha1(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{name[:SHORT_KEEP]}… #{digest}"
