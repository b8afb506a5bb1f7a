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
compiled with LLVM's SLP vectorizer (off by default in Numba, switched on for this
function's compilation only) each row's eight chains are one eight-lane vector fused
multiply-add per input channel, the same operation in every lane, so the bits do not
depend on it. Vertices of one slice (one group of each kind, one kernel position) of
other shapes run four at a time, their scalar chains interleaved
(:func:`_one_slice_vertices`); anything else a scalar chain per element. Every path
gives the same bits.
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


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _one_slice_vertices(x, w, o_rows, i_rows, out):  # pragma: no cover - compiled
    """:func:`_chain` of a class whose vertices have one conv group, output group,
    input group and kernel position, for any group shape: four vertices' chains
    interleaved (each a chain of dependent fused multiply-adds, as long as the input
    channels, which one vertex's alone leaves waiting on each step's latency). Rows no
    position adds to are zero, the others ``0 + sum`` (the zeroed partial plus the
    product: a sum of -0 stored as +0, as the scratch of :func:`_chain` gives it)."""
    n0, n1, ic, oc, nq = x.shape[0], x.shape[1], x.shape[5], w.shape[6], out.shape[3]
    zero = np.float32(0)
    for a in range(n0):
        b = 0
        while b < n1:
            step = 4 if b + 4 <= n1 else 1
            for v in range(step):
                for q in range(nq):
                    out[a, b + v, 0, q] = zero
            for j in range(o_rows.size):
                i, r = i_rows[j], o_rows[j] * oc
                for o in range(oc):
                    if step == 4:
                        s0 = s1 = s2 = s3 = zero
                        for t in range(ic):
                            s0 = _fma(x[a, b, 0, 0, i, t], w[a, b, 0, 0, 0, 0, o, t], s0)
                            s1 = _fma(x[a, b + 1, 0, 0, i, t], w[a, b + 1, 0, 0, 0, 0, o, t], s1)
                            s2 = _fma(x[a, b + 2, 0, 0, i, t], w[a, b + 2, 0, 0, 0, 0, o, t], s2)
                            s3 = _fma(x[a, b + 3, 0, 0, i, t], w[a, b + 3, 0, 0, 0, 0, o, t], s3)
                        out[a, b, 0, r + o] = zero + s0
                        out[a, b + 1, 0, r + o] = zero + s1
                        out[a, b + 2, 0, r + o] = zero + s2
                        out[a, b + 3, 0, r + o] = zero + s3
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
    multiply-add per input channel (the weights transposed into ``wt`` once per slice);
    other groups a scalar chain per output element. Both give the same bits.

    While a vertex computes, the next vertex's input rows and output are prefetched: in
    a replica's image each vertex's operands lie on pages of their own (8 KiB apart in
    the MLP step), where the processor's own prefetcher does not follow (the inputs
    not when every vertex reads the same ones, a stride of 0)."""
    n0, n1, ncg, nig, nrows, ic = x.shape
    nog, nk, oc = w.shape[3], w.shape[5], w.shape[6]
    nout = part.shape[0]
    eight = oc == 8 and ic == 8
    zero = np.float32(0)
    ahead = x.strides[1] != 0
    if not eight and ncg == 1 and nig == 1 and nog == 1 and nk == 1:
        _one_slice_vertices(x, w, o_rows, i_rows, out)
        return
    for a in range(n0):
        for b in range(n1):
            na, nb = (a, b + 1) if b + 1 < n1 else (a + 1, 0)
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
