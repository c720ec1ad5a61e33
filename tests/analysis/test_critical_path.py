"""The critical path on hand-built traces whose paths are worked out in the comments, on a synthetic pipeline, and on
the real sample traces (its length is the step time; on the pipeline it moves between the stages every step)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import critical_path as cp
from analysis import mpi, segments
from analysis.records import Records
from analysis.window import select
from gpt2trace.format.reader import Trace, load
from gpt2trace.format.schema import END_NS, RANK, START_NS, State
from gpt2trace.testing import synthetic as syn
from gpt2trace.testing import synthetic_pipeline as sp

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"
US = 1_000                  # ns per microsecond


def path_of(trace: Trace, steps: str | None = None) -> tuple[cp.CriticalPath, dict]:
    found = cp.critical_path(trace, select(trace, steps))
    return found, cp.tables(found)


def pieces(found: cp.CriticalPath) -> list[tuple]:
    """(rank, thread, start s, end s, category, name) of each piece, in time order."""
    p = found.pieces
    return [(r, t, s / 1e9, e / 1e9, c, n) for r, t, s, e, c, n in
            zip(p["rank"], p["thread"], p[START_NS], p[END_NS], p["category"], p["name"])]


def item(tables: dict, name: str, layer=None, category: str | None = None) -> dict:
    rows = tables["items"]
    hit = rows[(rows["name"] == name) & (rows["layer"].isna() if layer is None else rows["layer"] == layer)]
    if category is not None:
        hit = hit[hit["category"] == category]
    assert len(hit) == 1, (name, layer, rows)
    return hit.iloc[0].to_dict()


def lanes(tables: dict) -> dict:
    return {(r, th): s for r, th, s in tables["lanes"][["rank", "thread", "time_s"]].itertuples(index=False)}


def late_sender() -> Trace:
    # rank 0: matmul_forward L0 [0,3], MPI_Send to 1 [3,3.1]
    # rank 1: gelu_forward L0 [0,1], MPI_Recv from 0 [1,3.2] (its send starts at 3: Late Sender), residual L1 [3.2,4]
    recs = [syn.state(0, 0, 0, 4, State.RUNNING), syn.state(1, 0, 0, 4, State.RUNNING),
            syn.kernel(0, 0, 0, 3, "matmul_forward", 0, 0), syn.comm(0, 3, 3.1, "MPI_Send", peer=1, step=0),
            syn.kernel(1, 0, 0, 1, "gelu_forward", 0, 0), syn.comm(1, 1, 3.2, "MPI_Recv", peer=0, step=0),
            syn.kernel(1, 0, 3.2, 4, "residual_forward", 0, 1),
            syn.phase(0, 0, 3.1, "forward", 0), syn.phase(1, 0, 4, "forward", 0)]
    return Trace.from_table(syn.from_records(recs))


def test_a_late_sender_moves_the_path_to_the_sender():
    found, t = path_of(late_sender())
    # Back from 4 on rank 1 (its residual ends last): residual [3.2,4]; the receive waited for the send that
    # started at 3, so the path lands on rank 0 where that send ended (3.1): the receive keeps [3.1,3.2]; then the
    # send [3,3.1] and matmul [0,3] on rank 0. gelu [0,1] and the wait [1,3.1] are off the path.
    assert pieces(found) == [(0, 0, 0.0, 3.0, "kernel", "matmul_forward"), (0, 0, 3.0, 3.1, "mpi", "MPI_Send"),
                             (1, 0, 3.1, 3.2, "mpi", "MPI_Recv"), (1, 0, 3.2, 4.0, "kernel", "residual_forward")]
    assert t["length_s"] == pytest.approx(4.0) and t["window_s"] == pytest.approx(4.0)
    assert t["clock_violations"] == 0 and t["rank_switches"] == 1
    assert item(t, "matmul_forward", 0)["share"] == pytest.approx(3 / 4)
    assert item(t, "residual_forward", 1)["time_s"] == pytest.approx(0.8)
    assert lanes(t) == pytest.approx({(0, 0): 3.1, (1, 0): 0.9})


def test_a_collective_waits_for_its_last_rank(late_rank):
    found, t = path_of(late_rank)
    # Both ranks end at 10 (rank 0 is taken); its MPI_Allreduce [6,10] waited for rank 1, which entered last at 9,
    # and the path lands on rank 1 at the end of rank 1's call (10). Rank 1: allreduce [9,10], gelu L1 [4,9],
    # matmul L0 [0,4]: 10 s, all on rank 1; rank 0's gelu and its 3 s wait are off the path.
    assert pieces(found) == [(1, 0, 0.0, 4.0, "kernel", "matmul_forward"), (1, 0, 4.0, 9.0, "kernel", "gelu_forward"),
                             (1, 0, 9.0, 10.0, "mpi", "MPI_Allreduce")]
    assert t["length_s"] == pytest.approx(10.0)
    # gelu 5 of 10 s, matmul 4, the allreduce 1; the phases: forward [0,9] and grad_sync [9,10] of rank 1
    assert [(r["name"], r["time_s"], r["share"]) for r in t["items"].to_dict("records")] == [
        ("gelu_forward", pytest.approx(5.0), pytest.approx(0.5)), ("matmul_forward", pytest.approx(4.0),
                                                                     pytest.approx(0.4)),
        ("MPI_Allreduce", pytest.approx(1.0), pytest.approx(0.1))]
    assert dict(t["phases"][["phase", "time_s"]].values.tolist()) == pytest.approx({"forward": 9, "grad_sync": 1})
    assert t["steps"] == [{"step": 0, "length_s": pytest.approx(10.0), "switches": 0, "ranks": [1],
                           "top": "gelu_forward (layer 1)"}]


def test_a_parallel_region_ends_with_its_slowest_thread(slow_thread):
    found, t = path_of(slow_thread)
    # Back from 10: gelu [8,10] ends on every thread at 10 (the main thread is taken), Python on the main thread
    # [5,8], then matmul's region [0,5] through thread 2, whose block ends last: its block [1,5] and its fork
    # delay [0,1]. Threads 0 and 1 of matmul (ending at 2 and 3) are off the path.
    assert pieces(found) == [(0, 2, 0.0, 1.0, "fork/join", "matmul_forward"),
                             (0, 2, 1.0, 5.0, "kernel", "matmul_forward"), (0, 0, 5.0, 8.0, "serial", "serial code"),
                             (0, 0, 8.0, 10.0, "kernel", "gelu_forward")]
    assert t["length_s"] == pytest.approx(10.0)
    assert item(t, "matmul_forward", 0, "kernel")["time_s"] == pytest.approx(4.0)
    assert item(t, "matmul_forward", 0, "fork/join")["time_s"] == pytest.approx(1.0)
    assert item(t, "serial code")["share"] == pytest.approx(0.3)
    # thread 0: Python 3 + gelu 2; thread 2: fork 1 + block 4
    assert lanes(t) == pytest.approx({(0, 0): 5.0, (0, 2): 5.0})


def test_a_wait_follows_the_last_posting_of_its_collective(nonblocking):
    found, t = path_of(nonblocking)
    # Back from 7 on rank 0 (both waits end at 6): Python [6,7]; its MPI_Wait [4,6] completes the MPI_Iallreduce
    # that rank 1 posted last, at 4.5: the path lands on rank 1 at the end of that posting (5), the wait keeping
    # [5,6]. Rank 1: the posting [4.5,5], matmul_backward L1 [1,4.5], Python [0,1]. 7 s in all.
    assert pieces(found) == [(1, 0, 0.0, 1.0, "serial", "serial code"),
                             (1, 0, 1.0, 4.5, "kernel", "matmul_backward"), (1, 0, 4.5, 5.0, "mpi", "MPI_Iallreduce"),
                             (0, 0, 5.0, 6.0, "mpi", "MPI_Wait"), (0, 0, 6.0, 7.0, "serial", "serial code")]
    assert t["length_s"] == pytest.approx(7.0)


def test_a_message_received_before_it_was_sent_is_counted():
    # rank 1's receive [1,2] is matched with a send that starts at 3 on rank 0's clock: the clocks disagree.
    recs = [syn.kernel(0, 0, 0, 3, "matmul_forward", 0, 0), syn.comm(0, 3, 3.5, "MPI_Send", peer=1, step=0),
            syn.comm(1, 1, 2, "MPI_Recv", peer=0, step=0), syn.kernel(1, 0, 2, 4, "gelu_forward", 0, 0)]
    found, t = path_of(Trace.from_table(syn.from_records(recs)))
    # Back from 4 on rank 1: gelu [2,4]; the receive waited for the send, which the path reaches at the time it
    # left (2), not back in time: rank 0's matmul [0,2] is on the path, the send [3,3.5] is not. The path still
    # tiles the 4 s window.
    assert pieces(found) == [(0, 0, 0.0, 2.0, "kernel", "matmul_forward"), (1, 0, 2.0, 4.0, "kernel", "gelu_forward")]
    assert t["clock_violations"] == 1
    assert t["length_s"] == pytest.approx(4.0) and t["length_ratio"] == pytest.approx(1.0)


def overlapping_calls() -> Trace:
    # Two threads of each rank call MPI at once, so each rank's tiling shows one call where the other is hidden:
    # rank 0: thread 0 MPI_Recv [1,5] of rank 1's send b, thread 1 MPI_Send [2,6] to rank 1 (hidden until 5)
    # rank 1: thread 1 MPI_Recv [1.5,7] of rank 0's send, thread 0 MPI_Send b [3,6] (hidden whole, inside the Recv)
    # The receive on rank 0 waited for b (which started later), rank 1's receive for rank 0's send: at time 5
    # each sends the path to the other rank, where the tiling shows the call that sends it back.
    recs = [syn.state(r, th, 0, 7, State.RUNNING) for r in (0, 1) for th in (0, 1)]
    recs += [syn.phase(r, 0, 7, "forward", 0) for r in (0, 1)]
    recs += [syn.kernel(0, 0, 0, 1, "matmul_forward", 0, 0), syn.kernel(1, 0, 0, 1.5, "gelu_forward", 0, 0),
             syn.comm(0, 1, 5, "MPI_Recv", peer=1, step=0, tag=1),
             syn.comm(1, 3, 6, "MPI_Send", peer=0, step=0, tag=1),
             syn.comm(0, 2, 6, "MPI_Send", peer=1, step=0, tag=2, thread=1),
             syn.comm(1, 1.5, 7, "MPI_Recv", peer=0, step=0, tag=2, thread=1)]
    return Trace.from_table(syn.from_records(recs))


def test_overlapping_calls_of_several_threads_do_not_loop():
    found, t = path_of(overlapping_calls())
    # Back from 7 on rank 1: its receive [1.5,7] waited for rank 0's send (started at 2): the path lands there at
    # the send's end (6) and goes back through the send's visible part [5,6] to 5, where rank 0's receive sends it
    # to rank 1 at 5, whose receive would send it back to rank 0 at 5, where a turn already started: that
    # receive is taken as not waiting, so the path goes down rank 1's receive to 1.5 and its gelu [0,1.5].
    assert pieces(found) == [(1, 0, 0.0, 1.5, "kernel", "gelu_forward"), (1, 1, 1.5, 5.0, "mpi", "MPI_Recv"),
                             (0, 1, 5.0, 6.0, "mpi", "MPI_Send"), (1, 1, 6.0, 7.0, "mpi", "MPI_Recv")]
    assert t["length_s"] == pytest.approx(t["window_s"])


def test_a_two_stage_pipeline():
    cfg = sp.PipelineConfig(stages=2, micro_batches=2, schedule=sp.ONE_F_ONE_B, steps=1, layers=2)
    found, t = path_of(Trace.from_table(sp.generate(cfg)))
    # The schedule in µs (forward 1000, backward 2000, gap 3, dataload 10, a call 2, transfer 20; both stages load
    # data before each forward; the step runs from 3, the first dataload, to 9247, the end of the tracer's flush):
    #   stage 0: dataload [3,13]  F0 [16,1016] Isend [1016,1018]   dataload [1021,1031] Wait [1034,1036]
    #            F1 [1036,2036] Isend [2036,2038]   Recv B0 [2041,4059] B0 [4059,6059]   Recv B1 [6062,7084]
    #            B1 [7084,9084]   Wait [9087,9089] Allreduce [9089,9139]   adamw [9142,9242] flush [9242,9247]
    #   stage 1: dataload [3,13]  Recv F0 [16,1036] F0 [1036,2036]   B0 [2039,4039] Isend [4039,4041]
    #            dataload [4044,4054] Recv F1 [4057,4059] F1 [4059,5059]   Wait [5062,5064] B1 [5064,7064]
    #            Isend [7064,7066]   Wait [7069,7084] Allreduce [7084,9139]   adamw [9142,9242] flush [9242,9247]
    # Back from 9247 on stage 0 (adamw ends at 9242 on both; the lower rank is taken): flush, adamw, the
    # Allreduce it entered last [9089,9139], its Wait (its receiver was long done), B1; its Recv B1 waited for
    # stage 1's send at 7064, so the path lands on stage 1 at 7066 (the Isend's end), the Recv keeping
    # [7066,7084]. Stage 1: Isend, B1, Wait, F1, its Recv F1 [4057,4059] (the message was there), dataload, Isend,
    # B0, F0, and its Recv F0 waited for stage 0's send at 1016: the path lands on stage 0 at 1018, the Recv
    # keeping [1018,1036]. Stage 0: Isend [1016,1018], F0 [16,1016], dataload [3,13] and Python from 3.
    assert [(r, round(s * 1e6), round(e * 1e6)) for r, s, e in
            cp.segments(found.pieces)[["rank", "start_s", "end_s"]].itertuples(index=False, name=None)] == [
        (0, 3, 1018), (1, 1018, 7066), (0, 7066, 9247)]
    assert found.length_ns == (9247 - 3) * US and t["rank_switches"] == 2
    # Phases: forward 1002 (stage 0 F0 + Isend) + 1018 (stage 1 Recv from 1018 + F0) + 1002 (Recv F1 + F1);
    # backward 2002 (B0 + Isend) + 2004 (Wait + B1 + Isend) + 2018 (stage 0 Recv from 7066 + B1);
    # grad_sync 2 + 50, optimizer 100, trace_flush 5, dataload 10 + 10, Python between phases 7 x 3.
    assert dict(t["phases"][["phase", "time_s"]].values.tolist()) == pytest.approx(
        {"forward": 3022e-6, "backward": 6024e-6, "grad_sync": 52e-6, "optimizer": 100e-6, "trace_flush": 5e-6,
         "dataload": 20e-6, cp.NO_PHASE: 21e-6})
    by_category = t["items"].groupby("category")["time_s"].sum()
    # kernels: 3 forwards of 1000, 3 backwards of 2000, adamw 100; MPI: Recv 18 + 2 + 18, Isend 3 x 2, Wait 2 + 2,
    # Allreduce 50; serial code: the rest, 46.
    assert by_category.to_dict() == pytest.approx({"kernel": 9100e-6, "mpi": 98e-6, "serial": 46e-6})
    assert item(t, "MPI_Recv")["time_s"] == pytest.approx(38e-6)


@pytest.mark.parametrize("name", ["tiny_2threads", "tiny_2ranks_allreduce", "tiny_2ranks_overlap",
                                  "small_2ranks_sp_contiguous", "small_2ranks_sp_interleaved",
                                  "small_2ranks_pp2_1f1b", "small_2ranks_pp2_gpipe"])
def test_on_the_sample_traces_the_length_is_the_step_time(name):
    trace = load(SAMPLES / f"{name}.parquet")
    found, t = path_of(trace)
    steps = pd.DataFrame(t["steps"]).set_index("step")["length_s"]
    from analysis.steps import steps_table
    table = steps_table(trace).set_index("step")["seconds"]
    # every analyzed step's path is as long as the step, within 1 % (the real traces' clocks agree: exactly)
    assert (abs(steps / table.reindex(steps.index) - 1) < 0.01).all()
    assert t["clock_violations"] == 0 and abs(t["length_ratio"] - 1) < 0.01
    assert t["items"]["share"].sum() == pytest.approx(1.0)
    if "pp2" in name:
        # Both stages are on the path in every step, and it moves between them: warm-up forwards on stage 0,
        # the steady state on the slower last stage (it also runs the head and the loss), back to stage 0's last
        # backward; and the stage-1 share of the path shows it is the bottleneck.
        assert all(s["ranks"] == [0, 1] and s["switches"] >= 2 for s in t["steps"])
        lanes = t["lanes"].set_index("rank")["share"]
        assert lanes[1] > lanes[0]


def _kern(rows: list[tuple]) -> Records:
    """Kernel records from (rank, thread, start ns, end ns, name code, layer)."""
    cols = dict(zip(("rank", "thread", START_NS, END_NS, "name", "layer"), map(np.array, zip(*rows))))
    return Records(cols, ("a", "b"))


def test_kernel_regions_join_waits_for_the_last_end_then_the_lowest_thread():
    # rank 0: region [0,6] ends at 6 on threads 2 and 1 -> thread 1 (block from 2); [6,9] starts where it ends:
    # a region of its own; the zero-length record is left out. rank 1: [0,2] and [5,8], one record each.
    rows = [(0, 0, 0, 4, 0, 1), (0, 2, 1, 6, 0, 1), (0, 1, 2, 6, 0, 1), (0, 0, 6, 9, 1, -1), (0, 1, 7, 7, 1, -1),
            (1, 3, 5, 8, 1, 0), (1, 0, 0, 2, 0, 0)]
    out = cp.kernel_regions(_kern(rows))
    assert out.values.tolist() == [[0, 0, 6, 1, 2, 0, 1], [0, 6, 9, 0, 6, 1, -1], [1, 0, 2, 0, 0, 0, 0],
                                   [1, 5, 8, 3, 5, 1, 0]]
    assert (out.dtypes == np.int64).all()
    shuffled = _kern([rows[i] for i in (6, 3, 1, 5, 0, 4, 2)])              # the record order does not matter
    pd.testing.assert_frame_equal(cp.kernel_regions(shuffled), out)
    assert cp.kernel_regions(_kern([(0, 0, 3, 3, 0, 0)])).empty              # only zero-length records: no region


@pytest.mark.parametrize("name", ["small_8ranks_3d", "small_2ranks_pp2_1f1b", "tiny_2ranks_overlap"])
def test_the_tiling_by_blocks_of_ranks_is_the_tiling_of_all(name, monkeypatch):
    trace = load(SAMPLES / f"{name}.parquet")
    window = select(trace)
    calls = mpi.calls(trace, window)
    regions = cp.kernel_regions(segments.kernel_records(trace, window))
    ranks = np.r_[cp.main_threads(trace).index.to_numpy(), 97, 98]      # and two ranks with no records at all
    quiet = ranks[len(ranks) // 2 - 1]                                    # and one in the middle, when it has none
    cases = [(regions, calls), (regions[regions[RANK] != quiet], calls[calls[RANK] != quiet].reset_index(drop=True))]
    for regs, cs in cases:
        whole = cp._tiling(regs, cs, ranks, window.t0_ns, window.t1_ns)
        with monkeypatch.context() as m:
            m.setattr(cp, "_CHUNK", 3)       # a block of ranks starts at the rank of every third region
            blocks = cp._tiling(regs, cs, ranks, window.t0_ns, window.t1_ns)
        assert len(np.unique(regs[RANK].to_numpy()[3::3])) >= (2 if len(regs) == len(regions) else 1)  # blocks
        for field in ("rank", "start", "end", "kind", "ref", "prev_call", "ranks", "ptr"):
            assert np.array_equal(getattr(whole, field), getattr(blocks, field)), field
    path = cp.critical_path(trace, window).pieces
    monkeypatch.setattr(cp, "_CHUNK", 3)
    pd.testing.assert_frame_equal(cp.critical_path(trace, window).pieces, path, check_exact=True)
