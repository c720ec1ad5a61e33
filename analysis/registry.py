"""The declared sections of `analyze`'s result (analysis.sections.Section), in the order they are computed and,
for those the terminal and the report do not place themselves, drawn. A new section is its module and a line
here."""
from __future__ import annotations

from collections.abc import Iterable

from analysis import bursts, comm_groups, counters, kernel_threads, memory, network_load, step_phases
from analysis.sections import Section
from gpt2trace.format.reader import Reads

SECTIONS: tuple[Section, ...] = (
    counters.SECTION,
    comm_groups.SECTION,
    memory.SECTION,
    network_load.SECTION,
    step_phases.SECTION,
    kernel_threads.SECTION,
    bursts.SECTION,
)
KEYS = tuple(s.key for s in SECTIONS)


def chosen(keys: Iterable[str] | None = None) -> tuple[Section, ...]:
    """The sections of `keys` (None: all), in SECTIONS' order. Raises ValueError for a key no section has."""
    if keys is None:
        return SECTIONS
    wanted = set(keys)
    unknown = sorted(wanted - set(KEYS))
    if unknown:
        raise ValueError(f"no analysis section {', '.join(map(repr, unknown))}; the sections are {', '.join(KEYS)}")
    return tuple(s for s in SECTIONS if s.key in wanted)


def reads(sections: Iterable[Section]) -> Reads:
    """What the `part`s of `sections` read of a group, together."""
    out = Reads(columns=(), kinds=())
    for s in sections:
        if s.part is not None:
            out = out | s.reads
    return out
