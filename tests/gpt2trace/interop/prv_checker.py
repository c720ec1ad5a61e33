"""A strict checker of Paraver traces (.prv/.pcf/.row), written from the format description, independent of our
exporter and importer (plain Python, line by line: for the small traces of the tests).

check(prv) returns the list of problems (empty: the trace passes):
  header   '#Paraver (dd/mm/yyyy at hh:mm):<end>_ns:<nodes>(<cpus>,...):<nappl>:<ntasks>(<threads>:<node>,...)'
           with ',<ncomms>' and that many 'c:appl:id:ntasks:task...' lines; ids 1-based
  body     '1:cpu:appl:task:thread:begin:end:state', '2:cpu:appl:task:thread:time:type:value[:type:value]',
           '3:' with 14 fields; every id within the header's counts; times within [0, end]; begin <= end;
           records sorted by time; event types within int32; the states of a thread do not overlap
  counts   the header's end time is the latest time of the records; every declared task and thread has records
  pcf      DEFAULT_OPTIONS, STATES, STATES_COLOR; every state used is named and colored; every event type used is
           named in an EVENT_TYPE block; every value of a type with VALUES is named; fields separated by spaces;
           no control character (NUL, CR, ...) in any line
  row      LEVEL CPU / NODE / THREAD with as many names as the header declares; no control character
  events   per thread and type, opening events (value != 0) and closing ones (value 0) of MPI calls, functions
           and phases nest and all close; collectives name a declared communicator
"""
from __future__ import annotations

import gzip
import re
from pathlib import Path

HEADER = re.compile(r"^#Paraver \((\d\d)/(\d\d)/(\d{4}) at (\d\d):(\d\d)\):(\d+)_ns:(\d+)\(([\d,]+)\):(\d+):(.*)$")
RANGED = set(range(50000001, 50000006)) | {60000018, 60000019, 60000020, 60000023, 71000010, 36}   # 36: task type
INT32 = 2**31 - 1
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")      # tabs are reported apart, in the .pcf


def check(prv: Path) -> list[str]:
    problems: list[str] = []
    opener = gzip.open if prv.name.endswith(".gz") else open
    with opener(prv, "rt") as fh:
        lines = fh.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        return [f"{prv}: empty"]
    m = HEADER.match(lines[0])
    if not m:
        return [f"{prv}:1: malformed header {lines[0][:80]!r}"]
    end, nodes = int(m[6]), int(m[7])
    cpus_per_node = [int(c) for c in m[8].split(",")]
    if len(cpus_per_node) != nodes:
        problems.append(f"{prv}:1: {nodes} nodes but {len(cpus_per_node)} CPU counts")
    ncpus, nappl = sum(cpus_per_node), int(m[9])
    if nappl != 1:
        problems.append(f"{prv}:1: this checker expects one application, got {nappl}")
    am = re.match(r"^(\d+)\(([\d:,]+)\),(\d+)$", m[10])
    if not am:
        return problems + [f"{prv}:1: malformed application list {m[10]!r}"]
    ntasks, ncomms = int(am[1]), int(am[3])
    specs = [s.split(":") for s in am[2].split(",")]
    if len(specs) != ntasks:
        problems.append(f"{prv}:1: {ntasks} tasks declared, {len(specs)} listed")
    threads = [int(s[0]) for s in specs]
    for s in specs:
        if not 1 <= int(s[1]) <= nodes:
            problems.append(f"{prv}:1: task on node {s[1]}, outside 1..{nodes}")
    comms = set()
    for k in range(1, 1 + ncomms):
        f = lines[k].split(":") if k < len(lines) else []
        if len(f) < 4 or f[0] != "c" or len(f) != 4 + int(f[3]) or int(f[1]) != 1:
            problems.append(f"{prv}:{k + 1}: malformed communicator line")
            continue
        comms.add(int(f[2]))
        if any(not 1 <= int(t) <= ntasks for t in f[4:]):
            problems.append(f"{prv}:{k + 1}: communicator names a task outside 1..{ntasks}")
    used_states, used_types, used_values = set(), set(), {}
    seen_threads, last_time, max_time = set(), -1, 0
    stacks: dict[tuple, list[int]] = {}
    state_end: dict[tuple, int] = {}
    for i, line in enumerate(lines[1 + ncomms:], start=2 + ncomms):
        where = f"{prv}:{i}"
        f = line.split(":")
        try:
            v = [int(x) for x in f]
        except ValueError:
            problems.append(f"{where}: non-integer field in {line[:60]!r}")
            continue
        kind = v[0]
        want = {1: 8, 3: 15}.get(kind)
        if kind not in (1, 2, 3) or (want and len(v) != want) or (kind == 2 and (len(v) < 8 or len(v) % 2)):
            problems.append(f"{where}: bad record {line[:60]!r}")
            continue
        ends = [v[1:6]] if kind != 3 else [v[1:6], v[7:12]]
        for cpu, appl, task, thread, _ in ends:
            if not (1 <= cpu <= ncpus and appl == 1 and 1 <= task <= ntasks and 1 <= thread <= threads[task - 1]):
                problems.append(f"{where}: ids cpu {cpu} appl {appl} task {task} thread {thread} out of range")
        key_time = v[5]
        times = [v[5], v[6]] if kind == 1 else [v[5]] if kind == 2 else [v[5], v[6], v[11], v[12]]
        if any(not 0 <= t <= end for t in times):
            problems.append(f"{where}: time outside [0, {end}]")
        max_time = max(max_time, *times)
        if key_time < last_time:
            problems.append(f"{where}: not sorted by time ({key_time} after {last_time})")
        last_time = key_time
        seen_threads.add((v[3], v[4]))
        if kind == 1:
            if v[6] < v[5]:
                problems.append(f"{where}: state ends before it begins")
            if v[5] < state_end.get((v[3], v[4]), 0):
                problems.append(f"{where}: state begins before the thread's previous state ends")
            state_end[(v[3], v[4])] = max(state_end.get((v[3], v[4]), 0), v[6])
            used_states.add(v[7])
        elif kind == 2:
            pairs = list(zip(v[6::2], v[7::2]))
            for typ, value in pairs:
                if not 0 < typ <= INT32:
                    problems.append(f"{where}: event type {typ} outside int32")
                used_types.add(typ)
                used_values.setdefault(typ, set()).add(value)
                if typ in RANGED:
                    stack = stacks.setdefault((v[3], v[4], typ), [])
                    if value:
                        stack.append(value)
                    elif not stack:
                        problems.append(f"{where}: type {typ} closes with nothing open")
                    else:
                        stack.pop()
                if typ == 50100004 and value not in comms:
                    problems.append(f"{where}: communicator {value} is not declared in the header")
        if len(problems) > 20:
            break
    problems += [f"{prv}: type {k[2]} on task {k[0]} thread {k[1]} never closes" for k, s in stacks.items() if s]
    if max_time != end:
        problems.append(f"{prv}:1: header end time {end} but the latest record time is {max_time}")
    declared = {(t + 1, h + 1) for t in range(ntasks) for h in range(threads[t])}
    if seen_threads != declared:
        problems.append(f"{prv}:1: declared threads without records: {sorted(declared - seen_threads)[:5]}; "
                        f"records of undeclared threads: {sorted(seen_threads - declared)[:5]}")
    base = str(prv)[:-7] if str(prv).endswith(".prv.gz") else str(prv)[:-4]
    problems += _check_pcf(Path(base + ".pcf"), used_states, used_types, used_values)
    problems += _check_row(Path(base + ".row"), ncpus, nodes, sum(threads))
    return problems


def _check_pcf(pcf: Path, states: set, types: set, values: dict) -> list[str]:
    if not pcf.is_file():
        return [f"{pcf}: missing"]
    problems, section, block = [], None, []
    named_states, colored, named_types, named_values = set(), set(), set(), {}
    sections = set()
    for i, raw in enumerate(pcf.read_text().split("\n"), 1):
        if CONTROL.search(raw):
            problems.append(f"{pcf}:{i}: control character in {raw[:60]!r}")
        line = raw.strip()
        if not line:
            continue
        if re.fullmatch(r"[A-Z_]+", line):
            section = line
            sections.add(line)
            if line == "EVENT_TYPE":
                block = []
            continue
        f = line.split()
        if "\t" in raw:
            problems.append(f"{pcf}:{i}: tab instead of spaces")
        if section == "STATES":
            named_states.add(int(f[0]))
            if len(f) < 2:
                problems.append(f"{pcf}:{i}: state without a name")
        elif section == "STATES_COLOR":
            if not re.fullmatch(r"\{\d+,\d+,\d+\}", f[1] if len(f) > 1 else ""):
                problems.append(f"{pcf}:{i}: bad color {line!r}")
            colored.add(int(f[0]))
        elif section == "EVENT_TYPE":
            if len(f) < 3 or not f[0].isdigit() or not f[1].isdigit() or int(f[1]) > INT32:
                problems.append(f"{pcf}:{i}: bad event type line {line!r}")
                continue
            named_types.add(int(f[1]))
            block.append(int(f[1]))
        elif section == "VALUES":
            if len(f) < 2 or not f[0].lstrip("-").isdigit():
                problems.append(f"{pcf}:{i}: bad value line {line!r}")
                continue
            for t in block:
                named_values.setdefault(t, set()).add(int(f[0]))
    for s in ("DEFAULT_OPTIONS", "STATES", "STATES_COLOR"):
        if s not in sections:
            problems.append(f"{pcf}: no {s} section")
    problems += [f"{pcf}: state {s} used but not named" for s in sorted(states - named_states)]
    problems += [f"{pcf}: state {s} used but has no color" for s in sorted(states - colored)]
    problems += [f"{pcf}: event type {t} used but not named" for t in sorted(types - named_types)]
    for t, vals in values.items():
        if t in named_values:
            missing = vals - named_values[t]
            if missing:
                problems.append(f"{pcf}: values {sorted(missing)[:5]} of type {t} are not named")
    return problems


def _check_row(row: Path, cpus: int, nodes: int, threads: int) -> list[str]:
    if not row.is_file():
        return [f"{row}: missing"]
    lines = row.read_text().split("\n")
    bad = [k for k, ln in enumerate(lines, 1) if CONTROL.search(ln)]
    if bad:
        return [f"{row}:{bad[0]}: control character in {lines[bad[0] - 1][:60]!r}"]
    levels, i = {}, 0
    while i < len(lines):
        m = re.fullmatch(r"LEVEL (\w+) SIZE (\d+)", lines[i].strip())
        if not m:
            if lines[i].strip():
                return [f"{row}:{i + 1}: expected a LEVEL line"]
            i += 1
            continue
        names = lines[i + 1:i + 1 + int(m[2])]
        if len(names) != int(m[2]) or any(not n.strip() for n in names):
            return [f"{row}:{i + 1}: LEVEL {m[1]} has fewer names than its size"]
        levels[m[1]] = names
        i += 1 + int(m[2])
    want = {"CPU": cpus, "NODE": nodes, "THREAD": threads}
    return [f"{row}: LEVEL {k} has {len(levels.get(k, []))} names, the header declares {n}"
            for k, n in want.items() if len(levels.get(k, [])) != n]
