"""How each elementwise op splits a tile's work into vertices, as Poplibs' sources do.

A plan takes the contiguous output regions of one tile (see
:mod:`poplar_api.popops.layout`) and returns the vertices to add there: their class,
their pieces of output positions and whether each piece is a row of a 2-D field. The
choices restate ``lib/popops/ElementWise.cpp`` (binary, unary, broadcast-scalar and
ternary ops), ``Cast.cpp``, ``ScaledAdd.cpp`` and ``Fill.cpp``: one multi-vertex over
a single region that fits the codelet's limits, else worker vertices from
``splitRegionsBetweenWorkers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from poplar_api.popops import estimators as est
from poplar_api.popops import vertices as vx
from poplar_api.popops.layout import (
    ATOMIC_STORE_GRANULARITY,
    RPT_COUNT_MAX,
    UINT_MAX,
    split_pieces,
    split_regions,
)
from poplar_api.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Type

if TYPE_CHECKING:
    from poplar_api.graph import Graph

__all__ = [
    "Plan",
    "binary_vector_width",
    "broadcast_scalar_plan",
    "cast_plan",
    "fill_plan",
    "general_plan",
    "grain_of",
    "region_limits",
    "scaled_plan",
    "ternary_plan",
    "unary_plan",
    "unary_vector_width",
]


#: A vertex to add: (class, pieces of output positions, one row per piece?).
Plan = list[tuple[type, list[np.ndarray], bool]]

#: ``maxDivisibleValue`` (ElementWise.cpp): the largest count the 1-D work division takes.
_MAX_DIVISIBLE = UINT_MAX // 0xAAAB - 5


def _workers(graph: Graph) -> int:
    return graph.getTarget().getNumWorkerContexts()


def grain_of(graph: Graph, t: Type) -> int:
    """``max(getVectorWidth(t), getAtomicStoreGranularity())``, as ElementWise.cpp."""
    return max(graph.getTarget().getVectorWidth(t), ATOMIC_STORE_GRANULARITY)


def region_limits(vw: int, unlimited: bool) -> tuple[int, int, int]:
    """``MaxElements`` (repeat, division, regionSize) of ``maxVertexElementsPerRegion``.

    Integer and bool-output vertices (``in != HALF && out != FLOAT``) have no limit;
    the others are limited by the repeat counter (``rptCountMax * vw``) and the work
    division (``vw * maxDivisibleValue``).
    """
    if unlimited:
        return UINT_MAX, UINT_MAX, UINT_MAX
    return RPT_COUNT_MAX * vw, vw * _MAX_DIVISIBLE, RPT_COUNT_MAX * vw


def _fits_multi_vertex(total: int, limits: tuple[int, int, int], workers: int) -> bool:
    """``validateRegionSizeForMultiVertex`` (ElementWise.cpp)."""
    repeat, division, _ = limits
    if total > division:
        return False
    return repeat == UINT_MAX or total <= repeat * workers


def binary_vector_width(op: str, in_t: Type, out_t: Type) -> int:
    """``getBinaryOpVectorWidth`` for the types ipusim supports."""
    if in_t in (HALF, FLOAT) and out_t == BOOL:
        return 4
    return {HALF: 4, FLOAT: 2}.get(in_t, 1) if in_t == out_t else 1


def unary_vector_width(op: str, t: Type, out_t: Type | None = None) -> int:
    """``getUnaryOpVectorWidth``: BOOL results from float/half 4; non-linearities (TANH,
    RELU, SIGMOID, GELU_ERF) use half the width; integer and bool ops 1."""
    out_t = t if out_t is None else out_t
    if t in (HALF, FLOAT) and out_t == BOOL:
        return 4
    nonlinear = op in ("TANH", "RELU", "SIGMOID", "GELU_ERF")
    if t is HALF:
        return 2 if nonlinear else 4
    if t is FLOAT:
        return 1 if nonlinear else 2
    return 1


def general_plan(
    graph: Graph, grain: int, limits: tuple[int, int, int], cls_1d: type, cls_2d: type
) -> Any:
    """``binaryOpGeneral`` / ``unaryOp`` per tile: one 1-D multi-vertex over a single
    region that fits, else 2-D worker vertices from ``splitRegionsBetweenWorkers``
    (grain, 2 grains minimum, pieces of at most ``regionSize``)."""
    workers = _workers(graph)

    def plan(regions: list[np.ndarray]) -> Plan:
        sizes = [r.size for r in regions]
        if len(regions) == 1 and _fits_multi_vertex(sizes[0], limits, workers):
            return [(cls_1d, regions, False)]
        split = split_regions(sizes, grain, workers, 2 * grain, UINT_MAX, limits[2])
        return [(cls_2d, p, True) for p in split_pieces(regions, split)]

    return plan


def broadcast_scalar_plan(graph: Graph, op: str, t: Type, out_t: Type, in_place: bool) -> Any:
    """``createVertexBinaryOpBroadcastScalar`` per tile.

    The tile's regions are split for 2-D workers as the general op does; the 1-D
    multi-vertices (one per contiguous region) are chosen when the sum of their
    estimates is below ``W`` times the estimate of the 2-D vertex with the most
    regions, and the elements fit a multi-vertex.
    """
    target = graph.getTarget()
    workers, vw = _workers(graph), target.getVectorWidth(t)
    grain = grain_of(graph, t)
    limits = region_limits(binary_vector_width(op, t, out_t), t != HALF and out_t != FLOAT)
    cls_1d = vx.broadcast_scalar_vertex(op, t, "1D", in_place)
    cls_2d = vx.broadcast_scalar_vertex(op, t, "2D", in_place)

    def plan(regions: list[np.ndarray]) -> Plan:
        sizes = [int(r.size) for r in regions]
        split = split_regions(sizes, grain, workers, 2 * grain, UINT_MAX, limits[2])
        est_1d = sum(est.broadcast_scalar_1d(op, t.name, n, workers, vw, in_place) for n in sizes)
        busiest = max(split, key=len)  # the first vertex with the most regions
        est_2d = est.broadcast_scalar_2d_data(op, t.name, [n for _, _, n in busiest], vw, in_place)
        if est_1d < est_2d * workers and _fits_multi_vertex(sum(sizes), limits, workers):
            return [(cls_1d, [r], False) for r in regions]
        return [(cls_2d, p, True) for p in split_pieces(regions, split)]

    return plan


#: ``maxVertexElementsPerRegion`` for the ternary codelets (ElementWise.cpp): elements
#: per hardware-loop pass by output type (None: no repeat limit, 0: no such vertex).
_TERNARY_LOOP_ELEMS: dict[tuple[str, bool], dict[Type, int | None]] = {
    ("Clamp", False): {BOOL: 0, INT: None, HALF: 2, FLOAT: 1, UNSIGNED_INT: None},
    ("BroadcastClamp", False): {BOOL: 0, INT: None, HALF: 2, FLOAT: 1, UNSIGNED_INT: None},
    ("Select", False): {BOOL: None, INT: 1, HALF: None, FLOAT: 1, UNSIGNED_INT: None},
    ("BroadcastSelect", False): dict.fromkeys((BOOL, INT, HALF, FLOAT, UNSIGNED_INT)),
    ("BroadcastSelectorSelect", False): dict.fromkeys((BOOL, INT, HALF, FLOAT, UNSIGNED_INT)),
    ("Clamp", True): {BOOL: 0, INT: None, HALF: None, FLOAT: None, UNSIGNED_INT: None},
    ("BroadcastClamp", True): {BOOL: 0, INT: None, HALF: None, FLOAT: None, UNSIGNED_INT: None},
    ("Select", True): dict.fromkeys((BOOL, INT, HALF, FLOAT, UNSIGNED_INT)),
    ("BroadcastSelect", True): dict.fromkeys((BOOL, INT, HALF, FLOAT, UNSIGNED_INT), 0),
    ("BroadcastSelectorSelect", True): dict.fromkeys((BOOL, INT, HALF, FLOAT, UNSIGNED_INT)),
}


def ternary_plan(graph: Graph, kind: str, t: Type, in_place: bool) -> Any:
    """Per tile, ``splitRegionsBetweenWorkers(grain max(VW, 4), min 2 grains,
    regionSize rptCountMax · loop elements)``; every vertex is a worker vertex."""
    loop = _TERNARY_LOOP_ELEMS[(kind, in_place)][t]
    region = UINT_MAX if loop is None else RPT_COUNT_MAX * loop
    grain = grain_of(graph, t)
    workers = _workers(graph)
    cls = vx.ternary_vertex(kind, t, in_place)

    def plan(regions: list[np.ndarray]) -> Plan:
        sizes = [int(r.size) for r in regions]
        split = split_regions(sizes, grain, workers, 2 * grain, UINT_MAX, region)
        return [(cls, p, True) for p in split_pieces(regions, split)]

    return plan


def unary_plan(graph: Graph, op: str, t: Type, in_place: bool, out_t: Type | None = None) -> Any:
    """``unaryOp`` (ElementWise.cpp): the general plan with the unary limits.

    Limits as ``maxVertexElementsPerRegion``: none when ``in != HALF && out != FLOAT``
    (integer ops, and float -> BOOL tests such as IS_FINITE), else the repeat and
    work-division limits of the op's vector width. Not modelled: the in-place
    non-linearities' extra limit from their ``n`` field size (a codelet property, not
    in the Poplibs sources); they use the float/half limits.
    """
    out_t = t if out_t is None else out_t
    unlimited = t != HALF and out_t != FLOAT
    return general_plan(
        graph,
        grain_of(graph, t),
        region_limits(unary_vector_width(op, t, out_t), unlimited),
        vx.unary_vertex(op, t, "1D", in_place),
        vx.unary_vertex(op, t, "2D", in_place),
    )


#: ``multiVertexCyclesForWorkDivision`` (Cast.cpp).
_CAST_WORK_DIVISION = 6
#: ``elementsPerLoop`` (Cast.cpp): the repeat limit is ``rptCountMax * 4`` elements.
_CAST_ELEMS_PER_LOOP = 4


def cast_plan(graph: Graph, src: Type, dst: Type) -> Any:
    """``castImpl`` (Cast.cpp) per tile.

    A single region that fits the repeat limit gets ``Cast1DSingleWorker`` when it has
    at most ``min(VW(src), VW(dst)) * 6`` elements, else a ``Cast1D`` multi-vertex;
    otherwise the regions are split (grain ``max(VW(src), VW(dst))``) and each vertex
    with one piece is a ``Cast1DSingleWorker``, with several a ``Cast2D``.
    """
    target = graph.getTarget()
    workers = _workers(graph)
    max_rpt = RPT_COUNT_MAX * _CAST_ELEMS_PER_LOOP
    vw_src, vw_dst = target.getVectorWidth(src), target.getVectorWidth(dst)
    grain = max(vw_src, vw_dst)
    single = vx.cast_vertex(src, dst, "1DSingleWorker")
    multi = vx.cast_vertex(src, dst, "1D")
    two_d = vx.cast_vertex(src, dst, "2D")

    def plan(regions: list[np.ndarray]) -> Plan:
        sizes = [int(r.size) for r in regions]
        n = sizes[0]
        if len(regions) == 1 and n <= _MAX_DIVISIBLE and n <= max_rpt * workers:
            small = n <= min(vw_src, vw_dst) * _CAST_WORK_DIVISION
            return [(single if small else multi, regions, False)]
        split = split_regions(sizes, grain, workers, 2 * grain, UINT_MAX, max_rpt)
        return [
            (single, p, False) if len(p) == 1 else (two_d, p, True)
            for p in split_pieces(regions, split)
        ]

    return plan


def scaled_plan(graph: Graph, t: Type, subtract: bool) -> Any:
    """``createVertices`` (ScaledAdd.cpp) per tile.

    One supervisor over a single region of at most ``rptCountMax * VW * W`` elements
    (the vertex's ``size`` field limit is a codelet property, not modelled); otherwise
    2-D workers split with grain ``VW``, pieces of at most ``rptCountMax * VW``.
    """
    target = graph.getTarget()
    workers, vw = _workers(graph), target.getVectorWidth(t)
    sup = vx.scaled_add_vertex(t, "1D", subtract)
    two_d = vx.scaled_add_vertex(t, "2D", subtract)

    def plan(regions: list[np.ndarray]) -> Plan:
        sizes = [int(r.size) for r in regions]
        if len(regions) == 1 and sizes[0] <= RPT_COUNT_MAX * vw * workers:
            return [(sup, regions, False)]
        split = split_regions(sizes, vw, workers, 2 * vw, UINT_MAX, RPT_COUNT_MAX * vw)
        return [(two_d, p, True) for p in split_pieces(regions, split)]

    return plan


def fill_plan(graph: Graph, t: Type) -> Any:
    """``fill`` of a compute set (Fill.cpp) per tile.

    The regions are always split over the workers: grain ``VW``, at least ``2 * VW``
    elements per vertex, at most ``rptCountMax * width`` (``width`` = 64/16 for half,
    64/32 otherwise); a vertex with one piece is a ``Fill``, with several a ``Fill2d``.
    """
    target = graph.getTarget()
    vw = target.getVectorWidth(t)
    width = target.getDataPathWidth() // (16 if t is HALF else 32)
    one, two_d = vx.fill_vertex(t, "1D"), vx.fill_vertex(t, "2D")
    workers = _workers(graph)

    def plan(regions: list[np.ndarray]) -> Plan:
        split = split_regions(
            [int(r.size) for r in regions], vw, workers, 2 * vw, RPT_COUNT_MAX * width
        )
        return [
            (one, p, False) if len(p) == 1 else (two_d, p, True)
            for p in split_pieces(regions, split)
        ]

    return plan
