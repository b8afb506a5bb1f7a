"""Matrix multiplication on the tiles: ``matMul``, ``matMulGrouped``, ``matMulAcc`` and
the ``createMatMulInput*`` layout helpers.

A product is built from a :class:`~poplar_api.poplin.planner.MatMulPlan`: one compute
set of MatMulPartial vertices (one per block product and group) and, when K is split,
a second compute set of ReduceAdd vertices that sums the float partials into the
result. Operands are read where they live; the engine exchanges what a tile lacks.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.poplin.planner import MatMulPlan, partials_type_of, plan_matmul
from poplar_api.poplin.vertices import MATMUL_TYPES, matmul_partial_vertex, reduce_add_vertex
from poplar_api.program import Execute
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, Type

_PLANS: weakref.WeakKeyDictionary[Any, dict[tuple, MatMulPlan]] = weakref.WeakKeyDictionary()


# ------------------------------------------------------------------ checks & plans
def _check_type(t: Type, what: str) -> Type:
    if t not in MATMUL_TYPES:
        raise TypeMismatchError(
            f"{what}: element type {t!r} is not supported; matMul takes FLOAT or HALF "
            f"(hint: cast the operand first)"
        )
    return t


def _dims(
    a_shape: Sequence[int], b_shape: Sequence[int], what: str, names: tuple[str, str] = ("A", "B")
) -> tuple[int, int, int, int]:
    """``(G, M, K, N)`` of ``a_shape x b_shape`` (2-D or 3-D), or a clear error."""
    a, b = list(a_shape), list(b_shape)
    if len(a) != len(b):
        raise TensorError(
            f"{what}: rank mismatch, {names[0]} has shape {a} (rank {len(a)}) and "
            f"{names[1]} has shape {b} (rank {len(b)}); both must be 2-D [M,K] x [K,N] or "
            f"both 3-D [G,M,K] x [G,K,N]"
        )
    if len(a) not in (2, 3):
        raise TensorError(
            f"{what}: operands of rank {len(a)} ({names[0]} {a}, {names[1]} {b}) are not "
            f"supported; use 2-D [M,K] x [K,N] or grouped 3-D [G,M,K] x [G,K,N] (hint: "
            f"reshape first)"
        )
    if len(a) == 2:
        a, b = [1, *a], [1, *b]
    if a[2] != b[1]:
        raise TensorError(
            f"{what}: inner dimensions differ: {names[0]} has shape {list(a_shape)} and "
            f"{names[1]} has shape {list(b_shape)}; the last dimension of {names[0]} "
            f"({a[2]}) must equal the {'second' if len(a_shape) == 3 else 'first'} "
            f"dimension of {names[1]} ({b[1]})"
        )
    if a[0] != b[0]:
        raise TensorError(
            f"{what}: group dimensions differ: {names[0]} has shape {list(a_shape)} and "
            f"{names[1]} has shape {list(b_shape)}; both need the same G"
        )
    if min(a[0], a[1], a[2], b[2]) < 1:
        raise TensorError(
            f"{what}: every dimension must be >= 1, got {names[0]} {list(a_shape)} and "
            f"{names[1]} {list(b_shape)}"
        )
    return int(a[0]), int(a[1]), int(a[2]), int(b[2])


def _options(options: Mapping[str, Any] | None) -> dict[str, str]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise GraphError(f"matMul options must be a mapping of str to str, got {options!r}")
    known = {"partialsType", "availableMemoryProportion"}
    unknown = sorted(set(map(str, options)) - known)
    if unknown:
        raise GraphError(
            f"matMul options {unknown} are not recognised; known options: {sorted(known)}"
        )
    return {str(k): str(v) for k, v in options.items()}


def getPlan(
    graph: Graph,
    shape: tuple[int, int, int, int],
    inputType: Type,
    outputType: Type | None = None,
    options: Mapping[str, Any] | None = None,
) -> MatMulPlan:
    """The plan ``matMul`` uses for a ``(G, M, K, N)`` product on ``graph`` (cached)."""
    opts = _options(options)
    out_type = inputType if outputType is None else outputType
    num_tiles = graph.getTarget().getNumTiles()
    key = (num_tiles, tuple(shape), inputType, out_type, tuple(sorted(opts.items())))
    cache = _PLANS.setdefault(graph._state, {})
    plan = cache.get(key)
    if plan is None:
        plan = plan_matmul(tuple(shape), inputType, out_type, graph.getTarget(), opts)
        cache[key] = plan
    return plan


def _bounds(size: int, block: int, parts: int) -> list[tuple[int, int]]:
    return [(p * block, min((p + 1) * block, size)) for p in range(parts)]


def _chunks(size: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ranges covering ``[0, size)`` (later ones may be empty)."""
    c = -(-size // parts)
    return [(min(p * c, size), min((p + 1) * c, size)) for p in range(parts)]


def _as3(t: Tensor) -> Tensor:
    return t.expand([0]) if t.rank() == 2 else t


def _map_spread(graph: Graph, flat: Tensor, tiles: Sequence[int]) -> None:
    """Map ``flat`` (1-D) in equal contiguous chunks over ``tiles``."""
    for (lo, hi), tile in zip(_chunks(flat.numElements(), len(tiles)), tiles, strict=True):
        if hi > lo:
            graph.setTileMapping(flat.slice(lo, hi), int(tile))


# ------------------------------------------------------------------ layout helpers
def _create_input(
    graph: Graph,
    type_: Type,
    aShape: Sequence[int],
    bShape: Sequence[int],
    name: str,
    options: Mapping[str, Any] | None,
    lhs: bool,
) -> Tensor:
    what = "createMatMulInputLHS" if lhs else "createMatMulInputRHS"
    _check_type(type_, what)
    g, m, k, n = _dims(aShape, bShape, what, ("aShape", "bShape"))
    plan = getPlan(graph, (g, m, k, n), type_, None, options)
    pg, pm, pk, pn = plan.parts
    bg, bm, bk, bn = plan.blocks
    shape = list(aShape if lhs else bShape)
    t = graph.addVariable(type_, shape, name)
    t3 = _as3(t)
    for gi, (g0, g1) in enumerate(_bounds(g, bg, pg)):
        for kk, (k0, k1) in enumerate(_bounds(k, bk, pk)):
            if lhs:
                for i, (i0, i1) in enumerate(_bounds(m, bm, pm)):
                    blk = t3.slice([g0, i0, k0], [g1, i1, k1]).flatten()
                    _map_spread(graph, blk, plan.tiles[gi, i, :, kk].tolist())
            else:
                for j, (j0, j1) in enumerate(_bounds(n, bn, pn)):
                    blk = t3.slice([g0, k0, j0], [g1, k1, j1]).flatten()
                    _map_spread(graph, blk, plan.tiles[gi, :, j, kk].tolist())
    return t


def createMatMulInputLHS(
    graph: Graph,
    type: Type,
    aShape: Sequence[int],
    bShape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """A left operand of shape ``aShape``, laid out as the plan of ``aShape x bShape`` wants.

    Each ``[m, k]`` block is spread in equal chunks over the tiles that multiply it,
    so those tiles only receive the rest of the block.
    """
    return _create_input(graph, type, aShape, bShape, name, options, lhs=True)


def createMatMulInputRHS(
    graph: Graph,
    type: Type,
    aShape: Sequence[int],
    bShape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """A right operand of shape ``bShape``, laid out as the plan of ``aShape x bShape`` wants."""
    return _create_input(graph, type, aShape, bShape, name, options, lhs=False)


# ------------------------------------------------------------------ the product
def _check_operands(graph: Graph, A: Any, B: Any, what: str) -> tuple[Type, tuple]:
    for t, label in ((A, "A"), (B, "B")):
        if not isinstance(t, Tensor):
            raise TensorError(f"{what}: operand {label} must be a Tensor, got {type(t).__name__}")
        if t.graph is not graph._state:
            raise GraphError(f"{what}: operand {label} ('{t.name}') belongs to another graph")
    dims = _dims(A.shape(), B.shape(), what)
    ta, tb = A.elementType(), B.elementType()
    if ta != tb:
        raise TypeMismatchError(
            f"{what}: element types differ: A '{A.name}' is {ta.name} and B '{B.name}' is "
            f"{tb.name}; both operands need the same type (hint: cast one of them)"
        )
    _check_type(ta, f"{what}: operand A '{A.name}'")
    return ta, dims


def _build(
    graph: Graph,
    A: Tensor,
    B: Tensor,
    prog: ProgramSequence,
    name: str,
    options: Mapping[str, Any] | None,
    out_type: Type,
    acc: tuple[Tensor, Any] | None = None,
) -> Tensor:
    """Add the compute sets of ``C = A B`` (or ``C += k A B``) to ``prog``; return C."""
    in_type, (g, m, k, n) = _check_operands(graph, A, B, name)
    if not isinstance(prog, ProgramSequence):
        raise GraphError(f"{name}: prog must be a program.Sequence, got {type(prog).__name__}")
    _check_type(out_type, f"{name}: outputType")
    opts = _options(options)
    plan = getPlan(graph, (g, m, k, n), in_type, out_type, opts)
    pg, pm, pk, pn = plan.parts
    bg, bm, bk, bn = plan.blocks
    A3, B3 = _as3(A), _as3(B)
    two_d = A.rank() == 2
    C = graph.addVariable(out_type, [m, n] if two_d else [g, m, n], name) if acc is None else acc[0]
    C3 = _as3(C)
    use_reduce = pk > 1 or acc is not None
    partials_type = partials_type_of(opts, in_type)
    partials = (
        graph.addVariable(partials_type, [pk, g, m, n], f"{name}/partials") if use_reduce else None
    )
    partial_cls = matmul_partial_vertex(in_type, partials_type if use_reduce else out_type)
    cs = graph.addComputeSet(f"{name}/MatMul")
    red_cs = graph.addComputeSet(f"{name}/Reduce") if use_reduce else None
    red_cls = reduce_add_vertex(partials_type, out_type, update=acc is not None)
    scale = _scale_tensor(graph, acc[1], plan, name) if acc is not None else None
    g_b, m_b, k_b, n_b = (
        _bounds(g, bg, pg), _bounds(m, bm, pm), _bounds(k, bk, pk), _bounds(n, bn, pn)
    )  # fmt: skip
    for gi, (g0, g1) in enumerate(g_b):
        for i, (i0, i1) in enumerate(m_b):
            for j, (j0, j1) in enumerate(n_b):
                tiles = plan.tiles[gi, i, j, :].tolist()
                out_blk = C3.slice([g0, i0, j0], [g1, i1, j1])
                if acc is None:
                    if use_reduce:
                        _map_spread(graph, out_blk.flatten(), tiles)
                    else:
                        graph.setTileMapping(out_blk, tiles[0])
                for kk, (k0, k1) in enumerate(k_b):
                    tile = tiles[kk]
                    if use_reduce:
                        dst = partials.slice([kk, g0, i0, j0], [kk + 1, g1, i1, j1])[0]
                        graph.setTileMapping(dst, tile)
                    for gg in range(g0, g1):
                        v = graph.addVertex(
                            cs,
                            partial_cls,
                            {
                                "in": A3[gg].slice([i0, k0], [i1, k1]).flatten(),
                                "weights": B3[gg].slice([k0, j0], [k1, j1]).flatten(),
                                "out": (
                                    partials[kk, gg].slice([i0, j0], [i1, j1]).flatten()
                                    if use_reduce
                                    else C3[gg].slice([i0, j0], [i1, j1]).flatten()
                                ),
                            },
                        )
                        graph.setTileMapping(v, tile)
                if use_reduce:
                    _add_reduce(
                        graph, red_cs, red_cls, partials, out_blk, (g0, g1, i0, i1, j0, j1),
                        tiles, scale, (gi, i, j),
                    )  # fmt: skip
    prog.add(Execute(cs))
    if red_cs is not None:
        prog.add(Execute(red_cs))
    return C


def _add_reduce(
    graph: Graph,
    cs: Any,
    cls: type,
    partials: Tensor,
    out_blk: Tensor,
    box: tuple[int, int, int, int, int, int],
    tiles: list[int],
    scale: Any,
    key: tuple[int, int, int],
) -> None:
    """ReduceAdd vertices for one output block: chunk ``kk`` on ``tiles[kk]``."""
    g0, g1, i0, i1, j0, j1 = box
    pk = partials.dim(0)
    flat_out = out_blk.flatten()
    flat_parts = [partials.slice([p, g0, i0, j0], [p + 1, g1, i1, j1]).flatten() for p in range(pk)]
    for kk, (lo, hi) in enumerate(_chunks(flat_out.numElements(), len(tiles))):
        if hi <= lo:
            continue
        fields: dict[str, Any] = {
            "partials": [fp.slice(lo, hi) for fp in flat_parts],
            "out": flat_out.slice(lo, hi),
        }
        if scale is not None:
            fields["scale"] = scale(*key, kk)
        v = graph.addVertex(cs, cls, fields)
        graph.setTileMapping(v, int(tiles[kk]))


def _scale_tensor(graph: Graph, k: Any, plan: MatMulPlan, name: str) -> Any:
    """``scale(gi, i, j, kk)``: the ``scale`` connection of a matMulAcc reduce vertex.

    A number becomes a FLOAT constant with one element on each tile of the plan; a
    1-element FLOAT tensor is connected as it is (the engine broadcasts it).
    """
    if isinstance(k, Tensor):
        if k.elementType() != FLOAT or k.numElements() != 1:
            raise TypeMismatchError(
                f"{name}: scale tensor '{k.name}' must be a FLOAT tensor of 1 element, got "
                f"{k.elementType().name} of shape {k.shape()}"
            )
        view = k.reshape([])
        return lambda gi, i, j, kk: view
    try:
        value = float(k)
    except (TypeError, ValueError):
        raise TypeMismatchError(
            f"{name}: scale k={k!r} must be a number or a 1-element FLOAT tensor"
        ) from None
    const = graph.addConstant(FLOAT, list(plan.tiles.shape), value, f"{name}/scale")
    flat = const.flatten()
    for idx, tile in enumerate(plan.tiles.reshape(-1).tolist()):
        graph.setTileMapping(flat.slice(idx, idx + 1), int(tile))
    return lambda gi, i, j, kk: const[gi, i, j, kk]


def matMul(
    graph: Graph,
    A: Tensor,
    B: Tensor,
    prog: ProgramSequence,
    debugName: str = "",
    options: Mapping[str, Any] | None = None,
    outputType: Type | None = None,
) -> Tensor:
    """``A @ B`` for ``[M,K] x [K,N]`` (or grouped ``[G,M,K] x [G,K,N]``).

    Parameters
    ----------
    graph, prog
        The graph, and the Sequence the compute sets are appended to.
    A, B
        Operands of the same type (FLOAT or HALF); any views (slices, transposes).
    debugName
        Prefix of the compute sets (``<name>/MatMul``, ``<name>/Reduce``) and the
        result's name.
    options
        ``partialsType`` ("float", default, or "half") and
        ``availableMemoryProportion`` (default "0.6").
    outputType
        Result type; defaults to the operands' type. HALF products accumulate in float32.

    Returns
    -------
    Tensor
        A new ``[M,N]`` (or ``[G,M,N]``) tensor mapped over the tiles that computed it.

    Raises
    ------
    TensorError
        Rank mismatch, inner dimensions differ (both shapes named) or empty dimensions.
    TypeMismatchError
        Operand types differ or are not FLOAT/HALF.
    """
    name = debugName or "matMul"
    ta = A.elementType() if isinstance(A, Tensor) else None
    out_type = outputType if outputType is not None else ta
    return _build(graph, A, B, prog, name, options, out_type if out_type else FLOAT)


def matMulGrouped(
    graph: Graph,
    A: Tensor,
    B: Tensor,
    prog: ProgramSequence,
    debugName: str = "",
    options: Mapping[str, Any] | None = None,
    outputType: Type | None = None,
) -> Tensor:
    """Batched ``A[g] @ B[g]`` for ``[G,M,K] x [G,K,N]``; see :func:`matMul`."""
    for t, label in ((A, "A"), (B, "B")):
        if isinstance(t, Tensor) and t.rank() != 3:
            raise TensorError(
                f"{debugName or 'matMulGrouped'}: operand {label} has shape {t.shape()}; "
                f"matMulGrouped needs 3-D [G,M,K] x [G,K,N] operands (hint: use matMul for 2-D)"
            )
    return matMul(graph, A, B, prog, debugName or "matMulGrouped", options, outputType)


def matMulAcc(
    graph: Graph,
    C: Tensor,
    k: float | Tensor,
    A: Tensor,
    B: Tensor,
    prog: ProgramSequence,
    debugName: str = "",
    options: Mapping[str, Any] | None = None,
) -> None:
    """``C += k * A @ B`` in place (``k`` a number or a 1-element FLOAT tensor).

    ``C`` keeps its own tile mapping; the partial products are summed, scaled and
    added by ReduceAdd update vertices on the tiles of the plan.
    """
    name = debugName or "matMulAcc"
    if not isinstance(C, Tensor):
        raise TensorError(f"{name}: C must be a Tensor, got {type(C).__name__}")
    _, (g, m, _, n) = _check_operands(graph, A, B, name)
    want = [m, n] if A.rank() == 2 else [g, m, n]
    if C.shape() != want:
        raise TensorError(
            f"{name}: C '{C.name}' has shape {C.shape()} but A {A.shape()} x B {B.shape()} "
            f"gives {want}"
        )
    _check_type(C.elementType(), f"{name}: C '{C.name}'")
    _build(graph, A, B, prog, name, options, C.elementType(), acc=(C, k))


__all__ = [
    "createMatMulInputLHS",
    "createMatMulInputRHS",
    "getPlan",
    "matMul",
    "matMulAcc",
    "matMulGrouped",
]
