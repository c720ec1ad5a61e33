"""How each kernel call is cut into block tasks: the blocks, the function each runs, the regions it declares.

The model's calls are unchanged (`run(kernel, layer, *args)`); a tiling turns one call into tasks over blocks of its
output, each declaring what it reads (IN), writes (OUT) or accumulates into (INOUT):

    rows      (BT, ...) row blocks of `rows` rows: the kernel's serial twin (`k.block`, no GIL) on the block's views
              (layernorm, matmul forward, residual, GELU, cross-entropy, encoder forward, zeroing). Forward of layer
              l+1 on a row block waits only for that block of layer l (and for the kernels' weights).
    sequences attention (forward and backward): one task per sequence b, its rows and its (NH, T, T) planes
    features  weight gradients, the reduction over all BT rows: matmul's dweight/dbias by blocks of output features
              (matmul_backward_weight), layernorm's dweight/dbias by blocks of channels (layernorm_backward_params),
              as many blocks as the call has row blocks; they read all rows, so they wait for every row block of
              their inputs. matmul's and layernorm's input gradients are row blocks (matmul_backward_input,
              layernorm_backward_input).
    elements  1-D buffers (the flat gradients, AdamW, the norm): blocks of ELEMENTS elements
    whole     encoder backward is one task: rows sharing a token add into the same dwte row

Each element of every output is computed by the same arithmetic, in the same order, as in the forkjoin kernel,
except where BLAS is given a differently shaped block (its results can differ in the last bits) and the gradient
norm's partial sums (per element block here, per thread there).
"""
from __future__ import annotations

import numpy as np

from trainer.kernels import adamw, attention, crossentropy, encoder, gelu, layernorm, matmul, residual, zero
from trainer.kernels.launch import NO_LAYER
from trainer.tasks.regions import IN, INOUT, OUT, Region

ELEMENTS = 1 << 18      # elements per task of a 1-D buffer: 1 MiB of float32, ~0.1-0.3 ms of AdamW


def row_blocks(n: int, rows: int) -> list[tuple[int, int]]:
    return [(r, min(r + rows, n)) for r in range(0, n, rows)] or [(0, 0)]


def even_blocks(n: int, count: int) -> list[tuple[int, int]]:
    """n split into `count` near-equal contiguous blocks (none empty unless n < count)."""
    count = max(1, min(count, n))
    return [(n * b // count, n * (b + 1) // count) for b in range(count)]


def _timed(body, *extra):
    """A task body that calls the kernel `body(*args, tr, *extra)` and returns (entry_ns, exit_ns) of the kernel
    as its trace log `tr` read them, inside, without the GIL: the Python call around it (dropping and taking back
    the GIL) counts as the runtime's, not the task's (trainer.tasks.runtime)."""
    def run(*args):
        tr = np.zeros((2, 2, 3), dtype=np.int64)   # the header and one call: its region and block 0 (launch.py)
        body(*args, tr, *extra)
        return int(tr[1, 0, 0]), int(tr[1, 0, 1])
    run.__name__ = getattr(body, "__name__", "task")
    return run


def _serial(k):
    """The block body of a kernel run serially on views: its GIL-free twin on one thread, timed by its trace log."""
    return _timed(k.block, k.kid, NO_LAYER, 1)


# Each tiling: (kernel's serial body, args, rows) -> [(fn, args, accesses, block)], accesses as (lo, hi, mode) byte
# ranges (trainer.tasks.regions.Region: each array's address is read once per call, its blocks' by arithmetic)

_MODES = {"r": IN, "w": OUT, "u": INOUT}


def _rows(spec: str):
    """A tiling for a kernel whose arguments are split by rows: `spec` has one letter per argument, r/w/u for a
    row-blocked input/output/accumulated (INOUT) array, R for a whole input array, '.' for a scalar or a constant
    array that no task writes."""
    blocked = [i for i, c in enumerate(spec) if c in _MODES]

    def tile(body, args, rows):
        n = args[blocked[0]].shape[0]
        regions = {i: Region(args[i]) for i in blocked}
        whole = [Region(a).whole(IN) for a, c in zip(args, spec) if c == "R"]
        out = []
        for b, (r0, r1) in enumerate(row_blocks(n, rows)):
            bargs = tuple(a[r0:r1] if c in _MODES else a for a, c in zip(args, spec))
            acc = [regions[i].rows(r0, r1, _MODES[spec[i]]) for i in blocked] + whole
            out.append((body, bargs, acc, b))
        return out
    return tile


def _elements(spec: str):
    """As _rows, over the elements of 1-D buffers (or of any C-contiguous buffer, flattened)."""
    rows_tiling = _rows(spec)

    def tile(body, args, rows):
        flat = tuple(a.reshape(-1) if c in _MODES else a for a, c in zip(args, spec))
        return rows_tiling(body, flat, ELEMENTS)
    return tile


def _zero(body, args, rows):
    buf, = args
    return (_rows("w") if buf.ndim > 1 else _elements("w"))(body, args, rows)


def _encoder_forward(body, args, rows):
    out, tokens, wte, wpe, pos, v0, add_pos = args
    Tl = pos.shape[0]
    ro, rt, weights = Region(out), Region(tokens), [Region(wte).whole(IN), Region(wpe).whole(IN)]
    tasks = []
    for b, (r0, r1) in enumerate(row_blocks(out.shape[0], rows)):
        bpos = np.roll(pos, -(r0 % Tl))      # row i of the block is row r0 + i of the call
        tasks.append((body, (out[r0:r1], tokens[r0:r1], wte, wpe, bpos, v0, add_pos),
                      [ro.rows(r0, r1, OUT), rt.rows(r0, r1, IN)] + weights, b))
    return tasks


def _encoder_backward(body, args, rows):
    dwte, dwpe, dout, tokens, pos, v0 = args
    return [(body, args, [Region(dwte).whole(INOUT), Region(dwpe).whole(INOUT), Region(dout).whole(IN),
                          Region(tokens).whole(IN)], 0)]


def _check_whole_sequences(q, kv, kpos) -> None:
    if q.shape[0] != kv.shape[0] or kpos.shape[0] != 1:
        raise ValueError("tasks: attention is cut by sequence, which needs whole sequences on the rank")


def _attention_forward(body, args, rows):
    out, preatt, att, q, kv, qpos, kpos, B, NH = args
    _check_whole_sequences(q, kv, kpos)
    T = q.shape[0] // B
    ro, rp, ra, rq = Region(out), Region(preatt), Region(att), Region(q)
    tasks = []
    for b in range(B):
        r0, r1 = b * T, (b + 1) * T
        qb = q[r0:r1]
        tasks.append((body, (out[r0:r1], preatt[b:b + 1], att[b:b + 1], qb, qb, qpos, kpos, 1, NH),
                      [ro.rows(r0, r1, OUT), rp.rows(b, b + 1, OUT), ra.rows(b, b + 1, OUT), rq.rows(r0, r1, IN)], b))
    return tasks


def _attention_backward(body, args, rows):
    dq, dkv, dpreatt, datt, dout, q, kv, att, qpos, kpos, B, NH, dkoff = args
    _check_whole_sequences(q, kv, kpos)
    if dq is not dkv:
        raise ValueError("tasks: attention backward is cut by sequence, which needs dq and dkv in one buffer")
    T = q.shape[0] // B
    rd, rdp, rda, rdo, rq, ra = (Region(a) for a in (dq, dpreatt, datt, dout, q, att))
    tasks = []
    for b in range(B):
        r0, r1 = b * T, (b + 1) * T
        d, qb = dq[r0:r1], q[r0:r1]
        tasks.append((body, (d, d, dpreatt[b:b + 1], datt[b:b + 1], dout[r0:r1], qb, qb, att[b:b + 1], qpos, kpos,
                             1, NH, dkoff),
                      [rd.rows(r0, r1, INOUT), rdp.rows(b, b + 1, OUT), rda.rows(b, b + 1, OUT),
                       rdo.rows(r0, r1, IN), rq.rows(r0, r1, IN), ra.rows(b, b + 1, IN)], b))
    return tasks


def _matmul_backward(body, args, rows):
    dinp, dweight, dbias, dout, inp, weight, has_bias = args
    BT, OC = dout.shape
    blocks = row_blocks(BT, rows)
    rdi, rdw, rdb, rdo = Region(dinp), Region(dweight), Region(dbias), Region(dout)
    w, whole_dout, whole_inp = Region(weight).whole(IN), rdo.whole(IN), Region(inp).whole(IN)
    tasks = []
    for b, (r0, r1) in enumerate(blocks):
        tasks.append((_timed(matmul.matmul_backward_input), (dinp[r0:r1], dout[r0:r1], weight),
                      [rdi.rows(r0, r1, INOUT), rdo.rows(r0, r1, IN), w], b))
    for b, (o0, o1) in enumerate(even_blocks(OC, len(blocks))):
        acc = [rdw.rows(o0, o1, INOUT), whole_dout, whole_inp] + ([rdb.rows(o0, o1, INOUT)] if has_bias else [])
        tasks.append((_timed(matmul.matmul_backward_weight), (dweight, dbias, dout, inp, o0, o1, has_bias), acc, b))
    return tasks


def _layernorm_backward(body, args, rows):
    dinp, dweight, dbias, dout, inp, weight, mean, rstd = args
    BT, C = inp.shape
    blocks = row_blocks(BT, rows)
    rdi, rdo, ri, rm, rs = (Region(a) for a in (dinp, dout, inp, mean, rstd))
    rdw, rdb, w = Region(dweight), Region(dbias), Region(weight).whole(IN)
    tasks = []
    for b, (r0, r1) in enumerate(blocks):
        bargs = (dinp[r0:r1], dout[r0:r1], inp[r0:r1], weight, mean[r0:r1], rstd[r0:r1])
        tasks.append((_timed(layernorm.layernorm_backward_input), bargs,
                      [rdi.rows(r0, r1, INOUT), rdo.rows(r0, r1, IN), ri.rows(r0, r1, IN), w, rm.rows(r0, r1, IN),
                       rs.rows(r0, r1, IN)], b))
    reads = [rdo.whole(IN), ri.whole(IN), rm.whole(IN), rs.whole(IN)]
    for b, (c0, c1) in enumerate(even_blocks(C, len(blocks))):
        tasks.append((_timed(layernorm.layernorm_backward_params), (dweight, dbias, dout, inp, mean, rstd, c0, c1),
                      [rdw.rows(c0, c1, INOUT), rdb.rows(c0, c1, INOUT)] + reads, b))
    return tasks


def _grad_norm(body, args, rows):
    partials, grads = args
    # one partial per block of the caller's partials (trainer.tasks.sync sizes them with norm_blocks)
    rp, rg = Region(partials), Region(grads)
    tasks = []
    for b, (i0, i1) in enumerate(even_blocks(grads.shape[0], partials.shape[0])):
        tasks.append((body, (partials[b:b + 1], grads[i0:i1]), [rp.rows(b, b + 1, OUT), rg.rows(i0, i1, IN)], b))
    return tasks


def norm_blocks(n: int) -> int:
    """Partial sums the gradient norm of n elements is cut into (one per task)."""
    return max(1, -(-n // ELEMENTS))


TILINGS = {
    encoder.encoder_forward: _encoder_forward,
    encoder.encoder_backward: _encoder_backward,
    layernorm.layernorm_forward: _rows("wwwrRR"),
    layernorm.layernorm_backward: _layernorm_backward,
    matmul.matmul_forward: _rows("wrRR."),
    matmul.matmul_backward: _matmul_backward,
    attention.attention_forward: _attention_forward,
    attention.attention_backward: _attention_backward,
    residual.residual_forward: _rows("wrr"),
    residual.residual_backward: _rows("uur"),
    gelu.gelu_forward: _rows("wr"),
    gelu.gelu_backward: _rows("urr"),
    crossentropy.crossentropy_forward: _rows("wwrr."),
    crossentropy.crossentropy_backward: _rows("wrr..."),
    zero.zero_fill: _zero,
    adamw.adamw_update: _elements("uruu......"),
    adamw.grad_norm_squared: _grad_norm,
}


def tasks_of(k, args: tuple, rows: int) -> list[tuple]:
    """The block tasks of the call `k(*args)`: (fn, args, accesses, block) each."""
    tile = TILINGS.get(k)
    if tile is None:
        raise ValueError(f"tasks: no tiling for kernel {k.name}; run it with --schedule forkjoin")
    return tile(_serial(k), args, rows)
