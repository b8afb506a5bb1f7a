"""Lowerings and gradients of ONNX's reduction, softmax, dropout and shape ops.

Reductions use ``popops.reduce``, shape ops are views of the input (``reshape``,
``dimShuffle``, ``slice``, ``concat``, ``expand``/``broadcast``). ``Gather`` is a
one-hot encoding of the indices (``popnn.encodeOneHot``) times the data
(``poplin.matMul``), the way a lookup is commonly written for the IPU without a
dynamic-slice codelet; its gradient is the transposed product. ``Dropout`` in training
draws its mask with ``poprand.bernoulli`` and keeps it for the gradient. The
elementwise-math ops are in :mod:`popart_api.ops_math`.

Ops whose inputs are all known when the graph is built (shapes, axes: numpy arrays)
are folded with numpy, as exported models compute shapes with ``Shape``, ``Gather``,
``Concat``, ``Unsqueeze`` and ``Slice``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from popart_api.autodiff import GradContext, Grads, register_grad, unbroadcast, zeros
from popart_api.errors import popart_exception
from popart_api.ops import context, first_tensor, float_check, register, tensor, value_shape
from poplar_api import (
    BOOL,
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    Graph,
    Tensor,
    poplin,
    popnn,
    popops,
    poprand,
)
from poplar_api import program as pprog
from poplar_api.popops import Operation
from poplar_api.poputil import mapTensorLinearly
from poplar_api.tensor import concat


def _rank(v: Any) -> int:
    return len(value_shape(v))


#: Why PopART needs an operand's value when it builds its graph, per op.
_WHY_KNOWN = {
    # graphcore/popart d2f20d78 willow/src/op/slice.cpp, BaseSliceOp::connectInTensor:
    # "Need the value of the ... input 'starts' to determine the output shape"
    "Slice": " (PopART's SliceOp needs its value to determine the output shape: a slice "
    "by a value computed on the device, e.g. a Loop's iteration count, is refused there too)",
}


def _const_ints(v: Any, op: str, name: str, what: str) -> list[int]:
    if isinstance(v, Tensor):
        raise popart_exception(
            f"{op} (node '{name}'): input '{what}' ('{v.name}') must be known when the graph "
            f"is built{_WHY_KNOWN.get(op, '')}; hint: make it with aiOnnx.constant or "
            "addInitializedInputTensor"
        )
    return [int(d) for d in np.asarray(v).reshape(-1)]


def _norm_axes(axes: Sequence[int], rank: int, op: str, name: str, what: str = "axis") -> list[int]:
    """``axes`` of a rank-``rank`` input made non-negative; an axis out of range is an
    error naming it as ``what``."""
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise popart_exception(
                f"{op} (node '{name}'): {what} {a} is out of range for a rank-{rank} input; "
                f"required: -{rank} <= axis < {rank}"
            )
        out.append(a % max(rank, 1))
    return out


# ----------------------------------------------------------------- reductions
def _reduce_axes(inputs: list, attrs: dict, rank: int, op: str, name: str, from_input: bool):
    if from_input:
        axes = (
            _const_ints(inputs[1], op, name, "axes")
            if len(inputs) > 1 and inputs[1] is not None
            else []
        )
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return None
        return list(range(rank))
    return sorted(set(_norm_axes(axes, rank, op, name)))


_NUMPY_REDUCE = {
    "ReduceSum": np.sum,
    "ReduceMean": np.mean,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "ReduceProd": np.prod,
}
_REDUCE_OPS = {
    "ReduceSum": Operation.ADD,
    "ReduceMean": Operation.ADD,
    "ReduceMax": Operation.MAX,
    "ReduceMin": Operation.MIN,
    "ReduceSumSquare": Operation.SQUARE_ADD,
    "ReduceProd": Operation.MUL,
}


#: The value of a reduction over no element (ONNX: the operation's identity).
_EMPTY_VALUE = {
    "ReduceSum": 0.0,
    "ReduceMean": float("nan"),
    "ReduceMax": -np.inf,
    "ReduceMin": np.inf,
    "ReduceSumSquare": 0.0,
    "ReduceProd": 1.0,
    "ReduceL1": 0.0,
    "ReduceL2": 0.0,
    "ReduceLogSum": -np.inf,
    "ReduceLogSumExp": -np.inf,
}


def empty_reduction(
    graph: Graph, x: Tensor, axes: list[int], keep: int, op: str, prog: Any, name: str
) -> Tensor:
    """Reduction ``op`` of an input with no element over ``axes``: the identity of the
    operation (``-inf`` for a max, the type's lowest value for integers), filled by
    ``popops.fill``."""
    shape = [1 if d in axes else n for d, n in enumerate(x.shape()) if keep or d not in axes]
    out = graph.addVariable(x.elementType(), shape, f"{name}/empty")
    mapTensorLinearly(graph, out)
    value = _EMPTY_VALUE[op]
    typ = x.elementType()
    if typ == BOOL:
        value = bool(value > 0)
    elif typ not in (FLOAT, HALF):
        info = np.iinfo(typ.numpy)
        value = info.min if value == -np.inf else info.max if value == np.inf else int(value)
    if out.numElements():
        popops.fill(graph, out, value, prog, f"{name}/fill")
    return out


def _reduce(op: str, axes_input_since: int) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        opset = context().opset or axes_input_since
        x = inputs[0]
        rank = _rank(x)
        axes = _reduce_axes(inputs, attrs, rank, op, name, opset >= axes_input_since)
        keep = int(attrs.get("keepdims", 1))
        if axes is None:
            return [x if not isinstance(x, Tensor) else popops.add(graph, x, 0, prog, name), None]
        if not isinstance(x, Tensor):
            return [_NUMPY_REDUCE[op](np.asarray(x), axis=tuple(axes), keepdims=bool(keep)), axes]
        if axes and x.numElements() == 0:
            return [empty_reduction(graph, x, axes, keep, op, prog, name), axes]
        if not axes or x.numElements() == 0:
            return [popops.add(graph, x, 0, prog, name), axes]
        out = popops.reduce(graph, x, axes, _REDUCE_OPS[op], prog, name)
        if op == "ReduceMean":
            count = int(np.prod([x.dim(a) for a in axes], dtype=np.int64))
            out = popops.mul(graph, out, 1.0 / max(count, 1), prog, f"{name}/mean")
        if keep:
            out = out.reshape([1 if d in axes else n for d, n in enumerate(x.shape())])
        return [out, axes]

    return lower


for _op, _since in (
    ("ReduceSum", 13),
    ("ReduceMean", 18),
    ("ReduceMax", 18),
    ("ReduceMin", 18),
    ("ReduceSumSquare", 18),
    ("ReduceProd", 18),
):
    register(_op, since=1)(_reduce(_op, _since))


def _expand_back(g: GradContext, t: Tensor, axes: list[int]) -> Tensor:
    """``t`` (the reduced shape, with or without kept dims) broadcast to the input."""
    x = g.inputs[0]
    shape = x.shape()
    kept = t.reshape([1 if d in axes else n for d, n in enumerate(shape)])
    view = kept
    for d in axes:
        if shape[d] != 1:
            view = view.broadcast(shape[d], d)
    return view


def _reduce_grad(op: str) -> Callable:
    def grad(g: GradContext) -> Grads:
        x = g.inputs[0]
        axes = g.outputs[1]
        dy = g.grad_output(0)
        if axes is None:
            return [dy, None]
        if op in ("ReduceSum", "ReduceMean"):
            d = _expand_back(g, dy, axes)
            scale = 1.0
            if op == "ReduceMean":
                scale = 1.0 / max(int(np.prod([x.dim(a) for a in axes], dtype=np.int64)), 1)
            return [popops.mul(g.graph, d, scale, g.prog, g.name), None]
        if op == "ReduceSumSquare":
            d = _expand_back(g, dy, axes)
            two_x = popops.mul(g.graph, x, 2.0, g.prog, f"{g.name}/twoX")
            return [popops.mul(g.graph, two_x, d, g.prog, g.name), None]
        if op == "ReduceProd":
            y = _expand_back(g, g.outputs[0], axes)
            d = popops.div(
                g.graph,
                popops.mul(g.graph, _expand_back(g, dy, axes), y, g.prog, f"{g.name}/dyY"),
                x,
                g.prog,
                g.name,
            )
            return [d, None]
        y = _expand_back(g, g.outputs[0], axes)  # Max / Min: to every element equal to it
        hit = popops.eq(g.graph, x, y, g.prog, f"{g.name}/hit")
        return [popops.select(g.graph, _expand_back(g, dy, axes), 0.0, hit, g.prog, g.name), None]

    return grad


for _op in _REDUCE_OPS:
    register_grad(_op)(_reduce_grad(_op))


# ---------------------------------------------------------------- LogSoftmax
def _log_softmax_last(graph: Graph, x: Tensor, prog: Any, name: str) -> Tensor:
    last = x.rank() - 1
    m = popops.reduce(graph, x, [last], Operation.MAX, prog, f"{name}/max").expand([last])
    s = popops.sub(graph, x, m, prog, f"{name}/shift")
    e = popops.exp(graph, s, prog, f"{name}/exp")
    lse = popops.log(
        graph,
        popops.reduce(graph, e, [last], Operation.ADD, prog, f"{name}/sum"),
        prog,
        f"{name}/log",
    ).expand([last])
    return popops.sub(graph, s, lse, prog, name)


def _softmax_layout(x: Tensor, attrs: dict, opset_13: bool, name: str):
    """(view with the softmax axis last, function restoring the layout)."""
    rank = x.rank()
    if not opset_13:
        axis = int(attrs.get("axis", 1)) % max(rank, 1)
        shape = x.shape()
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        flat = x.reshape([rows, int(np.prod(shape[axis:], dtype=np.int64))])
        return flat, lambda t: t.reshape(shape)
    axis = int(attrs.get("axis", -1)) % max(rank, 1)
    last = rank - 1
    if axis == last:
        return x, lambda t: t
    return x.dimShufflePartial([axis], [last]), lambda t: t.dimShufflePartial([last], [axis])


def _log_softmax(opset_13: bool) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = float_check(tensor(graph, inputs[0], name), "LogSoftmax", name)
        view, back = _softmax_layout(x, attrs, opset_13, name)
        return [back(_log_softmax_last(graph, view, prog, name))]

    return lower


register("LogSoftmax", since=1)(_log_softmax(False))
register("LogSoftmax", since=13)(_log_softmax(True))


@register_grad("LogSoftmax")
def _log_softmax_grad(g: GradContext) -> Grads:
    """``dx = dy - exp(y)·sum(dy)`` along the axis."""
    y, dy = g.outputs[0], g.grad_output(0)
    yv, back = _softmax_layout(y, g.attrs, g.opset >= 13, g.name)
    dv, _ = _softmax_layout(dy, g.attrs, g.opset >= 13, g.name)
    last = yv.rank() - 1
    total = popops.reduce(g.graph, dv, [last], Operation.ADD, g.prog, f"{g.name}/sum")
    p = popops.exp(g.graph, yv, g.prog, f"{g.name}/p")
    t = popops.mul(g.graph, p, total.expand([last]), g.prog, f"{g.name}/pSum")
    return [back(popops.sub(g.graph, dv, t, g.prog, g.name))]


# -------------------------------------------------------------------- Dropout
@register("Dropout", since=1)
def _dropout(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = float_check(tensor(graph, inputs[0], name), "Dropout", name)
    ratio = float(attrs.get("ratio", 0.5))
    if len(inputs) > 1 and inputs[1] is not None:
        ratio = float(np.asarray(_const_value(inputs[1], "Dropout", name, "ratio")))
    training = context().training
    if len(inputs) > 2 and inputs[2] is not None:
        training = bool(np.asarray(_const_value(inputs[2], "Dropout", name, "training_mode")))
    if not 0.0 <= ratio < 1.0:
        raise popart_exception(f"Dropout (node '{name}'): ratio {ratio} must be in [0, 1)")
    if not training or ratio == 0.0:
        mask = graph.addConstant(BOOL, x.shape(), True, f"{name}/mask")
        mapTensorLinearly(graph, mask)
        return [x, mask, None, 1.0]
    seed = context().seed_tensor
    if seed is None:  # outside a session: a fixed seed
        seed = graph.addConstant(
            UNSIGNED_INT, [2], np.array([context().seed, 0], np.uint32), f"{name}/seed"
        )
        graph.setTileMapping(seed, 0)
    modifier = sum(ord(c) for c in name) & 0xFFFFFFFF
    keep = poprand.bernoulli(
        graph, seed, modifier, x, x.elementType(), 1.0 - ratio, prog, f"{name}/mask"
    )
    scale = 1.0 / (1.0 - ratio)
    y = popops.mul(
        graph, popops.mul(graph, x, keep, prog, f"{name}/apply"), scale, prog, f"{name}/scale"
    )
    mask = popops.cast(graph, keep, BOOL, prog, f"{name}/maskBool")
    return [y, mask, keep, scale]


def _const_value(v: Any, op: str, name: str, what: str) -> np.ndarray:
    if isinstance(v, Tensor):
        raise popart_exception(
            f"{op} (node '{name}'): '{what}' must be a constant or initializer, got a tensor"
        )
    return np.asarray(v)


@register_grad("Dropout")
def _dropout_grad(g: GradContext) -> Grads:
    keep, scale = g.outputs[2], g.outputs[3]
    dy = g.grad_output(0)
    if keep is None:
        return [dy]
    return [
        popops.mul(
            g.graph, popops.mul(g.graph, dy, keep, g.prog, f"{g.name}/mask"), scale, g.prog, g.name
        )
    ]


# ---------------------------------------------------------------- shape ops
@register("Shape", since=1)
def _shape_op(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    shape = np.asarray(value_shape(inputs[0]), np.int64)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return [shape[start : None if end is None else int(end)]]


@register("Flatten", since=1)
def _flatten(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = value_shape(x)
    axis = int(attrs.get("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise popart_exception(
            f"Flatten (node '{name}'): axis {axis} is out of range for rank {len(shape)}"
        )
    if axis < 0:
        axis += len(shape)
    dims = [int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))]
    return [x.reshape(dims) if isinstance(x, Tensor) else np.asarray(x).reshape(dims)]


def _axes_attr_or_input(inputs: list, attrs: dict, op: str, name: str) -> list[int] | None:
    if len(inputs) > 1 and inputs[1] is not None:
        return _const_ints(inputs[1], op, name, "axes")
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    return None


@register("Squeeze", since=1)
def _squeeze(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = value_shape(x)
    axes = _axes_attr_or_input(inputs, attrs, "Squeeze", name)
    if axes is None:
        axes = [d for d, n in enumerate(shape) if n == 1]
    axes = _norm_axes(axes, len(shape), "Squeeze", name)
    bad = [a for a in axes if shape[a] != 1]
    if bad:
        raise popart_exception(
            f"Squeeze (node '{name}'): axes {bad} of shape {shape} are not of size 1"
        )
    dims = [n for d, n in enumerate(shape) if d not in axes]
    return [x.reshape(dims) if isinstance(x, Tensor) else np.asarray(x).reshape(dims)]


@register("Unsqueeze", since=1)
def _unsqueeze(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = value_shape(x)
    axes = _axes_attr_or_input(inputs, attrs, "Unsqueeze", name)
    if axes is None:
        raise popart_exception(f"Unsqueeze (node '{name}'): 'axes' is required")
    rank = len(shape) + len(axes)
    axes = sorted(_norm_axes(axes, rank, "Unsqueeze", name))
    dims = list(shape)
    for a in axes:
        dims.insert(a, 1)
    return [x.reshape(dims) if isinstance(x, Tensor) else np.asarray(x).reshape(dims)]


def _reshape_grad(g: GradContext) -> Grads:
    return [g.grad_output(0).reshape(value_shape(g.inputs[0])), None]


for _op in ("Flatten", "Squeeze", "Unsqueeze"):
    register_grad(_op)(_reshape_grad)


@register("Expand", since=8)
def _expand(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    want = _const_ints(inputs[1], "Expand", name, "shape")
    try:
        shape = list(np.broadcast_shapes(tuple(value_shape(x)), tuple(want)))
    except ValueError:
        raise popart_exception(
            f"Expand (node '{name}'): shape {value_shape(x)} does not broadcast to {want}"
        ) from None
    if not isinstance(x, Tensor):
        return [np.broadcast_to(np.asarray(x), shape).copy()]
    view = x.reshape([1] * (len(shape) - x.rank()) + x.shape())
    for d, n in enumerate(shape):
        if view.dim(d) != n:
            view = view.broadcast(n, d)
    return [popops.add(graph, view, 0, prog, name)]  # a new tensor, as ONNX's output is


@register_grad("Expand")
def _expand_grad(g: GradContext) -> Grads:
    return [unbroadcast(g.graph, g.grad_output(0), value_shape(g.inputs[0]), g.prog, g.name), None]


@register("Concat", since=4)
def _concat(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    values = [v for v in inputs if v is not None]
    if "axis" not in attrs:
        raise popart_exception(f"Concat (node '{name}'): attribute 'axis' is required")
    rank = _rank(values[0])
    axis = _norm_axes([int(attrs["axis"])], rank, "Concat", name)[0]
    for v in values:
        s0, s = value_shape(values[0]), value_shape(v)
        if len(s) != rank or any(
            a != b for d, (a, b) in enumerate(zip(s0, s, strict=False)) if d != axis
        ):
            raise popart_exception(
                f"Concat (node '{name}'): input shapes {[value_shape(u) for u in values]} differ "
                f"outside axis {axis}"
            )
    like = first_tensor(values)
    if like is None:
        return [np.concatenate([np.asarray(v) for v in values], axis=axis)]
    return [concat([tensor(graph, v, name, like) for v in values], axis)]


@register_grad("Concat")
def _concat_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    axis = int(g.attrs["axis"]) % dy.rank()
    out, start = [], 0
    for i, v in enumerate(g.inputs):
        n = value_shape(v)[axis]
        out.append(dy.slice(start, start + n, axis) if g.needs_grad(i) else None)
        start += n
    return out


def _slice_params(inputs: list, attrs: dict, shape: list[int], name: str, from_inputs: bool):
    if from_inputs:
        starts = _const_ints(inputs[1], "Slice", name, "starts")
        ends = _const_ints(inputs[2], "Slice", name, "ends")
        axes = (
            _const_ints(inputs[3], "Slice", name, "axes")
            if len(inputs) > 3 and inputs[3] is not None
            else list(range(len(starts)))
        )
        steps = (
            _const_ints(inputs[4], "Slice", name, "steps")
            if len(inputs) > 4 and inputs[4] is not None
            else [1] * len(starts)
        )
    else:
        starts, ends = [int(a) for a in attrs["starts"]], [int(a) for a in attrs["ends"]]
        axes = [int(a) for a in attrs.get("axes", range(len(starts)))]
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise popart_exception(
            f"Slice (node '{name}'): starts, ends, axes and steps differ in length"
        )
    axes = _norm_axes(axes, len(shape), "Slice", name)
    if any(s == 0 for s in steps):
        raise popart_exception(f"Slice (node '{name}'): a step of 0 is not allowed")
    out = []
    for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
        out.append((a, *slice(b, e, st).indices(shape[a])))
    return out


def _slice_view(t: Tensor, params: list[tuple[int, int, int, int]]) -> Tensor:
    """``t[begin:end:step]`` along each axis (``slice().indices`` bounds) as a view."""
    for axis, begin, end, step in params:
        if step > 0:
            t = t.slice(begin, max(end, begin), axis)
        else:  # element i is element n-1-i of the reversed axis
            n = t.dim(axis)
            t = t.reverse(axis).slice(n - 1 - begin, max(n - 1 - end, n - 1 - begin), axis)
        if abs(step) > 1 and t.dim(axis):
            t = t.subSample(abs(step), axis)
    return t


@register("Slice", since=1)
def _slice_op(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    params = _slice_params(inputs, attrs, value_shape(x), name, len(inputs) > 1)
    if not isinstance(x, Tensor):
        index = [slice(None)] * np.ndim(x)
        for axis, begin, end, step in params:
            index[axis] = slice(begin, end if end >= 0 else None, step)
        return [np.asarray(x)[tuple(index)], params]
    return [_slice_view(x, params), params]


@register_grad("Slice")
def _slice_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    params = g.outputs[1]
    dx = zeros(g.graph, g.grad_output(0).elementType(), x.shape(), g.prog, f"{g.name}/zero")
    g.prog.add(pprog.Copy(g.grad_output(0), _slice_view(dx, params)))
    return [dx] + [None] * (len(g.inputs) - 1)


# --------------------------------------------------------------------- Gather
def _one_hot(graph: Graph, idx: Tensor, n: int, typ: Any, prog: Any, name: str) -> Tensor:
    flat = idx.reshape([max(idx.numElements(), 1)])
    if flat.elementType() not in (INT, UNSIGNED_INT):
        flat = popops.cast(graph, flat, INT, prog, f"{name}/indices")
    if flat.elementType() == INT:  # negative indices count from the end
        neg = popops.lt(graph, flat, 0, prog, f"{name}/negative")
        flat = popops.select(
            graph,
            popops.add(graph, flat, n, prog, f"{name}/wrap"),
            flat,
            neg,
            prog,
            f"{name}/normalise",
        )
    enc = graph.addVariable(typ, [flat.numElements(), n], f"{name}/onehot")
    mapTensorLinearly(graph, enc)
    popnn.encodeOneHot(graph, flat, enc, prog, f"{name}/onehot")
    return enc


@register("Gather", since=1)
def _gather(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    data, idx = inputs
    rank = _rank(data)
    axis = _norm_axes([int(attrs.get("axis", 0))], rank, "Gather", name)[0]
    n = value_shape(data)[axis]
    if not isinstance(idx, Tensor):
        ids = np.asarray(idx).astype(np.int64)
        bad = ids[(ids < -n) | (ids >= n)]
        if bad.size:
            raise popart_exception(
                f"Gather (node '{name}'): index {int(bad[0])} is out of range for axis {axis} "
                f"of size {n}; required: -{n} <= index < {n}"
            )
        if not isinstance(data, Tensor):
            return [np.take(np.asarray(data), ids, axis=axis), None]
        idx = graph.addConstant(
            INT, list(ids.shape), (ids % n).astype(np.int32).reshape(-1), f"{name}/indices"
        )
        mapTensorLinearly(graph, idx)
    data = tensor(graph, data, name)
    if data.elementType() not in (FLOAT, HALF):
        raise popart_exception(
            f"Gather (node '{name}'): data '{data.name}' is {data.elementType().name}; "
            "gathering from a device tensor needs FLOAT or FLOAT16 data"
        )
    moved = data.dimShufflePartial([axis], [0]) if axis else data
    rest = moved.shape()[1:]
    enc = _one_hot(graph, idx, n, data.elementType(), prog, name)
    table = moved.reshape([n, int(np.prod(rest, dtype=np.int64))])
    rows = poplin.matMul(graph, enc, table, prog, f"{name}/lookup", context().options or None)
    ishape = value_shape(idx)
    out = rows.reshape([*ishape, *rest])
    if axis:  # indices' dimensions go where the axis was
        k = len(ishape)
        perm = list(range(k, k + axis)) + list(range(k)) + list(range(k + axis, k + len(rest)))
        out = out.dimShuffle(perm)
    return [out, enc]


@register_grad("Gather")
def _gather_grad(g: GradContext) -> Grads:
    """The one-hot matrix transposed times the output gradient: every row of the data
    gets the sum of the gradients of the positions that read it."""
    data, enc = g.inputs[0], g.outputs[1]
    axis = int(g.attrs.get("axis", 0)) % data.rank()
    dy = g.grad_output(0)
    k = _rank(g.inputs[1])
    if axis:  # undo the output permutation: indices' dimensions first
        perm = list(range(axis, axis + k)) + list(range(axis)) + list(range(axis + k, dy.rank()))
        dy = dy.dimShuffle(perm)
    rest = dy.shape()[k:]
    flat = dy.reshape([enc.dim(0), int(np.prod(rest, dtype=np.int64))])
    d = poplin.matMul(g.graph, enc.transpose(), flat, g.prog, f"{g.name}/scatter")
    d = d.reshape([data.dim(axis), *rest])
    if axis:
        d = d.dimShufflePartial([0], [axis])
    return [d, None]


__all__: list[str] = []
