"""`analyze_groups` (a trace given as groups of its ranks) against `analyze` of the whole trace."""
import json
import math
import pickle
import threading
import weakref
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from random_traces import configs

from analysis import rank_groups
from analysis.analyze import analyze, analyze_groups
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.schema import NAME, Kind
from gpt2trace.testing import synthetic

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
MULTI_RANK = sorted(p.name for p in SAMPLES.glob("*.parquet")
                    if load(p).parts[Kind.STATE].column("rank").to_numpy().max() > 0)
# Seconds summed over the records of several ranks in the file's order (phases per name, per step): groups add
# them in rank order, another order when a file interleaves ranks, so they may differ in the last bits there only.
ORDER_DEPENDENT = ("/summary/phases", "/step_phases/")


def differences(a, b, path=""):
    """Where two JSON results differ: (path, what), floats beyond 1e-12 relative (or 1e-15 absolute: a difference
    of sums, such as a step's time outside its phases, keeps the round-off of its terms, far below the clock's
    nanosecond) or, outside ORDER_DEPENDENT, at all."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return [(path, f"keys {sorted(set(a) ^ set(b))}")]
        return [d for k in a for d in differences(a[k], b[k], f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [(path, f"{len(a)} != {len(b)} items")]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    if (isinstance(a, float) and isinstance(b, float) and path.startswith(ORDER_DEPENDENT)
            and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15)):
        return []
    return [] if a == b and type(a) is type(b) else [(path, f"{a!r} != {b!r}")]


def plain(result: dict):
    return json.loads(json.dumps(result))


def shuffled(trace: Trace, seed: int) -> Trace:
    table = trace.table
    return Trace.from_table(table.take(np.random.default_rng(seed).permutation(table.num_rows)), path=trace.path)


@pytest.mark.parametrize("name", MULTI_RANK)
@pytest.mark.parametrize("groups", [1, 2, 3])
def test_groups_of_a_sample_trace_give_the_whole_result(name, groups):
    trace = load(SAMPLES / name)
    parts = rank_groups.split(trace, groups)
    assert len(parts) == min(groups, len(np.unique(rank_groups.threads(trace)["rank"])))
    assert differences(plain(analyze(trace)), plain(analyze_groups(parts))) == []


def test_sample_traces_cover_several_ranks_and_pipelines():
    assert {"small_8ranks_3d.parquet", "small_2ranks_pp2_1f1b.parquet", "tiny_2ranks_allreduce.parquet"} <= set(
        MULTI_RANK)


@pytest.mark.parametrize("name", ["small_8ranks_3d.parquet", "tiny_2ranks_overlap.parquet"])
def test_records_in_any_order_differ_only_in_the_order_of_float_sums(name):
    trace = shuffled(load(SAMPLES / name), seed=1)
    whole, split = plain(analyze(trace)), plain(analyze_groups(rank_groups.split(trace, 3)))
    assert differences(whole, split) == []
    exact = differences(whole, split, "/exact")          # no tolerance anywhere: only the documented sums differ
    assert {p.split("[")[0] for p, _ in exact} <= {"/exact/summary/phases", "/exact/step_phases/phases",
                                                   "/exact/step_phases/steps"}


@settings(max_examples=20, deadline=None)
@given(configs(), st.integers(2, 3), st.booleans())
def test_groups_of_random_traces_give_the_whole_result(cfg, groups, shuffle):
    trace = Trace.from_table(synthetic.generate(cfg))
    if shuffle:
        trace = shuffled(trace, cfg.seed)
    whole = plain(analyze(trace))
    assert differences(whole, plain(analyze_groups(rank_groups.split(trace, groups)))) == []
    brief = plain(analyze(trace, explain=False))
    assert differences(brief, plain(analyze_groups(rank_groups.split(trace, groups), explain=False))) == []


def _reversed_kernel_names(trace: Trace) -> Trace:
    """The same records with the kernel names' dictionary in reverse order (as a reader of one rank group's row
    groups may find them)."""
    kern = trace.parts[Kind.KERNEL]
    col = kern.column(NAME).combine_chunks()
    names = col.dictionary.to_pylist()[::-1]
    codes = len(names) - 1 - col.indices.to_numpy(zero_copy_only=False)
    recoded = pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), pa.array(names))
    parts = {**trace.parts, Kind.KERNEL: kern.set_column(kern.column_names.index(NAME), NAME, recoded)}
    return Trace(parts=parts, path=trace.path, version=trace.version, run=trace.run, machine=trace.machine,
                 peak=trace.peak, clock=trace.clock, comm_table=trace.comm_table)


def test_groups_with_their_own_kernel_dictionaries():
    trace = load(SAMPLES / "small_8ranks_3d.parquet")
    groups = rank_groups.split(trace, 3)
    groups[1] = _reversed_kernel_names(groups[1])
    assert groups[1].parts[Kind.KERNEL].column(NAME).chunk(0).dictionary != \
        groups[0].parts[Kind.KERNEL].column(NAME).chunk(0).dictionary
    assert differences(plain(analyze(trace)), plain(analyze_groups(groups))) == []


def test_steps_from_kernels_when_one_group_has_no_phases():
    # phases on rank 0 only: the steps come from the phases (level 0) even for the group of rank 1
    trace = Trace.from_table(synthetic.generate(synthetic.SyntheticConfig(ranks=2, threads=2, steps=3)))
    phase = trace.parts[Kind.PHASE]
    parts = {**trace.parts, Kind.PHASE: phase.filter(pa.compute.equal(phase.column("rank"), 0))}
    trace = Trace(parts=parts, path=None, run=trace.run, comm_table=trace.comm_table)
    assert differences(plain(analyze(trace)), plain(analyze_groups(rank_groups.split(trace, 2)))) == []
    no_phases = Trace(parts={k: v for k, v in trace.parts.items() if k != Kind.PHASE}, run=trace.run)
    assert differences(plain(analyze(no_phases)), plain(analyze_groups(rank_groups.split(no_phases, 2)))) == []


@pytest.mark.parametrize("name", ["tiny_2ranks_tasks.parquet", "small_2threads_tasks.parquet"])
def test_groups_of_a_task_trace_give_the_whole_result(name):
    trace = load(SAMPLES / name)
    whole = plain(analyze(trace))
    assert whole["tasks"] is not None
    assert differences(whole, plain(analyze_groups(rank_groups.split(trace, 2)))) == []


@pytest.mark.parametrize("name", MULTI_RANK)
def test_groups_read_from_the_file_with_what_each_pass_reads(name):
    # the loads: pass 1 of every group but the last, then the last for both passes, then pass 2 of the others
    path = SAMPLES / name
    groups = [list(r) for r in np.array_split(np.unique(rank_groups.threads(load(path))["rank"]), 3) if len(r)]
    asked = []

    def loader(ranks):
        def read(reads):
            asked.append((ranks, reads))
            return load(path, ranks=ranks, reads=reads)
        return read
    result = plain(analyze_groups([loader(g) for g in groups]))
    assert differences(plain(analyze(load(path))), result) == []
    gather, both = rank_groups.GATHER_READS, rank_groups.GATHER_READS | rank_groups.PART_READS
    assert asked == ([(g, gather) for g in groups[:-1]] + [(groups[-1], both)]
                     + [(g, rank_groups.PART_READS) for g in groups[:-1]])


def test_groups_out_of_rank_order_or_overlapping_are_refused():
    trace = load(SAMPLES / "small_8ranks_3d.parquet")
    a, b = rank_groups.subset(trace, [0, 1, 2, 3]), rank_groups.subset(trace, [3, 4, 5, 6, 7])
    with pytest.raises(rank_groups.NotCombinable, match="disjoint"):
        analyze_groups([a, b])
    with pytest.raises(rank_groups.NotCombinable, match="ordered"):
        analyze_groups([rank_groups.subset(trace, [4, 5, 6, 7]), rank_groups.subset(trace, [0, 1, 2, 3])])


def test_parts_are_picklable_and_small():
    # 4 ranks x 4 threads x 6 steps: each group's part, pickled (what an MPI process would send), is a fraction
    # of the group's records
    trace = Trace.from_table(synthetic.generate(synthetic.SyntheticConfig(ranks=4, threads=4, steps=6, layers=4)))
    groups = rank_groups.split(trace, 2)
    gathered = [rank_groups.gather(g) for g in groups]
    ctx = rank_groups.context(gathered, groups[0])
    for group in groups:
        part = rank_groups.part(group, ctx)
        size = len(pickle.dumps(part))
        records = sum(t.nbytes for t in group.parts.values())
        assert size < records / 4, (size, records)
        assert pickle.loads(pickle.dumps(part)).segs.rank.tolist() == part.segs.rank.tolist()
    assert pickle.loads(pickle.dumps(gathered[0])).kernel_names == gathered[0].kernel_names


def test_state_gaps_of_several_groups_are_counted_together():
    # every 50th state record left out on every rank: gaps on both groups' threads, counted in one warning
    trace = Trace.from_table(synthetic.generate(synthetic.SyntheticConfig(ranks=4, threads=2, steps=3)))
    states = trace.parts[Kind.STATE]
    keep = np.arange(states.num_rows) % 50 != 7
    trace = Trace(parts={**trace.parts, Kind.STATE: states.filter(pa.array(keep))}, run=trace.run)
    whole = plain(analyze(trace))
    gaps = [w for w in whole["warnings"] if "gap(s) between state records" in w]
    assert len(gaps) == 1 and int(gaps[0].split(": ")[1].split()[0]) > 2
    assert differences(whole, plain(analyze_groups(rank_groups.split(trace, 2)))) == []
    assert differences(whole, plain(analyze_groups(rank_groups.split(trace, 4)))) == []


def test_a_group_without_state_or_kernel_records():
    # rank 2 keeps its phases, MPI calls and counters only: its group contributes empty parts
    trace = Trace.from_table(synthetic.generate(synthetic.SyntheticConfig(ranks=3, threads=2, steps=3)))
    parts = {k: (t.filter(pa.compute.not_equal(t.column("rank"), 2)) if k in (Kind.STATE, Kind.KERNEL) else t)
             for k, t in trace.parts.items()}
    trace = Trace(parts=parts, run=trace.run, comm_table=trace.comm_table)
    assert differences(plain(analyze(trace)), plain(analyze_groups(rank_groups.split(trace, 3)))) == []


def _tracked(trace: Trace, groups: list[Trace], loaded, alive: set) -> list:
    """A loader per group of `trace`: it calls `loaded(i)` first, then makes its group anew, whose id is in `alive`
    while the group lives."""
    def loader(i):
        def read(reads):
            loaded(i)
            group = rank_groups.subset(trace, sorted(set(rank_groups.threads(groups[i])["rank"])))
            alive.add(id(group))
            weakref.finalize(group, alive.discard, id(group))
            return group
        return read
    return [loader(i) for i in range(len(groups))]


def test_the_next_group_loads_while_one_is_worked_on_and_two_at_most_are_held(monkeypatch):
    """Each pass asks for a group while the one before is gathered or reduced (on a thread: decoding overlaps the
    analysis), and no more than two groups are alive at any of those moments."""
    trace = load(SAMPLES / "small_8ranks_3d.parquet")
    groups = rank_groups.split(trace, 4)
    n = len(groups)
    assert n == 4
    # loads asked for by the time each group is worked on: pass 1 gathers group i with group i + 1 asked for (the
    # last group alone: pass 2 starts after the context); pass 2 reduces the last group with group 0 asked for,
    # then group j with group j + 1
    expected = iter([i + 2 for i in range(n - 1)] + [n, n + 1] + [n + j + 2 for j in range(n - 2)] + [2 * n - 1])
    started, alive, seen = [], set(), []
    moved = threading.Condition()

    def loaded(i):
        with moved:
            started.append(i)
            moved.notify_all()

    def watched(work):
        def run(group, *args, **kwargs):
            want = next(expected)
            with moved:
                seen.append((moved.wait_for(lambda: len(started) >= want, timeout=2), len(alive)))
            return work(group, *args, **kwargs)
        return run
    whole = plain(analyze(trace))
    monkeypatch.setattr(rank_groups, "gather", watched(rank_groups.gather))
    monkeypatch.setattr(rank_groups, "part", watched(rank_groups.part))
    assert differences(whole, plain(analyze_groups(_tracked(trace, groups, loaded, alive)))) == []
    assert len(seen) == 2 * n and all(ahead for ahead, _ in seen) and max(k for _, k in seen) <= 2


def test_without_prefetch_each_group_loads_on_the_calling_thread_when_its_turn_comes(monkeypatch):
    """prefetch=False (a process on one core): no thread, no load ahead, no group alive while one loads, one while
    one is worked on."""
    trace = load(SAMPLES / "small_8ranks_3d.parquet")
    groups = rank_groups.split(trace, 4)
    n = len(groups)
    # loads done by the time each group is worked on: as in the test above, without the one ahead
    expected = iter([i + 1 for i in range(n)] + [n] + [n + j + 1 for j in range(n - 1)])
    started, alive, seen, at_load = [], set(), [], []

    def loaded(i):
        started.append(threading.get_ident())
        at_load.append(len(alive))

    def watched(work):
        def run(group, *args, **kwargs):
            seen.append((len(started) == next(expected), len(alive)))
            return work(group, *args, **kwargs)
        return run
    whole = plain(analyze(trace))
    monkeypatch.setattr(rank_groups, "gather", watched(rank_groups.gather))
    monkeypatch.setattr(rank_groups, "part", watched(rank_groups.part))
    result = analyze_groups(_tracked(trace, groups, loaded, alive), prefetch=False)
    assert differences(whole, plain(result)) == []
    assert set(started) == {threading.get_ident()} and len(started) == 2 * n - 1 and max(at_load) == 0
    assert len(seen) == 2 * n and all(on_time for on_time, _ in seen) and max(k for _, k in seen) == 1


def test_a_trace_in_memory_is_analyzed_without_a_loading_thread(monkeypatch):
    import analysis.analyze

    def no_pool(*args, **kwargs):
        raise AssertionError("a thread pool for a trace already in memory")
    monkeypatch.setattr(analysis.analyze, "ThreadPoolExecutor", no_pool)
    assert analyze(load(SAMPLES / "small_8ranks_3d.parquet"))["summary"]
