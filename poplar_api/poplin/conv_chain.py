"""The convolution partials' products: one defined order of float32 operations.

Every product of a convolution partial vertex (:mod:`poplar_api.poplin.conv_vertices`),
``in[cg, ig][inRow] @ W[cg, og, ig][k].T`` for one row, is defined here, whatever
the host: each output channel's value a chain of float32 fused multiply-adds (one
rounding each) over the group's input channels in order, starting from zero; that sum
then added (one float32 addition) to the partial in the order of the input groups and
kernel positions, after the partials are zeroed. So the simulated values depend on the
program, its inputs and this definition only, not on the host's BLAS library, its
build or its processor (an ``sgemm`` orders the sums by its kernel: OpenBLAS 0.3.31's
SkylakeX kernels in one chain per element, its Haswell kernels in two interleaved ones;
a single row is a ``gemv``).

The order is that of the C++ worker loop of Poplibs' ``ConvPartial1x1Out`` codelet
(graphcore/poplibs at 7eac0f266ced5b064b3284a3cd90d491745b387c,
``lib/poplin/codelets/ConvPartial1x1Out.cpp``, ``ConvPartial1x1Out::compute(unsigned
wid)``): per field element and output channel a ``float`` sum from zero over the input
channels in order, stored for the first input group and added for the others. Poplibs'
``ConvPartialnx1`` and ``ConvPartialHorizontalMac`` C++ loops (``ConvPartialnx1.cpp``,
``ConvPartialHorizontalMac.cpp``, their ``compute``) instead start each chain from the
partial in memory; this simulator uses the 1x1 order for every family (a documented
difference: the same terms, another rounding), and a fused multiply-add where the C++
writes ``sum += a * b``. The hardware's assembly codelets (the AMP's pipelined
accumulators) order the sums otherwise again; none of these is modelled bit for bit.

:func:`chain_products` computes a whole class of vertices (``_products``' stacks: the
replicas, the vertices of one geometry) in one compiled loop, :func:`chain_product`
one slice (what ``compute_one`` needs for a vertex run alone). Groups of 8 output and
8 input channels (the AMP's FLOAT groups) take a path whose chain length is fixed:
each row's eight chains are one eight-lane vector fused multiply-add per input channel,
the same operation in every lane, so the bits do not depend on it. Where every kernel
position adds input row ``r`` to output row ``r`` (a fully connected layer's partials)
that is vector code written for LLVM (:func:`_vertex8`: the weights transposed by
shuffles, the rows' chains interleaved, the partials in registers); elsewhere the
scalar code vectorized by LLVM's SLP vectorizer (off by default in Numba, switched on
for this function's compilation only). Vertices of one slice (one group of each kind,
one kernel position) of other shapes run eight at a time, their scalar chains
interleaved (:func:`_one_slice_vertices`); anything else a scalar chain per element.
Every path gives the same bits.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numba
import numpy as np
from llvmlite import ir as llvm_ir
from numba import types
from numba.core import cgutils
from numba.core import config as numba_config
from numba.extending import intrinsic

__all__ = ["IN_CHANS", "OUT_CHANS", "chain_product", "chain_products"]

#: Vertices ahead of the one computing whose operands :func:`_chain`'s scratch path
#: prefetches (its 8x8 classes with the caches flushed between calls: 324-388 µs a
#: ``[16, 49]`` class against 667-907 µs without, docs/models.md, 2026-11-30). The
#: register path (:func:`_vertex8`) prefetches nothing: inside a later 16-replica MLP
#: run its 42 calls took 2.78-2.79 ms of CPU a run without against 3.89-4.04 ms with 3
#: ahead (medians of 120-150 runs, AMD EPYC, 2026-12-02), the prefetches' address
#: arithmetic costing more than the waits they hid with the operands in the caches.
AHEAD = 3

#: Output and input channels of the products the compiled pass handles (the AMP's
#: FLOAT groups: eight conv units, eight input channels). Eight outputs are one vector
#: of float32 lanes, and a fixed chain length lets the chains be unrolled and vectorized
#: (with a chain length known only at run time LLVM left them scalar, 2.3 times slower).
OUT_CHANS = IN_CHANS = 8


@intrinsic
def _fma(typingctx: Any, a: Any, b: Any, c: Any) -> Any:  # pragma: no cover - compiled
    """``a * b + c`` in float32 with one rounding (LLVM's ``llvm.fma.f32``)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = llvm_ir.FunctionType(llvm_ir.FloatType(), [llvm_ir.FloatType()] * 3)
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.fma.f32")
        return builder.call(fn, args)

    return sig, codegen


def _prefetch_codegen(write: int) -> Any:
    """LLVM's ``llvm.prefetch`` of the cache line of an array element: a hint (no fault,
    no value changed), for a read (0) or a write (1), kept in every cache level."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = cgutils.unpack_tuple(builder, args[1], aryty.ndim)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
        i8p, i32 = llvm_ir.IntType(8).as_pointer(), llvm_ir.IntType(32)
        fnty = llvm_ir.FunctionType(llvm_ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(write), i32(3), i32(1)])
        return context.get_dummy_value()

    return codegen


@intrinsic
def _prefetch(typingctx: Any, arr: Any, index: Any) -> Any:  # pragma: no cover - compiled
    """Ask for the cache line holding ``arr[index]``, to be read."""
    return types.void(arr, index), _prefetch_codegen(0)


@intrinsic
def _prefetch_write(typingctx: Any, arr: Any, index: Any) -> Any:  # pragma: no cover
    """Ask for the cache line holding ``arr[index]``, to be written."""
    return types.void(arr, index), _prefetch_codegen(1)


def _shuffle(builder: Any, a: Any, b: Any, mask: list[int]) -> Any:
    """LLVM's ``shufflevector`` of two eight-lane vectors: lane ``n`` of the result is
    lane ``mask[n]`` of ``a`` followed by ``b``."""
    i32 = llvm_ir.IntType(32)
    return builder.shuffle_vector(a, b, llvm_ir.Constant(llvm_ir.VectorType(i32, 8), mask))


def _transposed(builder: Any, rows: list[Any]) -> list[Any]:
    """The eight columns of the 8x8 block whose rows are ``rows`` (eight-lane vectors):
    pairs of rows interleaved, then pairs of pairs, then halves (24 shuffles, which
    move values only)."""
    lo, hi = [0, 8, 1, 9, 2, 10, 3, 11], [4, 12, 5, 13, 6, 14, 7, 15]
    m0, m1 = [0, 1, 8, 9, 2, 3, 10, 11], [4, 5, 12, 13, 6, 7, 14, 15]
    f0, f1 = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
    a = [_shuffle(builder, rows[2 * j], rows[2 * j + 1], lo) for j in range(4)]
    b = [_shuffle(builder, rows[2 * j], rows[2 * j + 1], hi) for j in range(4)]
    c = [_shuffle(builder, a[p], a[p + 1], m) for p in (0, 2) for m in (m0, m1)]
    d = [_shuffle(builder, b[p], b[p + 1], m) for p in (0, 2) for m in (m0, m1)]
    return [_shuffle(builder, e[p], e[p + 2], f) for e in (c, d) for p in (0, 1) for f in (f0, f1)]


#: Output rows, at most, of a vertex whose partial sums :func:`_vertex8` keeps in
#: registers (one eight-lane vector each, beside the eight transposed weight columns:
#: 12 + 8 of the 32 vector registers of AVX-512, spilled to the stack where fewer).
MAX_ROWS = 12


@intrinsic
def _vertex8(
    typingctx: Any, x: Any, xi: Any, w: Any, wi: Any, out: Any, oi: Any, nrows: Any
) -> Any:  # pragma: no cover - compiled
    """The partial sums of one vertex's conv group and output group of 8x8 groups whose
    every kernel position reads input row ``r`` and adds to output row ``r`` for each of
    ``nrows`` rows (1 to :data:`MAX_ROWS`): ``xi`` indexes the group's first input
    element (``[a, b, cg, 0, 0, 0]``), ``wi`` its first weight (``[a, b, cg, og, 0, 0,
    0, 0]``, inner stride one element), ``oi`` its first output (inner stride one
    element). Per input group and kernel position in order, the weights are transposed
    by shuffles into registers and each row's eight chains are one eight-lane fused
    multiply-add (``llvm.fma.v8f32``) per input channel in order from zero, added (one
    eight-lane addition) to the row's partial, kept in a register from zero; the
    partials are stored once at the end. The same operations as :func:`_chain`'s scratch
    path, element for element; code is generated for each row count, chosen by a
    switch."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        xty, _, wty, _, oty, _, _ = signature.args
        i64, i8p = llvm_ir.IntType(64), llvm_ir.IntType(8).as_pointer()
        f32 = llvm_ir.FloatType()
        v8 = llvm_ir.VectorType(f32, 8)
        fma = cgutils.get_or_insert_function(
            builder.module, llvm_ir.FunctionType(v8, [v8, v8, v8]), "llvm.fma.v8f32"
        )

        def pointer(ty: Any, arr: Any, index: Any) -> tuple[Any, list[Any], list[Any]]:
            ary = context.make_array(ty)(context, builder, arr)
            idx = cgutils.unpack_tuple(builder, index, ty.ndim)
            ptr = cgutils.get_item_pointer(context, builder, ty, ary, idx, wraparound=False)
            strides = cgutils.unpack_tuple(builder, ary.strides, ty.ndim)
            return builder.bitcast(ptr, i8p), strides, cgutils.unpack_tuple(builder, ary.shape)

        def vector_at(base: Any, offset: Any) -> Any:
            return builder.bitcast(builder.gep(base, [offset]), v8.as_pointer())

        xbase, xs, xshape = pointer(xty, args[0], args[1])
        wbase, ws, wshape = pointer(wty, args[2], args[3])
        obase, _, _ = pointer(oty, args[4], args[5])
        zero = llvm_ir.Constant(v8, [0.0] * 8)
        splat = llvm_ir.Constant(llvm_ir.VectorType(llvm_ir.IntType(32), 8), [0] * 8)
        undef = llvm_ir.Constant(v8, llvm_ir.Undefined)
        nrows = args[6]
        end = builder.append_basic_block("vertex8.end")
        switch = builder.switch(nrows, end)
        for n in range(1, MAX_ROWS + 1):
            block = builder.append_basic_block(f"vertex8.rows{n}")
            switch.add_case(llvm_ir.Constant(nrows.type, n), block)
            builder.position_at_end(block)
            partials = [cgutils.alloca_once_value(builder, zero) for _ in range(n)]
            # the input groups and kernel positions as one loop, the group and position
            # counted along (with two nested loops LLVM hoisted the input rows'
            # broadcasts out of the positions' loop, into 72 vectors on the stack)
            group = cgutils.alloca_once_value(builder, i64(0))
            position = cgutils.alloca_once_value(builder, i64(0))
            with cgutils.for_range(builder, builder.mul(xshape[3], wshape[5])):
                ig, k = builder.load(group), builder.load(position)
                xg = builder.gep(xbase, [builder.mul(ig, xs[3])])
                wk = builder.gep(
                    wbase, [builder.add(builder.mul(ig, ws[4]), builder.mul(k, ws[5]))]
                )
                last = builder.icmp_signed("==", builder.add(k, i64(1)), wshape[5])
                builder.store(builder.select(last, builder.add(ig, i64(1)), ig), group)
                builder.store(builder.select(last, i64(0), builder.add(k, i64(1))), position)
                rows = [
                    builder.load(vector_at(wk, builder.mul(ws[6], i64(o))), align=4)
                    for o in range(8)
                ]
                cols = _transposed(builder, rows)
                chains = [zero] * n
                for t in range(8):  # the rows' chains interleaved, each in order
                    for r in range(n):
                        at = builder.add(builder.mul(xs[4], i64(r)), builder.mul(xs[5], i64(t)))
                        ptr = builder.bitcast(builder.gep(xg, [at]), f32.as_pointer())
                        one = builder.insert_element(undef, builder.load(ptr, align=4), i64(0))
                        lanes = builder.shuffle_vector(one, undef, splat)
                        chains[r] = builder.call(fma, [lanes, cols[t], chains[r]])
                for r in range(n):
                    total = builder.fadd(builder.load(partials[r]), chains[r])
                    builder.store(total, partials[r])
            for r in range(n):
                builder.store(builder.load(partials[r]), vector_at(obase, i64(32 * r)), align=4)
            builder.branch(end)
        builder.position_at_end(end)
        return context.get_dummy_value()

    return types.void(x, xi, w, wi, out, oi, nrows), codegen


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _rows_in_place(o_rows, i_rows, k_start, nout):  # pragma: no cover - compiled
    """Whether every kernel position reads input row ``r`` and adds to output row ``r``
    for each of the ``nout`` rows, in order (what :func:`_vertex8` computes)."""
    for k in range(k_start.size - 1):
        if k_start[k + 1] - k_start[k] != nout:
            return False
        for r in range(nout):
            if o_rows[k_start[k] + r] != r or i_rows[k_start[k] + r] != r:
                return False
    return True


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _one_slice_vertices(x, w, o_rows, i_rows, out):  # pragma: no cover - compiled
    """:func:`_chain` of a class whose vertices have one conv group, output group,
    input group and kernel position, for any group shape: eight vertices' chains
    interleaved (each a chain of dependent fused multiply-adds, as long as the input
    channels, which one vertex's alone leaves waiting on each step's latency). Rows no
    position adds to are zero, the others ``0 + sum`` (the zeroed partial plus the
    product: a sum of -0 stored as +0, as the scratch of :func:`_chain` gives it)."""
    n0, n1, ic, oc, nq = x.shape[0], x.shape[1], x.shape[5], w.shape[6], out.shape[3]
    zero = np.float32(0)
    for a in range(n0):
        b = 0
        while b < n1:
            step = 8 if b + 8 <= n1 else 1
            for v in range(step):
                for q in range(nq):
                    out[a, b + v, 0, q] = zero
            for j in range(o_rows.size):
                i, r = i_rows[j], o_rows[j] * oc
                for o in range(oc):
                    if step == 8:
                        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
                        for t in range(ic):
                            s0 = _fma(x[a, b, 0, 0, i, t], w[a, b, 0, 0, 0, 0, o, t], s0)
                            s1 = _fma(x[a, b + 1, 0, 0, i, t], w[a, b + 1, 0, 0, 0, 0, o, t], s1)
                            s2 = _fma(x[a, b + 2, 0, 0, i, t], w[a, b + 2, 0, 0, 0, 0, o, t], s2)
                            s3 = _fma(x[a, b + 3, 0, 0, i, t], w[a, b + 3, 0, 0, 0, 0, o, t], s3)
                            s4 = _fma(x[a, b + 4, 0, 0, i, t], w[a, b + 4, 0, 0, 0, 0, o, t], s4)
                            s5 = _fma(x[a, b + 5, 0, 0, i, t], w[a, b + 5, 0, 0, 0, 0, o, t], s5)
                            s6 = _fma(x[a, b + 6, 0, 0, i, t], w[a, b + 6, 0, 0, 0, 0, o, t], s6)
                            s7 = _fma(x[a, b + 7, 0, 0, i, t], w[a, b + 7, 0, 0, 0, 0, o, t], s7)
                        out[a, b, 0, r + o] = zero + s0
                        out[a, b + 1, 0, r + o] = zero + s1
                        out[a, b + 2, 0, r + o] = zero + s2
                        out[a, b + 3, 0, r + o] = zero + s3
                        out[a, b + 4, 0, r + o] = zero + s4
                        out[a, b + 5, 0, r + o] = zero + s5
                        out[a, b + 6, 0, r + o] = zero + s6
                        out[a, b + 7, 0, r + o] = zero + s7
                    else:
                        s0 = zero
                        for t in range(ic):
                            s0 = _fma(x[a, b, 0, 0, i, t], w[a, b, 0, 0, 0, 0, o, t], s0)
                        out[a, b, 0, r + o] = zero + s0
            b += step


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _chain(x, w, o_rows, i_rows, k_start, wt, part, out):  # pragma: no cover - compiled
    """``out[a, b, cg * nog + og]`` (``[out_rows * oc]``) set to the partial sums of
    ``x[a, b, cg, ig, i_rows[j]] @ w[a, b, cg, og, ig, k].T`` added, from zero, into
    output row ``o_rows[j]`` for every input group ``ig`` and kernel position ``k`` in
    order (rows ``j`` of ``k`` from ``k_start[k]`` to ``k_start[k + 1]``), each product
    a chain of fused multiply-adds over the input channels in order from zero; ``w``'s
    last two axes are ``[oc, ic]``; ``wt`` is scratch ``[8, 8]`` and ``part`` scratch
    ``[out_rows, oc]``. ``out`` may be a view of the replicas' images: the sums are
    stored where the partials lie.

    Groups of 8 output and 8 input channels (:data:`OUT_CHANS`, :data:`IN_CHANS`) take
    a path with the chain length fixed, each row's eight chains one vector fused
    multiply-add per input channel: where every kernel position adds input row ``r`` to
    output row ``r`` (a fully connected layer's partials) and the weights' and outputs'
    inner stride is one element, :func:`_vertex8` with the weights and the partials in
    registers; else the weights transposed into ``wt`` once per slice and the partials
    summed in ``part``. Other groups a scalar chain per output element. Every path gives
    the same bits.

    On the scratch paths, while a vertex computes, the input rows and output of the
    vertex :data:`AHEAD` after it are prefetched: in a replica's image each vertex's
    operands lie on pages of their own (8 KiB apart in the MLP step), where the
    processor's own prefetcher does not follow (the inputs not when every vertex reads
    the same ones, a stride of 0). The register path prefetches nothing (measured
    faster: see :data:`AHEAD`)."""
    n0, n1, ncg, nig, nrows, ic = x.shape
    nog, nk, oc = w.shape[3], w.shape[5], w.shape[6]
    nout = part.shape[0]
    eight = oc == 8 and ic == 8
    zero = np.float32(0)
    ahead = x.strides[1] != 0
    if not eight and ncg == 1 and nig == 1 and nog == 1 and nk == 1:
        _one_slice_vertices(x, w, o_rows, i_rows, out)
        return
    in_registers = (
        eight and w.strides[7] == 4 and out.strides[3] == 4 and 1 <= nout <= MAX_ROWS
        and nrows == nout and _rows_in_place(o_rows, i_rows, k_start, nout)
    )  # fmt: skip
    for a in range(n0):
        for b in range(n1):
            if in_registers:
                for cg in range(ncg):
                    for og in range(nog):
                        _vertex8(
                            x, (a, b, cg, 0, 0, 0), w, (a, b, cg, og, 0, 0, 0, 0),
                            out, (a, b, cg * nog + og, 0), nout,
                        )  # fmt: skip
                continue
            na, nb = divmod(a * n1 + b + AHEAD, n1)
            if na < n0:
                for cg in range(ncg):
                    if ahead:
                        for ig in range(nig):
                            for i in range(nrows):
                                _prefetch(x, (na, nb, cg, ig, i, 0))
                    for og in range(nog):
                        for r in range(nout):
                            _prefetch_write(out, (na, nb, cg * nog + og, r * oc))
            for cg in range(ncg):
                for og in range(nog):
                    part[...] = zero
                    for ig in range(nig):
                        for k in range(nk):
                            if not eight:
                                for j in range(k_start[k], k_start[k + 1]):
                                    i, r = i_rows[j], o_rows[j]
                                    for o in range(oc):
                                        s = zero
                                        for t in range(ic):
                                            v = x[a, b, cg, ig, i, t]
                                            s = _fma(v, w[a, b, cg, og, ig, k, o, t], s)
                                        part[r, o] += s
                                continue
                            for o in range(8):
                                for t in range(8):
                                    wt[t, o] = w[a, b, cg, og, ig, k, o, t]
                            for j in range(k_start[k], k_start[k + 1]):
                                i = i_rows[j]
                                s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = zero
                                for t in range(8):
                                    v = x[a, b, cg, ig, i, t]
                                    s0 = _fma(v, wt[t, 0], s0)
                                    s1 = _fma(v, wt[t, 1], s1)
                                    s2 = _fma(v, wt[t, 2], s2)
                                    s3 = _fma(v, wt[t, 3], s3)
                                    s4 = _fma(v, wt[t, 4], s4)
                                    s5 = _fma(v, wt[t, 5], s5)
                                    s6 = _fma(v, wt[t, 6], s6)
                                    s7 = _fma(v, wt[t, 7], s7)
                                acc = part[o_rows[j]]
                                acc[0] += s0
                                acc[1] += s1
                                acc[2] += s2
                                acc[3] += s3
                                acc[4] += s4
                                acc[5] += s5
                                acc[6] += s6
                                acc[7] += s7
                    dst = out[a, b, cg * nog + og]
                    for r in range(nout):
                        for c in range(oc):
                            dst[r * oc + c] = part[r, c]


@contextlib.contextmanager
def _slp_vectorized() -> Iterator[None]:
    """Numba's SLP vectorizer on while a function compiles (Numba reads the setting
    when it builds each compilation's pass managers)."""
    old = numba_config.SLP_VECTORIZE
    numba_config.SLP_VECTORIZE = 1
    try:
        yield
    finally:
        numba_config.SLP_VECTORIZE = old


def _strided(ndim: int, dtype: Any, readonly: bool = False) -> types.Array:
    """Numba's type of an array of any strides (layout ``A``)."""
    return types.Array(dtype, ndim, "A", readonly=readonly)


#: The one signature :func:`_chain` is compiled for: the operands, rows and output of
#: any strides (a C-contiguous array converts to it; the operands and rows read-only,
#: which a writable array converts to as well), the scratch C-contiguous (the chains
#: read ``wt``'s rows as vectors). Numba compiles a function once per tuple of argument
#: types, and C-contiguous and strided operands are two, which the tests and workloads
#: both pass (2.0 and 2.2 s of compile CPU in a first run of the suite:
#: docs/benchmarks.md, "Compiled type sets per kernel").
SIGNATURE = types.void(
    _strided(6, types.float32, readonly=True),
    _strided(8, types.float32, readonly=True),
    *(_strided(1, types.intp, readonly=True),) * 3,
    types.float32[:, ::1],
    types.float32[:, ::1],
    _strided(4, types.float32),
)


def _compiled() -> Any:
    """:func:`_chain` compiled (or loaded from the disk cache) for :data:`SIGNATURE`
    alone, vectorized; further signatures are not compiled (a call converts its
    arguments to this one, or fails to type)."""
    if not _chain.overloads:
        with _slp_vectorized():
            _chain.compile(SIGNATURE)
        _chain.disable_compile()
    return _chain


def _run(
    x: np.ndarray, w: np.ndarray, o_rows: np.ndarray, i_rows: np.ndarray, k_start: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip
    """Call the compiled pass (compiled once, for :data:`SIGNATURE`); ``out`` is
    ``[n0, n1, ncg * nog, out_rows * oc]``."""
    oc = w.shape[6]
    wt = np.empty((IN_CHANS, OUT_CHANS), np.float32)
    part = np.empty((out.shape[3] // oc, oc), np.float32)
    _compiled()(x, w, o_rows, i_rows, k_start, wt, part, out)


def chain_products(
    x: np.ndarray, w: np.ndarray, geo: Any, out: np.ndarray | None = None
) -> np.ndarray | None:
    """``_products``' partial sums of a class by the compiled pass, or None, having
    written nothing, where it does not apply: operands not float32, or an ``out`` of
    another dtype or shape.

    Parameters
    ----------
    x, w
        ``[*lead, ncg * nig, in_size]`` inputs and ``[*lead, ncg * nog * nig,
        weight_size]`` weights, ``lead`` being ``(vertices,)`` or ``(replicas,
        vertices)``; any strides.
    geo
        The class's geometry (``conv_vertices._Geometry``): groups of ``oc`` output and
        ``ic`` input channels, any sizes.
    out
        Where to store the sums: a float32 ``[*lead, ncg * nog, out_rows * oc]`` array,
        any strides (a view of the replicas' images); None for a new array.

    Returns
    -------
    numpy.ndarray or None
        ``[*lead, ncg * nog, out_size]`` float32: ``out`` when given.
    """
    if x.dtype != np.float32 or w.dtype != np.float32:
        return None
    lead = x.shape[:-2]
    shape = (*lead, geo.ncg * geo.nog, geo.out_rows * geo.oc)
    if out is not None and (out.dtype != np.float32 or out.shape != shape):
        return None
    if len(lead) == 1:
        x, w = x[None], w[None]
    n0, n1 = x.shape[0], x.shape[1]
    xs = x.reshape(n0, n1, geo.ncg, geo.nig, geo.in_rows, geo.ic)
    ws = w.reshape(n0, n1, geo.ncg, geo.nog, geo.nig, geo.nk, geo.oc, geo.ic)
    if out is None:
        out = np.empty(shape, np.float32)
    _run(xs, ws, *_rows(geo), out if len(lead) == 2 else out[None])
    return out


def chain_product(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` (``x``: ``[rows, ic]``, ``w``: ``[oc, ic]``, float32) with every
    element the chain of fused multiply-adds over the input channels in order from
    zero: the product of one slice, as :func:`chain_products` computes each."""
    rows, oc = x.shape[0], w.shape[0]
    out = np.empty((1, 1, 1, rows * oc), np.float32)
    ids = np.arange(rows, dtype=np.intp)
    _run(
        x.reshape(1, 1, 1, 1, rows, x.shape[1]), w.reshape(1, 1, 1, 1, 1, 1, oc, w.shape[1]),
        ids, ids, np.array([0, rows], np.intp), out,
    )  # fmt: skip
    return out.reshape(rows, oc)


#: Class geometries (by id, with the geometry) -> their rows for the pass.
_ROWS: dict[int, tuple[Any, tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
#: Geometries whose rows are kept, at most.
KEPT_GEOMETRIES = 1 << 12


def _last_of_each(o_r: np.ndarray) -> np.ndarray:
    """Positions in ``o_r`` of each row's last occurrence, in order: numpy's indexed
    ``acc[o_r] += product`` adds to a repeated row only its last product (each row
    gathered once, then stored once per occurrence, the last store kept)."""
    if o_r.size < 2:
        return np.arange(o_r.size)
    _, first_of_reversed = np.unique(o_r[::-1], return_index=True)
    return np.sort(o_r.size - 1 - first_of_reversed)


def _rows(geo: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A class's output rows, input rows and each kernel position's first row in them,
    as the pass takes them; where a kernel position's output rows repeat, only each
    row's last occurrence (what the indexed addition of ``compute_one`` keeps: see
    :func:`_last_of_each`). Found once per geometry (a kept plan hands the same
    geometries to every run)."""
    hit = _ROWS.get(id(geo))
    if hit is not None and hit[0] is geo:
        return hit[1]
    kept = [(o_r[_last_of_each(o_r)], i_r[_last_of_each(o_r)]) for o_r, i_r in geo.rows]
    k_start = np.zeros(geo.nk + 1, np.intp)
    k_start[1:] = np.cumsum([o_r.size for o_r, _ in kept])
    found = (
        np.concatenate([o_r for o_r, _ in kept]).astype(np.intp),
        np.concatenate([i_r for _, i_r in kept]).astype(np.intp),
        k_start,
    )
    if len(_ROWS) >= KEPT_GEOMETRIES:
        _ROWS.clear()
    _ROWS[id(geo)] = (geo, found)
    return found
