"""The convolution partials' products as one compiled pass, where it gives BLAS's bits.

:func:`poplar_api.poplin.conv_vertices._products` computes a class of partial vertices
with one stacked ``matmul`` per input-channel group and kernel position; numpy enters
BLAS once per slice (a ``[rows, inChans] @ [inChans, outChans]`` product), about 0.2 to
0.5 µs each, and a 16-replica MLP step makes some 175,000 of them per run. This module
computes the same products in one compiled loop over the class, each output element a
chain of fused multiply-adds over the input channels in order, starting from zero, and
then added to the partial sums in the order ``_products`` adds them.

Why that can be BLAS's result: a row-major ``x @ w.T`` reaches OpenBLAS as a
column-major ``sgemm`` with the transposed operand first (``TN``); for fewer than 32
input channels OpenBLAS's small-matrix path refuses ``TN`` products
(``sgemm_small_kernel_permit_skylakex.c``: ``K < 32`` returns 0), so the product runs
through the blocked ``sgemm`` kernel, whose every output element is one register
accumulating ``vfmadd`` over the inner dimension in order, and ``beta = 0`` leaves it as
it is. Other builds and processors order the sums otherwise (OpenBLAS's Haswell kernels
add the even and the odd inner positions in two chains; a single row or column is a
``gemv`` or a ``dot``). So the pass is used for a shape only after it has given, bit for
bit, what ``matmul`` gives in this process on probe operands of that shape
(:func:`matches_blas`, once per shape); elsewhere ``_products`` calls ``matmul`` as
before. Either way every slice's values are those of its own BLAS call.

The eight outputs of a row are eight independent chains: compiled with LLVM's SLP
vectorizer (off by default in Numba, switched on for this function's compilation only)
they are one eight-lane vector fused multiply-add per input channel, the same operation
in every lane, so the bits do not depend on it.
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

__all__ = ["IN_CHANS", "OUT_CHANS", "chain_products", "matches_blas"]

#: Output and input channels of the products the compiled pass handles (the AMP's
#: FLOAT groups: eight conv units, eight input channels). Eight outputs are one vector
#: of float32 lanes, and a fixed chain length lets the chains be unrolled and vectorized
#: (with a chain length known only at run time LLVM left them scalar, 2.3 times slower).
OUT_CHANS = IN_CHANS = 8
#: Probe slices per shape, and the spread of their magnitudes (powers of two).
PROBE_SLICES, PROBE_EXPONENTS = 64, 12


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
def _chain8(x, w, o_rows, i_rows, k_start, wt, part, out):  # pragma: no cover - compiled
    """``out[a, b, cg * nog + og]`` (``[out_rows * 8]``) set to the partial sums of
    ``x[a, b, cg, ig, i_rows[j]] @ w[a, b, cg, og, ig, k].T`` added, from zero, into
    output row ``o_rows[j]`` for every input group ``ig`` and kernel position ``k`` in
    order (rows ``j`` of ``k`` from ``k_start[k]`` to ``k_start[k + 1]``), each product
    a chain of fused multiply-adds over the input channels; ``w``'s last two axes are
    ``[8, inChans]``; ``wt`` is scratch ``[8, 8]`` and ``part`` scratch ``[out_rows,
    8]`` (``x`` and ``w`` have 8 input channels). ``out`` may be a view of the
    replicas' images: the sums are stored where the partials lie.

    While a vertex computes, the next vertex's input rows and output are prefetched: in
    a replica's image each vertex's operands lie on pages of their own (8 KiB apart in
    the MLP step), where the processor's own prefetcher does not follow (the inputs
    not when every vertex reads the same ones, a stride of 0)."""
    n0, n1, ncg, nig, nrows = x.shape[0], x.shape[1], x.shape[2], x.shape[3], x.shape[4]
    nog, nk = w.shape[3], w.shape[5]
    nout = part.shape[0]
    zero = np.float32(0)
    ahead = x.strides[1] != 0
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
                            _prefetch_write(out, (na, nb, cg * nog + og, r * 8))
            for cg in range(ncg):
                for og in range(nog):
                    part[...] = zero
                    for ig in range(nig):
                        for k in range(nk):
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
                        for c in range(8):
                            dst[r * 8 + c] = part[r, c]


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


#: The one signature :func:`_chain8` is compiled for: the operands, rows and output of
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
    """:func:`_chain8` compiled (or loaded from the disk cache) for :data:`SIGNATURE`
    alone, vectorized; further signatures are not compiled (a call converts its
    arguments to this one, or fails to type)."""
    if not _chain8.overloads:
        with _slp_vectorized():
            _chain8.compile(SIGNATURE)
        _chain8.disable_compile()
    return _chain8


def _run(
    x: np.ndarray, w: np.ndarray, o_rows: np.ndarray, i_rows: np.ndarray, k_start: np.ndarray,
    out: np.ndarray,
) -> None:  # fmt: skip
    """Call the compiled pass (compiled once, for :data:`SIGNATURE`); ``out`` is
    ``[n0, n1, ncg * nog, out_rows * 8]``."""
    wt = np.empty((IN_CHANS, OUT_CHANS), np.float32)
    part = np.empty((out.shape[3] // OUT_CHANS, OUT_CHANS), np.float32)
    _compiled()(x, w, o_rows, i_rows, k_start, wt, part, out)


#: (rows, input channels) -> whether the pass gives ``matmul``'s bits in this process.
_VERDICTS: dict[tuple[int, int], bool] = {}


def matches_blas(rows: int, in_chans: int) -> bool:
    """Whether the compiled pass gives, bit for bit, what ``matmul`` gives in this
    process for ``[rows, in_chans] @ [in_chans, 8]`` slices (strided as the partials
    stack them), on :data:`PROBE_SLICES` probe slices of values of magnitudes spread
    over :data:`PROBE_EXPONENTS` binades and of both signs; found once per shape."""
    key = (int(rows), int(in_chans))
    hit = _VERDICTS.get(key)
    if hit is not None:
        return hit
    ok = False
    if key[0] >= 2 and key[1] == IN_CHANS:
        rng = np.random.default_rng(key[0] * 1000 + key[1])

        def draw(shape: tuple[int, ...]) -> np.ndarray:
            scale = np.exp2(rng.integers(-PROBE_EXPONENTS // 2, PROBE_EXPONENTS // 2, shape))
            return (rng.standard_normal(shape) * scale).astype(np.float32)

        x = draw((PROBE_SLICES, *key))
        w = draw((PROBE_SLICES, OUT_CHANS, key[1]))
        want = x @ w.swapaxes(-1, -2)
        got = np.zeros((1, PROBE_SLICES, 1, key[0] * OUT_CHANS), np.float32)
        rows_ = np.arange(key[0], dtype=np.intp)
        _run(
            x[None, :, None, None], w[None, :, None, None, None, None], rows_, rows_,
            np.array([0, key[0]], np.intp), got,
        )  # fmt: skip
        ok = bool(np.array_equal(want.view(np.int32), got.reshape(want.shape).view(np.int32)))
    _VERDICTS[key] = ok
    return ok


def chain_products(
    x: np.ndarray, w: np.ndarray, geo: Any, out: np.ndarray | None = None
) -> np.ndarray | None:
    """``_products``' partial sums of a class by the compiled pass, or None where it
    does not apply (the caller then runs the stacked ``matmul``; nothing is written):
    operands not float32, groups not of :data:`OUT_CHANS` output and :data:`IN_CHANS`
    input channels, a kernel position whose output rows repeat (numpy's indexed ``+=``
    adds a repeated row once) or a product shape whose probe did not give ``matmul``'s
    bits (:func:`matches_blas`).

    Parameters
    ----------
    x, w
        ``[*lead, ncg * nig, in_size]`` inputs and ``[*lead, ncg * nog * nig,
        weight_size]`` weights, ``lead`` being ``(vertices,)`` or ``(replicas,
        vertices)``; any strides.
    geo
        The class's geometry (``conv_vertices._Geometry``).
    out
        Where to store the sums: a float32 ``[*lead, ncg * nog, out_rows * 8]`` array,
        any strides (a view of the replicas' images); None for a new array. Nothing is
        stored (None returned) when it has another dtype or shape.

    Returns
    -------
    numpy.ndarray or None
        ``[*lead, ncg * nog, out_size]`` float32: ``out`` when given.
    """
    if x.dtype != np.float32 or w.dtype != np.float32 or (geo.oc, geo.ic) != (OUT_CHANS, IN_CHANS):
        return None
    lead = x.shape[:-2]
    shape = (*lead, geo.ncg * geo.nog, geo.out_rows * OUT_CHANS)
    if out is not None and (out.dtype != np.float32 or out.shape != shape):
        return None
    for o_r, _ in geo.rows:
        if o_r.size and not matches_blas(o_r.size, geo.ic):
            return None
    rows = _rows(geo)
    if rows is None:
        return None
    if len(lead) == 1:
        x, w = x[None], w[None]
    n0, n1 = x.shape[0], x.shape[1]
    xs = x.reshape(n0, n1, geo.ncg, geo.nig, geo.in_rows, geo.ic)
    ws = w.reshape(n0, n1, geo.ncg, geo.nog, geo.nig, geo.nk, OUT_CHANS, geo.ic)
    if out is None:
        out = np.empty(shape, np.float32)
    _run(xs, ws, *rows, out if len(lead) == 2 else out[None])
    return out


#: Class geometries (by id, with the geometry) -> their rows for the pass, or None.
_ROWS: dict[int, tuple[Any, tuple[np.ndarray, np.ndarray, np.ndarray] | None]] = {}
#: Geometries whose rows are kept, at most.
KEPT_GEOMETRIES = 1 << 12


def _rows(geo: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A class's output rows, input rows and each kernel position's first row in them,
    as the pass takes them; None where a kernel position's output rows repeat. Found
    once per geometry (a kept plan hands the same geometries to every run)."""
    hit = _ROWS.get(id(geo))
    if hit is not None and hit[0] is geo:
        return hit[1]
    found: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    if all(o_r.size < 2 or np.unique(o_r).size == o_r.size for o_r, _ in geo.rows):
        k_start = np.zeros(geo.nk + 1, np.intp)
        k_start[1:] = np.cumsum([o_r.size for o_r, _ in geo.rows])
        found = (
            np.concatenate([o_r for o_r, _ in geo.rows]).astype(np.intp),
            np.concatenate([i_r for _, i_r in geo.rows]).astype(np.intp),
            k_start,
        )
    if len(_ROWS) >= KEPT_GEOMETRIES:
        _ROWS.clear()
    _ROWS[id(geo)] = (geo, found)
    return found
