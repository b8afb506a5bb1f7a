"""Region-of-interest align (``popnn::experimental::roiAlignFwd`` and
``roiAlignInputGradient``).

As ``lib/popnn/ROIAlign.cpp`` ``roiAlignFwd`` (graphcore/poplibs @7eac0f26): one
``popnn::ROIAlignForward<T>`` vertex per (region, channel, sample row ``iy``, sample
column ``ix``), vertex ``k`` on tile ``k mod tiles``; each writes the bilinear sample
``(iy, ix)`` of every output bin of its region and channel into
``topDataGrid[roi][c][iy][ix]`` (``[R, C, gh, gw, outH, outW]``, zero-filled first);
``popops.reduce`` adds the samples of a bin (dimensions 2 and 3) and ``popops.div``
divides by the ``gh x gw`` samples. The gradient (:func:`roiAlignInputGradient`) adds
each output point's share into per-(channel, region group, sample) buffers with
``popnn::ROIAlignBackward<T>`` vertices, a compute set per group of regions, and
reduces them.

Where this differs from Poplibs (each noted so a reader of the Poplibs source is not
surprised):

* The vertex state Poplibs sets with ``setInitialValue`` (spatial scale, sizes,
  ``iy``, ``ix``, grid, ``aligned``) is a constant ``params`` row per vertex, and the
  vertex reads its channel's ``[batch * H * W]`` data as one vector and its region's
  batch index as a scalar (Poplibs: one vector per batch entry and the whole index
  vector with the region's position).
* A sample point is dropped (contributes 0) when ``y < -1``, ``y > H``, ``x < -1`` or
  ``x > W``, and one at or past the last row or column reads that row or column, as
  ONNX's ``RoiAlign`` defines (the Poplibs codelet checks only ``y <= H`` and
  ``x <= W``).
* ``mode="max"`` (ONNX's, not in Poplibs): a sample is the largest of its four
  weighted neighbours and the bin the largest sample (a MAX reduction, no division).

The cycle estimate: Poplibs' ``ROIAlignForward`` estimator
(``lib/popnn/popnnCycleEstimators.cpp``) is a placeholder returning 10. Here the
estimate counts the compiled codelet's work, in worker-thread cycles (one instruction
a cycle): :data:`SETUP_CYCLES` for the region's start, end and bin sizes (four float
divisions in software), and :data:`POINT_CYCLES` for each output point (bounds
checks, two float-to-int conversions, four indices, four loads, eight multiplies and
three adds of the interpolation, the store and the loop).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.codelet import InOut, Input, Output, Vector, Vertex
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.library_checks import check_element_type
from poplar_api.popops import Operation, div, fill, reduce
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, INT, Type

__all__ = [
    "RoiAlignParams",
    "roiAlignFwd",
    "roiAlignInputGradient",
    "roi_align_grad_vertex",
    "roi_align_vertex",
]

#: Worker cycles of a vertex's set-up (region corners, sizes, four divisions).
SETUP_CYCLES = 60
#: Worker cycles of one output point of one sample (see the module docstring).
POINT_CYCLES = 46
#: Worker cycles of one output point of the gradient: the forward point's work with
#: the four loads made read-modify-writes (four more stores) and the four weighted
#: terms scaled by the inverse sample count (four more multiplies).
GRAD_POINT_CYCLES = POINT_CYCLES + 8
#: Columns of a vertex's ``params`` row.
_PARAMS = ("spatial_scale", "height", "width", "aligned_height", "aligned_width", "iy", "ix",
           "bin_grid_h", "bin_grid_w", "aligned", "max")  # fmt: skip


@dataclass(frozen=True)
class RoiAlignParams:
    """``popnn::experimental::roiAlignParams``.

    Attributes
    ----------
    samplingRatio
        Samples per bin along each axis (``> 0``; ONNX's adaptive 0 is not supported,
        as in Poplibs).
    alignedHeight, alignedWidth
        Output bins per region.
    aligned
        Shift the region by half a pixel (ONNX's ``half_pixel``; False is
        ``output_half_pixel``, opset 10's only behaviour).
    spatialScale
        Scale from region coordinates to input pixels (``> 0``).
    mode
        ``"avg"`` (Poplibs) or ``"max"`` (ONNX).
    """

    samplingRatio: int
    alignedHeight: int
    alignedWidth: int
    aligned: bool
    spatialScale: float
    mode: str = "avg"


def roi_align_cycles(points: int, grad: bool = False) -> int:
    """Worker cycles of one ``ROIAlignForward`` (or ``ROIAlignBackward``) vertex over
    ``points`` output points."""
    return SETUP_CYCLES + (GRAD_POINT_CYCLES if grad else POINT_CYCLES) * points


def _compute(cls, batches, num_vertices, num_workers):
    data, rois, index = batches["bottom_data"], batches["bottom_rois"], batches["batch_index"]
    params, out = batches["params"], batches["top_data_grid"]
    n = num_vertices
    k = len(_PARAMS)
    p = params.data[params.offsets[:n, None] + np.arange(k)].astype(np.float64)
    for key in np.unique(p[:, 1:5], axis=0):  # one group per (H, W, outH, outW)
        sel = np.flatnonzero((p[:, 1:5] == key).all(axis=1))
        height, width, out_h, out_w = (int(v) for v in key)
        _compute_group(cls, data, rois, index, out, p, sel, height, width, out_h, out_w)


def _geometry(rois, index, p, sel, height, width, out_h, out_w):
    """Per vertex of ``sel``: the four neighbours' flat positions in the vertex's
    ``[batch * H * W]`` field, their bilinear weights and which points are inside
    (arrays ``[len(sel), outH, outW]``), as ONNX's ``RoiAlign`` samples."""
    f32 = np.float32
    cols = {name: p[sel, i] for i, name in enumerate(_PARAMS)}
    r = rois.data[rois.offsets[sel, None] + np.arange(4)].astype(f32)
    scale = cols["spatial_scale"].astype(f32)[:, None]
    offset = np.where(cols["aligned"] > 0, f32(0.5), f32(0.0))[:, None].astype(f32)
    start_w, start_h, end_w, end_h = (r[:, j : j + 1] * scale - offset for j in range(4))
    floor = np.where(cols["aligned"] > 0, f32(0.0), f32(1.0))[:, None].astype(f32)
    roi_w = np.maximum(end_w - start_w, floor)
    roi_h = np.maximum(end_h - start_h, floor)
    bin_h, bin_w = roi_h / f32(out_h), roi_w / f32(out_w)
    gh = cols["bin_grid_h"].astype(f32)[:, None]
    gw = cols["bin_grid_w"].astype(f32)[:, None]
    iy = cols["iy"].astype(f32)[:, None]
    ix = cols["ix"].astype(f32)[:, None]
    y = (start_h + np.arange(out_h, dtype=f32) * bin_h + (iy + f32(0.5)) * bin_h / gh)[:, :, None]
    x = (start_w + np.arange(out_w, dtype=f32) * bin_w + (ix + f32(0.5)) * bin_w / gw)[:, None, :]
    y, x = np.broadcast_arrays(y, x)
    valid = (y >= -1) & (y <= height) & (x >= -1) & (x <= width)
    y, x = np.maximum(y, f32(0)), np.maximum(x, f32(0))
    y_low, x_low = y.astype(np.int64), x.astype(np.int64)
    y_edge, x_edge = y_low >= height - 1, x_low >= width - 1
    y_low = np.where(y_edge, height - 1, y_low)
    x_low = np.where(x_edge, width - 1, x_low)
    y = np.where(y_edge, y_low.astype(f32), y)
    x = np.where(x_edge, x_low.astype(f32), x)
    y_high = np.where(y_edge, y_low, y_low + 1)
    x_high = np.where(x_edge, x_low, x_low + 1)
    ly, lx = y - y_low.astype(f32), x - x_low.astype(f32)
    hy, hx = f32(1) - ly, f32(1) - lx
    batch = index.data[index.offsets[sel]].astype(np.int64)
    base = (batch * height * width)[:, None, None]
    pos = [
        base + y_low * width + x_low,
        base + y_low * width + x_high,
        base + y_high * width + x_low,
        base + y_high * width + x_high,
    ]
    weights = [hy * hx, hy * lx, ly * hx, ly * lx]
    return pos, weights, valid, cols


def _compute_group(cls, data, rois, index, out, p, sel, height, width, out_h, out_w) -> None:
    f32 = np.float32
    pos, weights, valid, cols = _geometry(rois, index, p, sel, height, width, out_h, out_w)
    vals = data.data.astype(f32)
    start = data.offsets[sel][:, None, None]
    terms = [w * vals[start + q] for w, q in zip(weights, pos, strict=True)]
    is_max = cols["max"][:, None, None] > 0
    sample = np.where(is_max, np.maximum.reduce(terms), terms[0] + terms[1] + terms[2] + terms[3])
    sample = np.where(valid, sample, f32(0))
    points = out_h * out_w
    dst = out.offsets[sel, None] + np.arange(points)
    out.data[dst] = sample.reshape(len(sel), points).astype(out.data.dtype)


def _compute_grad(cls, batches, num_vertices, num_workers):
    diff, rois, index = batches["bottom_diff"], batches["bottom_rois"], batches["batch_index"]
    params, top = batches["params"], batches["top_diff"]
    n = num_vertices
    p = params.data[params.offsets[:n, None] + np.arange(len(_PARAMS))].astype(np.float64)
    for key in np.unique(p[:, 1:5], axis=0):
        sel = np.flatnonzero((p[:, 1:5] == key).all(axis=1))
        height, width, out_h, out_w = (int(v) for v in key)
        pos, weights, valid, cols = _geometry(rois, index, p, sel, height, width, out_h, out_w)
        f32 = np.float32
        count = (cols["bin_grid_h"] * cols["bin_grid_w"]).astype(f32)[:, None, None]
        g = top.data[top.offsets[sel, None] + np.arange(out_h * out_w)].astype(f32)
        g = np.where(valid, g.reshape(len(sel), out_h, out_w) / count, f32(0))
        start = diff.offsets[sel][:, None, None]
        acc = diff.data.astype(f32)
        for w, q in zip(weights, pos, strict=True):
            np.add.at(acc, (start + q).reshape(-1), (w * g).reshape(-1))
        diff.data[:] = acc.astype(diff.data.dtype)


def _estimate(cls, sizes, target) -> int:
    return roi_align_cycles(int(sizes["top_data_grid"]))


def _estimate_grad(cls, sizes, target) -> int:
    return roi_align_cycles(int(sizes["top_diff"]), grad=True)


_CACHE: dict[Type, type] = {}
_GRAD_CACHE: dict[Type, type] = {}


def _roi_vertex(
    cache: dict[Type, type], t: Type, name: str, doc: str, data: tuple[str, Any],
    result: tuple[str, Any], compute: Any, estimate: Any,
) -> type:  # fmt: skip
    """The vertex class ``popnn::name<t>`` (made once per type), its fields in the
    codelet's order: the ``data`` field, the region's corners, its batch index, the
    parameters, then the ``result`` field."""
    cls = cache.get(t)
    if cls is None:
        attrs: dict[str, Any] = {
            "typeName": f"popnn::{name}<{t.name}>",
            "__doc__": doc,
            "__module__": __name__,
            data[0]: data[1],
            "bottom_rois": Input(Vector(t)),
            "batch_index": Input(INT),
            "params": Input(Vector(FLOAT)),
            result[0]: result[1],
            "computeBatch": classmethod(compute),
            "getCycleEstimate": classmethod(estimate),
        }
        cls = cache[t] = type(f"{name}_{t.constant}", (Vertex,), attrs)
    return cls


def roi_align_grad_vertex(t: Type) -> type:
    """``popnn::ROIAlignBackward<t>``: adds the gradient of one sample (iy, ix) of every
    output bin of one region and channel into its ``bottom_diff`` slot (InOut)."""
    doc = "Scatters one region's output gradient to its bilinear neighbours."
    return _roi_vertex(_GRAD_CACHE, t, "ROIAlignBackward", doc,
                       ("top_diff", Input(Vector(t))), ("bottom_diff", InOut(Vector(t))),
                       _compute_grad, _estimate_grad)  # fmt: skip


def roi_align_vertex(t: Type) -> type:
    """``popnn::ROIAlignForward<t>`` (a worker vertex; fields as the module docstring)."""
    doc = "Bilinear samples (iy, ix) of every output bin of one region and channel."
    return _roi_vertex(_CACHE, t, "ROIAlignForward", doc,
                       ("bottom_data", Input(Vector(t))), ("top_data_grid", Output(Vector(t))),
                       _compute, _estimate)  # fmt: skip


def _check(bottomData: Tensor, bottomRois: Tensor, batchIndex: Tensor, p: RoiAlignParams) -> None:
    fn = "roiAlignFwd"
    for what, t, rank in (("bottomData", bottomData, 4), ("bottomRois", bottomRois, 2),
                          ("bottomBatchIndex", batchIndex, 1)):  # fmt: skip
        if t.rank() != rank:
            raise GraphError(f"{fn}: {what} '{t.name}' has shape {t.shape()}; it must be {rank}-D")
    if bottomRois.dim(1) != 4:
        raise GraphError(
            f"{fn}: bottomRois '{bottomRois.name}' has shape {bottomRois.shape()}; each "
            "region must have 4 coordinates (x1, y1, x2, y2)"
        )
    if batchIndex.dim(0) != bottomRois.dim(0):
        raise GraphError(
            f"{fn}: bottomBatchIndex '{batchIndex.name}' has {batchIndex.dim(0)} entries for "
            f"{bottomRois.dim(0)} regions; they must match"
        )
    check_element_type(bottomData, "bottomData", (FLOAT, HALF), fn, "float or half is required")
    if bottomRois.elementType() != bottomData.elementType():
        raise TypeMismatchError(
            f"{fn}: bottomRois '{bottomRois.name}' is {bottomRois.elementType().name}; it "
            f"must be {bottomData.elementType().name}, as bottomData"
        )
    check_element_type(batchIndex, "bottomBatchIndex", (INT,), fn, "int is required")
    if p.samplingRatio <= 0 or p.spatialScale <= 0:
        raise GraphError(
            f"{fn}: samplingRatio {p.samplingRatio} and spatialScale {p.spatialScale} must be > 0"
        )
    if p.alignedHeight <= 0 or p.alignedWidth <= 0 or p.mode not in ("avg", "max"):
        raise GraphError(
            f"{fn}: output {p.alignedHeight}x{p.alignedWidth} must be positive and mode "
            f"{p.mode!r} 'avg' or 'max'"
        )


def roiAlignFwd(
    graph: Graph,
    prog: _program.Sequence,
    bottomData: Tensor,
    bottomRois: Tensor,
    bottomBatchIndex: Tensor,
    params: RoiAlignParams,
    debugName: str = "",
) -> Tensor:
    """``[R, C, outH, outW]`` region features of ``bottomData`` (``[N, C, H, W]``) for
    the regions ``bottomRois`` (``[R, 4]``: x1, y1, x2, y2) of images
    ``bottomBatchIndex`` (``[R]``, int).

    Raises
    ------
    GraphError
        A tensor of the wrong rank or size, a non-positive sampling ratio, scale or
        output size, an unknown mode.
    TypeMismatchError
        Data not float or half, regions of another type, indices not int.
    """
    _check(bottomData, bottomRois, bottomBatchIndex, params)
    name = debugName or "roiAlignFwd"
    t = bottomData.elementType()
    batch, channels, height, width = bottomData.shape()
    rois = bottomRois.dim(0)
    g = int(params.samplingRatio)
    out_h, out_w = int(params.alignedHeight), int(params.alignedWidth)
    grid = graph.addVariable(t, [rois, channels, g, g, out_h, out_w], f"{name}/topDataGrid")
    n = rois * channels * g * g
    tiles = np.arange(n, dtype=np.int64) % graph.getTarget().getNumTiles()
    graph.mapElements(grid, np.repeat(tiles, out_h * out_w))
    if n == 0:
        return _finish(graph, grid, params, prog, name)
    rows = [rois, channels, g, g]
    per_channel = bottomData.dimShuffle([1, 0, 2, 3]).reshape([channels, batch * height * width])
    conns: dict[str, Any] = {
        "bottom_data": _spread(per_channel, 1, rows).reshape([n, batch * height * width]),
        "bottom_rois": _spread(bottomRois, 0, rows).reshape([n, 4]),
        "batch_index": _spread(bottomBatchIndex, 0, rows).reshape([n]),
        "top_data_grid": grid.reshape([n, out_h * out_w]),
    }
    conns["params"] = _params(graph, params, height, width, rows, tiles, name)
    cs = graph.addComputeSet(f"{name}/roiAlignCS")
    graph.addVertices(cs, roi_align_vertex(t), tiles, conns)
    fill(graph, grid, 0.0, prog, f"{name}/zeroGrid")
    prog.add(_program.Execute(cs))
    return _finish(graph, grid, params, prog, name)


def _params(
    graph: Graph,
    params: RoiAlignParams,
    height: int,
    width: int,
    rows: Sequence[int],
    tiles: np.ndarray,
    name: str,
) -> Tensor:
    """The constant ``[n, len(_PARAMS)]`` vertex state of the vertices ``rows``
    (``[..., iy, ix]`` in row-major order), each row on its vertex's tile."""
    n = int(np.prod(rows))
    iy, ix = np.unravel_index(np.arange(n), rows)[-2:]
    fixed = {"spatial_scale": params.spatialScale, "height": height, "width": width,
             "aligned_height": params.alignedHeight, "aligned_width": params.alignedWidth,
             "bin_grid_h": params.samplingRatio, "bin_grid_w": params.samplingRatio,
             "aligned": float(params.aligned), "max": float(params.mode == "max")}  # fmt: skip
    table = np.zeros((n, len(_PARAMS)), np.float32)
    for i, key in enumerate(_PARAMS):
        table[:, i] = fixed.get(key, 0.0)
    table[:, _PARAMS.index("iy")] = iy
    table[:, _PARAMS.index("ix")] = ix
    const = graph.addConstant(FLOAT, [n, len(_PARAMS)], table, f"{name}/params")
    graph.mapElements(const, np.repeat(tiles, len(_PARAMS)))
    return const


def roiAlignInputGradient(
    graph: Graph,
    prog: _program.Sequence,
    bottomData: Tensor,
    bottomRois: Tensor,
    bottomBatchIndex: Tensor,
    topDataGrad: Tensor,
    params: RoiAlignParams,
    debugName: str = "",
) -> Tensor:
    """The gradient of :func:`roiAlignFwd` with respect to ``bottomData`` (its shape),
    given ``topDataGrad`` (``[R, C, outH, outW]``); ``mode="avg"`` only.

    As Poplibs' ``roiAlignInputGradient``: ``group = min(R, ceil(workers x tiles /
    (C x ratio^2)))`` regions run in each compute set (``R / group + 1`` of them, in
    order), one ``ROIAlignBackward`` vertex per (region, channel, sample) adding into
    its slot of ``bottomBuffGrad`` (``[N, C, group, ratio, ratio, H, W]``, slot
    ``(c, region mod group)`` on tile ``(c x group + region mod group) mod tiles``,
    zero-filled first); ``popops.reduce`` adds dimensions 2, 3 and 4.

    Raises
    ------
    GraphError, TypeMismatchError
        As :func:`roiAlignFwd`; ``topDataGrad`` of another shape or type than the
        forward output; ``mode="max"`` (no gradient defined).
    """
    _check(bottomData, bottomRois, bottomBatchIndex, params)
    fn = "roiAlignInputGradient"
    batch, channels, height, width = bottomData.shape()
    rois = bottomRois.dim(0)
    g = int(params.samplingRatio)
    out_h, out_w = int(params.alignedHeight), int(params.alignedWidth)
    want = [rois, channels, out_h, out_w]
    if topDataGrad.shape() != want or topDataGrad.elementType() != bottomData.elementType():
        raise GraphError(
            f"{fn}: topDataGrad '{topDataGrad.name}' is {topDataGrad.elementType().name} "
            f"{topDataGrad.shape()}; required {bottomData.elementType().name} {want}"
        )
    if params.mode != "avg":
        raise GraphError(f"{fn}: mode {params.mode!r} has no gradient; only 'avg'")
    name = debugName or fn
    t = bottomData.elementType()
    target = graph.getTarget()
    num_tiles = target.getNumTiles()
    group = max(1, min(rois, -(-target.getNumWorkerContexts() * num_tiles
                                // max(channels * g * g, 1))))  # fmt: skip
    buff = graph.addVariable(t, [batch, channels, group, g, g, height, width],
                             f"{name}/bottomBuffGrad")  # fmt: skip
    slot_tile = (np.arange(channels)[:, None] * group + np.arange(group)) % num_tiles
    tiles_full = np.broadcast_to(
        slot_tile[None, :, :, None, None, None, None], buff.shape()
    ).reshape(-1)
    graph.mapElements(buff, tiles_full)
    fill(graph, buff, 0.0, prog, f"{name}/zeroBuff")
    slots = buff.dimShuffle([2, 1, 3, 4, 0, 5, 6])  # [group, C, g, g, N, H, W]
    for k, r0 in enumerate(range(0, rois, group)):
        r1 = min(r0 + group, rois)
        rows = [r1 - r0, channels, g, g]
        n = int(np.prod(rows))
        gi, c = np.unravel_index(np.arange(n), rows)[:2]
        tiles = (c * group + gi) % num_tiles
        top = topDataGrad.slice(r0, r1, 0).reshape([r1 - r0, channels, 1, 1, out_h * out_w])
        top = top.broadcast(g, 2).broadcast(g, 3)
        conns: dict[str, Any] = {
            "top_diff": top.reshape([n, out_h * out_w]),
            "bottom_rois": _spread(bottomRois.slice(r0, r1, 0), 0, rows).reshape([n, 4]),
            "batch_index": _spread(bottomBatchIndex.slice(r0, r1, 0), 0, rows).reshape([n]),
            "bottom_diff": slots.slice(0, r1 - r0, 0).reshape([n, batch * height * width]),
            "params": _params(graph, params, height, width, rows, tiles, f"{name}/{k}"),
        }
        cs = graph.addComputeSet(f"{name}/roiAlignGradCS_{k}")
        graph.addVertices(cs, roi_align_grad_vertex(t), tiles, conns)
        prog.add(_program.Execute(cs))
    return reduce(graph, buff, [2, 3, 4], Operation.ADD, prog, f"{name}/gradCSReduce")


def _spread(t: Tensor, dim: int, rows: Sequence[int]) -> Tensor:
    """``t`` (its first dimension the ``dim``-th of ``rows``) broadcast, as a view, to
    ``[*rows, *t.shape()[1:]]``."""
    rest = t.shape()[1:]
    view = t.reshape([1] * dim + [t.dim(0)] + [1] * (len(rows) - dim - 1) + rest)
    for d, size in enumerate(rows):
        if d != dim and size != 1:
            view = view.broadcast(size, d)
    return view


def _finish(
    graph: Graph, grid: Tensor, params: RoiAlignParams, prog: _program.Sequence, name: str
) -> Tensor:
    if params.mode == "max":
        return reduce(graph, grid, [2, 3], Operation.MAX, prog, f"{name}/topDataReduce")
    summed = reduce(graph, grid, [2, 3], Operation.ADD, prog, f"{name}/topDataReduce")
    count = float(params.samplingRatio**2)
    return div(graph, summed, count, prog, f"{name}/topDataDiv")
