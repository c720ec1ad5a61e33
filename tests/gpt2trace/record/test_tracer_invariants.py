"""Issue 3's invariants over real traces from the trainer: 1 and 2 threads, gradient accumulation, --steps 0."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpt2trace.format import schema as S
from gpt2trace.format.reader import load
from gpt2trace.testing.invariants import check_running_per_step, check_trace

CASES = [(2, 3, 1), (1, 3, 1), (2, 2, 2), (2, 0, 1), (1, 0, 1)]   # threads, steps, grad_accum


@pytest.mark.parametrize("threads,steps,grad_accum", CASES,
                         ids=[f"{t}threads-{s}steps-accum{a}" for t, s, a in CASES])
def test_invariants(real_trace, threads, steps, grad_accum):
    rt = real_trace(threads, steps, grad_accum)
    trace = check_trace(rt.path, threads=threads, steps=steps, grad_accum=grad_accum, tokens=rt.tokens)
    kernels = trace.records(S.Kind.KERNEL).num_rows
    assert (kernels > 0) == (steps > 0)
    if steps == 0:          # no step ran: the whole span is the main thread's Python and idle workers
        states = trace.records(S.Kind.STATE).to_pandas()
        assert set(states[S.STATE]) <= {S.State.RUNNING, S.State.IDLE}


def test_every_kernel_call_has_one_block_per_thread(real_trace):
    # With 2 threads each parallel region splits its work into 2 blocks: per step and kernel (name, layer),
    # an even number of kernel records, the same in every step, and both threads run blocks.
    df = load(real_trace(2, 3, 1).path).records(S.Kind.KERNEL).to_pandas()
    assert set(df[S.THREAD]) == {0, 1}
    counts = df.groupby([S.STEP, S.NAME, S.LAYER], dropna=False).size().unstack(S.STEP)
    assert (counts % 2 == 0).all().all() and (counts.nunique(axis=1) == 1).all()


def test_one_thread_trace_has_only_the_main_thread(real_trace):
    trace = load(real_trace(1, 3, 1).path)
    for kind in trace.parts:
        assert set(trace.records(kind).column(S.THREAD).to_pylist()) == {0}


def _mutated(path, tmp_path, mutate):
    """The trace with one thing broken, written beside it with the same schema and metadata."""
    table = pq.read_table(path)
    df = mutate(table.to_pandas())
    out = tmp_path / "broken.parquet"
    pq.write_table(pa.Table.from_pandas(df, schema=table.schema, preserve_index=False), out)
    return out


def _drop_a_worker_state(df):
    i = df.index[(df[S.KIND] == "state") & (df[S.THREAD] == 1)][5]
    return df.drop(index=i)


def _move_a_kernel_to_the_next_step(df):
    i = df.index[df[S.KIND] == "kernel"][3]
    df.loc[i, S.STEP] += 1                               # its time is in the phases of the step before
    return df


def _repeat_a_counter(df):
    return pd.concat([df, df[(df[S.KIND] == "counter") & (df[S.NAME] == S.Counter.LOSS)].head(1)])


def _drop_a_memory_sample(df):
    return df.drop(df.index[df[S.NAME] == S.Counter.RSS_BYTES][3])


def _drop_the_first_steps_memory(df):
    return df.drop(df.index[(df[S.NAME] == S.Counter.RSS_BYTES) & (df[S.STEP] == 0)])


def _move_a_memory_sample(df):
    i = df.index[df[S.NAME] == S.Counter.RSS_BYTES][1]
    df.loc[i, [S.START_NS, S.END_NS]] += 1                # 1 ns after the phase end it samples
    return df


def _stretch_a_worker_block(df):
    i = df.index[(df[S.KIND] == "kernel") & (df[S.THREAD] == 1)][2]
    df.loc[i, S.END_NS] += 1                             # 1 ns more than the worker's Running time
    return df


BROKEN = [("gap in a worker's states", _drop_a_worker_state, "thread 1: gap or overlap"),
          ("kernel outside its phase", _move_a_kernel_to_the_next_step, "outside the compute phases"),
          ("counter twice in a step", _repeat_a_counter, "counters per step"),
          ("phase end without memory", _drop_a_memory_sample, "a step sampled at some phase ends only"),
          ("first step without memory", _drop_the_first_steps_memory, "a rank's first step not sampled"),
          ("memory off a phase end", _move_a_memory_sample, "a sample at no phase end"),
          ("kernel longer than Running", _stretch_a_worker_block, "thread 1: a kernel record is not inside Running")]


@pytest.mark.parametrize("case,mutate,message", BROKEN, ids=[b[0] for b in BROKEN])
def test_the_checks_catch_a_broken_trace(real_trace, tmp_path, case, mutate, message):
    rt = real_trace(2, 3, 1)
    with pytest.raises(AssertionError, match=message):
        check_trace(_mutated(rt.path, tmp_path, mutate), threads=2, steps=3, tokens=rt.tokens)


def test_running_per_step_catches_a_missing_kernel_record(real_trace, tmp_path):
    def drop_a_worker_kernel(df):
        return df.drop(index=df.index[(df[S.KIND] == "kernel") & (df[S.THREAD] == 1)][4])
    broken = load(_mutated(real_trace(2, 3, 1).path, tmp_path, drop_a_worker_kernel))
    with pytest.raises(AssertionError, match=r"step 0 thread 1: Running \d+ ns, kernel blocks \d+ ns"):
        check_running_per_step(broken)
