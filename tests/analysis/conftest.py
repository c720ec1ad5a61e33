"""Tiny hand-built traces whose every number the tests work out by hand (times in seconds).

late_rank    2 ranks x 1 thread, one step, one MPI_Allreduce; rank 1's gelu_forward (layer 1) takes 5 s
             instead of 2 s, so rank 0 waits 3 s in the allreduce.
slow_thread  1 rank x 3 threads; in matmul_forward (layer 0) thread 2's block takes 4 s, the others 2 s;
             then 3 s of Python on the main thread alone; then gelu_forward (layer 0) on all threads.
serial       1 rank x 2 threads: 4 s of a kernel on both threads, then 6 s of the main thread alone.
nonblocking  2 ranks x 1 thread: MPI_Iallreduce posted early on rank 0 and late on rank 1 (after a 3.5 s
             matmul_backward, layer 1), completed by MPI_Wait on both.
bucketed     2 ranks x 1 thread, as `--dp-sync overlap` runs: after a barrier, backward posts one MPI_Iallreduce
             per gradient bucket (layer 1, layer 0, the rest) and an MPI_Waitall completes them; rank 1's
             matmul_backward takes 3 s per layer instead of 2, its encoder_backward 0.3 s instead of 0.2.
fork_join    1 rank x 4 threads, 12 s: serial Python, a region in which thread 3 gets no block, I/O on the main
             thread, more Python, a region of all four threads, Python to the end.
io_rank      2 ranks x 1 thread (pure MPI): rank 0 reads input (I/O) for 2 s before computing; one MPI_Allreduce.
three_steps  1 rank: steps 0, 1, 2 as forward phases [0,5], [5,6], [6,7.5]: step times 5, 1, 1.5 (they tile [0, 7.5]).
"""
from __future__ import annotations

import pytest

from gpt2trace.format.reader import Trace
from gpt2trace.format.schema import State
from gpt2trace.testing import synthetic as syn

RUN, SYNC, FORK, IDLE = State.RUNNING, State.SYNCHRONIZATION, State.SCHEDULING_FORK_JOIN, State.IDLE
GROUP, WAIT, IO = State.GROUP_COMMUNICATION, State.WAIT_WAITALL, State.IO


@pytest.fixture
def late_rank() -> Trace:
    # rank 0: matmul_forward L0 [0,4], gelu_forward L1 [4,6], MPI_Allreduce [6,10]   (waits 9 - 6 = 3 s)
    # rank 1: matmul_forward L0 [0,4], gelu_forward L1 [4,9], MPI_Allreduce [9,10]   (arrives last)
    recs = []
    for rank, gelu_end in ((0, 6), (1, 9)):
        recs += [syn.state(rank, 0, 0, gelu_end, RUN), syn.state(rank, 0, gelu_end, 10, GROUP),
                 syn.kernel(rank, 0, 0, 4, "matmul_forward", 0, 0),
                 syn.kernel(rank, 0, 4, gelu_end, "gelu_forward", 0, 1),
                 syn.phase(rank, 0, gelu_end, "forward", 0), syn.phase(rank, gelu_end, 10, "grad_sync", 0),
                 syn.comm(rank, gelu_end, 10, "MPI_Allreduce", seq=0, nbytes=1_000_000_000, step=0)]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def slow_thread() -> Trace:
    recs = [
        # thread 0: block [0,2], Synchronization [2,5], Python [5,8], gelu block [8,10]        U = 7
        syn.state(0, 0, 0, 2, RUN), syn.state(0, 0, 2, 5, SYNC), syn.state(0, 0, 5, 8, RUN),
        syn.state(0, 0, 8, 10, RUN),
        # thread 1: fork [0,1], block [1,3], Synchronization [3,5], Idle [5,8], gelu [8,10]   U = 4
        syn.state(0, 1, 0, 1, FORK), syn.state(0, 1, 1, 3, RUN), syn.state(0, 1, 3, 5, SYNC),
        syn.state(0, 1, 5, 8, IDLE), syn.state(0, 1, 8, 10, RUN),
        # thread 2 (slow): fork [0,1], block [1,5], Idle [5,8], gelu [8,10]                    U = 6
        syn.state(0, 2, 0, 1, FORK), syn.state(0, 2, 1, 5, RUN), syn.state(0, 2, 5, 8, IDLE),
        syn.state(0, 2, 8, 10, RUN),
        syn.kernel(0, 0, 0, 2, "matmul_forward", 0, 0), syn.kernel(0, 1, 1, 3, "matmul_forward", 0, 0),
        syn.kernel(0, 2, 1, 5, "matmul_forward", 0, 0),
        syn.kernel(0, 0, 8, 10, "gelu_forward", 0, 0), syn.kernel(0, 1, 8, 10, "gelu_forward", 0, 0),
        syn.kernel(0, 2, 8, 10, "gelu_forward", 0, 0),
        syn.phase(0, 0, 10, "forward", 0),
    ]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def serial() -> Trace:
    recs = [syn.state(0, 0, 0, 4, RUN), syn.state(0, 0, 4, 10, RUN),
            syn.state(0, 1, 0, 4, RUN), syn.state(0, 1, 4, 10, IDLE),
            syn.kernel(0, 0, 0, 4, "matmul_forward", 0, 0), syn.kernel(0, 1, 0, 4, "matmul_forward", 0, 0),
            syn.phase(0, 0, 10, "forward", 0)]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def nonblocking() -> Trace:
    recs = [
        # rank 0: Python [0,1], post [1,1.5], matmul_backward L0 [1.5,4], MPI_Wait [4,6], Python [6,7]
        syn.state(0, 0, 0, 1, RUN), syn.state(0, 0, 1, 1.5, GROUP), syn.state(0, 0, 1.5, 4, RUN),
        syn.state(0, 0, 4, 6, WAIT), syn.state(0, 0, 6, 7, RUN),
        syn.kernel(0, 0, 1.5, 4, "matmul_backward", None, 0),
        syn.comm(0, 1, 1.5, "MPI_Iallreduce", seq=0, nbytes=100), syn.comm(0, 4, 6, "MPI_Wait"),
        # rank 1: Python [0,1], matmul_backward L1 [1,4.5], post [4.5,5], MPI_Wait [5,6], Python [6,7]
        syn.state(1, 0, 0, 4.5, RUN), syn.state(1, 0, 4.5, 5, GROUP), syn.state(1, 0, 5, 6, WAIT),
        syn.state(1, 0, 6, 7, RUN),
        syn.kernel(1, 0, 1, 4.5, "matmul_backward", None, 1),
        syn.comm(1, 4.5, 5, "MPI_Iallreduce", seq=0, nbytes=100), syn.comm(1, 5, 6, "MPI_Wait"),
    ]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def bucketed() -> Trace:
    recs = []
    # rank 0: Barrier [0,1]; mm_bwd L1 [1,3]; post [3,3.1]; mm_bwd L0 [3.1,5.1]; post [5.1,5.2];
    #         encoder_bwd [5.2,5.4]; post [5.4,5.5]; MPI_Waitall [5.5,8]
    # rank 1: Barrier [0,1]; mm_bwd L1 [1,4]; post [4,4.1]; mm_bwd L0 [4.1,7.1]; post [7.1,7.2];
    #         encoder_bwd [7.2,7.5]; post [7.5,7.6]; MPI_Waitall [7.6,8]
    for rank, mm, enc in ((0, 2.0, 0.2), (1, 3.0, 0.3)):
        t = 1.0
        recs += [syn.state(rank, 0, 0, 1, GROUP), syn.comm(rank, 0, 1, "MPI_Barrier", seq=0)]
        for seq, (name, layer, dur) in enumerate((("matmul_backward", 1, mm), ("matmul_backward", 0, mm),
                                                  ("encoder_backward", None, enc)), start=1):
            recs += [syn.state(rank, 0, t, t + dur, RUN), syn.kernel(rank, 0, t, t + dur, name, None, layer),
                     syn.state(rank, 0, t + dur, t + dur + 0.1, GROUP),
                     syn.comm(rank, t + dur, t + dur + 0.1, "MPI_Iallreduce", seq=seq, nbytes=1000)]
            t += dur + 0.1
        recs += [syn.state(rank, 0, t, 8, WAIT), syn.comm(rank, t, 8, "MPI_Waitall")]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def fork_join() -> Trace:
    # Region A [2,6] (matmul_forward): blocks t0 [2,5], t1 [2.5,6], t2 [3,5]; thread 3 gets none (Idle).
    # Region B [8,11] (gelu_forward): t0 [8,11], workers fork until 8.5 and run [8.5,11].
    # Main thread outside regions: Python [0,2], I/O [6,7], Python [7,8], Python [11,12]; workers Idle.
    recs = [syn.state(0, 0, 0, 2, RUN), syn.state(0, 0, 2, 5, RUN), syn.state(0, 0, 5, 6, SYNC),
            syn.state(0, 0, 6, 7, IO), syn.state(0, 0, 7, 8, RUN), syn.state(0, 0, 8, 11, RUN),
            syn.state(0, 0, 11, 12, RUN),
            syn.state(0, 1, 0, 2, IDLE), syn.state(0, 1, 2, 2.5, FORK), syn.state(0, 1, 2.5, 6, RUN),
            syn.state(0, 1, 6, 8, IDLE),
            syn.state(0, 2, 0, 2, IDLE), syn.state(0, 2, 2, 3, FORK), syn.state(0, 2, 3, 5, RUN),
            syn.state(0, 2, 5, 6, SYNC), syn.state(0, 2, 6, 8, IDLE),
            syn.state(0, 3, 0, 8, IDLE),
            syn.kernel(0, 0, 2, 5, "matmul_forward", 0, 0), syn.kernel(0, 1, 2.5, 6, "matmul_forward", 0, 0),
            syn.kernel(0, 2, 3, 5, "matmul_forward", 0, 0), syn.kernel(0, 0, 8, 11, "gelu_forward", 0, 0),
            syn.phase(0, 0, 12, "forward", 0)]
    for thread in (1, 2, 3):
        recs += [syn.state(0, thread, 8, 8.5, FORK), syn.state(0, thread, 8.5, 11, RUN),
                 syn.state(0, thread, 11, 12, IDLE), syn.kernel(0, thread, 8.5, 11, "gelu_forward", 0, 0)]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def io_rank() -> Trace:
    # rank 0: I/O [0,2], Running [2,5], MPI_Allreduce [5,6], Running [6,8]
    # rank 1: Running [0,4], MPI_Allreduce [4,6], Running [6,8]
    recs = [syn.state(0, 0, 0, 2, IO), syn.state(0, 0, 2, 5, RUN), syn.state(0, 0, 5, 6, GROUP),
            syn.state(0, 0, 6, 8, RUN), syn.comm(0, 5, 6, "MPI_Allreduce", seq=0),
            syn.state(1, 0, 0, 4, RUN), syn.state(1, 0, 4, 6, GROUP), syn.state(1, 0, 6, 8, RUN),
            syn.comm(1, 4, 6, "MPI_Allreduce", seq=0)]
    return Trace.from_table(syn.from_records(recs))


@pytest.fixture
def three_steps() -> Trace:
    recs = [syn.state(0, 0, 0, 7.5, RUN)]
    for step, (a, b) in enumerate(((0, 5), (5, 6), (6, 7.5))):
        recs.append(syn.phase(0, a, b, "forward", step))
    return Trace.from_table(syn.from_records(recs))
