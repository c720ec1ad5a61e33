"""Run under mpiexec by tests/gpt2trace/record/test_traced_p2p.py: point-to-point MPI through TracedComm, recorded
by a real trace session (clock sync, parts, merge) into the trace at argv[1].

One step; each micro-batch (the tracer's microstep) is one pattern, inside a `forward` phase. Sizes are float32
counts, so bytes = 4 x count. With 2 ranks (world communicator; `other` is the other rank):
  0  late sender: rank 0 sleeps LATE_S, then MPI_Send 1000 floats tag 11; rank 1 MPI_Recv waits for it
  1  exchange: MPI_Isend (rank 0: 200 floats tag 20, rank 1: 300 floats tag 21), MPI_Recv of the other's, MPI_Wait
  2  Irecv + Wait: rank 1 posts MPI_Irecv of 600 floats tag 13 and waits (MPI_Wait) while rank 0 sleeps LATE_S,
     then rank 0 MPI_Sends them
  3  MPI_Sendrecv: 128 floats to the other, tag 30 + own rank, receiving the other's
  4  wildcards: rank 0 MPI_Send 500 floats tag 14; rank 1 MPI_Recv with ANY_SOURCE and ANY_TAG into 1024 floats
With 3 ranks, on `ring`, a sub-communicator from Split(color 0, key -rank) (its rank s is world rank 2 - s), so
peers are translated: right = sub rank s + 1, left = s - 1 (mod 3):
  0  MPI_Sendrecv ring: 256 floats to the right, tag 40 + s, receiving the left's
  1  MPI_Send / MPI_Recv ring, sub rank 0 late: it sleeps LATE_S, sends 100 floats tag 50 + s to the right, then
     receives from the left; the others receive from the left first, then send
  2  MPI_Irecv from the left (tag 60 + left) and MPI_Isend to the right (64 floats, tag 60 + s), then MPI_Wait on
     the send and on the receive
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from gpt2trace.record.traced_comm import TracedComm
from gpt2trace.run.session import TraceSession

LATE_S = 0.3


def floats(n: int, fill: float = 0.0) -> np.ndarray:
    return np.full(n, fill, dtype=np.float32)


def pair(comm, tracer, rank: int) -> None:
    other = 1 - rank
    with tracer.phase("forward"):                       # 0: late sender
        if rank == 0:
            time.sleep(LATE_S)
            comm.Send(floats(1000, 1.0), 1, 11)
        else:
            buf = floats(1000)
            comm.Recv(buf, 0, 11)
            assert buf[0] == 1.0
    tracer.microstep(1)
    with tracer.phase("forward"):                       # 1: Isend, Recv, Wait
        req = comm.Isend(floats(200 + 100 * rank, rank), other, 20 + rank)
        buf = floats(200 + 100 * other)
        comm.Recv(buf, other, 20 + other)
        comm.Wait(req)
        assert buf[0] == other
    tracer.microstep(2)
    with tracer.phase("forward"):                       # 2: Irecv + Wait, late sender
        if rank == 0:
            time.sleep(LATE_S)
            comm.Send(floats(600, 2.0), 1, 13)
        else:
            buf = floats(600)
            comm.Wait(comm.Irecv(buf, 0, 13))
            assert buf[0] == 2.0
    tracer.microstep(3)
    with tracer.phase("forward"):                       # 3: Sendrecv
        buf = floats(128)
        comm.Sendrecv(floats(128, rank), other, 30 + rank, buf, other, 30 + other)
        assert buf[0] == other
    tracer.microstep(4)
    with tracer.phase("forward"):                       # 4: wildcards
        if rank == 0:
            comm.Send(floats(500, 4.0), 1, 14)
        else:
            buf = floats(1024)
            comm.Recv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG)
            assert buf[0] == 4.0 and buf[500] == 0.0


def ring(world, tracer, rank: int) -> None:
    comm = world.Split(0, -rank)
    comm.Set_name("ring")
    s = comm.Get_rank()
    assert s == 2 - rank
    right, left = (s + 1) % 3, (s - 1) % 3
    with tracer.phase("forward"):                       # 0: Sendrecv ring
        buf = floats(256)
        comm.Sendrecv(floats(256, s), right, 40 + s, buf, left, 40 + left)
        assert buf[0] == left
    tracer.microstep(1)
    with tracer.phase("forward"):                       # 1: Send/Recv ring, sub rank 0 late
        buf = floats(100)
        if s == 0:
            time.sleep(LATE_S)
            comm.Send(floats(100, s), right, 50 + s)
            comm.Recv(buf, left, 50 + left)
        else:
            comm.Recv(buf, left, 50 + left)
            comm.Send(floats(100, s), right, 50 + s)
        assert buf[0] == left
    tracer.microstep(2)
    with tracer.phase("forward"):                       # 2: Irecv, Isend, Wait, Wait
        buf = floats(64)
        recv = comm.Irecv(buf, left, 60 + left)
        send = comm.Isend(floats(64, s), right, 60 + s)
        comm.Wait(send)
        comm.Wait(recv)
        assert buf[0] == left


def main() -> None:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    session = TraceSession.open(Path(sys.argv[1]), {"test": "p2p", "ranks": size}, 1, 0.0, 0.0, world)
    tracer = session.tracer
    comm = TracedComm(world, tracer)
    world.Barrier()                                     # untraced: every rank starts the step together
    tracer.begin_step(0)
    (pair if size == 2 else ring)(comm, tracer, rank)
    tracer.end_step(0)
    session.finish(True)


if __name__ == "__main__":
    main()
