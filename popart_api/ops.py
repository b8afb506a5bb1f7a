"""Lowering of ONNX ops onto poplar_api and Poplibs calls.

Every op is one function registered with :func:`register`::

    @register("Relu")
    def _relu(graph, inputs, attrs, prog, name):
        return [popnn.nonLinearity(graph, NL.RELU, tensor(graph, inputs[0], name), prog, name)]

``inputs`` holds, per ONNX input, a poplar_api :class:`~poplar_api.Tensor` or, for a
value known when the graph is built (a ``Constant`` node's output, an INT64 shape),
a numpy array; :func:`tensor` turns either into a Tensor. ``attrs`` are the node's
attributes as Python values (ONNX defaults are the lowering's job). A lowering
appends its programs to ``prog`` (a ``Sequence``) and returns one value per output.
An op registered with ``since=v`` is used for models of opset ``>= v`` of its domain
(the newest registration not newer than the model's opset wins).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popart_api.errors import popart_exception
from popart_api.onnx_model import DEVICE_TYPES
from poplar_api import (
    FLOAT,
    HALF,
    INT,
    Graph,
    Tensor,
    poplin,
    popnn,
    popops,
)
from poplar_api.popnn import NonLinearityType
from poplar_api.poputil import mapTensorLinearly

Value = Any  # Tensor | np.ndarray
Lowering = Callable[[Graph, list[Value], dict[str, Any], Any, str], list[Value]]

#: (domain, op type) -> [(since opset version, lowering)], oldest first.
REGISTRY: dict[tuple[str, str], list[tuple[int, Lowering]]] = {}


@dataclass
class LoweringContext:
    """What a lowering may need beyond its node: set by the session around each node.

    Attributes
    ----------
    training
        True when the model is lowered for a ``TrainingSession`` (Dropout drops,
        BatchNormalization uses batch statistics).
    options
        Poplibs options for this node's matMul and convolution calls (for example
        ``{"availableMemoryProportion": "0.3"}`` from
        ``Builder.setAvailableMemoryProportion``, or the session's
        ``convolutionOptions``).
    seed
        The session's random seed (Dropout).
    seed_tensor
        The session's seed on the device (UNSIGNED_INT [2]: ``randomSeed`` and a counter
        the session advances every micro-batch), so Dropout draws a new mask each
        micro-batch and the same one when a node is recomputed.
    opset
        The model's opset of the node's domain (ops whose inputs changed between
        opsets, e.g. reduction axes as an attribute or an input).
    side_effects
        Where a lowering puts programs that must run once per forward pass and never
        again when the node is recomputed (BatchNormalization's running-statistics
        write-back); ``None`` outside a session (use the node's ``prog``).
    num_outputs
        How many outputs the node has (``Split`` without a ``split`` list).
    scope
        The values lowered so far, by tensor id (``None`` outside a session): what
        the subgraphs of ``If``, ``Loop`` and ``Scan`` read from the enclosing graph
        by name.
    fetch
        ``fetch(tid, value)``: a value of the enclosing graph as the node's IPU sees
        it (copied there once when it lives on another IPU); ``None`` outside a
        session.
    """

    training: bool = False
    options: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    side_effects: Any = None
    opset: int = 0
    seed_tensor: Any = None
    num_outputs: int = 1
    scope: Any = None
    fetch: Any = None


_CONTEXT: contextvars.ContextVar[LoweringContext | None] = contextvars.ContextVar(
    "popart_lowering", default=None
)


def context() -> LoweringContext:
    """The context of the node being lowered (inference defaults outside a session)."""
    return _CONTEXT.get() or LoweringContext()


@contextlib.contextmanager
def lowering_context(ctx: LoweringContext) -> Iterator[LoweringContext]:
    """Make ``ctx`` the context of the lowerings run inside the ``with`` block."""
    token = _CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _CONTEXT.reset(token)


def _domain(domain: str) -> str:
    return "ai.onnx" if domain in ("", "ai.onnx") else domain


def register(op_type: str, domain: str = "ai.onnx", since: int = 1) -> Callable:
    """Decorator: register a lowering of ``op_type`` of ``domain`` from opset ``since``."""

    def deco(fn: Lowering) -> Lowering:
        entries = REGISTRY.setdefault((_domain(domain), op_type), [])
        entries.append((since, fn))
        entries.sort(key=lambda e: e[0])
        return fn

    return deco


def supported_ops() -> list[str]:
    """``domain::OpType`` of every registered op, sorted."""
    return sorted(f"{d}::{t}" for d, t in REGISTRY)


def lookup(domain: str, op_type: str, opset: int, node_name: str) -> Lowering:
    """The lowering of ``op_type`` for a model of ``opset``.

    Raises
    ------
    popart_exception
        The op is not supported (the message lists the supported ops).
    """
    entries = REGISTRY.get((_domain(domain), op_type))
    if not entries:
        from popart_api.onnx_scope import POPART_OPS

        why = (
            "PopART's op registry has no such op either"
            if _domain(domain) != "ai.onnx" or op_type not in POPART_OPS
            else "PopART supports it but popart_api does not lower it yet"
        )
        raise popart_exception(
            f"op '{op_type}' (domain '{_domain(domain)}', opset {opset}, node '{node_name}') is "
            f"not supported by popart_api ({why}); supported: {', '.join(supported_ops())}; "
            "hint: see the op table in docs/popart.md"
        )
    usable = [fn for since, fn in entries if since <= opset]
    if not usable:
        raise popart_exception(
            f"op '{op_type}' (node '{node_name}'): opset {opset} of '{_domain(domain)}' is "
            f"older than any supported version: popart_api supports {op_type} from "
            f"opset {entries[0][0]}; hint: export the model with opset >= {entries[0][0]}"
        )
    return usable[-1]


# ------------------------------------------------------------------ helpers
def tensor(graph: Graph, value: Value, name: str, like: Tensor | None = None) -> Tensor:
    """``value`` as a Tensor: a numpy array becomes a constant mapped linearly over the
    tiles (in ``like``'s type when given, so ``x + 1`` keeps ``x``'s type)."""
    if isinstance(value, Tensor):
        return value
    arr = np.asarray(value)
    if like is not None:
        typ = like.elementType()
    else:
        typ = DEVICE_TYPES.get(arr.dtype)
        if typ is None:
            raise popart_exception(
                f"{name}: constant of dtype {arr.dtype} has no device type; supported: "
                "float32, float16, int32, int64 (as int32), bool, 8/16-bit integers, uint32"
            )
    t = graph.addConstant(typ, list(arr.shape), arr.reshape(-1), f"{name}/const")
    mapTensorLinearly(graph, t)
    return t


def value_shape(v: Value) -> list[int]:
    """The shape of a lowered value: a Tensor's, or a build-time numpy value's."""
    return v.shape() if isinstance(v, Tensor) else list(np.shape(v))


def first_tensor(values: list[Value]) -> Tensor | None:
    """The first Tensor of ``values`` (None when all are build-time numpy values)."""
    return next((v for v in values if isinstance(v, Tensor)), None)


def float_check(t: Tensor, op: str, name: str) -> Tensor:
    """``t``, or an error naming op ``op`` of node ``name`` when it is not FLOAT/FLOAT16."""
    if t.elementType() not in (FLOAT, HALF):
        raise popart_exception(
            f"{op} (node '{name}'): input '{t.name}' is {t.elementType().name}; this op "
            "needs FLOAT or FLOAT16"
        )
    return t


def numeric_check(t: Tensor, op: str, name: str) -> Tensor:
    """``t``, or an error naming op ``op`` of node ``name`` when it is not FLOAT,
    FLOAT16 or INT32 (the types of the ops that compare or order values)."""
    if t.elementType() not in (FLOAT, HALF, INT):
        raise popart_exception(
            f"{op} (node '{name}'): input '{t.name}' is {t.elementType().name}; this op "
            "needs FLOAT, FLOAT16 or INT32"
        )
    return t


# --------------------------------------------------------------- elementwise
def _binary(fn: Callable, numpy_fn: Callable) -> Lowering:
    def lower(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
        a, b = inputs
        like = first_tensor([a, b])
        if like is None:  # both known at build time: fold
            return [numpy_fn(np.asarray(a), np.asarray(b))]
        return [fn(graph, tensor(graph, a, name, like), tensor(graph, b, name, like), prog, name)]

    return lower


for _op, _fn, _np in (
    ("Add", popops.add, np.add),
    ("Sub", popops.sub, np.subtract),
    ("Mul", popops.mul, np.multiply),
    ("Div", popops.div, lambda a, b: divide(a, b)),
):
    register(_op, since=7)(_binary(_fn, _np))


def divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX ``Div`` of values known when the graph is built: integers truncate towards
    zero (as the device's integer division does), floats divide."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.trunc(np.true_divide(a, b))
        return q.astype(np.result_type(a, b))
    return np.divide(a, b)


def _unary(fn: Callable) -> Lowering:
    def lower(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
        return [fn(graph, tensor(graph, inputs[0], name), prog, name)]

    return lower


for _op, _fn in (("Sqrt", popops.sqrt), ("Exp", popops.exp), ("Log", popops.log)):
    register(_op, since=6)(_unary(_fn))


#: numpy forms of the nonlinearities, for values known when the graph is built.
_NL_NUMPY: dict[NonLinearityType, Callable[[np.ndarray], np.ndarray]] = {
    NonLinearityType.RELU: lambda x: np.maximum(x, 0).astype(x.dtype),
    NonLinearityType.SIGMOID: lambda x: (1 / (1 + np.exp(-x))).astype(x.dtype),
    NonLinearityType.TANH: np.tanh,
}


def _nonlinearity(kind: NonLinearityType) -> Lowering:
    def lower(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
        if not isinstance(inputs[0], Tensor) and np.asarray(inputs[0]).dtype.kind == "f":
            return [_NL_NUMPY[kind](np.asarray(inputs[0]))]  # known: folded
        x = float_check(tensor(graph, inputs[0], name), kind.name.title(), name)
        return [popnn.nonLinearity(graph, kind, x, prog, name)]

    return lower


register("Relu", since=6)(_nonlinearity(NonLinearityType.RELU))
register("Sigmoid", since=6)(_nonlinearity(NonLinearityType.SIGMOID))
register("Tanh", since=6)(_nonlinearity(NonLinearityType.TANH))


@register("Scale", domain="ai.graphcore")
def _scale(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    if "scale" not in attrs:
        raise popart_exception(f"Scale (node '{name}'): attribute 'scale' is required")
    return [popops.mul(graph, tensor(graph, inputs[0], name), float(attrs["scale"]), prog, name)]


# ------------------------------------------------------------------- softmax
def _axis(attrs: dict, default: int, rank: int, op: str, name: str) -> int:
    axis = int(attrs.get("axis", default))
    if not -rank <= axis < max(rank, 1):
        raise popart_exception(
            f"{op} (node '{name}'): axis {axis} is out of range for a rank-{rank} input; "
            f"required: -{rank} <= axis < {rank}"
        )
    return axis % max(rank, 1)


@register("Softmax", since=1)
def _softmax_coerced(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str):
    """Opsets 1-12: the input is coerced to 2-D ``[prod(:axis), prod(axis:)]``."""
    x = float_check(tensor(graph, inputs[0], name), "Softmax", name)
    axis = _axis(attrs, 1, x.rank(), "Softmax", name)
    shape = x.shape()
    rows = int(np.prod(shape[:axis], dtype=np.int64))
    flat = x.reshape([rows, int(np.prod(shape[axis:], dtype=np.int64))])
    y = popnn.nonLinearity(graph, NonLinearityType.SOFTMAX_STABLE, flat, prog, name)
    return [y.reshape(shape)]


@register("Softmax", since=13)
def _softmax(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str):
    """Opset 13+: softmax along ``axis`` (default -1)."""
    x = float_check(tensor(graph, inputs[0], name), "Softmax", name)
    rank = x.rank()
    axis = _axis(attrs, -1, rank, "Softmax", name)
    last = rank - 1
    moved = x.dimShufflePartial([axis], [last]) if axis != last else x
    y = popnn.nonLinearity(graph, NonLinearityType.SOFTMAX_STABLE, moved, prog, name)
    return [y.dimShufflePartial([last], [axis]) if axis != last else y]


# -------------------------------------------------------------------- matmul
def matmul(graph: Graph, a: Tensor, b: Tensor, prog: Any, name: str) -> Tensor:
    """numpy ``matmul`` of ``a`` and ``b`` by ``poplin.matMul`` (batch dims broadcast)."""
    a_vec, b_vec = a.rank() == 1, b.rank() == 1
    if a_vec:
        a = a.expand([0])
    if b_vec:
        b = b.expand([1])
    if a.dim(a.rank() - 1) != b.dim(b.rank() - 2):
        raise popart_exception(
            f"MatMul (node '{name}'): inner dimensions differ: '{a.name}' {a.shape()} x "
            f"'{b.name}' {b.shape()}"
        )
    if a.rank() == 2 and b.rank() == 2:
        out = poplin.matMul(graph, a, b, prog, name, context().options or None)
    elif b.rank() == 2 and a.dim(a.rank() - 1) > 0:
        # one weight for every batch row: a single [B·M, K] x [K, N] product, as
        # PopART's MatMul lowering flattens the left operand's leading dimensions
        k = a.dim(a.rank() - 1)
        rows = a.reshape([a.numElements() // k, k])
        out = poplin.matMul(graph, rows, b, prog, name, context().options or None)
        out = out.reshape([*a.shape()[:-1], b.dim(1)])
    else:
        try:
            batch = list(np.broadcast_shapes(tuple(a.shape()[:-2]), tuple(b.shape()[:-2])))
        except ValueError:
            raise popart_exception(
                f"MatMul (node '{name}'): batch dimensions do not broadcast: '{a.name}' "
                f"{a.shape()} x '{b.name}' {b.shape()}"
            ) from None
        a3 = _batch3(a, batch)
        b3 = _batch3(b, batch)
        out = poplin.matMul(graph, a3, b3, prog, name, context().options or None)
        out = out.reshape([*batch, out.dim(1), out.dim(2)])
    if a_vec:
        out = out.squeeze([out.rank() - 2])
    if b_vec:
        out = out.squeeze([out.rank() - 1])
    return out


def _batch3(t: Tensor, batch: list[int]) -> Tensor:
    """``t`` broadcast to ``[*batch, m, n]`` and flattened to ``[prod(batch), m, n]``."""
    full = [*batch, *t.shape()[-2:]]
    view = t.reshape([1] * (len(full) - t.rank()) + t.shape())
    for d, n in enumerate(full):
        if view.dim(d) == 1 and n != 1:
            view = view.broadcast(n, d)
    return view.reshape([int(np.prod(batch, dtype=np.int64)), *full[-2:]])


@register("MatMul", since=1)
def _matmul_op(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    a = float_check(tensor(graph, inputs[0], name), "MatMul", name)
    b = float_check(tensor(graph, inputs[1], name, a), "MatMul", name)
    return [matmul(graph, a, b, prog, name)]


@register("Gemm", since=1)
def _gemm(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    a = float_check(tensor(graph, inputs[0], name), "Gemm", name)
    b = float_check(tensor(graph, inputs[1], name, a), "Gemm", name)
    for t in (a, b):
        if t.rank() != 2:
            raise popart_exception(
                f"Gemm (node '{name}'): input '{t.name}' has shape {t.shape()}; Gemm needs "
                "2-D A and B"
            )
    if int(attrs.get("transA", 0)):
        a = a.transpose()
    if int(attrs.get("transB", 0)):
        b = b.transpose()
    out = matmul(graph, a, b, prog, f"{name}/matmul")
    alpha = float(attrs.get("alpha", 1.0))
    beta = float(attrs.get("beta", 1.0))
    if alpha != 1.0:
        out = popops.mul(graph, out, alpha, prog, f"{name}/alpha")
    if len(inputs) > 2 and inputs[2] is not None and beta != 0.0:
        c = inputs[2]
        if isinstance(c, Tensor):
            if beta != 1.0:
                c = popops.mul(graph, c, beta, prog, f"{name}/beta")
        else:
            c = tensor(graph, np.asarray(c) * beta, name, out)
        out = popops.add(graph, out, c, prog, f"{name}/addC")
    return [out]


# --------------------------------------------------------------------- views
@register("Identity", since=1)
def _identity(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    return [inputs[0]]


@register("Constant", since=1)
def _constant(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    kinds = {
        "value": None,
        "value_float": np.float32,
        "value_floats": np.float32,
        "value_int": np.int64,
        "value_ints": np.int64,
    }
    for key, dtype in kinds.items():
        if key in attrs:
            return [np.asarray(attrs[key], dtype=dtype)]
    raise popart_exception(
        f"Constant (node '{name}'): needs one of the attributes {sorted(kinds)}; got "
        f"{sorted(attrs)} (sparse and string constants are not supported)"
    )


@register("Reshape", since=5)
def _reshape(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    x, shape = inputs
    if isinstance(shape, Tensor):
        raise popart_exception(
            f"Reshape (node '{name}'): the shape input '{shape.name}' must be known when the "
            "graph is built; hint: make it with aiOnnx.constant or addInitializedInputTensor"
        )
    src = x.shape() if isinstance(x, Tensor) else list(np.shape(x))
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    allow_zero = int(attrs.get("allowzero", 0))
    dims = [src[i] if d == 0 and not allow_zero else d for i, d in enumerate(dims)]
    total = int(np.prod(src, dtype=np.int64))
    if dims.count(-1) == 1:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        dims[dims.index(-1)] = total // known if known else 0
    if dims.count(-1) > 1 or int(np.prod(dims, dtype=np.int64)) != total:
        raise popart_exception(
            f"Reshape (node '{name}'): cannot reshape {src} ({total} elements) to "
            f"{np.asarray(shape).tolist()}"
        )
    if not isinstance(x, Tensor):
        return [np.asarray(x).reshape(dims)]
    return [x.reshape(dims)]


@register("Transpose", since=1)
def _transpose(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    rank = x.rank() if isinstance(x, Tensor) else np.ndim(x)
    perm = [int(p) for p in attrs.get("perm", list(range(rank))[::-1])]
    if sorted(perm) != list(range(rank)):
        raise popart_exception(
            f"Transpose (node '{name}'): perm {perm} is not a permutation of 0..{rank - 1}"
        )
    if not isinstance(x, Tensor):
        return [np.transpose(np.asarray(x), perm)]
    return [x.dimShuffle(perm)]


__all__ = [
    "REGISTRY",
    "LoweringContext",
    "context",
    "lookup",
    "lowering_context",
    "register",
    "supported_ops",
    "tensor",
]
