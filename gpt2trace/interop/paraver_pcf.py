"""A Paraver trace's two companion files: the .pcf (names and colors of states, event types and values) and the
.row (names of the CPUs, nodes and threads). Writers for our exports, readers for imports.

.pcf: sections, each a keyword line (DEFAULT_OPTIONS, STATES, STATES_COLOR, EVENT_TYPE, VALUES, ...) and lines of
space-separated fields. An EVENT_TYPE block lists `color type label` lines; the VALUES block after it names the
values of every type in that block. .row: `LEVEL <level> SIZE <n>` and n names. Labels and names are written
through `labels.escape` (one line each, whatever the name holds) and read back through `labels.unescape` when the
files are our own export's. Values are unsigned 64-bit in Extrae's files: they are kept as the int64 of the same
bits, as the .prv parser keeps event values, so that the two meet.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpt2trace.format.errors import TraceError
from gpt2trace.interop.labels import escape, unescape
from gpt2trace.interop.paraver_format import STATE_COLORS, STATE_NAMES

DEFAULT_OPTIONS = """DEFAULT_OPTIONS

LEVEL               THREAD
UNITS               NANOSEC
LOOK_BACK           100
SPEED               1
FLAG_ICONS          ENABLED
NUM_OF_STATE_COLORS 1000
YMAX_SCALE          37


DEFAULT_SEMANTIC

THREAD_FUNC          State As Is
"""
_SECTION = re.compile(r"^[A-Z][A-Z_]*$")


@dataclass(frozen=True)
class EventType:
    type: int
    label: str
    values: Mapping[int, str] = field(default_factory=dict)
    color: int = 0                 # Paraver's gradient/flag column: 0 = plain


@dataclass(frozen=True)
class Pcf:
    """What a .pcf names: states, event types and their values (empty when a trace comes without one)."""
    states: Mapping[int, str] = field(default_factory=dict)
    types: Mapping[int, str] = field(default_factory=dict)
    values: Mapping[int, Mapping[int, str]] = field(default_factory=dict)

    def value_label(self, typ: int, value: int) -> str | None:
        return self.values.get(typ, {}).get(value)


def pcf_text(event_types: Iterable[EventType]) -> str:
    parts = [DEFAULT_OPTIONS, "\nSTATES"]
    parts += [f"{s:<4} {escape(name)}" for s, name in sorted(STATE_NAMES.items())]
    parts += ["", "STATES_COLOR"]
    parts += [f"{int(s):<4} {{{r},{g},{b}}}" for s, (r, g, b) in sorted(STATE_COLORS.items())]
    for et in event_types:
        parts += ["", "", "EVENT_TYPE", f"{et.color:<4} {et.type:<12} {escape(et.label)}"]
        if et.values:
            parts.append("VALUES")
            parts += [f"{v:<8} {escape(label)}" for v, label in sorted(et.values.items())]
    return "\n".join(parts) + "\n"


def write_pcf(path: Path, event_types: Iterable[EventType]) -> None:
    path.write_text(pcf_text(event_types), encoding="utf-8")


def read_pcf(path: Path, escaped: bool = False) -> Pcf:
    """Parses a .pcf (labels unescaped when `escaped`: our own export's); a malformed line in STATES, EVENT_TYPE or
    VALUES is a TraceError naming its line."""
    states: dict[int, str] = {}
    types: dict[int, str] = {}
    values: dict[int, dict[int, str]] = {}
    section, block = None, []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    label_of = unescape if escaped else str
    for lineno, raw in enumerate(_lines(text), 1):
        line = raw.strip()
        if not line:
            if section == "VALUES":
                section = None
            continue
        if _SECTION.match(line):
            if line == "EVENT_TYPE":
                block = []
            elif line == "VALUES" and section != "EVENT_TYPE":
                raise TraceError(f"{path}:{lineno}: VALUES outside an EVENT_TYPE block")
            section = line
            continue
        if section == "STATES":
            num, label = _numbered(path, lineno, line, 1)
            states[num[0]] = label_of(label)
        elif section == "EVENT_TYPE":
            num, label = _numbered(path, lineno, line, 2)
            types[num[1]] = label_of(label)
            values.setdefault(num[1], {})
            block.append(num[1])
        elif section == "VALUES":
            num, label = _numbered(path, lineno, line, 1)
            value = _as_int64(path, lineno, num[0])
            if label:                                   # a value without a label is not named
                for typ in block:
                    values[typ][value] = label_of(label)
    return Pcf(states, types, {t: v for t, v in values.items() if v})


def _numbered(path: Path, lineno: int, line: str, count: int) -> tuple[list[int], str]:
    fields = line.split(None, count)
    try:
        nums = [int(f) for f in fields[:count]]
    except ValueError:
        nums = []
    if len(nums) != count:
        raise TraceError(f"{path}:{lineno}: expected {count} number(s) then a label, got {line[:80]!r}")
    return nums, (fields[count].strip() if len(fields) > count else "")


def _as_int64(path: Path, lineno: int, value: int) -> int:
    """An event value as the .prv parser stores it: unsigned 64-bit values of 2**63 and more as the int64 of the
    same bits (negative), so a value and its label meet."""
    if not -2**63 <= value < 2**64:
        raise TraceError(f"{path}:{lineno}: value {value} does not fit in 64 bits")
    return value - 2**64 if value >= 2**63 else value


def _lines(text: str) -> list[str]:
    """Lines split at newlines only, as Paraver reads them (str.splitlines would also split at U+2028, form feeds
    and other characters a label may hold)."""
    return [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]


def row_text(levels: Mapping[str, list[str]]) -> str:
    parts = []
    for level, names in levels.items():
        parts += [f"LEVEL {level} SIZE {len(names)}", *(escape(n) for n in names), ""]
    return "\n".join(parts)


def write_row(path: Path, levels: Mapping[str, list[str]]) -> None:
    path.write_text(row_text(levels), encoding="utf-8")


def read_row(path: Path, escaped: bool = False) -> dict[str, list[str]]:
    """Level -> names (unescaped when `escaped`); a size that does not match the names that follow is a TraceError
    naming the line."""
    levels: dict[str, list[str]] = {}
    label_of = unescape if escaped else str
    try:
        lines = _lines(path.read_text(encoding="utf-8", errors="replace"))
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({exc.strerror})") from None
    i = 0
    while i < len(lines):
        fields = lines[i].split()
        if not fields:
            i += 1
            continue
        if len(fields) != 4 or fields[0] != "LEVEL" or fields[2] != "SIZE" or not fields[3].isdigit():
            raise TraceError(f"{path}:{i + 1}: expected 'LEVEL <name> SIZE <n>', got {lines[i][:80]!r}")
        size = int(fields[3])
        names = lines[i + 1:i + 1 + size]
        if len(names) < size or any(not n.strip() for n in names):
            raise TraceError(f"{path}:{i + 1}: LEVEL {fields[1]} announces {size} names; fewer follow")
        levels[fields[1]] = [label_of(n.strip()) for n in names]
        i += 1 + size
    return levels
