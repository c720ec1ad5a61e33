"""A traced stand-in for an mpi4py communicator: every MPI call becomes a `comm` record and an MPI state.

The strategies in trainer.dp and the sequence-parallel exchange (trainer.parallel.sequence) call Allreduce, Reduce,
Bcast, Iallreduce, Waitall, Reduce_scatter, Reduce_scatter_block, Allgather, Allgatherv and Scatter on whatever
communicator they are given, the pipeline stages Send, Recv, Isend, Irecv, Wait and Sendrecv, and the rank grid
(trainer.parallel.grid) Splits it into sub-communicators and names them with Set_name. This proxy times each call
on the calling (main) thread, as Extrae does, and hands the tracer: the MPI call's name, bytes, peer (the root of a
rooted collective, or a message's partner, as a world rank), the communicator's id, its collective sequence number
(per communicator, so the same call can be matched across its ranks; none for point-to-point calls), a message's
tag, and the Paraver state the thread is in meanwhile (Extrae's: Blocking Send, Waiting a message, Immediate
Send/Receive, Wait/WaitAll, Send Receive, Group Communication). Worker threads are outside parallel regions, hence
Idle, meanwhile.

Point-to-point calls have mpi4py's buffer-API signatures and defaults. A blocking receive (Recv, Sendrecv) may name
MPI.ANY_SOURCE or MPI.ANY_TAG: the record gets the actual source, tag and received size from its MPI.Status. An
Irecv's record is made when it is posted, before any status exists, so it needs an explicit source and tag. A
partner that is MPI.PROC_NULL is no message: the record has no peer and no tag.

A Split's groups get their ids as gpt2trace/format/communicators.py defines them (creation order x world size +
lowest world rank: the same on every member, no communication), and the sink learns each communicator's name
and world ranks (`communicator`), which the trace's metadata lists.
"""
from __future__ import annotations

import time
from typing import Protocol

import numpy as np

from gpt2trace.format import communicators as comms
from gpt2trace.format import mpi_calls
from gpt2trace.format.schema import State
from gpt2trace.record.network import Cluster, hold


class CommSink(Protocol):
    def comm(self, name: str, start_ns: int, end_ns: int, nbytes: int | None, peer: int | None,
             seq: int | None, state: int, communicator: int, tag: int | None = None) -> None: ...

    def communicator(self, comm: comms.Communicator) -> None: ...


def _nbytes(buf) -> int:
    """Bytes of an mpi4py buffer spec: an array, or [array, ...] / [array, counts, displs, type]."""
    if buf is None or isinstance(buf, type(None)):
        return 0
    arr = buf[0] if isinstance(buf, (list, tuple)) else buf
    return int(np.asarray(arr).nbytes) if not isinstance(arr, (int, float)) else 0


class _Family:
    """What every communicator derived from one world shares: its size, how many creating calls were made, and the
    emulated network (gpt2trace.record.network) with the node of every world rank, if any."""

    def __init__(self, world_size: int, network: Cluster | None = None, world_rank: int = 0):
        self.world_size, self.created = world_size, 0
        self.network, self.world_rank = network, world_rank
        self.node_of = network.placement(world_size) if network is not None else None


class TracedComm:
    """`network`: hold every call for the extra time that emulated network would add (gpt2trace.record.network)."""

    def __init__(self, comm, sink: CommSink, *, network: Cluster | None = None, _family: _Family | None = None,
                 _info: comms.Communicator | None = None):
        from mpi4py import MPI
        self.comm, self.sink, self.MPI = comm, sink, MPI
        self.family = _family or _Family(comm.Get_size(), network, comm.Get_rank())
        self._posted: list[tuple[int, float]] = []   # nonblocking collectives: (posting time, network cost)
        self.info = _info or comms.world(range(comm.Get_size()))
        self.seq = 0   # collectives posted on this communicator, in order: identical on every rank of it
        self._request_seq: dict[int, int] = {}   # id of a pending Iallreduce's request -> its seq (for MPI_Test)
        sink.communicator(self.info)

    def __getattr__(self, name):
        return getattr(self.comm, name)

    @property
    def id(self) -> int:
        return self.info.id

    def _collective(self, name: str, nbytes: int, root: int | None, call, state: int = State.GROUP_COMMUNICATION):
        seq = self.seq
        self.seq += 1
        t0 = time.monotonic_ns()
        out = call()
        peer = None if root is None else self.info.ranks[root]
        net = self.family.network
        if net is not None:
            cost = net.cost(name, nbytes, self.info.ranks, peer, self.family.node_of)
            if name in mpi_calls.NONBLOCKING_COLLECTIVES:
                self._posted.append((t0, cost))       # its Waitall holds for it
            elif cost > 0:
                hold(cost, time.monotonic_ns())
        self.sink.comm(name, t0, time.monotonic_ns(), nbytes, peer, seq, state, self.info.id)
        return out

    def _hold_posted(self) -> None:
        """At a Waitall: until every nonblocking collective posted since has had its network time."""
        if self._posted:
            t, cost = max(self._posted, key=lambda p: p[0] + p[1] * 1e9)
            self._posted = []
            hold(cost, t)

    def _hold_message(self, partner_world: int, nbytes: int, name: str) -> None:
        net = self.family.network
        if net is not None:
            cost = net.cost(name, nbytes, (), None, self.family.node_of, partner_world, self.family.world_rank)
            if cost > 0:
                hold(cost, time.monotonic_ns())

    def _data(self, sendbuf, recvbuf):
        return _nbytes(recvbuf) if sendbuf is self.MPI.IN_PLACE else _nbytes(sendbuf)

    # -- communicators --------------------------------------------------------------------------------
    def Split(self, color: int = 0, key: int = 0):
        """A sub-communicator, traced like this one (with its own collective sequence); None where MPI gives
        MPI_COMM_NULL (color MPI_UNDEFINED). Collective over this communicator, as MPI_Comm_split is."""
        self.family.created += 1
        creation = self.family.created
        sub = self.comm.Split(color, key)
        if sub == self.MPI.COMM_NULL:
            return None
        mine, theirs = sub.Get_group(), self.comm.Get_group()
        parent = self.MPI.Group.Translate_ranks(mine, list(range(sub.Get_size())), theirs)
        mine.Free()
        theirs.Free()
        ranks = tuple(self.info.ranks[r] for r in parent)
        cid = comms.new_id(creation, self.family.world_size, ranks)
        return TracedComm(sub, self.sink, _family=self.family, _info=comms.Communicator(cid, f"comm{cid}", ranks))

    def Set_name(self, name: str) -> None:
        """MPI_Comm_set_name; the trace names the communicator so too."""
        self.comm.Set_name(name)
        self.info = comms.Communicator(self.info.id, name, self.info.ranks)
        self.sink.communicator(self.info)

    # -- collectives ----------------------------------------------------------------------------------
    def Allreduce(self, sendbuf, recvbuf, op=None):
        return self._collective("MPI_Allreduce", self._data(sendbuf, recvbuf), None,
                                lambda: self.comm.Allreduce(sendbuf, recvbuf, op=op or self.MPI.SUM))

    def Reduce(self, sendbuf, recvbuf, op=None, root: int = 0):
        return self._collective("MPI_Reduce", self._data(sendbuf, recvbuf), root,
                                lambda: self.comm.Reduce(sendbuf, recvbuf, op=op or self.MPI.SUM, root=root))

    def Bcast(self, buf, root: int = 0):
        return self._collective("MPI_Bcast", _nbytes(buf), root, lambda: self.comm.Bcast(buf, root=root))

    def Scatter(self, sendbuf, recvbuf, root: int = 0):
        return self._collective("MPI_Scatter", _nbytes(recvbuf), root,
                                lambda: self.comm.Scatter(sendbuf, recvbuf, root=root))

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=None):
        return self._collective("MPI_Reduce_scatter", _nbytes(sendbuf), None,
                                lambda: self.comm.Reduce_scatter(sendbuf, recvbuf, recvcounts=recvcounts,
                                                                 op=op or self.MPI.SUM))

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=None):
        return self._collective("MPI_Reduce_scatter_block", _nbytes(sendbuf), None,
                                lambda: self.comm.Reduce_scatter_block(sendbuf, recvbuf, op=op or self.MPI.SUM))

    def Allgather(self, sendbuf, recvbuf):
        return self._collective("MPI_Allgather", _nbytes(recvbuf), None,
                                lambda: self.comm.Allgather(sendbuf, recvbuf))

    def Allgatherv(self, sendbuf, recvbuf):
        return self._collective("MPI_Allgatherv", _nbytes(recvbuf), None,
                                lambda: self.comm.Allgatherv(sendbuf, recvbuf))

    def Gatherv(self, sendbuf, recvbuf, root: int = 0):
        # a checkpoint gathers ZeRO-1's moment shards (trainer.training_state)
        return self._collective("MPI_Gatherv", _nbytes(sendbuf), root,
                                lambda: self.comm.Gatherv(sendbuf, recvbuf, root=root))

    def Barrier(self):
        return self._collective("MPI_Barrier", 0, None, self.comm.Barrier)

    def Iallreduce(self, sendbuf, recvbuf, op=None):
        # the posting: short, but it carries the seq that the matching Waitall (or successful Test) completes
        request = self._collective("MPI_Iallreduce", self._data(sendbuf, recvbuf), None,
                                   lambda: self.comm.Iallreduce(sendbuf, recvbuf, op=op or self.MPI.SUM))
        self._request_seq[id(request)] = self.seq - 1
        return request

    def Test(self, request) -> bool:
        """MPI_Test of a nonblocking collective's request: recorded (Test/Probe state, the posting's seq) only when
        it completes the request; a poll that finds it in flight is not recorded (the task runtime counts them)."""
        t0 = time.monotonic_ns()
        done = request.Test()
        if done:
            self._hold_posted()
            seq = self._request_seq.pop(id(request), None)
            self.sink.comm(mpi_calls.TEST, t0, time.monotonic_ns(), None, None, seq, State.TEST_PROBE, self.info.id)
        return done

    def Waitall(self, requests) -> None:
        t0 = time.monotonic_ns()
        self.MPI.Request.Waitall(requests)
        for r in requests:
            self._request_seq.pop(id(r), None)
        self._hold_posted()
        self.sink.comm("MPI_Waitall", t0, time.monotonic_ns(), None, None, None, State.WAIT_WAITALL, self.info.id)

    # -- point to point -------------------------------------------------------------------------------
    def Wait(self, request, status=None) -> None:
        """MPI_Wait on a request of Isend or Irecv: Wait/WaitAll meanwhile. Call it here, not as request.Wait(),
        which MPI would run untraced."""
        t0 = time.monotonic_ns()
        request.Wait(status)
        self.sink.comm("MPI_Wait", t0, time.monotonic_ns(), None, None, None, State.WAIT_WAITALL, self.info.id)

    def Send(self, buf, dest: int, tag: int = 0) -> None:
        return self._p2p("MPI_Send", State.BLOCKING_SEND, _nbytes(buf), dest, tag,
                         lambda: self.comm.Send(buf, dest, tag))

    def Isend(self, buf, dest: int, tag: int = 0):
        return self._p2p("MPI_Isend", State.IMMEDIATE_SEND, _nbytes(buf), dest, tag,
                         lambda: self.comm.Isend(buf, dest, tag))

    def Irecv(self, buf, source: int | None = None, tag: int | None = None):
        MPI = self.MPI
        if source in (None, MPI.ANY_SOURCE) or tag in (None, MPI.ANY_TAG):
            raise ValueError("a traced Irecv needs an explicit source and tag (its record is made when it is "
                             "posted, before the message is known); use Recv for MPI.ANY_SOURCE or MPI.ANY_TAG")
        # the buffer's size: the message may be shorter, which only its Wait's status would tell
        return self._p2p("MPI_Irecv", State.IMMEDIATE_RECEIVE, _nbytes(buf), source, tag,
                         lambda: self.comm.Irecv(buf, source, tag))

    def Recv(self, buf, source: int | None = None, tag: int | None = None, status=None) -> None:
        MPI = self.MPI
        status = status if status is not None else MPI.Status()
        source = MPI.ANY_SOURCE if source is None else source
        tag = MPI.ANY_TAG if tag is None else tag
        t0 = time.monotonic_ns()
        self.comm.Recv(buf, source, tag, status)
        if self.family.network is not None and status.Get_source() != MPI.PROC_NULL:
            self._hold_message(self.info.ranks[status.Get_source()], status.Get_count(MPI.BYTE), "MPI_Recv")
        t1 = time.monotonic_ns()
        self._record("MPI_Recv", State.WAITING_A_MESSAGE, t0, t1, status.Get_count(MPI.BYTE), status.Get_source(),
                     status.Get_tag())

    def Sendrecv(self, sendbuf, dest: int, sendtag: int = 0, recvbuf=None, source: int | None = None,
                 recvtag: int | None = None, status=None) -> None:
        """One record: peer and tag of its send half (the trace keeps one partner, as Extrae's send record does),
        or of the message it received when it sends to MPI.PROC_NULL; bytes sent."""
        MPI = self.MPI
        status = status if status is not None else MPI.Status()
        source = MPI.ANY_SOURCE if source is None else source
        recvtag = MPI.ANY_TAG if recvtag is None else recvtag
        t0 = time.monotonic_ns()
        self.comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag, status)
        if self.family.network is not None and status.Get_source() != MPI.PROC_NULL:
            self._hold_message(self.info.ranks[status.Get_source()], status.Get_count(MPI.BYTE), "MPI_Sendrecv")
        t1 = time.monotonic_ns()
        peer, tag = (dest, sendtag) if dest != MPI.PROC_NULL else (status.Get_source(), status.Get_tag())
        self._record("MPI_Sendrecv", State.SEND_RECEIVE, t0, t1, _nbytes(sendbuf) if dest != MPI.PROC_NULL else 0,
                     peer, tag)

    def _p2p(self, name: str, state: int, nbytes: int, partner: int, tag: int, call):
        t0 = time.monotonic_ns()
        out = call()
        self._record(name, state, t0, time.monotonic_ns(), nbytes, partner, tag)
        return out

    def _record(self, name: str, state: int, t0: int, t1: int, nbytes: int, partner: int, tag: int) -> None:
        """A point-to-point call over [t0, t1); `partner` a rank of this communicator."""
        if partner == self.MPI.PROC_NULL:
            peer, tag = None, None
        else:
            peer = self.info.ranks[partner]
        self.sink.comm(name, t0, t1, nbytes, peer, None, state, self.info.id, tag)
