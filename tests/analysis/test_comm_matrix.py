"""The communication matrix: a hand-checked 3-rank trace (collectives of every class and point-to-point), the
seconds adding up on a real pipeline trace, and a trace without MPI."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from analysis import mpi
from analysis.analyze import analyze
from analysis.comm_matrix import comm_matrix
from analysis.window import select
from gpt2trace.format import communicators as comms
from gpt2trace.format.mpi_calls import COLL, RECV, SEND, SENDRECV
from gpt2trace.format.reader import Trace, load
from gpt2trace.testing import synthetic as syn

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def three_ranks() -> Trace:
    c = syn.comm
    recs = [syn.phase(r, 0, 12, "forward", 0) for r in range(3)]
    recs += [
        # Allreduce of 100 bytes on the world: rank 0 in it 4 s, rank 1 2 s, rank 2 1 s
        c(0, 0, 4, "MPI_Allreduce", seq=0, nbytes=100), c(1, 2, 4, "MPI_Allreduce", seq=0, nbytes=100),
        c(2, 3, 4, "MPI_Allreduce", seq=0, nbytes=100),
        # Bcast of 40 bytes from rank 2: 1, 2, 0.5 s
        c(0, 4, 5, "MPI_Bcast", seq=1, nbytes=40, peer=2), c(1, 4, 6, "MPI_Bcast", seq=1, nbytes=40, peer=2),
        c(2, 4, 4.5, "MPI_Bcast", seq=1, nbytes=40, peer=2),
        # Allgather into 300 bytes (100 from each rank), 0.6 s each
        *(c(r, 6, 6.6, "MPI_Allgather", seq=2, nbytes=300) for r in range(3)),
        # Reduce of 8 bytes onto rank 0, 1 s each
        *(c(r, 7, 8, "MPI_Reduce", seq=3, nbytes=8, peer=0) for r in range(3)),
        # on the pipeline communicator (id 5): 1000 bytes 0 -> 1 (Send 1 s, Recv 2 s), 500 bytes 1 -> 0 (Isend and
        # Irecv 0.1 s each; their waits name no peer)
        c(0, 8, 9, "MPI_Send", nbytes=1000, peer=1, communicator=5),
        c(1, 8, 10, "MPI_Recv", nbytes=1000, peer=0, communicator=5),
        c(1, 10, 10.1, "MPI_Isend", nbytes=500, peer=0, communicator=5),
        c(0, 10, 10.1, "MPI_Irecv", nbytes=500, peer=1, communicator=5),
        c(0, 10.1, 11, "MPI_Wait", communicator=5), c(1, 10.1, 11, "MPI_Wait", communicator=5),
        # a send that no receive matches: no message
        c(2, 11, 12, "MPI_Send", nbytes=7, peer=0),
    ]
    table = [comms.world(range(3)), comms.Communicator(5, "pp", (0, 1))]
    return Trace.from_table(syn.from_records(recs, comms.to_metadata(table)))


def test_three_ranks_hand_checked():
    trace = three_ranks()
    out = comm_matrix(mpi.calls(trace, select(trace)))
    got = {(r["group"], r["src"], r["dst"]): (r["bytes"], r["messages"], r["time_s"])
           for r in out["communicators"].to_dict("records")}
    # Each call's seconds are shared among the pairs its rank is an end of: an allreduce of 3 ranks, 4 pairs
    # (so rank 0 gives 4/4 to each of its pairs, rank 1 2/4, rank 2 1/4); the bcast root 2 pairs, the others 1.
    # (0,1): allreduce 100 + allgather 300/3; 1 + 0.5, + 0.15 + 0.15
    # (1,0): the same + the reduce's 8 bytes; + 1 (rank 1's whole reduce) + 1/2 (rank 0's, over 2 pairs)
    # (0,2): 200; 1 + 0.25 + 0.3.  (1,2): 200; 0.5 + 0.25 + 0.3
    # (2,0): 100 + bcast 40 + 100 + 8; 1.25 + (0.25 + 1) + 0.3 + (1 + 0.5)
    # (2,1): 100 + 40 + 100; 0.75 + (0.25 + 2) + 0.3
    # pp: Send + Recv = 3 s; Isend + Irecv 0.2 s; the unmatched send (2 -> 0) is no message
    assert got == {
        ("world", 0, 1): (200, 2, pytest.approx(1.8)), ("world", 1, 0): (208, 3, pytest.approx(3.3)),
        ("world", 0, 2): (200, 2, pytest.approx(1.55)), ("world", 1, 2): (200, 2, pytest.approx(1.05)),
        ("world", 2, 0): (248, 4, pytest.approx(4.3)), ("world", 2, 1): (240, 3, pytest.approx(3.3)),
        ("pp", 0, 1): (1000, 1, pytest.approx(3.0)), ("pp", 1, 0): (500, 1, pytest.approx(0.2))}
    assert out["communicators"]["communicator"].tolist()[:2] == [5, 5]        # by bytes: the pipeline's first
    pairs = out["pairs"].set_index(["src", "dst"])
    # summed over communicators: (0,1) 1200 bytes of which 1000 point-to-point, 3 messages, 4.8 s
    assert pairs.loc[(0, 1), ["bytes", "messages", "p2p_bytes", "collective_bytes"]].tolist() == [1200, 3, 1000, 200]
    assert pairs.loc[(0, 1), "time_s"] == pytest.approx(4.8)
    assert pairs.loc[(1, 0), ["bytes", "p2p_bytes"]].tolist() == [708, 500]
    assert list(out["pairs"]["bytes"]) == sorted(out["pairs"]["bytes"], reverse=True)


def test_scatter_scan_and_reduce_scatter():
    c = syn.comm
    # Scatter from rank 0: each rank records the 30 bytes it gets; Scan of 5 bytes: only 0->1, 0->2, 1->2;
    # Reduce_scatter of a 90-byte vector: 30 bytes for each other rank.
    recs = [syn.phase(r, 0, 3, "forward", 0) for r in range(3)]
    recs += [c(r, 0, 1, "MPI_Scatter", seq=0, nbytes=30, peer=0) for r in range(3)]
    recs += [c(r, 1, 2, "MPI_Scan", seq=1, nbytes=5) for r in range(3)]
    recs += [c(r, 2, 3, "MPI_Reduce_scatter", seq=2, nbytes=90) for r in range(3)]
    trace = Trace.from_table(syn.from_records(recs))
    pairs = comm_matrix(mpi.calls(trace, select(trace)))["pairs"].set_index(["src", "dst"])["bytes"].to_dict()
    assert pairs == {(0, 1): 30 + 5 + 30, (0, 2): 30 + 5 + 30, (1, 2): 5 + 30, (1, 0): 30, (2, 0): 30, (2, 1): 30}


def test_seconds_add_up_to_the_data_calls_of_a_pipeline():
    trace = load(SAMPLES / "small_2ranks_pp2_1f1b.parquet")
    calls = mpi.calls(trace, select(trace, "0:100"))
    out = comm_matrix(calls)
    # every blocking collective and matched point-to-point call is shared out whole; waits and postings are not
    carry = calls["op"].isin((COLL, SEND, RECV, SENDRECV)) | (calls["recv_of"] >= 0) | (calls["send_of"] >= 0)
    seconds = ((calls["end_ns"] - calls["start_ns"])[carry]).sum() / 1e9
    assert out["pairs"]["time_s"].sum() == pytest.approx(seconds)
    assert out["communicators"]["time_s"].sum() == pytest.approx(seconds)
    # every micro-batch's activations and gradients: the point-to-point bytes each way are the sends' bytes
    sends = calls[calls["recv_of"] >= 0]
    for src in (0, 1):
        sent = int(sends.loc[sends["rank"] == src, "bytes"].sum())
        assert out["pairs"].set_index("src").loc[src, "p2p_bytes"] == sent > 0


def test_no_mpi_no_rows_and_analyze_has_the_key():
    result = analyze(Trace.from_table(syn.generate(syn.SyntheticConfig(ranks=1, threads=2, steps=3))))
    assert result["comm_matrix"] == {"communicators": [], "pairs": []}
    rows = analyze(three_ranks(), steps="0:1")["comm_matrix"]["pairs"]
    assert {(r["src"], r["dst"]) for r in rows} == {(a, b) for a in range(3) for b in range(3) if a != b}
    assert all(isinstance(r["bytes"], int) and np.isfinite(r["time_s"]) for r in rows)
