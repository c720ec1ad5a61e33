"""The rank-by-rank import (paraver_stream) against the in-memory one (paraver_import): every column of every record
equal, rank by rank, on the hand-written .prv files of the import tests and on exported-then-imported traces;
with spill limits small enough that every rank's rows go through the spill files, and windows (paraver_windows)
of a few lines, so that pairs, calls and messages cross them."""
import contextlib
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import test_extrae_import as extrae
import test_paraver_import as hand
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpt2trace.format.errors import TraceError
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.interop.paraver_import import import_paraver
from gpt2trace.interop.paraver_stream import import_paraver_to
from gpt2trace.interop.paraver_windows import WINDOW_LINES


def _decoded(table: pa.Table) -> pa.Table:
    return pa.table({n: c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(table.column_names, table.columns)})


def same_as_in_memory(prv, tmp_path, spill_bytes=1 << 12, window_lines=WINDOW_LINES):
    """Imports `prv` both ways; the streamed trace must be the in-memory table taken rank by rank (each rank's
    records in their order), with the same metadata and notes. Returns the streamed import."""
    memory = import_paraver(prv)
    out = tmp_path / "streamed.parquet"
    out.unlink(missing_ok=True)
    streamed = import_paraver_to(prv, out, tmp_path, spill_bytes=spill_bytes, window_lines=window_lines)
    got = pq.read_table(out)
    order = np.argsort(memory.table.column("rank").to_numpy(), kind="stable")
    want = _decoded(memory.table.take(pa.array(order)))
    assert got.num_rows == streamed.records == want.num_rows
    for name in want.column_names:
        assert _decoded(got).column(name).equals(want.column(name)), name
    assert got.schema.metadata == memory.table.schema.metadata
    assert sorted(streamed.notes) == sorted(memory.notes)
    assert not list(tmp_path.glob("gpt2trace-prv-*"))            # the spill folder is gone
    return streamed


HAND = {"states": (hand.STATES, hand.PCF), "events": (hand.EVENTS, hand.PCF), "message": (hand.MESSAGE, None),
        "collectives": (hand.COLLECTIVES, None),
        "unclosed": (hand.STATES + "2:1:1:1:1:100:60000019:1\n2:1:1:1:1:200:60000019:0\n"
                     "2:1:1:1:1:300:60000019:0\n2:1:1:1:2:400:60000019:2\n", hand.PCF),
        "microseconds": (hand.STATES.replace("1000_ns", "1000"), None),
        "a rank without lines": (hand.HEAD + "1000_ns:1(3):1:3(1:1,1:1,1:1),0\n1:1:1:1:1:0:600:1\n"
                                 "1:3:1:3:1:100:900:1\n", None),
        # a send inside a send: the message at 25 falls in the inner one; the one at 50 in none (the call that
        # started last before it has ended), even when a window ends between them
        "nested sends": (hand.HEAD + "1000_ns:1(2):1:2(1:1,1:1),0\n1:1:1:1:1:0:1000:1\n1:2:1:2:1:0:1000:1\n"
                         "2:1:1:1:1:10:50000001:1\n2:1:1:1:1:20:50000001:1\n3:1:1:1:1:25:25:2:1:2:1:60:70:8:1\n"
                         "2:1:1:1:1:30:50000001:0\n2:1:1:1:1:40:60000019:1\n2:1:1:1:1:45:60000019:0\n"
                         "3:1:1:1:1:50:50:2:1:2:1:60:70:64:3\n2:2:1:2:1:60:50000001:2\n"
                         "2:2:1:2:1:70:50000001:0\n2:1:1:1:1:100:50000001:0\n", None)}


@pytest.mark.parametrize("window_lines", [1, 2, WINDOW_LINES])
@pytest.mark.parametrize("name", HAND)
def test_hand_written_traces(tmp_path, name, window_lines):
    text, pcf = HAND[name]
    same_as_in_memory(hand.write(tmp_path, text, pcf), tmp_path, window_lines=window_lines)


def test_collective_roots_come_from_another_rank(tmp_path):
    """COLLECTIVES: the root flag sits on one rank's call and gives the peer of the other ranks' calls; two
    communicators, so computed seq numbers carry the communicator's id (both need every rank)."""
    streamed = same_as_in_memory(hand.write(tmp_path, hand.COLLECTIVES), tmp_path)
    comm = pq.read_table(streamed.path).to_pandas().query("kind == 'comm'")
    assert comm["peer"].notna().any() and (comm["seq"] >= 2**32).any()


def test_extrae_trace_with_pcf_and_row(tmp_path):
    (tmp_path / "omp.pcf").write_text(extrae.PCF)
    (tmp_path / "omp.row").write_text(extrae.ROW)
    (tmp_path / "omp.prv").write_text(extrae.PRV)
    same_as_in_memory(tmp_path / "omp.prv", tmp_path)


def test_gzip(tmp_path):
    same_as_in_memory(hand.write(tmp_path, hand.MESSAGE, hand.PCF, name="g.prv.gz"), tmp_path)


@pytest.mark.parametrize("window_lines", [7, WINDOW_LINES])
def test_exported_synthetic_trace(tmp_path, synthetic_path, window_lines):
    out = export_paraver(synthetic_path, tmp_path / "syn")
    same_as_in_memory(out.prv, tmp_path, window_lines=window_lines)


@pytest.mark.parametrize("window_lines", [5, 60, WINDOW_LINES])
def test_exported_mpi_calls_with_and_without_our_attributes(tmp_path, mpi_zoo_path, window_lines):
    out = export_paraver(mpi_zoo_path, tmp_path / "zoo")
    same_as_in_memory(out.prv, tmp_path, window_lines=window_lines)
    # as Extrae writes them: seq from the order on the communicator, peers from the root flag and the 3: records
    (tmp_path / "extrae.prv").write_text(re.sub(r":7100000[1-6]:-?\d+", "", out.prv.read_text()))
    (tmp_path / "extrae.pcf").write_text(out.pcf.read_text())
    same_as_in_memory(tmp_path / "extrae.prv", tmp_path, window_lines=window_lines)


@pytest.mark.parametrize("sample", ["small_2ranks_pp2_1f1b", "small_2threads_tasks", "small_2ranks_tp2"])
def test_exported_samples_in_windows(tmp_path, sample):
    """Pipeline sends and receives, tasks, tensor-parallel collectives: in windows of 40 lines, with and without
    our attributes."""
    out = export_paraver(f"sample_traces/{sample}.parquet", tmp_path / "s")
    same_as_in_memory(out.prv, tmp_path, window_lines=40)
    (tmp_path / "extrae.prv").write_text(re.sub(r":7100000[1-9]:-?\d+", "", out.prv.read_text()))
    (tmp_path / "extrae.pcf").write_text(out.pcf.read_text())
    same_as_in_memory(tmp_path / "extrae.prv", tmp_path, window_lines=40)


def test_eight_ranks_in_rank_ordered_row_groups(tmp_path):
    out = export_paraver("sample_traces/small_8ranks_3d.parquet", tmp_path / "r8")
    streamed = same_as_in_memory(out.prv, tmp_path, spill_bytes=1 << 16)
    meta = pq.ParquetFile(streamed.path).metadata
    rank = meta.schema.to_arrow_schema().get_field_index("rank")
    spans = [(meta.row_group(g).column(rank).statistics.min, meta.row_group(g).column(rank).statistics.max)
             for g in range(meta.num_row_groups)]
    assert all(lo == hi for lo, hi in spans)                        # no row group holds two ranks
    assert [lo for lo, _ in spans] == sorted(lo for lo, _ in spans) and len({lo for lo, _ in spans}) == 8


@pytest.mark.parametrize("text, line, message", hand.MALFORMED)
def test_malformed_lines_fail_as_in_memory_and_leave_no_output(tmp_path, text, line, message):
    path = hand.write(tmp_path, text, hand.PCF)
    with pytest.raises(TraceError) as memory:
        import_paraver(path)
    with pytest.raises(TraceError) as streamed:
        import_paraver_to(path, tmp_path / "out.parquet", tmp_path)
    assert str(streamed.value) == str(memory.value)
    assert not (tmp_path / "out.parquet").exists() and not list(tmp_path.glob("gpt2trace-prv-*"))


def test_progress_is_told_every_stage(tmp_path, synthetic_path):
    """The progress factory gets the lines read, the ranks imported and the records written, with their totals."""
    told = {}

    @contextlib.contextmanager
    def progress(what, total=None, unit="records"):
        told[what] = [total, 0]
        yield lambda n: told[what].__setitem__(1, told[what][1] + n)

    out = export_paraver(synthetic_path, tmp_path / "syn", progress=progress)
    assert told["lines of trace.parquet"] == [out.records, out.records]
    assert told["writing syn.prv"] == [out.lines, out.lines]
    told.clear()
    streamed = import_paraver_to(out.prv, tmp_path / "back.parquet", progress=progress)
    assert told == {"reading syn.prv": [None, out.lines],
                    "importing ranks": [2, 2], "writing back.parquet": [streamed.records, streamed.records]}


def random_prv(seed: int) -> str:
    """An Extrae-like .prv: 1-4 ranks x 1-2 threads, states, nested user functions, MPI calls (collectives on two
    communicators with sizes and root flags, their attributes sometimes on a line of their own at the same
    instant; sends and receives with 3: records, a few falling in no call), counters, a never closed and a stray
    closing event; lines sorted by time as Paraver wants them."""
    rng = np.random.default_rng(seed)
    ranks, threads, end = int(rng.integers(1, 5)), int(rng.integers(1, 3)), 100_000
    lines, sends, recvs = [], [], []
    for r in range(ranks):
        for th in range(threads):
            where = f"{r * threads + th + 1}:1:{r + 1}:{th + 1}"
            t = int(rng.integers(0, 50))
            while t < end - 2000:
                d = int(rng.integers(10, 1500))
                lines.append((t, f"1:{where}:{t}:{t + d}:{int(rng.choice([1, 3, 5, 9]))}"))
                kind = rng.integers(0, 5)
                if kind == 0:                                   # a collective
                    value = int(rng.choice([7, 9, 10, 17]))
                    attrs = ""
                    if rng.random() < 0.8:
                        attrs += f":50100004:{int(rng.integers(1, 3))}"
                    if rng.random() < 0.3:
                        attrs += ":50100003:1"
                    if rng.random() < 0.5:
                        attrs += f":50100001:{int(rng.integers(0, 4096))}"
                    if attrs and rng.random() < 0.3:            # Extrae splits a line at one instant
                        lines += [(t, f"2:{where}:{t}:50000002:{value}"), (t, f"2:{where}:{t}{attrs}")]
                    else:
                        lines.append((t, f"2:{where}:{t}:50000002:{value}{attrs}"))
                    lines.append((t + d, f"2:{where}:{t + d}:50000002:0"))
                elif kind == 1:                                 # a send or a receive
                    value = int(rng.choice([1, 2]))
                    (sends if value == 1 else recvs).append((where, t, t + d))
                    lines += [(t, f"2:{where}:{t}:50000001:{value}"), (t + d, f"2:{where}:{t + d}:50000001:0")]
                elif kind == 2:                                 # nested functions
                    lines += [(t, f"2:{where}:{t}:60000019:{int(rng.integers(1, 4))}"),
                              (t + 1, f"2:{where}:{t + 1}:60000019:{int(rng.integers(1, 4))}"),
                              (t + d - 1, f"2:{where}:{t + d - 1}:60000019:0"),
                              (t + d, f"2:{where}:{t + d}:60000019:0")]
                elif kind == 3:
                    lines.append((t + d, f"2:{where}:{t + d}:42000050:{int(rng.integers(0, 10**6))}"))
                t += d
            lines.append((t, f"1:{where}:{t}:{end}:1"))
    for k in range(min(len(sends), len(recvs))):
        (sw, s0, _), (rw, r0, r1) = sends[k], recvs[-1 - k]
        lines.append((s0, f"3:{sw}:{s0}:{s0}:{rw}:{r0}:{r1}:{int(rng.integers(0, 10**5))}:{int(rng.integers(0, 9))}"))
    lines.append((5, "3:1:1:1:1:5:5:1:1:1:1:6:6:8:0"))          # in no call
    lines += [(7, "2:1:1:1:1:7:60000020:3"), (9, "2:1:1:1:1:9:60000018:0")]    # never closed; stray close
    lines.sort(key=lambda x: x[0])
    comms = "c:1:1:{n}:{all}\nc:1:2:1:1\n".format(n=ranks, all=":".join(str(r + 1) for r in range(ranks)))
    head = f"#Paraver (01/01/2024 at 10:00):{end}_ns:1({ranks * threads}):1:{ranks}("
    return head + ",".join(f"{threads}:1" for _ in range(ranks)) + "),2\n" + comms + "\n".join(x for _, x in lines)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), spill=st.sampled_from([1 << 10, 1 << 14, 1 << 26]),
       chunk=st.sampled_from([300, 4096, 8 << 20]), window=st.sampled_from([1, 4, 30, 200, WINDOW_LINES]))
def test_random_extrae_traces(tmp_path_factory, seed, spill, chunk, window):
    import gpt2trace.interop.paraver_stream as stream
    tmp = tmp_path_factory.mktemp("random")
    (tmp / "r.prv").write_text(random_prv(seed))
    old, stream.CHUNK_BYTES = stream.CHUNK_BYTES, chunk         # many chunks: pairs and lines cut between them
    try:
        same_as_in_memory(tmp / "r.prv", tmp, spill_bytes=spill, window_lines=window)
    finally:
        stream.CHUNK_BYTES = old
