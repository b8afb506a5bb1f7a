"""The Poplibs matrix-solver codelets: triangular inverse, Cholesky factor, triangular solve.

Three worker vertices (``Vertex``, one worker thread each, as Poplibs declares them),
one class per ``<FloatType, lower>`` template instance and estimator version, named as
Poplibs names them (``poplin::TriangularInverse<float,true>``):

``poplin::TriangularInverse<T,lower>``
    fields ``in`` and ``out``, both a row-major ``dim x dim`` block. ``out`` is the
    inverse of the lower (``lower=True``) or upper triangle of ``in``, diagonal
    included; the other triangle of ``in`` is not read and that of ``out`` is zero.
``poplin::Cholesky<T,lower>``
    field ``in`` (InOut), a row-major ``dim x dim`` symmetric positive-definite block
    of which only the lower (upper) triangle is read. In place, that triangle becomes
    the factor ``L`` with ``A = L L^T`` (``U`` with ``A = U^T U``); the other strict
    triangle is left as it was.
``poplin::TriangularSolve<T,lower>``
    fields ``a`` (row-major ``an x an``), ``b`` and ``x`` (``an`` each). ``x`` solves
    ``A x = b`` for the lower (upper) triangle of ``a`` with a *unit diagonal*: the
    codelet never reads nor divides by the diagonal of ``a``.

Poplibs also gives each vertex a ``const unsigned`` member (``dim``, ``an``); poplar_api
vertices have no non-edge members, so the size follows from the field sizes
(``dim^2 = |in|``, ``an = |b|``), which is also what the estimator uses. Values are
computed with numpy/scipy in float64 and rounded to the element type (half fields
compute in float32 in poplar_api kernels anyway), so the last bits can differ from the
codelet, which accumulates in its own type. The v2 codelets' memory-bank constraint
(``elem(*a) != elem(*x)``) and vector alignment are not modelled.

Cycle estimates
---------------
Poplibs' estimators for these codelets (``lib/poplin/poplinCycleEstimators.cpp``,
``MAKE_PERF_ESTIMATOR_NAME(TriangularInverse)``, ``(Cholesky)`` and
``(TriangularSolve)``) are Lagrange polynomials that ``tools/generate_cycle_estimate.py
--all`` fitted through the hardware ``cycles`` of the profile step named
``.../triangularInverse``, ``.../cholesky`` or ``.../triangularSolve`` of
``tools/matrix_solver``. :data:`POPLIBS_POLYNOMIALS` carries their coefficients, as
data, at two commits (:data:`VERSIONS`): ``v1`` = graphcore/poplibs@1e4ea3b2 and ``v2``
= graphcore/poplibs@f9273583, where ``Cholesky`` and ``TriangularSolve`` got
vectorised assembly dot products, ``TriangularInverse<half,false>`` was refitted and
the Cholesky estimate stopped depending on ``lower`` (the library then always uses
``Cholesky<T,true>``, on a transposed view for an upper factor).
:func:`poplibs_cycles` evaluates a polynomial the way the C++ does: each term
``c * n^p / d`` in integer arithmetic, truncated, then summed. The fitted rational
polynomial, which the calibration CSV quotes, can be a cycle or two higher; at the
measured sizes only ``TriangularInverse<half,false>`` v1 at ``dim = 8`` differs (13584
fitted, 13583 from the C++). Poplibs
computes in 32-bit ``unsigned``/``int``, which wraps for large sizes (``7261 * dim^3``
already beyond ``dim = 84``); Python integers do not wrap.

The polynomials are *tile* cycles of a step holding one worker running alone: the
leading coefficient of ``TriangularSolve<float,true>`` at v2 is ``3/2 an^2``, i.e.
``an^2/2`` multiply-adds at two per thread cycle (``f32v2mac``) times 6 contexts. Yet
Poplibs returns them as worker-vertex estimates, which are *thread* cycles, so an IPU
Model charging ``contexts x`` thread cycles would give about 6 times the hardware step.
The vertices here therefore report ``ceil(polynomial / worker contexts)`` thread cycles,
which makes the simulated step of one lone vertex the fitted hardware step (up to
``contexts - 1`` cycles of rounding plus the machine's own per-step costs).

Sizes outside the fitted samples (8 to 64 for TriangularInverse and Cholesky, 16 to 64 for
TriangularSolve) are allowed: the polynomial is simply evaluated there, an
extrapolation with no measurement behind it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from typing import Any, Literal

import numpy as np

from poplar_api.codelet import FieldBatch, InOut, Input, Output, Vector, Vertex
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.program import Execute, Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, Type

__all__ = [
    "CODELETS",
    "FITTED_SIZES",
    "POPLIBS_POLYNOMIALS",
    "VERSIONS",
    "choleskyBlockInPlace",
    "poplibs_cycles",
    "solver_vertex",
    "triangularInverseBlock",
    "triangularSolveBlock",
]

Codelet = Literal["TriangularInverse", "Cholesky", "TriangularSolve"]
Version = Literal["v1", "v2"]

#: Codelet names (without the ``poplin::`` namespace).
CODELETS: tuple[str, ...] = ("TriangularInverse", "Cholesky", "TriangularSolve")
#: Estimator version -> the Poplibs commit its polynomials come from.
VERSIONS: dict[str, str] = {
    "v1": "graphcore/poplibs@1e4ea3b225a40831ce6d8aec1160c5efd3b4cae7 (2021-02-26)",
    "v2": "graphcore/poplibs@f927358393d9c0ca6484bd9c991554c0de20cbb0 (2021-03-10)",
}
#: Codelet -> the sizes (``dim`` or ``an``) the polynomials were fitted through.
FITTED_SIZES: dict[str, tuple[int, ...]] = {
    "TriangularInverse": (8, 16, 32, 64),
    "Cholesky": (8, 16, 32, 64),
    "TriangularSolve": (16, 32, 64),
}
SOLVER_TYPES = (FLOAT, HALF)

Terms = tuple[tuple[int, int, int], ...]

# Source: lib/poplin/poplinCycleEstimators.cpp, functions
# MAKE_PERF_ESTIMATOR_NAME(TriangularInverse), (Cholesky) and (TriangularSolve), at the
# commits of VERSIONS. Each polynomial is a tuple of terms (c, p, d) meaning the C++
# expression ``c * n^p / d`` (integer, truncated); n is ``dim`` or ``an``.
_V1: dict[tuple[str, str, bool], Terms] = {
    ("TriangularInverse", "half", True): ((7, 3, 1), (387, 2, 2), (272, 1, 1), (-120, 0, 1)),
    ("TriangularInverse", "half", False): (
        (7261, 3, 1024), (14163, 2, 128), (2099, 1, 4), (-1326, 0, 1),
    ),
    ("TriangularInverse", "float", True): ((6, 3, 1), (264, 2, 1), (78, 1, 1), (-120, 0, 1)),
    ("TriangularInverse", "float", False): ((6, 3, 1), (51, 2, 1), (213, 1, 1), (12, 0, 1)),
    ("Cholesky", "half", True): ((311, 3, 64), (1059, 2, 8), (43, 1, 1), (648, 0, 1)),
    ("Cholesky", "half", False): ((6, 3, 1), (249, 2, 2), (165, 1, 1), (72, 0, 1)),
    ("Cholesky", "float", True): ((4, 3, 1), (72, 2, 1), (140, 1, 1), (84, 0, 1)),
    ("Cholesky", "float", False): ((5, 3, 1), (66, 2, 1), (97, 1, 1), (48, 0, 1)),
    ("TriangularSolve", "half", True): ((15, 2, 1), (144, 1, 1), (12, 0, 1)),
    ("TriangularSolve", "half", False): ((24, 2, 1), (153, 1, 1), (60, 0, 1)),
    # written ``12 * an * (an + 5)`` in the source
    ("TriangularSolve", "float", True): ((12, 2, 1), (60, 1, 1)),
    ("TriangularSolve", "float", False): ((21, 2, 1), (69, 1, 1), (90, 0, 1)),
}  # fmt: skip
_V2_CHANGES: dict[tuple[str, str, bool], Terms] = {
    ("TriangularInverse", "half", False): ((7, 3, 1), (123, 2, 1), (269, 1, 1), (-24, 0, 1)),
    # one polynomial for lower and upper at v2
    **{
        ("Cholesky", "half", lower): ((1, 3, 2), (795, 2, 4), (191, 1, 2), (426, 0, 1))
        for lower in (True, False)
    },
    **{
        ("Cholesky", "float", lower): ((1, 3, 1), (102, 2, 1), (101, 1, 1), (102, 0, 1))
        for lower in (True, False)
    },
    ("TriangularSolve", "half", True): ((3, 2, 4), (318, 1, 1), (-150, 0, 1)),
    ("TriangularSolve", "half", False): ((135, 2, 16), (1089, 1, 4), (12, 0, 1)),
    ("TriangularSolve", "float", True): ((3, 2, 2), (180, 1, 1), (-126, 0, 1)),
    ("TriangularSolve", "float", False): ((27, 2, 4), (327, 1, 2), (54, 0, 1)),
}  # fmt: skip
#: ``(version, codelet, type name, lower)`` -> terms ``(c, p, d)`` of ``c * n^p / d``.
POPLIBS_POLYNOMIALS: dict[tuple[str, str, str, bool], Terms] = {
    **{("v1", *k): v for k, v in _V1.items()},
    **{("v2", *k): v for k, v in {**_V1, **_V2_CHANGES}.items()},
}


def _check_choice(what: str, value: Any, allowed: tuple[Any, ...], hint: str = "") -> None:
    if value not in allowed:
        raise ValueError(
            f"poplin solvers: {what}={value!r} is not supported; it must be one of "
            f"{', '.join(repr(a) for a in allowed)}{hint}"
        )


def poplibs_cycles(codelet: str, elem_type: Type | str, lower: bool, n: int,
                   version: str = "v2") -> int:  # fmt: skip
    """The Poplibs cycle estimate of a solver codelet of size ``n``, as the C++ computes it.

    Parameters
    ----------
    codelet
        ``"TriangularInverse"``, ``"Cholesky"`` or ``"TriangularSolve"``.
    elem_type
        FLOAT or HALF (or ``"float"`` / ``"half"``).
    lower
        The ``lower`` template parameter.
    n
        ``dim`` (TriangularInverse, Cholesky) or ``an`` (TriangularSolve), >= 1. Sizes
        outside :data:`FITTED_SIZES` extrapolate the fitted polynomial.
    version
        ``"v1"`` or ``"v2"`` (:data:`VERSIONS`).

    Returns
    -------
    int
        The sum of the truncated terms: the number Poplibs' estimator returns (as a
        worker-vertex estimate), which is the hardware step's tile cycles it was fitted
        to; see the module docstring.
    """
    _check_choice("codelet", codelet, CODELETS)
    _check_choice("version", version, tuple(VERSIONS))
    type_name = elem_type if isinstance(elem_type, str) else elem_type.name
    _check_choice("element type", type_name, tuple(t.name for t in SOLVER_TYPES))
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(
            f"poplin solvers: {codelet} size n={n!r} must be an int >= 1 (the block's rows)"
        )
    terms = POPLIBS_POLYNOMIALS[(version, codelet, type_name, bool(lower))]
    total = 0
    for c, p, d in terms:
        term = abs(c) * int(n) ** p // d
        total += term if c >= 0 else -term
    return total


# ------------------------------------------------------------------------ vertices
def _square_side(elems: int, what: str) -> int:
    side = math.isqrt(int(elems))
    if side < 1 or side * side != int(elems):
        raise ValueError(
            f"field {what} has {elems} elements; it must hold a square dim x dim block "
            f"(dim^2 elements, dim >= 1)"
        )
    return side


def _blocks(batch: FieldBatch) -> list[tuple[int, int]]:
    return [(int(s), int(e)) for s, e in zip(batch.offsets[:-1], batch.offsets[1:], strict=True)]


def _triangle(block: np.ndarray, lower: bool, k: int = 0) -> np.ndarray:
    return np.tril(block, -k) if lower else np.triu(block, k)


class _SolverVertex(Vertex):
    """Shared parts of the solver codelets (see the module docstring)."""

    codelet: str = ""
    element_type_: tuple[Type] = (FLOAT,)
    lower: bool = True
    version: str = "v2"

    @classmethod
    def size_of(cls, sizes: Mapping[str, Any]) -> int:
        """``dim`` or ``an`` from the field sizes; ValueError if they do not fit."""
        raise NotImplementedError

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        n = cls.size_of(sizes)
        tile_cycles = poplibs_cycles(cls.codelet, cls.element_type_[0], cls.lower, n, cls.version)
        workers = int(target.getNumWorkerContexts())
        return max(0, -(-tile_cycles // workers))


class _TriangularInverseBase(_SolverVertex):
    codelet = "TriangularInverse"

    @classmethod
    def size_of(cls, sizes: Mapping[str, Any]) -> int:
        dim = _square_side(sizes["in"], "'in'")
        if int(sizes["out"]) != dim * dim:
            raise ValueError(
                f"field 'out' has {sizes['out']} elements but 'in' is {dim} x {dim}; "
                f"both must hold dim^2 = {dim * dim}"
            )
        return dim

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        import scipy.linalg  # loaded by the first solver run, not by every import

        src, dst = batches["in"], batches["out"]
        for (s, e), (os_, oe) in zip(_blocks(src), _blocks(dst), strict=True):
            dim = math.isqrt(e - s)
            tri = _triangle(src.data[s:e].astype(np.float64).reshape(dim, dim), cls.lower)
            with np.errstate(divide="ignore", invalid="ignore"):
                inv = scipy.linalg.solve_triangular(
                    tri, np.eye(dim), lower=cls.lower, check_finite=False
                )
            dst.data[os_:oe] = _triangle(inv, cls.lower).reshape(-1)
        return np.ones(num_vertices, dtype=bool)


class _CholeskyBase(_SolverVertex):
    codelet = "Cholesky"

    @classmethod
    def size_of(cls, sizes: Mapping[str, Any]) -> int:
        return _square_side(sizes["in"], "'in'")

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        blk = batches["in"]
        for s, e in _blocks(blk):
            dim = math.isqrt(e - s)
            a = blk.data[s:e].astype(np.float64).reshape(dim, dim)
            tri = _triangle(a, cls.lower)
            sym = tri + _triangle(a, cls.lower, 1).T  # the read triangle, mirrored
            try:
                factor = np.linalg.cholesky(sym)  # lower: sym = L L^T
            except np.linalg.LinAlgError:
                factor = np.full((dim, dim), np.nan)  # the codelet takes sqrt of < 0
            if not cls.lower:
                factor = factor.T  # sym = U^T U with U = L^T
            keep = _triangle(np.ones((dim, dim), bool), cls.lower)
            a[keep] = factor[keep]
            blk.data[s:e] = a.reshape(-1)
        return np.ones(num_vertices, dtype=bool)


class _TriangularSolveBase(_SolverVertex):
    codelet = "TriangularSolve"

    @classmethod
    def size_of(cls, sizes: Mapping[str, Any]) -> int:
        an = int(sizes["b"])
        if an < 1 or int(sizes["a"]) != an * an or int(sizes["x"]) != an:
            raise ValueError(
                f"field sizes a={sizes['a']}, b={sizes['b']}, x={sizes['x']} are not those "
                f"of an an x an matrix with an-element b and x (an >= 1)"
            )
        return an

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        import scipy.linalg  # loaded by the first solver run, not by every import

        a, b, x = batches["a"], batches["b"], batches["x"]
        for (s, e), (bs, be), (xs, xe) in zip(_blocks(a), _blocks(b), _blocks(x), strict=True):
            an = be - bs
            mat = a.data[s:e].astype(np.float64).reshape(an, an)
            x.data[xs:xe] = scipy.linalg.solve_triangular(
                mat, b.data[bs:be].astype(np.float64), lower=cls.lower,
                unit_diagonal=True, check_finite=False,
            )  # fmt: skip
        return np.ones(num_vertices, dtype=bool)


_BASES: dict[str, type] = {
    "TriangularInverse": _TriangularInverseBase,
    "Cholesky": _CholeskyBase,
    "TriangularSolve": _TriangularSolveBase,
}


def _fields(codelet: str, t: Type) -> dict[str, Any]:
    if codelet == "TriangularInverse":
        return {"in_": Input(Vector(t)), "out": Output(Vector(t))}
    if codelet == "Cholesky":
        return {"in_": InOut(Vector(t))}
    return {"a": Input(Vector(t)), "b": Input(Vector(t)), "x": Output(Vector(t))}


@cache
def solver_vertex(codelet: str, elem_type: Type, lower: bool, version: str = "v2") -> type:
    """The vertex class ``poplin::<codelet><type,lower>`` with the ``version`` estimator.

    Classes of both versions share the Poplibs type name, so one graph can hold only
    one version of a codelet instance (``addCodelets`` rejects a second class of the
    same name).

    Raises
    ------
    ValueError
        Unknown codelet or version, or a type other than FLOAT and HALF.
    """
    _check_choice("codelet", codelet, CODELETS)
    _check_choice("version", version, tuple(VERSIONS))
    _check_choice("element type", elem_type, SOLVER_TYPES)
    lower = bool(lower)
    flag = "true" if lower else "false"
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"poplin::{codelet}<{elem_type.name},{flag}>, Poplibs {version} estimator.",
        "typeName": f"poplin::{codelet}<{elem_type.name},{flag}>",
        "element_type_": (elem_type,),
        "lower": lower,
        "version": version,
        **_fields(codelet, elem_type),
    }
    py_name = f"{codelet}_{elem_type.constant}_{flag}_{version}"
    return type(py_name, (_BASES[codelet],), attrs)


# ------------------------------------------------------------------------ builders
def _checked(graph: Graph, prog: Sequence, api: str, **tensors: Tensor) -> Type:
    if not isinstance(graph, Graph):
        raise GraphError(f"poplin.{api}: expected a Graph, got {type(graph).__name__}")
    if not isinstance(prog, Sequence):
        raise GraphError(
            f"poplin.{api}: prog must be a program.Sequence to append to, got {type(prog).__name__}"
        )
    types = set()
    for what, t in tensors.items():
        if not isinstance(t, Tensor):
            raise GraphError(f"poplin.{api}: {what} must be a Tensor, got {type(t).__name__}")
        if t.elementType() not in SOLVER_TYPES:
            raise TypeMismatchError(
                f"poplin.{api}: {what} '{t.name}' is {t.elementType().name}; it must be "
                f"float or half; hint: popops.cast it first"
            )
        types.add(t.elementType())
    if len(types) > 1:
        described = ", ".join(f"{w} is {t.elementType().name}" for w, t in tensors.items())
        raise TypeMismatchError(f"poplin.{api}: {described}; they must have the same type")
    return types.pop()


def _square(a: Tensor, api: str, what: str = "a") -> int:
    shape = a.shape()
    if len(shape) != 2 or shape[0] != shape[1] or shape[0] < 1:
        raise TensorError(
            f"poplin.{api}: {what} '{a.name}' has shape {shape}; it must be a square "
            f"[n, n] matrix with n >= 1; hint: slice one block out of a larger matrix"
        )
    return int(shape[0])


def _tile_of(graph: Graph, t: Tensor, tile: int | None, api: str) -> int:
    if tile is not None:
        return int(tile)
    for local, intervals in enumerate(graph.getTileMapping(t, throwOnUnmapped=False)):
        if intervals:
            return local
    raise GraphError(
        f"poplin.{api}: '{t.name}' is not mapped to a tile and no tile= was given; "
        f"hint: graph.setTileMapping(a, tile) first"
    )


def _cs_name(debugPrefix: str, step: str) -> str:
    return f"{debugPrefix}/{step}" if debugPrefix else step


def triangularInverseBlock(
    graph: Graph,
    a: Tensor,
    lower: bool,
    prog: Sequence,
    debugPrefix: str = "",
    *,
    estimatorVersion: str = "v2",
    tile: int | None = None,
) -> Tensor:
    """The inverse of the lower (upper) triangle of the ``[n, n]`` block ``a``.

    Appends one compute set named ``<debugPrefix>/triangularInverse`` holding one
    ``poplin::TriangularInverse<T,lower>`` vertex on ``tile`` (default: the tile of
    ``a``'s first mapped element), the step that Poplibs' triangular solve runs on each
    diagonal block. Not Poplibs' blocked algorithm: one codelet over the whole block.
    An ``n`` outside the fitted sizes 8 to 64 extrapolates the cycle polynomial.

    Returns
    -------
    Tensor
        A new ``[n, n]`` variable on the same tile, zero outside the triangle.

    Raises
    ------
    TensorError
        ``a`` is not square.
    TypeMismatchError
        ``a`` is neither float nor half.
    """
    api = "triangularInverseBlock"
    t = _checked(graph, prog, api, a=a)
    n = _square(a, api)
    where = _tile_of(graph, a, tile, api)
    out = graph.addVariable(t, [n, n], _cs_name(debugPrefix, "triangularInverse/out"))
    graph.setTileMapping(out, where)
    cs = graph.addComputeSet(_cs_name(debugPrefix, "triangularInverse"))
    cls = solver_vertex("TriangularInverse", t, lower, estimatorVersion)
    v = graph.addVertex(cs, cls, {"in": a.flatten(), "out": out.flatten()})
    graph.setTileMapping(v, where)
    prog.add(Execute(cs))
    return out


def choleskyBlockInPlace(
    graph: Graph,
    a: Tensor,
    lower: bool,
    prog: Sequence,
    debugPrefix: str = "",
    *,
    estimatorVersion: str = "v2",
    tile: int | None = None,
) -> None:
    """Factor the symmetric positive-definite ``[n, n]`` block ``a`` in place.

    One compute set ``<debugPrefix>/cholesky`` with one ``poplin::Cholesky<T,lower>``
    vertex: the lower (upper) triangle of ``a`` becomes ``L`` (``U``); the other strict
    triangle is left unchanged. A block that is not positive definite gives NaN (the
    codelet takes the square root of a negative pivot). One codelet, not Poplibs'
    blocked ``choleskyInPlace``; an ``n`` outside 8 to 64 extrapolates the polynomial.

    Raises
    ------
    TensorError
        ``a`` is not square.
    TypeMismatchError
        ``a`` is neither float nor half.
    """
    api = "choleskyBlockInPlace"
    t = _checked(graph, prog, api, a=a)
    _square(a, api)
    where = _tile_of(graph, a, tile, api)
    cs = graph.addComputeSet(_cs_name(debugPrefix, "cholesky"))
    cls = solver_vertex("Cholesky", t, lower, estimatorVersion)
    v = graph.addVertex(cs, cls, {"in": a.flatten()})
    graph.setTileMapping(v, where)
    prog.add(Execute(cs))


def triangularSolveBlock(
    graph: Graph,
    a: Tensor,
    b: Tensor,
    lower: bool,
    prog: Sequence,
    debugPrefix: str = "",
    *,
    estimatorVersion: str = "v2",
    tile: int | None = None,
) -> Tensor:
    """``x`` with ``A x = b``, ``A`` the *unit-diagonal* lower (upper) triangle of ``a``.

    One compute set ``<debugPrefix>/triangularSolve`` with one
    ``poplin::TriangularSolve<T,lower>`` vertex (the diagonal of ``a`` is not read, as
    in the codelet; Poplibs scales by the inverse diagonal before). One right-hand
    side; an ``an`` outside the fitted sizes 16 to 64 extrapolates the polynomial.

    Returns
    -------
    Tensor
        A new ``[n]`` variable on the vertex's tile.

    Raises
    ------
    TensorError
        ``a`` is not square or ``b`` is not an ``[n]`` vector of ``a``'s size.
    TypeMismatchError
        ``a`` or ``b`` is neither float nor half, or their types differ.
    """
    api = "triangularSolveBlock"
    t = _checked(graph, prog, api, a=a, b=b)
    n = _square(a, api)
    if b.shape() != [n]:
        raise TensorError(
            f"poplin.{api}: b '{b.name}' has shape {b.shape()}; it must be [{n}], one "
            f"right-hand side for the [{n}, {n}] matrix a; hint: b.flatten() a column"
        )
    where = _tile_of(graph, a, tile, api)
    x = graph.addVariable(t, [n], _cs_name(debugPrefix, "triangularSolve/x"))
    graph.setTileMapping(x, where)
    cs = graph.addComputeSet(_cs_name(debugPrefix, "triangularSolve"))
    cls = solver_vertex("TriangularSolve", t, lower, estimatorVersion)
    v = graph.addVertex(cs, cls, {"a": a.flatten(), "b": b, "x": x})
    graph.setTileMapping(v, where)
    prog.add(Execute(cs))
    return x
