"""A checker of Chrome's Trace Event format (the JSON object form), independent of our exporter.

check(path) returns the list of problems (empty: the file passes):
  shape     an object with a `traceEvents` list (and optional displayTimeUnit 'ms'/'ns', otherData object)
  phases    every event's `ph` is known, with the fields that phase needs and the right types: X (name, ts,
            dur >= 0, pid, tid), M (process_name/thread_name with args.name, *_sort_index with args.sort_index),
            C (name, ts, pid, numeric args), s/f flows (id, cat, name, ts, pid, tid; f binds with bp 'e')
  metadata  every process with events is named, and every thread that has X events
  nesting   X events of one (pid, tid) nest: each one inside the enclosing one or after its end
  flows     each id has one s and one f, s no later than f, each inside an X event of its thread
Times are compared in integer nanoseconds (ts is in microseconds).
"""
from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

PHASES = {"X", "M", "C", "s", "t", "f", "B", "E", "i", "I", "b", "e", "n"}
META = {"process_name": "name", "thread_name": "name", "process_sort_index": "sort_index",
        "thread_sort_index": "sort_index", "process_labels": "labels"}


def check(path: Path) -> list[str]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return ["not an object with a traceEvents list"]
    problems = []
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        problems.append(f"displayTimeUnit {doc['displayTimeUnit']!r}")
    if not isinstance(doc.get("otherData", {}), dict):
        problems.append("otherData is not an object")
    slices, named_pid, named_tid, pids, flows = defaultdict(list), set(), set(), set(), defaultdict(list)
    for k, e in enumerate(doc["traceEvents"]):
        ph = e.get("ph")
        if ph not in PHASES:
            problems.append(f"event {k}: unknown phase {ph!r}")
            continue
        if not isinstance(e.get("pid"), int) or (ph != "C" and ph != "M" and not isinstance(e.get("tid"), int)):
            problems.append(f"event {k}: pid/tid missing or not integers")
            continue
        if ph == "M":
            key = META.get(e.get("name"))
            if key is None or key not in (e.get("args") or {}):
                problems.append(f"event {k}: metadata {e.get('name')!r} without args.{key}")
            if e.get("name") == "process_name":
                named_pid.add(e["pid"])
            if e.get("name") == "thread_name":
                named_tid.add((e["pid"], e.get("tid")))
            continue
        pids.add(e["pid"])
        if not isinstance(e.get("ts"), (int, float)) or e["ts"] < 0:
            problems.append(f"event {k}: ts missing or negative")
            continue
        ts = round(e["ts"] * 1000)
        if ph == "X":
            if not isinstance(e.get("name"), str) or not isinstance(e.get("dur"), (int, float)) or e["dur"] < 0:
                problems.append(f"event {k}: X event needs a name and dur >= 0")
                continue
            slices[(e["pid"], e["tid"])].append((ts, ts + round(e["dur"] * 1000), k))
        elif ph == "C":
            args = e.get("args")
            if not isinstance(e.get("name"), str) or not isinstance(args, dict) or not args or \
                    not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in args.values()):
                problems.append(f"event {k}: C event needs a name and numeric args")
        elif ph in ("s", "f"):
            if "id" not in e or not isinstance(e.get("cat"), str) or not isinstance(e.get("name"), str):
                problems.append(f"event {k}: flow event needs id, cat and name")
                continue
            if ph == "f" and e.get("bp") != "e":
                problems.append(f"event {k}: f event without bp 'e' binds to the next slice")
            flows[(e["cat"], e["id"])].append((ph, ts, e["pid"], e["tid"], k))
    problems += [f"process {p} has events but no process_name" for p in sorted(pids - named_pid)]
    problems += [f"thread {t} has slices but no thread_name" for t in sorted(set(slices) - named_tid)]
    for track, items in slices.items():
        items.sort(key=lambda x: (x[0], -x[1]))
        stack: list[tuple] = []
        for start, end, k in items:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack and end > stack[-1][1]:
                problems.append(f"event {k} on {track} overlaps event {stack[-1][2]} without nesting")
                break
            stack.append((start, end, k))
    for key, evs in flows.items():
        phases = sorted(ph for ph, *_ in evs)
        if phases != ["f", "s"]:
            problems.append(f"flow {key}: phases {phases}, expected one s and one f")
            continue
        s = next(x for x in evs if x[0] == "s")
        f = next(x for x in evs if x[0] == "f")
        if f[1] < s[1]:
            problems.append(f"flow {key}: f before s")
        for ph, ts, pid, tid, _ in (s, f):
            if not any(a <= ts <= b for a, b, _ in slices.get((pid, tid), [])):
                problems.append(f"flow {key}: {ph} at {ts} ns is inside no slice of {(pid, tid)}")
    return problems
