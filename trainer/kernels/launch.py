"""How every kernel runs on threads, and the one place per-thread timing is read.

A kernel is written once as a plain function whose body is `for t in prange(nthreads)` over contiguous
blocks (`chunk`); `@kernel` compiles it twice: a Numba-parallel launcher and a serial twin, so `--threads 1`
pays no fork/join. Each kernel takes as its last arguments a trace log `tr`, its kernel id `kid` and the call's
`layer`, and returns whether the log wants emptying (`region_end`). The log is an int64 array
(1 + RING, nthreads + 1, 3), a ring of calls behind a header row:

    tr.shape[0] == 0              tracing off: no clock is read, nothing is written
    tr[0, 0]  = (calls, taken, -)        calls written since the log was last emptied; of them, taken out
    tr[c, 0]  = (enter_ns, exit_ns, key) call number n in row c = 1 + n % RING: its parallel region, read on the
                                         calling thread, and its key (kid << 32) + layer
    tr[c, 1 + t] = (start_ns, end_ns, tid)  its block t, read on the thread that ran it (tid: its pthread id;
                                         NO_BLOCK, written when the call takes its row, until a thread runs it)

The kernel picks its own row and writes its own key, so a traced call costs the Python around it nothing more
than an untraced one: the cursor, the key and the ring's wrap live here, in compiled code. A kernel returns True
once half the ring is unread; the launcher then has the recorder copy the ring out (gpt2trace.record.recorder), so
a call never overwrites one not yet copied.

Inner loops run over a block's *slice* from 0 (`xb = x[r0:r1]; for i in range(r1 - r0)`), not over
`range(r0, r1)`: with an arbitrary start LLVM cannot prove the index non-negative (Numba's wraparound check
stays in the loop) and the loop is not vectorized (measured: GELU backward 8x slower).

Kernels contain exactly four hook calls (`region_begin`, `block_begin`/`block_end`, `region_end`) and know
nothing else about tracing.
"""
from __future__ import annotations

import types as pytypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

CLOCK_MONOTONIC = 1  # Linux; the same clock as Python's time.monotonic_ns()
NO_TRACE = np.zeros((0, 1, 3), dtype=np.int64)
NO_LAYER = -1
NO_BLOCK = -1            # a block's thread id until a thread has run it (the trace's NO_VALUE)
LAYER_BITS = 32          # a call's key: kid << LAYER_BITS plus its layer (NO_LAYER: none)
KERNEL_NAMES: list[str] = []   # by kernel id: every Kernel made in this process, in the order made


@intrinsic
def _clock_gettime_ns(typingctx):
    """clock_gettime(CLOCK_MONOTONIC) inlined into nopython code (~22 ns; cacheable: linked by name)."""
    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        timespec = ir.LiteralStructType([i64, i64])
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(i32, [i32, timespec.as_pointer()]), "clock_gettime")
        ts = cgutils.alloca_once(builder, timespec)
        builder.call(fn, [ir.Constant(i32, CLOCK_MONOTONIC), ts])
        sec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 0))
        nsec = builder.load(cgutils.gep_inbounds(builder, ts, 0, 1))
        return builder.add(builder.mul(sec, ir.Constant(i64, 1_000_000_000)), nsec)
    return types.int64(), codegen


@intrinsic
def _thread_id(typingctx):
    """The calling thread's pthread id (pthread_self: a read of the thread pointer, where Linux gettid is a system
    call, ~165 ns a block on this machine; Python's threading.get_ident() is the same id). Numba's own
    get_thread_id() bakes an address into the code and crashes when loaded from the on-disk cache; this links by
    name. The tracer maps the ids to 0..n-1."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i64, []), "pthread_self")
        return builder.call(fn, [])
    return types.int64(), codegen


@njit(inline="always")
def chunk(n, nthreads, t):
    """Rows [r0, r1) of block t when n rows are split into nthreads near-equal contiguous blocks."""
    return n * t // nthreads, n * (t + 1) // nthreads


@njit(inline="always")
def region_begin(tr, kid, layer):
    """The call's row in the log (0: not traced), its entry time and key written and its blocks marked not run
    (a row is reused once the ring wraps or the window is taken; marking it here, on the lines the call writes
    anyway, spares the recorder a pass over every row it copies or writes out)."""
    if tr.shape[0] > 0:
        n = tr[0, 0, 0]
        tr[0, 0, 0] = n + 1
        c = 1 + (n & (tr.shape[0] - 2))
        tr[c, 0, 0] = _clock_gettime_ns()
        tr[c, 0, 2] = (kid << LAYER_BITS) + layer
        for t in range(1, tr.shape[1]):
            tr[c, t, 2] = NO_BLOCK
        return c
    return 0


@njit(inline="always")
def region_end(tr, c):
    """The call's exit time; True when half the ring holds calls not yet taken out (the launcher empties it)."""
    if c > 0:
        tr[c, 0, 1] = _clock_gettime_ns()
        return 2 * (tr[0, 0, 0] - tr[0, 0, 1]) >= tr.shape[0] - 1
    return False


@njit(inline="always")
def block_begin(tr):
    if tr.shape[0] > 0:
        return _clock_gettime_ns()
    return 0


@njit(inline="always")
def block_end(tr, c, t, start_ns):
    if c > 0:
        tr[c, 1 + t, 0] = start_ns
        tr[c, 1 + t, 1] = _clock_gettime_ns()
        tr[c, 1 + t, 2] = _thread_id()


class Kernel:
    """A kernel's parallel launcher and serial twin; `k(nthreads, *args, tr)` picks one (`k.call` with the call's
    layer). `k.block(*args, tr, k.kid, layer, 1)` is the serial twin without the GIL, for the task runtime's block
    tasks. `kid`: the kernel's id, its index in KERNEL_NAMES."""

    def __init__(self, fn, **options):
        # error_model="numpy": x / 0 gives inf like NumPy instead of raising, which is what lets LLVM vectorize
        # loops with a division (AdamW, softmax, layernorm); NaN/inf are caught by the trainer's checks.
        options.setdefault("error_model", "numpy")
        self.name = fn.__name__
        self.kid = len(KERNEL_NAMES)
        KERNEL_NAMES.append(self.name)
        self.parallel = njit(parallel=True, cache=True, **options)(fn)
        # A copy under another qualname: Numba's cache is keyed by qualname, not by the parallel flag,
        # so compiling the same function object twice would make the two share (and clobber) one entry.
        twin = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                                    fn.__defaults__, fn.__closure__)
        twin.__qualname__ = fn.__qualname__ + "_serial"
        twin.__module__ = fn.__module__
        self.serial = njit(cache=True, **options)(twin)
        # A third copy for task bodies (trainer.tasks): the serial code on a block's views, releasing the GIL so
        # worker threads run blocks at once. Compiled on first use only, so forkjoin runs never pay for it.
        block = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_block",
                                     fn.__defaults__, fn.__closure__)
        block.__qualname__ = fn.__qualname__ + "_block"
        block.__module__ = fn.__module__
        self.block = njit(cache=True, nogil=True, **options)(block)

    def __call__(self, nthreads, *args):
        """`args` end with the trace log; the call has no layer. True: the log wants emptying."""
        return self.call(nthreads, NO_LAYER, *args)

    def call(self, nthreads, layer, *args):
        if nthreads == 1:
            return self.serial(*args, self.kid, layer, 1)
        return self.parallel(*args, self.kid, layer, nthreads)

    def __repr__(self) -> str:
        return f"Kernel({self.name})"


def kernel(fn=None, **options):
    """Decorator: `fn(outputs..., inputs..., sizes..., tr, kid, layer, nthreads)` -> Kernel called as
    k(nthreads, ..., tr).

    `@kernel(fastmath={"reassoc"})` passes Numba options (e.g. to let a reduction vectorize)."""
    if fn is None:
        return lambda f: Kernel(f, **options)
    return Kernel(fn, **options)
