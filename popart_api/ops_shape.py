"""Lowerings of ONNX's data-movement ops and the remaining reductions.

``Split``, ``Pad``, ``Tile``, ``DepthToSpace``/``SpaceToDepth`` and ``ConstantOfShape``
are views and constants, as Poplibs builds them: ``popops::pad`` concatenates the input
with constant tensors (constant mode), broadcast edge slices (edge mode) or reversed
slices (reflect mode) and computes nothing; PopART's ``SplitOpx`` and ``TileOpx``
return slices and concatenations; PopART rewrites DepthToSpace/SpaceToDepth into
Reshape and Transpose (``onnxpasses/nodepatterns/spacedepth.cpp``). ``ReduceL1``,
``ReduceL2``, ``ReduceLogSum`` and ``ReduceLogSumExp`` are ``popops.reduce`` with an
elementwise map before or after, as PopART's ``ReduceL1Opx`` (``ABS``, ``ADD``),
``ReduceL2Opx`` (``SQUARE_ADD`` then ``sqrt``), ``ReduceLogSumOpx`` (``ADD`` then
``log``) and ``ReduceLogSumExpOpx`` (the maximum subtracted first) are.
``ArgMax``/``ArgMin`` use ``popnn::argMax``/``argMin`` on the input with the axis
last, as PopART's ``ArgMaxOpx``; ``TopK`` takes ``k`` maxima one after the other
(``popnn::maxAndArgMax``, the found element masked out); ``OneHot`` compares the
indices with a constant iota; ``CumSum`` multiplies by a triangular constant matrix
(``poplin::matMul``), as PopART's ``CumSumOpx``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_api.autodiff import GradContext, Grads, register_grad
from popart_api.errors import popart_exception
from popart_api.ops import (
    context,
    float_check,
    matmul,
    numeric_check,
    register,
    tensor,
    value_shape,
)
from popart_api.ops_tensor import (
    _const_ints,
    _expand_back,
    _norm_axes,
    _reduce_axes,
    empty_reduction,
)
from poplar_api import BOOL, FLOAT, HALF, INT, Graph, Tensor, popnn, popops
from poplar_api.popops import Operation
from poplar_api.tensor import concat


def _input(graph: Graph, v: Any, name: str) -> Tensor:
    return tensor(graph, v, name)


# --------------------------------------------------------------------- Split
@register("Split", since=2)
def _split(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = value_shape(x)
    axis = _norm_axes([int(attrs.get("axis", 0))], len(shape), "Split", name)[0]
    n = shape[axis]
    if len(inputs) > 1 and inputs[1] is not None:
        sizes = _const_ints(inputs[1], "Split", name, "split")
    elif "split" in attrs:
        sizes = [int(s) for s in attrs["split"]]
    else:
        parts = int(attrs.get("num_outputs", context().num_outputs))
        step = -(-n // parts)  # opset 18: the last part may be smaller
        sizes = [min(step, n - i * step) for i in range(parts)]
    if sum(sizes) != n or any(s < 0 for s in sizes):
        raise popart_exception(
            f"Split (node '{name}'): sizes {sizes} do not add up to dimension {axis} of the "
            f"input ({n}); input shape {shape}"
        )
    out, start = [], 0
    for size in sizes:
        if isinstance(x, Tensor):
            out.append(x.slice(start, start + size, axis))
        else:
            out.append(np.take(np.asarray(x), range(start, start + size), axis=axis))
        start += size
    return out


@register_grad("Split")
def _split_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    axis = int(g.attrs.get("axis", 0)) % x.rank()
    parts = []
    for i, y in enumerate(g.outputs):
        parts.append(g.grad_output(i) if y is not None else None)
    return [concat(parts, axis), *([None] * (len(g.inputs) - 1))]


# ----------------------------------------------------------------------- Pad
def _pad_axis(graph: Graph, t: Tensor, axis: int, lo: int, hi: int, mode: str, value: Any,
              name: str) -> Tensor:  # fmt: skip
    """``t`` padded along ``axis`` (negative pads crop), as ``popops::pad``."""
    n = t.dim(axis)
    if lo < 0:
        t, n, lo = t.slice(-lo, n, axis), n + lo, 0
    if hi < 0:
        t, n, hi = t.slice(0, n + hi, axis), n + hi, 0
    if lo == 0 and hi == 0:
        return t
    pieces = []
    for count, before in ((lo, True), (hi, False)):
        if count == 0:
            pieces.append(None)
            continue
        if mode == "constant" or n == 0:
            shape = t.shape()
            shape[axis] = count
            pieces.append(tensor(graph, np.full(shape, value, t.elementType().numpy), name, t))
        elif mode == "edge":
            edge = t.slice(0, 1, axis) if before else t.slice(n - 1, n, axis)
            pieces.append(edge.broadcast(count, axis))
        elif mode == "reflect":
            if count > n - 1:
                raise popart_exception(
                    f"Pad (node '{name}'): reflect padding of {count} along axis {axis} needs "
                    f"more than {count} elements; the axis has {n}"
                )
            part = t.slice(1, count + 1, axis) if before else t.slice(n - 1 - count, n - 1, axis)
            pieces.append(part.reverse(axis))
        else:  # wrap
            reps = []
            need = count
            while need > 0:
                take = min(need, n)
                reps.append(t.slice(n - take, n, axis) if before else t.slice(0, take, axis))
                need -= take
            pieces.append(concat(reps[::-1] if before else reps, axis))
    parts = [p for p in (pieces[0], t, pieces[1]) if p is not None]
    return concat(parts, axis) if len(parts) > 1 else parts[0]


@register("Pad", since=2)
def _pad(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = value_shape(x)
    rank = len(shape)
    mode = str(attrs.get("mode", "constant"))
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise popart_exception(
            f"Pad (node '{name}'): mode '{mode}' is not constant, edge, reflect or wrap"
        )
    if len(inputs) > 1:  # opset 11: pads, constant_value and axes are inputs
        pads = _const_ints(inputs[1], "Pad", name, "pads")
        value = 0
        if len(inputs) > 2 and inputs[2] is not None:
            if isinstance(inputs[2], Tensor):
                raise popart_exception(
                    f"Pad (node '{name}'): input 'constant_value' must be known when the graph "
                    "is built"
                )
            value = np.asarray(inputs[2]).reshape(-1)[0] if np.size(inputs[2]) else 0
        axes = (
            _const_ints(inputs[3], "Pad", name, "axes")
            if len(inputs) > 3 and inputs[3] is not None
            else list(range(rank))
        )
    else:
        pads = [int(p) for p in attrs.get("pads", attrs.get("paddings", []))]
        value = float(attrs.get("value", 0.0))
        axes = list(range(rank))
    axes = _norm_axes(axes, rank, "Pad", name)
    if len(pads) != 2 * len(axes):
        raise popart_exception(
            f"Pad (node '{name}'): {len(pads)} pads for {len(axes)} axes; required 2 per axis"
        )
    if not isinstance(x, Tensor):
        width = [(0, 0)] * rank
        for i, a in enumerate(axes):
            width[a] = (pads[i], pads[i + len(axes)])
        if any(p < 0 for w in width for p in w):
            x = tensor(graph, x, name)
        else:
            kind = {"constant": "constant", "edge": "edge", "reflect": "reflect", "wrap": "wrap"}
            extra = {"constant_values": value} if mode == "constant" else {}
            return [np.pad(np.asarray(x), width, mode=kind[mode], **extra)]
    out = x
    for i, a in enumerate(axes):
        out = _pad_axis(graph, out, a, pads[i], pads[i + len(axes)], mode, value, name)
    return [popops.add(graph, out, 0, prog, name) if out.elementType() != BOOL else out]


@register_grad("Pad")
def _pad_grad(g: GradContext) -> Grads:
    """The slice of the output gradient the input went to (constant mode)."""
    if str(g.attrs.get("mode", "constant")) != "constant":
        raise popart_exception(
            f"Pad (node '{g.name}'): the gradient of mode '{g.attrs.get('mode')}' is not "
            "supported; required mode 'constant'"
        )
    x = g.inputs[0]
    rank = x.rank()
    if len(g.inputs) > 1:
        pads = [int(p) for p in np.asarray(g.inputs[1]).reshape(-1)]
        axes = (
            [int(a) % rank for a in np.asarray(g.inputs[3]).reshape(-1)]
            if len(g.inputs) > 3 and g.inputs[3] is not None
            else list(range(rank))
        )
    else:
        pads = [int(p) for p in g.attrs.get("pads", [])]
        axes = list(range(rank))
    dy = g.grad_output(0)
    for i, a in enumerate(axes):
        lo, hi = pads[i], pads[i + len(axes)]
        if lo < 0 or hi < 0:
            raise popart_exception(f"Pad (node '{g.name}'): no gradient for negative pads")
        dy = dy.slice(lo, dy.dim(a) - hi, a)
    return [dy, *([None] * (len(g.inputs) - 1))]


# ---------------------------------------------------------- Tile and friends
@register("Tile", since=6)
def _tile(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    repeats = _const_ints(inputs[1], "Tile", name, "repeats")
    if len(repeats) != len(value_shape(x)) or any(r < 0 for r in repeats):
        raise popart_exception(
            f"Tile (node '{name}'): repeats {repeats} must be {len(value_shape(x))} "
            "non-negative numbers (one per input dimension)"
        )
    if not isinstance(x, Tensor):
        return [np.tile(np.asarray(x), repeats)]
    out = x
    for d, r in enumerate(repeats):
        if r != 1:
            out = concat([out] * r, d) if r else out.slice(0, 0, d)
    return [popops.add(graph, out, 0, prog, name) if out.elementType() != BOOL else out]


@register_grad("Tile")
def _tile_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    repeats = [int(r) for r in np.asarray(g.inputs[1]).reshape(-1)]
    dy = g.grad_output(0)
    split = []
    for d, (n, r) in enumerate(zip(x.shape(), repeats, strict=True)):
        split += [r, n]
        del d
    view = dy.reshape(split)
    dims = list(range(0, len(split), 2))
    out = popops.reduce(g.graph, view, dims, Operation.ADD, g.prog, g.name)
    return [out.reshape(x.shape()), None]


@register("ConstantOfShape", since=9)
def _constant_of_shape(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    shape = _const_ints(inputs[0], "ConstantOfShape", name, "input")
    value = attrs.get("value")
    fill = np.asarray(value).reshape(-1) if value is not None else np.zeros(1, np.float32)
    return [np.full(shape, fill[0], fill.dtype)]


@register("DepthToSpace", since=1)
def _depth_to_space(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = _input(graph, inputs[0], name)
    b = int(attrs.get("blocksize", 0))
    n, c, h, w = _nchw(x, b, "DepthToSpace", name, c_divisible=True)
    if str(attrs.get("mode", "DCR")) == "DCR":
        y = x.reshape([n, b, b, c // (b * b), h, w]).dimShuffle([0, 3, 4, 1, 5, 2])
    else:  # CRD
        y = x.reshape([n, c // (b * b), b, b, h, w]).dimShuffle([0, 1, 4, 2, 5, 3])
    return [y.reshape([n, c // (b * b), h * b, w * b])]


@register("SpaceToDepth", since=1)
def _space_to_depth(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = _input(graph, inputs[0], name)
    b = int(attrs.get("blocksize", 0))
    n, c, h, w = _nchw(x, b, "SpaceToDepth", name, c_divisible=False)
    perm = [0, 3, 5, 1, 2, 4] if str(attrs.get("mode", "DCR")) == "DCR" else [0, 1, 3, 5, 2, 4]
    y = x.reshape([n, c, h // b, b, w // b, b]).dimShuffle(perm)
    return [y.reshape([n, c * b * b, h // b, w // b])]


def _nchw(x: Tensor, b: int, op: str, name: str, c_divisible: bool) -> list[int]:
    if x.rank() != 4 or b < 1:
        raise popart_exception(
            f"{op} (node '{name}'): needs a rank-4 NCHW input and blocksize >= 1; got shape "
            f"{x.shape()}, blocksize {b}"
        )
    n, c, h, w = x.shape()
    if (c_divisible and c % (b * b)) or (not c_divisible and (h % b or w % b)):
        raise popart_exception(
            f"{op} (node '{name}'): shape {x.shape()} does not divide by blocksize {b}"
        )
    return [n, c, h, w]


# --------------------------------------------------------------- reductions
def _extra_reduce(op: str) -> Any:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = _input(graph, inputs[0], name)
        opset = context().opset or 18
        axes = _reduce_axes(inputs, attrs, x.rank(), op, name, opset >= 18)
        keep = int(attrs.get("keepdims", 1))
        if axes is None:
            return [popops.add(graph, x, 0, prog, name)]
        if x.numElements() == 0:
            return [empty_reduction(graph, x, axes, keep, op, prog, name)]
        if op == "ReduceL1":
            out = popops.reduce(graph, popops.abs(graph, x, prog, f"{name}/abs"), axes,
                                Operation.ADD, prog, name)  # fmt: skip
        elif op == "ReduceL2":
            out = popops.reduce(graph, x, axes, Operation.SQUARE_ADD, prog, f"{name}/sumSquare")
            out = popops.sqrt(graph, out, prog, name)
        elif op == "ReduceLogSum":
            out = popops.reduce(graph, x, axes, Operation.ADD, prog, f"{name}/sum")
            out = popops.log(graph, out, prog, name)
        else:  # ReduceLogSumExp: max + log(sum(exp(x - max)))
            float_check(x, op, name)
            m = popops.reduce(graph, x, axes, Operation.MAX, prog, f"{name}/max")
            kept = m.reshape([1 if d in axes else n for d, n in enumerate(x.shape())])
            for d in axes:
                kept = kept.broadcast(x.dim(d), d) if x.dim(d) != 1 else kept
            e = popops.exp(graph, popops.sub(graph, x, kept, prog, f"{name}/shift"), prog,
                           f"{name}/exp")  # fmt: skip
            s = popops.reduce(graph, e, axes, Operation.ADD, prog, f"{name}/sum")
            out = popops.add(graph, popops.log(graph, s, prog, f"{name}/log"), m, prog, name)
        if keep:
            out = out.reshape([1 if d in axes else n for d, n in enumerate(x.shape())])
        return [out]

    return lower


for _op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
    register(_op, since=1)(_extra_reduce(_op))


def _reduce_grad_axes(g: GradContext, op: str) -> list[int] | None:
    x = g.inputs[0]
    opset = 18 if len(g.inputs) > 1 else 1
    return _reduce_axes(g.inputs, g.attrs, x.rank(), op, g.name, opset >= 18)


def _extra_reduce_grad(op: str) -> Any:
    def grad(g: GradContext) -> Grads:
        x = g.inputs[0]
        axes = _reduce_grad_axes(g, op)
        rest = [None] * (len(g.inputs) - 1)
        if axes is None:
            return [g.grad_output(0), *rest]
        dy = _expand_back(g, g.grad_output(0), axes)
        y = _expand_back(g, g.outputs[0], axes)
        if op == "ReduceL1":
            sign = popops.signum(g.graph, x, g.prog, f"{g.name}/sign")
            return [popops.mul(g.graph, dy, sign, g.prog, g.name), *rest]
        if op == "ReduceL2":  # x / y
            return [popops.mul(g.graph, dy, popops.div(g.graph, x, y, g.prog, f"{g.name}/xOverY"),
                               g.prog, g.name), *rest]  # fmt: skip
        if op == "ReduceLogSum":  # 1 / sum = exp(-y)
            inv = popops.exp(g.graph, popops.neg(g.graph, y, g.prog, f"{g.name}/negY"), g.prog,
                             f"{g.name}/invSum")  # fmt: skip
            return [popops.mul(g.graph, dy, inv, g.prog, g.name), *rest]
        soft = popops.exp(g.graph, popops.sub(g.graph, x, y, g.prog, f"{g.name}/xMinusY"), g.prog,
                          f"{g.name}/softmax")  # fmt: skip
        return [popops.mul(g.graph, dy, soft, g.prog, g.name), *rest]

    return grad


for _op in ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"):
    register_grad(_op)(_extra_reduce_grad(_op))


# ------------------------------------------------------- ArgMax, ArgMin, TopK
def _rows_last(x: Tensor, axis: int) -> tuple[Tensor, list[int]]:
    """``x`` with ``axis`` moved last, as ``[rows, n]``, and the other dimensions."""
    last = x.rank() - 1
    moved = x.dimShufflePartial([axis], [last]) if axis != last else x
    rest = moved.shape()[:-1]
    return moved.reshape([int(np.prod(rest, dtype=np.int64)), x.dim(axis)]), rest


def _arg(is_max: bool) -> Any:
    op = "ArgMax" if is_max else "ArgMin"

    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = numeric_check(_input(graph, inputs[0], name), op, name)
        axis = _norm_axes([int(attrs.get("axis", 0))], x.rank(), op, name)[0]
        keep = int(attrs.get("keepdims", 1))
        last = int(attrs.get("select_last_index", 0))
        rows, rest = _rows_last(x, axis)
        n = rows.dim(1)
        if last:
            rows = rows.reverse(1)
        fn = popnn.argMax if is_max else popnn.argMin
        idx = popops.cast(graph, fn(graph, rows, prog, f"{name}/arg"), INT, prog, f"{name}/cast")
        if last:  # index i of the reversed row is n-1-i
            idx = popops.sub(graph, tensor(graph, np.int32(n - 1), name, idx), idx, prog,
                             f"{name}/fromEnd")  # fmt: skip
        shape = list(rest)
        if keep:
            shape.insert(axis, 1)
        return [idx.reshape(shape)]

    return lower


register("ArgMax", since=1)(_arg(True))
register("ArgMin", since=1)(_arg(False))


@register("TopK", since=1)
def _topk(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = numeric_check(_input(graph, inputs[0], name), "TopK", name)
    k = _const_ints(inputs[1], "TopK", name, "K")[0] if len(inputs) > 1 else int(attrs["k"])
    axis = _norm_axes([int(attrs.get("axis", -1))], x.rank(), "TopK", name)[0]
    largest = int(attrs.get("largest", 1))
    rows, rest = _rows_last(x, axis)
    n = rows.dim(1)
    if not 0 <= k <= n:
        raise popart_exception(
            f"TopK (node '{name}'): k={k} is out of range for axis {axis} of size {n}"
        )
    work = popops.add(graph, rows, 0, prog, f"{name}/work")
    iota = tensor(graph, np.arange(n, dtype=np.int32), f"{name}/iota")
    if x.elementType() == INT:
        info = np.iinfo(np.int32)
        fill: float | int = int(info.min if largest else info.max)
    else:
        fill = float(-np.inf if largest else np.inf)
    values, indices = [], []
    fn = popnn.maxAndArgMax if largest else popnn.minAndArgMin
    for i in range(k):
        v, idx = fn(graph, work, prog, f"{name}/pick{i}")
        idx = popops.cast(graph, idx, INT, prog, f"{name}/cast{i}")
        values.append(v.reshape([rows.dim(0), 1]))
        indices.append(idx.reshape([rows.dim(0), 1]))
        if i + 1 < k:  # mask the element found
            r = rows.dim(0)
            a = iota.reshape([1, n]).broadcast(r, 0)
            hit = popops.eq(graph, a, idx.reshape([r, 1]).broadcast(n, 1), prog, f"{name}/hit{i}")
            work = popops.select(graph, fill, work, hit, prog, f"{name}/mask{i}")
    shape = [*rest, k]
    last = x.rank() - 1
    if k == 0:
        empty_v = graph.addVariable(x.elementType(), [rows.dim(0), 0], f"{name}/values")
        empty_i = graph.addVariable(INT, [rows.dim(0), 0], f"{name}/indices")
        vals, idxs = empty_v, empty_i
    else:
        vals, idxs = concat(values, 1), concat(indices, 1)
    vals, idxs = vals.reshape(shape), idxs.reshape(shape)
    if axis != last:
        vals = vals.dimShufflePartial([last], [axis])
        idxs = idxs.dimShufflePartial([last], [axis])
    return [vals, idxs]


# ---------------------------------------------------------------- OneHot
@register("OneHot", since=9)
def _one_hot(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    idx = inputs[0]
    depth = int(np.asarray(inputs[1]).reshape(-1)[0]) if not isinstance(inputs[1], Tensor) else None
    if depth is None:
        raise popart_exception(
            f"OneHot (node '{name}'): input 'depth' must be known when the graph is built"
        )
    values = inputs[2]
    if isinstance(values, Tensor):
        raise popart_exception(
            f"OneHot (node '{name}'): input 'values' must be known when the graph is built"
        )
    off, on = np.asarray(values).reshape(-1)[:2]
    idx = _input(graph, idx, name)
    rank = idx.rank() + 1
    axis = _norm_axes([int(attrs.get("axis", -1))], rank, "OneHot", name)[0]
    if idx.elementType() in (FLOAT, HALF):  # ONNX casts real indices to integers
        idx = popops.cast(graph, idx, INT, prog, f"{name}/toInt")
    negative = popops.lt(graph, idx, 0, prog, f"{name}/negative")
    wrapped = popops.select(
        graph, popops.add(graph, idx, depth, prog, f"{name}/plusDepth"), idx, negative, prog,
        f"{name}/wrapped",
    )  # fmt: skip
    iota = tensor(graph, np.arange(depth, dtype=np.int32), f"{name}/iota", wrapped)
    r = idx.rank()
    full = [*idx.shape(), depth]
    iota_full = iota.reshape([1] * r + [depth])
    for d, size in enumerate(full[:-1]):
        iota_full = iota_full.broadcast(size, d)
    hit = popops.eq(graph, wrapped.expand([r]).broadcast(depth, r), iota_full, prog,
                    f"{name}/hit")  # fmt: skip
    del full
    dtype = np.asarray(values).dtype
    on_t = tensor(graph, np.asarray([on], dtype), f"{name}/on")
    off_t = tensor(graph, np.asarray([off], dtype), f"{name}/off")
    out = popops.select(graph, on_t, off_t, hit, prog, name)
    last = rank - 1
    return [out.dimShufflePartial([last], [axis]) if axis != last else out]


# ---------------------------------------------------------------- CumSum
@register("CumSum", since=11)
def _cumsum(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = _input(graph, inputs[0], name)
    axis = _norm_axes(_const_ints(inputs[1], "CumSum", name, "axis"), x.rank(), "CumSum", name)[0]
    exclusive = int(attrs.get("exclusive", 0))
    reverse = int(attrs.get("reverse", 0))
    rows, rest = _rows_last(x, axis)
    n = rows.dim(1)
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")  # out[j] = sum_i x[i] m[i, j]
    m = (i >= j) if reverse else (i <= j)
    if exclusive:
        m &= i != j
    typ = x.elementType()
    work = rows if typ in (FLOAT, HALF) else popops.cast(graph, rows, FLOAT, prog, f"{name}/f")
    tri = tensor(graph, m.astype(np.float32), f"{name}/triangle", work)
    out = matmul(graph, work, tri, prog, f"{name}/matmul")
    if typ not in (FLOAT, HALF):
        out = popops.cast(graph, out, typ, prog, name)
    out = out.reshape([*rest, n])
    last = x.rank() - 1
    return [out.dimShufflePartial([last], [axis]) if axis != last else out]


__all__: list[str] = []


# ------------------------------------------------------------------ gradients
@register_grad("CumSum")
def _cumsum_grad(g: GradContext) -> Grads:
    """The cumulative sum of ``dy`` in the other direction."""
    attrs = dict(g.attrs)
    attrs["reverse"] = 1 - int(attrs.get("reverse", 0))
    dx = _cumsum(g.graph, [g.grad_output(0), g.inputs[1]], attrs, g.prog, g.name)[0]
    return [dx, None]


@register_grad("DepthToSpace")
def _depth_to_space_grad(g: GradContext) -> Grads:
    """SpaceToDepth of ``dy`` in the same mode (the same permutation undone)."""
    return _space_to_depth(g.graph, [g.grad_output(0)], dict(g.attrs), g.prog, g.name)


@register_grad("SpaceToDepth")
def _space_to_depth_grad(g: GradContext) -> Grads:
    """DepthToSpace of ``dy`` in the same mode (the same permutation undone)."""
    return _depth_to_space(g.graph, [g.grad_output(0)], dict(g.attrs), g.prog, g.name)
