"""popnn pooling (``popnn::pooling``): max, average and sum pooling and their gradients.

Signatures and semantics follow ``include/popnn/Pooling.hpp`` and
``lib/popnn/Pooling.cpp`` (graphcore/poplibs @7eac0f26):

* tensors at the interface are ``[batch, channels, *field]``; any number of field
  dimensions (1-D, 2-D, N-D);
* ``inputTruncationOrPaddingLower/Upper`` pad (> 0) or truncate (< 0) each field
  dimension; the output size is ``(in + lower + upper - kernel) // stride + 1``;
* MAX ignores padding (padding is not a value, it is skipped); an output whose window
  lies wholly in the padding is 0 (the pooled tensor is zeroed first, as Poplibs);
* AVG divides by the number of **non-padding** inputs in the window (the count of
  kernel positions that land on the input, as ``getNumKernelPositionsUsedForOutputs``
  and the vertices' scale factors count them), so padding does not count; when the
  kernel equals the field with no padding it is ``popops.reduce`` ADD scaled by
  ``1 / kernel size``, as ``substPoolingWithReduction``;
* the MAX gradient goes, in full, to **every** input equal to the maximum (ties all
  receive it, as ``MaxPoolingGrad``); with ``useScaledVariant`` it is first divided by
  the number of such inputs (``MaxPoolingGradientScale``), so ties share it.

Vertices and planning
---------------------
As ``PoolVertices.cpp``: per tile one supervisor vertex (``popnn::MaxPooling<T>``,
``popnn::SumPooling<T>`` for AVG and SUM, ``popnn::MaxPoolingGrad<T>``,
``popnn::MaxPoolingGradientScale<T>``) with worklists built by
``partitionPartialByContext`` and ``createPartitions`` (output rows split evenly over
the 6 workers, one worklist entry per partial row and contributing kernel position,
entries sorted by ``(out, in, n)``); AVG with differing counts on a tile adds
``popnn::SelectiveScaling<T>`` in a second compute set ``Scale``, else the vertex's
``scale`` is ``1 / count``. The forward pass folds the batch into the channels
(``gatherDimsTransformIn``). Each partition goes to the not yet used tile that holds
most of its input (``poolUseIntrospectiveMapping``, the default). Backward passes are
the transposed pass (``getGradientParams``: the pass input dilated by the stride, so
worklist entries step ``stride`` outputs apart).

Not modelled (stated in ``docs/estimators.md``): the popsolver plan search
(``PoolPlan.cpp``). ipusim splits channel groups, then batch, then the output field
dimensions in order, greedily over the tiles, with ``chansPerGroup`` the largest
divisor of the channels not above 8 grains (a grain is the 64-bit vector width; a
multiple of the grain when one divides). The planner's transforms (flattening
dimensions into channels, combining spatial dimensions) and channel padding are not
done; a group that is not a whole number of grains is estimated as the padded group
(``chansPerGroupD = ceil(chansPerGroup / vectorWidth)``). The optional ``optimizeForSpeed``
convolution path is not taken. Worklists and constants sit on the vertex's tile.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.graph_bulk import bulk_construction
from poplar_api.library_checks import check_graph
from poplar_api.popnn.mapping import check_sequence, clone_like, element_tiles, local_tiles
from poplar_api.popnn.pool_plan import (
    MAX_GRAINS_PER_GROUP as MAX_GRAINS_PER_GROUP,
)
from poplar_api.popnn.pool_plan import (
    _Builder,
    _bwd_pass,
    _chans_per_group,
    _Dim,
    _fwd_pass,
    _Operand,
)
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, Type

__all__ = [
    "PoolParams",
    "PoolingType",
    "getOutputFieldShape",
    "pool",
    "poolInputGradient",
]

_OPTIONS = ("poolUseIntrospectiveMapping", "optimizeForSpeed", "useFloatPartialsWhereBeneficial")


class PoolingType(enum.Enum):
    """Pooling type (``popnn::PoolingType``)."""

    MAX = "MAX"
    AVG = "AVG"
    SUM = "SUM"


def _int_list(value: Any, what: str, fn: str) -> list[int]:
    try:
        items = list(value)
    except TypeError:
        raise GraphError(f"{fn}: {what} must be a list of ints, got {value!r}") from None
    for x in items:
        if isinstance(x, bool) or not isinstance(x, int | np.integer):
            raise GraphError(f"{fn}: {what} must be a list of ints, got {value!r}")
    return [int(x) for x in items]


class PoolParams:
    """Parameters of a pooling (``popnn::pooling::PoolParams``); arguments as Poplibs.

    Parameters
    ----------
    poolingType
        :class:`PoolingType`.
    inputFieldShape
        Field shape, without batch and channels.
    kernelShape, stride
        Per field dimension; both at least 1.
    inputTruncationOrPaddingLower, inputTruncationOrPaddingUpper
        Per field dimension: padding (> 0) or truncation (< 0) at the start / end.
    numChannels, batchSize
        Channels and batch size of the input.
    dType
        FLOAT or HALF.
    """

    def __init__(
        self,
        poolingType: PoolingType,
        inputFieldShape: Sequence[int],
        kernelShape: Sequence[int],
        stride: Sequence[int],
        inputTruncationOrPaddingLower: Sequence[int],
        inputTruncationOrPaddingUpper: Sequence[int],
        numChannels: int,
        batchSize: int,
        dType: Type,
    ) -> None:
        fn = "PoolParams"
        if not isinstance(poolingType, PoolingType):
            raise GraphError(
                f"{fn}: poolingType {poolingType!r} is not a PoolingType; use "
                f"PoolingType.MAX, AVG or SUM"
            )
        self.poolingType = poolingType
        self.inputFieldShape = _int_list(inputFieldShape, "inputFieldShape", fn)
        self.kernelShape = _int_list(kernelShape, "kernelShape", fn)
        self.stride = _int_list(stride, "stride", fn)
        self.inputTruncationOrPaddingLower = _int_list(
            inputTruncationOrPaddingLower, "inputTruncationOrPaddingLower", fn
        )
        self.inputTruncationOrPaddingUpper = _int_list(
            inputTruncationOrPaddingUpper, "inputTruncationOrPaddingUpper", fn
        )
        for what, x in (("numChannels", numChannels), ("batchSize", batchSize)):
            if isinstance(x, bool) or not isinstance(x, int | np.integer) or x < 1:
                raise GraphError(f"{fn}: {what} must be a positive int, got {x!r}")
        self.numChannels = int(numChannels)
        self.batchSize = int(batchSize)
        if dType not in (FLOAT, HALF):
            raise TypeMismatchError(
                f"{fn}: dType {getattr(dType, 'name', dType)!r} is not supported; pooling "
                f"needs float or half"
            )
        self.dType = dType

    def getNumFieldDims(self) -> int:
        """Number of field dimensions."""
        return len(self.inputFieldShape)

    def getOutputFieldShape(self) -> list[int]:
        """Output field shape; checks the parameters (see :func:`getOutputFieldShape`)."""
        return [d.out for d in _dims(self, "getOutputFieldShape")]

    def __str__(self) -> str:
        return (
            f"{{ poolingType={self.poolingType.name.lower()}\n"
            f"  inputFieldShape={self.inputFieldShape}\n"
            f"  kernelShape={self.kernelShape}\n"
            f"  stride={self.stride}\n"
            f"  inputTruncationOrPaddingLower={self.inputTruncationOrPaddingLower}\n"
            f"  inputTruncationOrPaddingUpper={self.inputTruncationOrPaddingUpper}\n"
            f"  numChannels={self.numChannels}\n"
            f"  batchSize={self.batchSize}\n"
            f"  dType={self.dType.name} }}\n"
        )

    def __repr__(self) -> str:
        return (
            f"PoolParams(PoolingType.{self.poolingType.name}, {self.inputFieldShape}, "
            f"{self.kernelShape}, {self.stride}, {self.inputTruncationOrPaddingLower}, "
            f"{self.inputTruncationOrPaddingUpper}, {self.numChannels}, {self.batchSize}, "
            f"{self.dType.name})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PoolParams) and repr(self) == repr(other)

    __hash__ = None  # type: ignore[assignment]


def getOutputFieldShape(params: PoolParams) -> list[int]:
    """Output field shape of ``params`` (``popnn::pooling::getOutputFieldShape``).

    Raises
    ------
    GraphError
        Mismatched dimension counts, a kernel or stride below 1, a kernel larger than
        the padded input, or padding / truncation that leaves no output.
    """
    if not isinstance(params, PoolParams):
        raise GraphError(f"getOutputFieldShape: params must be a PoolParams, got {params!r}")
    return params.getOutputFieldShape()


def _dims(params: PoolParams, fn: str) -> list[_Dim]:
    p = params
    n = len(p.inputFieldShape)
    lengths = {
        "kernelShape": len(p.kernelShape),
        "stride": len(p.stride),
        "inputTruncationOrPaddingLower": len(p.inputTruncationOrPaddingLower),
        "inputTruncationOrPaddingUpper": len(p.inputTruncationOrPaddingUpper),
    }
    if n == 0:
        raise GraphError(f"{fn}: inputFieldShape is empty; pooling needs at least 1 field dim")
    bad = {k: v for k, v in lengths.items() if v != n}
    if bad:
        raise GraphError(
            f"{fn}: mismatched window dimensions: inputFieldShape has {n} dims but "
            + ", ".join(f"{k} has {v}" for k, v in bad.items())
        )
    out = []
    for d in range(n):
        size, k, s = p.inputFieldShape[d], p.kernelShape[d], p.stride[d]
        lo, hi = p.inputTruncationOrPaddingLower[d], p.inputTruncationOrPaddingUpper[d]
        if size < 1:
            raise GraphError(f"{fn}: inputFieldShape[{d}] = {size}; it must be >= 1")
        if k < 1:
            raise GraphError(f"{fn}: kernelShape[{d}] = {k}; it must be >= 1")
        if s < 1:
            raise GraphError(f"{fn}: stride[{d}] = {s}; it must be >= 1")
        padded = size + lo + hi
        if max(0, -lo) + max(0, -hi) >= size or padded <= 0:
            raise GraphError(
                f"{fn}: inputTruncationOrPaddingLower[{d}] = {lo} and "
                f"inputTruncationOrPaddingUpper[{d}] = {hi} truncate all {size} inputs of "
                f"field dim {d}; the output would be empty"
            )
        if k > padded:
            raise GraphError(
                f"{fn}: kernelShape[{d}] = {k} is larger than the padded input of field dim "
                f"{d} ({size} + {lo} + {hi} = {padded}); the output would be empty"
            )
        out.append(_Dim(size, k, s, lo, hi))
    return out


# ------------------------------------------------------------------ public API


def _check_common(graph: object, params: object, prog: object, options: object, fn: str):
    check_graph(graph, fn)
    if not isinstance(params, PoolParams):
        raise GraphError(f"{fn}: params must be a PoolParams, got {type(params).__name__}")
    dims = _dims(params, fn)
    check_sequence(prog, fn)
    if options is not None:
        if not isinstance(options, dict):
            raise GraphError(f"{fn}: options must be a dict, got {type(options).__name__}")
        for key, value in options.items():
            if key not in _OPTIONS:
                raise GraphError(
                    f"{fn}: unknown pooling option {key!r}; known: {', '.join(_OPTIONS)}"
                )
            if str(value).lower() not in ("true", "false"):
                raise GraphError(f"{fn}: option {key}={value!r} must be true or false")
    return dims


def _check_tensor(graph: Graph, t: object, what: str, shape: list[int], typ: Type, fn: str):
    _checked_tiles(graph, t, what, shape, typ, fn)
    return t


def _checked_tiles(
    graph: Graph, t: object, what: str, shape: list[int], typ: Type, fn: str
) -> np.ndarray:
    """:func:`_check_tensor`'s checks; the top-level tile of each element of ``t``."""
    if not graph.owns(t):
        raise GraphError(f"{fn}: {what} must be a Tensor of this graph, got {t!r}")
    if t.rank() != len(shape):
        raise GraphError(
            f"{fn}: {what} '{t.name}' has rank {t.rank()} (shape {t.shape()}); it must be "
            f"[batch, channels, *field] of rank {len(shape)} = {shape}"
        )
    if t.shape() != shape:
        raise GraphError(
            f"{fn}: {what} '{t.name}' has shape {t.shape()}; the pooling parameters need "
            f"{shape} ([batchSize, numChannels, *field])"
        )
    if t.elementType() != typ:
        raise TypeMismatchError(
            f"{fn}: {what} '{t.name}' is {t.elementType().name}; params.dType is {typ.name}"
        )
    return element_tiles(graph, t, f"{fn}: {what}")


def _layer_name(params: PoolParams, pas: str) -> str:
    kernel = "x".join(str(k) for k in params.kernelShape)
    return f"{params.poolingType.name.lower()}Pool{kernel}/{pas}"


def _matches_reduction(params: PoolParams) -> bool:
    """``detectMatchingFieldAndKernel``: kernel == field and no padding/truncation."""
    return params.kernelShape == params.inputFieldShape and not any(
        params.inputTruncationOrPaddingLower + params.inputTruncationOrPaddingUpper
    )


def _operand(field: str, t: Tensor, window: str, fold_batch: bool = False) -> _Operand:
    """``t`` as a pass operand in internal layout ``[channels, batch, *field]`` (with
    ``fold_batch``, the batch folded into the channels: ``gatherDimsTransformIn``)."""
    return _Operand(field, t, None, window, fold_batch)


def _broadcast_view(t: Tensor, shape: list[int], like: list[int]) -> Tensor:
    """``t`` (of ``shape``) broadcast to ``like`` by numpy rules, as a view."""
    pos = np.arange(t.numElements(), dtype=np.int64).reshape(shape)
    return t.elements(np.broadcast_to(pos, like))


def _new_output(graph: Graph, typ: Type, shape: list[int], name: str) -> Tensor:
    from poplar_api.poputil import mapTensorLinearly

    out = graph.addVariable(typ, shape, name)
    mapTensorLinearly(graph, out)
    return out


@bulk_construction
def pool(
    graph: Graph,
    params: PoolParams,
    in_: Tensor,
    prog: _program.Sequence,
    debugPrefix: str = "",
    options: dict[str, Any] | None = None,
) -> Tensor:
    """Pool ``in_`` (``[batch, channels, *field]``) over its field dimensions.

    Returns a new ``[batch, channels, *outField]`` tensor; the compute sets are added
    to ``prog``. MAX skips padding; AVG divides by the non-padding inputs of each
    window; SUM adds them.

    Raises
    ------
    GraphError
        Bad parameters (the message names the argument and value), or ``in_`` of the
        wrong rank or shape, or not mapped.
    TypeMismatchError
        ``in_`` is not of ``params.dType``.
    """
    fn = "pool"
    dims = _check_common(graph, params, prog, options, fn)
    in_shape = [params.batchSize, params.numChannels, *params.inputFieldShape]
    in_tiles = _checked_tiles(graph, in_, "in", in_shape, params.dType, fn)
    typ = params.dType
    name = (
        f"{debugPrefix}/{_layer_name(params, 'Fwd')}" if debugPrefix else _layer_name(params, "Fwd")
    )
    ptype = params.poolingType
    if _matches_reduction(params):  # substPoolingWithReduction
        from poplar_api.popops.reduce import Operation, ReduceParams, reduce

        kernel = int(np.prod(params.kernelShape))
        rp = (
            ReduceParams(Operation.MAX)
            if ptype is PoolingType.MAX
            else ReduceParams(
                Operation.ADD, scale=1.0 / kernel if ptype is PoolingType.AVG else 1.0
            )
        )
        red = reduce(graph, in_, list(range(2, in_.rank())), rp, prog, name)
        return red.reshape([params.batchSize, params.numChannels] + [1] * len(dims))
    out_shape = [params.batchSize, params.numChannels, *[d.out for d in dims]]
    out = _new_output(graph, typ, out_shape, f"{name}/out")
    vw = graph.getTarget().getVectorWidth(typ)
    chans = params.batchSize * params.numChannels
    kind = "max" if ptype is PoolingType.MAX else "sum"
    b = _Builder(graph, name, typ, kind, _fwd_pass(dims), _chans_per_group(chans, vw))
    src = _operand("in", in_, "in", fold_batch=True)
    operands = [src, _operand("out", out, "out", fold_batch=True)]
    # (on a top-level graph in_'s tiles are those its check asked for: not asked again)
    top = graph.getTopLevelGraph() is graph
    b.build(operands, prog, src, avg=ptype is PoolingType.AVG,
            intro_tiles=in_tiles if top else None)  # fmt: skip
    return out


def _avg_counts(dims: list[_Dim]) -> np.ndarray:
    """Non-padding inputs of every output window (``getNumKernelPositionsUsedForOutputs``)."""
    counts = np.ones([d.out for d in dims], np.float64)
    for i, p in enumerate(_fwd_pass(dims).valid):
        shape = [1] * len(dims)
        shape[i] = p.shape[0]
        counts = counts * p.sum(1).reshape(shape)
    return counts


def _grad_impl(
    graph, params, dims, in_, pooled, grad, output, scaled, prog, name, in_tiles=None,
    pooled_tiles=None,
) -> None:  # fmt: skip
    """``poolInputGradientImpl``: the input gradient into ``output``. ``in_tiles`` and
    ``pooled_tiles``, when given, are :func:`.mapping.local_tiles` of ``in_`` and
    ``pooled`` as the caller has them (read, not changed): not gathered again."""
    from poplar_api import popops

    typ = params.dType
    vw = graph.getTarget().getVectorWidth(typ)
    cpg = _chans_per_group(params.numChannels, vw)
    bwd = _bwd_pass(dims)
    ptype = params.poolingType
    if ptype is not PoolingType.MAX:
        if _matches_reduction(params):  # substPoolingGradientWithBroadcast
            src = grad
            if ptype is PoolingType.AVG:
                scale = 1.0 / float(np.prod(params.kernelShape))
                src = popops.mul(graph, grad, scale, prog, name)
            prog.add(_program.Copy(_broadcast_view(src, src.shape(), output.shape()), output))
            return
        if ptype is PoolingType.AVG:  # scaleGradient
            counts = _avg_counts(dims)
            inv = np.where(counts > 0, 1.0 / np.maximum(counts, 1), 0.0)
            const = graph.addConstant(typ, [inv.size], inv.ravel(), f"{name}/scaleTensor")
            graph.setTileMapping(const, 0)
            bscale = _broadcast_view(const, list(inv.shape), grad.shape())
            grad = popops.mul(graph, grad, bscale, prog, f"{name}/preScale")
        src = _operand("in", grad, "in")
        b = _Builder(graph, name, typ, "sum", bwd, cpg)
        b.build([src, _operand("out", output, "out")], prog, src)
        return
    if scaled:  # poolingMaxScale: 1 / (inputs equal to the maximum), per output
        scale = _new_output(graph, typ, grad.shape(), f"{name}/Scale/out")
        sb = _Builder(graph, f"{name}/Scale", typ, "maxGradScale", _fwd_pass(dims), cpg)
        src = _operand("in", in_, "in")
        sb.build(
            [src, _operand("out", scale, "out"), _operand("fwdActsOut", pooled, "out")],
            prog, src, intro_tiles=in_tiles,
        )  # fmt: skip
        grad = popops.mul(graph, grad, scale, prog, f"{name}/ScaleGrad")
    if pooled_tiles is None:
        pooled_tiles = local_tiles(graph, pooled, name)
    # (the clone is mapped as pooled is: its tiles are pooled's)
    rearranged = clone_like(graph, pooled, typ, f"{name}/gradsRearranged", name, pooled_tiles)
    prog.add(_program.Copy(grad, rearranged))
    src = _operand("in", rearranged, "in")
    b = _Builder(graph, name, typ, "maxGrad", bwd, cpg)
    b.build(
        [src, _operand("out", output, "out"), _operand("fwdActsIn", in_, "out"),
         _operand("fwdActsOut", pooled, "in")],
        prog, src, intro_tiles=pooled_tiles,
    )  # fmt: skip


@bulk_construction
def poolInputGradient(graph: Graph, params: PoolParams, *args: Any, **kwargs: Any) -> Tensor:
    """Gradient of a pooling with respect to its input (both Poplibs overloads).

    Two call forms, told apart by the third argument:

    * ``poolInputGradient(graph, params, in_, pooled, pooledGradient, useScaledVariant,
      prog, debugPrefix="", options=None)`` — any pooling type; MAX needs the forward
      input ``in_`` and output ``pooled`` (every input equal to the maximum gets the
      gradient; with ``useScaledVariant`` divided by the number of such inputs). The
      result is a clone of ``in_`` (same mapping).
    * ``poolInputGradient(graph, params, fwdChansPerGroup, pooledGradient, prog,
      debugPrefix="", options=None)`` — AVG and SUM only; the result is created
      ``[numChannels / fwdChansPerGroup, batch, *field, fwdChansPerGroup]``, mapped
      linearly and returned as ``[batch, numChannels, *field]``, as Poplibs.

    Raises
    ------
    GraphError
        Bad parameters or arguments (named with their values), tensors whose shapes do
        not match ``params``, or MAX with the second form.
    TypeMismatchError
        A tensor not of ``params.dType``.
    """
    fn = "poolInputGradient"
    if args and isinstance(args[0], int | np.integer) and not isinstance(args[0], bool):
        names = ["fwdChansPerGroup", "pooledGradient", "prog", "debugPrefix", "options"]
    else:
        names = [
            "in_",
            "pooled",
            "pooledGradient",
            "useScaledVariant",
            "prog",
            "debugPrefix",
            "options",
        ]
    if len(args) > len(names):
        raise GraphError(f"{fn}: too many arguments ({2 + len(args)}); the form is {names}")
    bound = dict(zip(names, args, strict=False))
    for k, v in kwargs.items():
        if k not in names:
            raise GraphError(f"{fn}: unexpected argument {k!r}; this form takes {names}")
        if k in bound:
            raise GraphError(f"{fn}: argument {k!r} given twice")
        bound[k] = v
    missing = [n for n in names if n not in bound and n not in ("debugPrefix", "options")]
    if missing:
        raise GraphError(f"{fn}: missing argument(s) {missing}; this form takes {names}")
    prog = bound["prog"]
    dims = _check_common(graph, params, prog, bound.get("options"), fn)
    typ = params.dType
    in_shape = [params.batchSize, params.numChannels, *params.inputFieldShape]
    out_shape = [params.batchSize, params.numChannels, *[d.out for d in dims]]
    prefix = bound.get("debugPrefix") or ""
    name = f"{prefix}/{_layer_name(params, 'Bwd')}" if prefix else _layer_name(params, "Bwd")
    grad = _check_tensor(graph, bound["pooledGradient"], "pooledGradient", out_shape, typ, fn)
    if "fwdChansPerGroup" in bound:
        cpg = int(bound["fwdChansPerGroup"])
        if params.poolingType is PoolingType.MAX:
            raise GraphError(
                f"{fn}: the fwdChansPerGroup form is for AVG and SUM pooling; MAX needs "
                f"the forward input and output (in_, pooled, pooledGradient, ...)"
            )
        if cpg < 1 or params.numChannels % cpg:
            raise GraphError(
                f"{fn}: fwdChansPerGroup = {cpg} must be >= 1 and divide numChannels = "
                f"{params.numChannels}"
            )
        field = params.inputFieldShape
        raw = graph.addVariable(
            typ, [params.numChannels // cpg, params.batchSize, *field, cpg], name
        )
        from poplar_api.poputil import mapTensorLinearly

        mapTensorLinearly(graph, raw)
        pos = np.arange(raw.numElements(), dtype=np.int64).reshape(raw.shape())
        pos = np.moveaxis(pos, -1, 1)  # [G, cpg, B, *f]
        output = raw.elements(
            np.swapaxes(pos.reshape(params.numChannels, params.batchSize, *field), 0, 1)
        )
        _grad_impl(graph, params, dims, None, None, grad, output, False, prog, name)
        return output
    in_ = bound["in_"]
    pooled = bound["pooled"]
    scaled = bound["useScaledVariant"]
    if not isinstance(scaled, bool | np.bool_):
        raise GraphError(f"{fn}: useScaledVariant must be True or False, got {scaled!r}")
    in_tiles = _checked_tiles(graph, in_, "in", in_shape, typ, fn)
    pooled_tiles = None
    if params.poolingType is PoolingType.MAX:
        pooled_tiles = _checked_tiles(graph, pooled, "pooled", out_shape, typ, fn)
    # (on a top-level graph the tiles are those element_tiles gave: not asked again)
    if graph.getTopLevelGraph() is not graph:
        in_tiles = pooled_tiles = None
    output = clone_like(graph, in_, typ, f"{name}/out", fn, in_tiles)
    _grad_impl(graph, params, dims, in_, pooled, grad, output, bool(scaled), prog, name,
               in_tiles, pooled_tiles)  # fmt: skip
    return output
