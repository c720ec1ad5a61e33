"""Point-to-point MPI through TracedComm under real `mpiexec` (mpi/p2p_session.py: 2 ranks on the world, 3 ranks in
a ring on a Split sub-communicator whose rank order is the world's reversed), recorded by a real trace session.

Checked: every record's call name, Paraver state, peer (a world rank), bytes, tag, communicator and micro-batch;
the late sender's receiver waits in state 3 for about the sender's sleep; the message invariants; the Paraver
export's 3: records carry the tags and the import gives the calls back; `analyze` (and `gpt2trace analyze`) finds
the Late Sender waits and blames the late rank, in the MPI_Wait of an Irecv too.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from analysis import mpi, rootcause, segments, waits
from analysis.analyze import analyze
from analysis.window import select
from gpt2trace.format import schema as S
from gpt2trace.format.reader import check_states, load
from gpt2trace.format.schema import State
from gpt2trace.interop.loader import load as load_any
from gpt2trace.interop.paraver_export import export_paraver
from gpt2trace.testing.invariants import check_messages, records

SCRIPT = Path(__file__).parent / "mpi" / "p2p_session.py"
LATE_S = 0.3                    # the script's sleep of the late sender
LONG_NS = int(0.25e9)           # a wait for it: the sleep, less the start skew the untraced barrier leaves (us)
SEND, RECV, ISEND, IRECV = State.BLOCKING_SEND, State.WAITING_A_MESSAGE, State.IMMEDIATE_SEND, State.IMMEDIATE_RECEIVE
WAIT, SENDRECV = State.WAIT_WAITALL, State.SEND_RECEIVE
W = None                        # no peer, bytes or tag: a wait

# Per world rank, in time order: (call, state, peer, bytes, tag, communicator, microstep), from the script's docstring.
PAIR = {
    0: [("MPI_Send", SEND, 1, 4000, 11, 0, 0),                  # late: 1000 floats after LATE_S
        ("MPI_Isend", ISEND, 1, 800, 20, 0, 1), ("MPI_Recv", RECV, 1, 1200, 21, 0, 1),
        ("MPI_Wait", WAIT, W, W, W, 0, 1),
        ("MPI_Send", SEND, 1, 2400, 13, 0, 2),                  # late again, into rank 1's Irecv
        ("MPI_Sendrecv", SENDRECV, 1, 512, 30, 0, 3),
        ("MPI_Send", SEND, 1, 2000, 14, 0, 4)],
    1: [("MPI_Recv", RECV, 0, 4000, 11, 0, 0),                  # waits ~LATE_S
        ("MPI_Isend", ISEND, 0, 1200, 21, 0, 1), ("MPI_Recv", RECV, 0, 800, 20, 0, 1),
        ("MPI_Wait", WAIT, W, W, W, 0, 1),
        ("MPI_Irecv", IRECV, 0, 2400, 13, 0, 2), ("MPI_Wait", WAIT, W, W, W, 0, 2),       # waits ~LATE_S
        ("MPI_Sendrecv", SENDRECV, 0, 512, 31, 0, 3),
        # ANY_SOURCE, ANY_TAG into 1024 floats: the actual source, tag and size (500 floats) from the status
        ("MPI_Recv", RECV, 0, 2000, 14, 0, 4)],
}
# The ring: sub rank s = 2 - world rank; right = s + 1, left = s - 1 (mod 3), so in world ranks rank w sends to
# w - 1 and receives from w + 1 (mod 3): 0 -> 2 -> 1 -> 0. Tags name the sending sub rank. The communicator's id:
# the run's first Split (1) x world size (3) + its lowest world rank (0) = 3.
RING = {
    0: [("MPI_Sendrecv", SENDRECV, 2, 1024, 42, 3, 0),
        ("MPI_Recv", RECV, 1, 400, 51, 3, 1), ("MPI_Send", SEND, 2, 400, 52, 3, 1),
        ("MPI_Irecv", IRECV, 1, 256, 61, 3, 2), ("MPI_Isend", ISEND, 2, 256, 62, 3, 2),
        ("MPI_Wait", WAIT, W, W, W, 3, 2), ("MPI_Wait", WAIT, W, W, W, 3, 2)],
    1: [("MPI_Sendrecv", SENDRECV, 0, 1024, 41, 3, 0),
        ("MPI_Recv", RECV, 2, 400, 50, 3, 1),                   # waits ~LATE_S for sub rank 0 (world 2)
        ("MPI_Send", SEND, 0, 400, 51, 3, 1),
        ("MPI_Irecv", IRECV, 2, 256, 60, 3, 2), ("MPI_Isend", ISEND, 0, 256, 61, 3, 2),
        ("MPI_Wait", WAIT, W, W, W, 3, 2), ("MPI_Wait", WAIT, W, W, W, 3, 2)],
    2: [("MPI_Sendrecv", SENDRECV, 1, 1024, 40, 3, 0),
        ("MPI_Send", SEND, 1, 400, 50, 3, 1),                   # late: after LATE_S
        ("MPI_Recv", RECV, 0, 400, 52, 3, 1),
        ("MPI_Irecv", IRECV, 0, 256, 62, 3, 2), ("MPI_Isend", ISEND, 1, 256, 60, 3, 2),
        ("MPI_Wait", WAIT, W, W, W, 3, 2), ("MPI_Wait", WAIT, W, W, W, 3, 2)],
}
EXPECTED = {2: PAIR, 3: RING}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    made = {}
    for ranks in EXPECTED:
        path = tmp_path_factory.mktemp(f"p2p{ranks}") / "trace.parquet"
        out = subprocess.run(["mpiexec", "-n", str(ranks), sys.executable, str(SCRIPT), str(path)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        made[ranks] = path
    return made


def _calls(trace):
    c = records(trace, S.Kind.COMM).sort_values([S.RANK, S.START_NS], kind="stable").reset_index(drop=True)
    return c.astype(object).where(c.notna(), None)


def _main_state(trace, rank: int, start: int, end: int) -> list[int]:
    """The states of rank's main thread over [start, end)."""
    st = records(trace, S.Kind.STATE)
    st = st[(st[S.RANK] == rank) & (st[S.THREAD] == 0) & (st[S.END_NS] > start) & (st[S.START_NS] < end)]
    return [int(s) for s in st[S.STATE]]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", list(EXPECTED))
def test_every_record(traces, ranks):
    trace = load(traces[ranks])
    assert trace.version == S.SCHEMA_VERSION
    c = _calls(trace)
    for rank, want in EXPECTED[ranks].items():
        mine = c[c[S.RANK] == rank]
        got = [(r[S.NAME], _main_state(trace, rank, r[S.START_NS], r[S.END_NS]), r[S.PEER], r[S.BYTES], r[S.TAG],
                r[S.COMMUNICATOR], r[S.MICROSTEP]) for _, r in mine.iterrows()]
        assert got == [(n, [int(st)], *rest) for n, st, *rest in want], rank
        assert set(mine[S.STEP]) == {0} and set(mine[S.SEQ]) == {None}      # seq is the collectives' sequence
    if ranks == 3:
        ring = trace.communicators[3]
        assert (ring.name, ring.ranks) == ("ring", (2, 1, 0))               # sub rank s is world rank 2 - s


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,rank,name,microstep", [(2, 1, "MPI_Recv", 0), (2, 1, "MPI_Wait", 2),
                                                       (3, 1, "MPI_Recv", 1)])
def test_the_late_senders_receiver_waits(traces, ranks, rank, name, microstep):
    c = _calls(load(traces[ranks]))
    call = c[(c[S.RANK] == rank) & (c[S.NAME] == name) & (c[S.MICROSTEP] == microstep)]
    assert len(call) == 1
    assert LONG_NS <= call[S.END_NS].iloc[0] - call[S.START_NS].iloc[0] < int(LATE_S * 1e9) + int(0.5e9)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", list(EXPECTED))
def test_invariants(traces, ranks):
    trace = load(traces[ranks])
    check_messages(trace)
    assert check_states(trace) == []
    st = records(trace, S.Kind.STATE)
    for (rank, thread), g in st.groupby([S.RANK, S.THREAD]):
        g = g.sort_values(S.START_NS)
        assert (g[S.START_NS].to_numpy()[1:] == g[S.END_NS].to_numpy()[:-1]).all(), (rank, thread)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", list(EXPECTED))
def test_paraver_export_carries_the_tags_and_imports_back(traces, ranks, tmp_path):
    out = export_paraver(traces[ranks], tmp_path / "t")
    lines = [ln.split(":") for ln in out.prv.read_text().splitlines() if ln.startswith("3:")]
    # one 3: record per message: each send of the script (Sendrecv halves included) -> 7 (pair), 9 (ring)
    assert out.messages == len(lines) == {2: 7, 3: 9}[ranks]
    sends = [(r, n, p, b, t) for r, calls in EXPECTED[ranks].items() for n, _, p, b, t, _, _ in calls
             if n in ("MPI_Send", "MPI_Isend", "MPI_Sendrecv")]
    # fields: 3:cpu:appl:task:thread:lsend:psend:cpu:appl:task:thread:lrecv:precv:size:tag (task = rank + 1)
    assert sorted((int(f[3]) - 1, int(f[9]) - 1, int(f[13]), int(f[14])) for f in lines) == sorted(
        (r, p, b, t) for r, _, p, b, t in sends)
    original, back = _calls(load(traces[ranks])), _calls(load_any(out.prv))
    cols = [S.RANK, S.START_NS, S.END_NS, S.NAME, S.PEER, S.BYTES, S.TAG, S.SEQ, S.COMMUNICATOR, S.STEP, S.MICROSTEP]
    assert back[cols].values.tolist() == original[cols].values.tolist()


@pytest.mark.mpi
@pytest.mark.parametrize("ranks,late", [(2, 0), (3, 2)])
def test_analyze_finds_the_late_sender(traces, ranks, late):
    result = analyze(load(traces[ranks]))
    states = {w["wait_state"]: w["wait_s"] for w in result["waits"]["states"]}
    assert states["Late Sender"] >= LONG_NS / 1e9
    # the late rank is blamed for the receive that waited for it (pair: rank 1's Recv; ring: world rank 1's Recv;
    # in the ring rank 0's Recv then waits as long for rank 1, which the analysis charges to rank 1)
    caused = {c["rank"]: c["wait_s"] for c in result["root_causes"]}
    assert caused[late] >= LONG_NS / 1e9
    from gpt2trace.cli.main import app
    run = CliRunner().invoke(app, ["analyze", str(traces[ranks]), "--json", "-"])
    assert run.exit_code == 0, run.output
    assert json.loads(run.stdout)["waits"]["states"] == result["waits"]["states"]


@pytest.mark.mpi
def test_the_wait_of_a_late_senders_irecv_is_a_late_sender(traces):
    """Pair pattern 2: rank 1 posts MPI_Irecv and waits in MPI_Wait while rank 0 sleeps LATE_S before sending."""
    trace = load(traces[2])
    window = select(trace)
    calls = mpi.calls(trace, window)
    late = waits.wait_states(calls)
    late = late[late["wait_state"] == waits.LATE_SENDER]
    rec = _calls(trace)
    wait = rec[(rec[S.RANK] == 1) & (rec[S.NAME] == "MPI_Wait") & (rec[S.MICROSTEP] == 2)].iloc[0]
    at = late[calls[S.START_NS].to_numpy()[late["row"].to_numpy()] == wait[S.START_NS]]
    assert len(at) == 1 and calls[S.NAME].iloc[int(at["row"].iloc[0])] == "MPI_Wait"
    assert (int(at["rank"].iloc[0]), int(at["culprit"].iloc[0])) == (1, 0)
    assert at["wait_ns"].iloc[0] >= LONG_NS
    # charged to rank 0, which slept outside any kernel before its send
    segs = segments.segments(segments.kernel_records(trace, window))
    causes = rootcause.root_causes(calls, at, segs, window)
    assert causes[["rank", "kernel"]].values.tolist() == [[0, rootcause.OUTSIDE]]
    assert causes["wait_s"].sum() >= LONG_NS / 1e9


class _Sink:
    """What the tracer would get: the comm calls' arguments."""

    def __init__(self):
        self.calls = []

    def comm(self, name, start_ns, end_ns, nbytes, peer, seq, state, communicator, tag=None):
        assert end_ns >= start_ns
        self.calls.append((name, nbytes, peer, seq, int(state), communicator, tag))

    def communicator(self, comm):
        pass


def test_on_one_process_wildcards_and_proc_null():
    """On MPI_COMM_SELF (no mpiexec): a message to itself, a wildcard receive resolved from its status, partners
    MPI_PROC_NULL (no message: no peer, no tag; a Sendrecv to no one sends 0 bytes), and an Irecv without an
    explicit source and tag refused (its record is made before the message is known)."""
    from mpi4py import MPI

    from gpt2trace.record.traced_comm import TracedComm
    sink = _Sink()
    comm = TracedComm(MPI.COMM_SELF, sink)
    buf = np.zeros(8, np.float64)
    req = comm.Isend(np.arange(4, dtype=np.float64), 0, 9)          # 32 bytes to itself
    comm.Recv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG)
    comm.Wait(req)
    assert buf[:4].tolist() == [0, 1, 2, 3]
    comm.Send(np.zeros(3, np.float32), MPI.PROC_NULL, 5)
    comm.Recv(buf, MPI.PROC_NULL, 5)
    comm.Sendrecv(np.zeros(2, np.float32), MPI.PROC_NULL, 1, buf, MPI.PROC_NULL, 2)
    comm.Sendrecv(np.ones(2, np.float32), 0, 3, np.zeros(2, np.float32), 0, 3)
    assert sink.calls == [
        ("MPI_Isend", 32, 0, None, ISEND, 0, 9), ("MPI_Recv", 32, 0, None, RECV, 0, 9),
        ("MPI_Wait", None, None, None, WAIT, 0, None),
        ("MPI_Send", 12, None, None, SEND, 0, None), ("MPI_Recv", 0, None, None, RECV, 0, None),
        ("MPI_Sendrecv", 0, None, None, SENDRECV, 0, None), ("MPI_Sendrecv", 8, 0, None, SENDRECV, 0, 3)]
    for source, tag in ((MPI.ANY_SOURCE, 1), (0, MPI.ANY_TAG), (0, None)):
        with pytest.raises(ValueError, match="a traced Irecv needs an explicit source and tag"):
            comm.Irecv(buf, source, tag)
    assert len(sink.calls) == 7
