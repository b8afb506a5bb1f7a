"""popnn losses and arg-max: ``calcLoss``, ``calcAccuracy``, ``argMax``, ``maxAndArgMax``,
``argMin``, ``minAndArgMin``.

Built as ``lib/popnn/Loss.cpp`` (graphcore/poplibs @7eac0f26) builds them:

``calcLoss``
    ``popops::encodeOneHot`` of the labels into a one-hot tensor (a clone of
    ``modelOutputs`` when its innermost grouping is at least
    ``max(atomicStoreGranularity, exchangeBytesPerCycle)`` bytes, else a new variable
    mapped linearly with grain VW), then one compute set ``<prefix>/on_tile_transform``
    of ``popnn::LossCrossEntropyTransform<T>`` or ``popnn::LossSumSquaredTransform<T>``
    worker vertices on the tiles of ``modelOutputs`` (per tile, its sorted contiguous
    regions split by ``splitRegionsBetweenWorkers`` with grain VW and, as the source
    passes it, a *minimum* of 0xFFF elements per vertex), which write ``deltas`` and a
    per-element ``transformed`` tensor (both mapped to the vertex's tile, as the source
    does, so ``deltas`` takes ``modelOutputs``' mapping); masked labels are then
    cleared from the deltas with ``popops::neq``, ``popops::cast`` and
    ``popops::mulInPlace``, and ``popops::reduceWithOutput`` sums ``transformed``
    into ``loss`` (``<prefix>/reduce_loss``).
``calcAccuracy``
    The arg-max reduction below, then one ``popnn::CalcAccuracy<LabelType>`` vertex on
    the tile of ``numCorrect`` (compute set ``Accuracy/CalcAccuracy``).
arg-max / arg-min (``maxMinArgMaxMin``)
    Stage 0 (``maxMinArgMaxMin(max)/ReduceClass[0]``): the rows are dealt out over the
    tiles from the last one down (``argMinMaxSplitFirstReduction``: at least
    ``32 x W`` elements a tile, workers take 32 to ``rptCountMax`` elements) to
    ``popnn::ReduceMaxClassGather<InType,LabelType>`` MultiVertices, one partial
    (value, index) per worker; later stages (``ReduceClass[i]``) reduce 32 partials a
    ``popnn::ReduceMaxClassSparse<PartialsType,LabelType>`` worker vertex until one is
    left per row. Partial values are float for float and half inputs.

Per batch item ``b`` with one-hot label vector ``e``:

* CROSS_ENTROPY_LOSS: ``loss[b] = -Σ e log(p[b] + eps)`` (eps ``1.17549435e-38`` for
  float, ``5.9605e-8`` for half), ``deltas[b] = deltasScale / modelOutputScaling ·
  (p[b] - e · modelOutputScaling)`` — the gradient of the loss with respect to the
  softmax *input*;
* SUM_SQUARED_LOSS: ``deltas[b] = p[b] - e``, ``loss[b] = ½ Σ deltas[b]²``
  (``deltasScale`` is not used).

A label equal to ``MASKED_LABEL_CODE`` (``0xFFFFFFFF``, or -1 for INT labels) gives
zero loss and deltas and never counts as correct. Deviations from Poplibs, so that
masking does what Poplibs documents for both losses: Poplibs clears masked deltas
only for cross entropy and only when the batch has more than one item, and leaves a
masked sum-squared row's loss at ``½ Σ p²``; ipusim always runs the mask step and,
for sum squared, also multiplies ``loss`` by the mask (one more ``popops::mul``
compute set). Poplibs throws when ``deltasScale`` is given for sum squared; ipusim
ignores it. Any other label outside ``0..classes-1`` makes the run fail in
``encodeOneHot`` with a :class:`~poplar_api.codelet.VertexError` naming the label.

``numCorrect`` (one UNSIGNED_INT element; ipusim also accepts INT) is **incremented**
by the number of items whose arg-max (first maximum) equals the label, so a training
loop zeroes it before a batch and reads it after, as the Poplar tutorial does.
"""

from __future__ import annotations

import enum
import math

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.graph_bulk import bulk_construction
from poplar_api.library_checks import check_element_type, check_graph
from poplar_api.popnn import vertices as vx
from poplar_api.popnn.mapping import element_tiles, local_tiles
from poplar_api.popnn.onehot import encodeOneHot
from poplar_api.popops.layout import ATOMIC_STORE_GRANULARITY, RPT_COUNT_MAX, split_regions
from poplar_api.popops.layout import tile_regions as _tile_regions
from poplar_api.popops.reduce import Operation, ReduceParams, reduceWithOutput
from poplar_api.poputil import cloneTensor, mapTensorLinearly
from poplar_api.tensor import Tensor, concat
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = [
    "MASKED_LABEL_CODE",
    "LossType",
    "argMax",
    "argMin",
    "calcAccuracy",
    "calcLoss",
    "maxAndArgMax",
    "minAndArgMin",
]

MASKED_LABEL_CODE = vx.MASKED_LABEL_CODE
#: ``minElementsPerPartition`` that ``onTileTransform`` passes (its comment calls it
#: the maximum region size).
_TRANSFORM_MIN_PER_VERTEX = 0xFFF
#: ``argMinMaxSplitFirstReduction``'s ``workerMin`` and the later stages' partials a vertex.
_WORKER_MIN = 32
_PARTIALS_PER_VERTEX = 32


class LossType(enum.Enum):
    """Loss function (``popnn::LossType``)."""

    SUM_SQUARED_LOSS = "SUM_SQUARED_LOSS"
    CROSS_ENTROPY_LOSS = "CROSS_ENTROPY_LOSS"


def _tensor(graph: Graph, t: object, what: str) -> Tensor:
    if not graph.owns(t):
        raise GraphError(f"{what} must be a Tensor of this graph, got {t!r}")
    return t


def _check_graph_prog(graph: object, prog: object, fn: str) -> _program.Sequence:
    check_graph(graph, fn)
    prog = _program.Sequence() if prog is None else prog
    if not isinstance(prog, _program.Sequence):
        raise GraphError(f"{fn}: prog must be a program.Sequence, got {type(prog).__name__}")
    return prog


def _check_outputs_labels(graph: Graph, model: object, expected: object, fn: str) -> tuple:
    check_graph(graph, fn)
    model = _tensor(graph, model, f"{fn}: modelOutputs")
    expected = _tensor(graph, expected, f"{fn}: expected")
    if model.rank() != 2:
        raise GraphError(
            f"{fn}: modelOutputs '{model.name}' has shape {model.shape()}; it must be "
            f"[batch, classes]"
        )
    check_element_type(model, "modelOutputs", (FLOAT, HALF), fn, "float or half is required")
    check_element_type(
        expected, "expected", (UNSIGNED_INT, INT), fn, "labels must be unsigned int or int"
    )
    if expected.shape() != [model.dim(0)]:
        raise GraphError(
            f"{fn}: expected '{expected.name}' has shape {expected.shape()}, needs "
            f"[{model.dim(0)}] (one label per row of modelOutputs {model.shape()})"
        )
    local_tiles(graph, model, fn)  # the vertices go where the model outputs are
    if model.dim(1) == 0:
        raise GraphError(
            f"{fn}: modelOutputs '{model.name}' has no classes (shape {model.shape()})"
        )
    return model, expected


# ------------------------------------------------------------------ arg-max / arg-min


def split_first_reduction(
    tiles_per_ipu: int, workers: int, rows: int, cols: int
) -> tuple[list[int], list[tuple[int, int, int, int, int, int, int]]]:
    """``argMinMaxSplitFirstReduction``: partials per row and, per stage-0 vertex,
    ``(tile, row, offsIn, size, offsOut, workerSize, workerNum)`` (tile counted on the
    IPU, from the last tile down)."""
    tile_min = workers * _WORKER_MIN
    total = rows * cols
    per_tile = max(tile_min, -(-total // tiles_per_ipu))
    tiles_to_use = -(-total // per_tile)
    partials: list[int] = []
    info = []
    row = offs_in = offs_out = num_partials = 0
    for tile in range(tiles_to_use):
        tile_size = (tile + 1) * total // tiles_to_use - tile * total // tiles_to_use
        while tile_size > 0:
            if offs_in == cols:
                partials.append(num_partials)
                num_partials, row, offs_in, offs_out = 0, row + 1, 0, 0
            size = min(tile_size, cols - offs_in)
            if size // workers >= _WORKER_MIN:
                worker_size = -(-size // workers)
                if worker_size > RPT_COUNT_MAX:
                    worker_size = RPT_COUNT_MAX
                    size = workers * worker_size
                num_workers = workers
            else:
                worker_size = _WORKER_MIN
                num_workers = -(-size // _WORKER_MIN)
            info.append(
                (tiles_per_ipu - 1 - tile, row, offs_in, size, offs_out, worker_size, num_workers)
            )
            num_partials += num_workers
            offs_in += size
            offs_out += num_workers
            tile_size -= size
    partials.append(num_partials)
    return partials, info


def _max_min_arg(
    graph: Graph, t: Tensor, result_type: Type, prog, prefix: str, is_max: bool = True
) -> tuple[Tensor, Tensor]:
    """``maxMinArgMaxMin``: per row of 2-D ``t``, the extreme value (float partials for
    float and half) and its index (``result_type``)."""
    low = "max" if is_max else "min"
    layer = f"{prefix}/maxMinArgMaxMin({low})/"
    target = graph.getTarget()
    tiles_per_ipu = target.getTilesPerIPU()
    rows, cols = t.dim(0), t.numElements() // t.dim(0)
    in_type = t.elementType()
    part_type = FLOAT if in_type in (FLOAT, HALF) else in_type
    num_partials, info = split_first_reduction(
        tiles_per_ipu, target.getNumWorkerContexts(), rows, cols
    )
    values = [graph.addVariable(part_type, [n], f"{layer}ValuePartials[0][{r}]")
              for r, n in enumerate(num_partials)]  # fmt: skip
    indices = [graph.addVariable(result_type, [n], f"{layer}IndexPartials[0][{r}]")
               for r, n in enumerate(num_partials)]  # fmt: skip
    cs = graph.addComputeSet(f"{layer}ReduceClass[0]")
    gather = vx.class_gather_vertex(in_type, result_type, is_max)
    src = t.reshape([rows, cols])
    n_params = len(info)
    params = graph.addConstant(
        UNSIGNED_INT, [max(n_params, 1), 2],
        np.array([[i[2], i[5]] for i in info] or [[0, 0]], np.uint32), f"{layer}params",
    )  # fmt: skip
    for k, (tile, row, offs_in, size, offs_out, _ws, nw) in enumerate(info):
        out_v = values[row].slice(offs_out, offs_out + nw)
        out_i = indices[row].slice(offs_out, offs_out + nw)
        graph.setTileMapping(out_v, tile)
        graph.setTileMapping(out_i, tile)
        graph.setTileMapping(params[k], tile)
        conns = {
            "activations": src[row].slice(offs_in, offs_in + size),
            "params": params[k],
            f"{low}Value": out_v,
            f"{low}Index": out_i,
        }
        graph.setTileMapping(graph.addVertex(cs, gather, conns), tile)
    prog.add(_program.Execute(cs))
    value_ts, index_ts = list(values), list(indices)
    remaining = [n for n in num_partials]
    tile = tiles_per_ipu - 1
    stage = 1
    sparse = vx.class_sparse_vertex(part_type, result_type, is_max)
    while any(n > 1 for n in remaining):
        cs = graph.addComputeSet(f"{layer}ReduceClass[{stage}]")
        for row in range(rows):
            n = remaining[row]
            if n <= 1:
                continue
            nxt = -(-n // _PARTIALS_PER_VERTEX)
            suffix = f"Partials[{stage}][{row}]"
            nv = graph.addVariable(part_type, [nxt], f"{layer}Value{suffix}")
            ni = graph.addVariable(result_type, [nxt], f"{layer}Index{suffix}")
            for i, offs in enumerate(range(0, n, _PARTIALS_PER_VERTEX)):
                size = min(n - offs, _PARTIALS_PER_VERTEX)
                graph.setTileMapping(nv[i], tile)
                graph.setTileMapping(ni[i], tile)
                conns = {
                    "activations": value_ts[row].slice(offs, offs + size),
                    "labels": index_ts[row].slice(offs, offs + size),
                    f"{low}Value": nv[i],
                    f"{low}Index": ni[i],
                }
                graph.setTileMapping(graph.addVertex(cs, sparse, conns), tile)
                tile = (tiles_per_ipu + tile - 1) % tiles_per_ipu
            value_ts[row], index_ts[row], remaining[row] = nv, ni, nxt
        prog.add(_program.Execute(cs))
        stage += 1
    flat = [v.flatten() for v in value_ts], [i.flatten() for i in index_ts]
    values_t = concat(flat[0]) if len(flat[0]) > 1 else flat[0][0]
    indices_t = concat(flat[1]) if len(flat[1]) > 1 else flat[1][0]
    return values_t, indices_t


def _check_arg_input(graph: object, t: object, prog: object, fn: str) -> tuple:
    prog = _check_graph_prog(graph, prog, fn)
    t = _tensor(graph, t, f"{fn}: input")
    if t.rank() != 2:
        raise GraphError(f"{fn}: input '{t.name}' has shape {t.shape()}; it must be rank 2")
    check_element_type(
        t,
        "input",
        (FLOAT, HALF, INT, UNSIGNED_INT),
        fn,
        "float, half, int or unsigned int is required",
    )
    if t.numElements() == 0:
        raise GraphError(f"{fn}: input '{t.name}' has no elements (shape {t.shape()})")
    element_tiles(graph, t, fn)
    return t, prog


def _extreme_and_arg(graph, t, prog, debugName, fn, is_max, cast_values):
    t, prog = _check_arg_input(graph, t, prog, fn)
    values, indices = _max_min_arg(graph, t, UNSIGNED_INT, prog, debugName or fn, is_max)
    if cast_values and values.elementType() != t.elementType():
        from poplar_api.popops.elementwise import cast

        values = cast(graph, values, t.elementType(), prog, debugName or fn)
    return values, indices


def argMax(graph: Graph, input: Tensor, prog: _program.Sequence, debugName: str = "") -> Tensor:
    """Index (UNSIGNED_INT ``[rows]``) of the first maximum of each row of 2-D ``input``
    (float, half, int or unsigned int), by ``ReduceMaxClassGather``/``Sparse`` vertices."""
    return _extreme_and_arg(graph, input, prog, debugName, "argMax", True, False)[1]


def maxAndArgMax(
    graph: Graph,
    input: Tensor,
    prog: _program.Sequence,
    debugName: str = "",
) -> tuple[Tensor, Tensor]:
    """``(max, argMax)`` of each row of 2-D ``input``; the maxima are cast back to
    ``input``'s type when the partials were float (half input), as Poplibs does."""
    return _extreme_and_arg(graph, input, prog, debugName, "maxAndArgMax", True, True)


def argMin(graph: Graph, input: Tensor, prog: _program.Sequence, debugName: str = "") -> Tensor:
    """As :func:`argMax` for the first minimum (``ReduceMinClass*`` vertices)."""
    return _extreme_and_arg(graph, input, prog, debugName, "argMin", False, False)[1]


def minAndArgMin(
    graph: Graph,
    input: Tensor,
    prog: _program.Sequence,
    debugName: str = "",
) -> tuple[Tensor, Tensor]:
    """As :func:`maxAndArgMax` for the minima."""
    return _extreme_and_arg(graph, input, prog, debugName, "minAndArgMin", False, True)


# ------------------------------------------------------------------------ accuracy


def _accuracy(graph, model, expected, num_correct, prog, name) -> None:
    num_correct = _tensor(graph, num_correct, "calcAccuracy: numCorrect")
    count_type = num_correct.elementType()
    if count_type not in (UNSIGNED_INT, INT) or num_correct.numElements() != 1:
        raise TypeMismatchError(
            f"calcAccuracy: numCorrect '{num_correct.name}' is {count_type.name} "
            f"{num_correct.shape()}; it must be one unsigned int or int element"
        )
    tile = int(local_tiles(graph, num_correct, "calcAccuracy: numCorrect")[0])
    layer = f"{name}/Accuracy" if name else "Accuracy"
    _, max_indices = _max_min_arg(graph, model, expected.elementType(), prog, layer)
    cs = graph.addComputeSet(f"{layer}/CalcAccuracy")
    cls = vx.calc_accuracy_vertex(expected.elementType(), count_type)
    conns = {
        "maxPerBatch": max_indices,
        "expected": expected,
        "numCorrect": num_correct.flatten()[0],
    }
    graph.setTileMapping(graph.addVertex(cs, cls, conns), tile)
    prog.add(_program.Execute(cs))


@bulk_construction
def calcAccuracy(
    graph: Graph,
    modelOutputs: Tensor,
    expected: Tensor,
    numCorrect: Tensor,
    prog: _program.Sequence | None = None,
    debugName: str = "",
) -> _program.Sequence:
    """Increment ``numCorrect`` by the rows whose arg-max equals the label.

    Returns ``prog`` (or a new sequence) holding the compute sets.
    """
    fn = "calcAccuracy"
    prog = _check_graph_prog(graph, prog, fn)
    model, expected = _check_outputs_labels(graph, modelOutputs, expected, fn)
    _accuracy(graph, model, expected, numCorrect, prog, debugName)
    return prog


# ---------------------------------------------------------------------------- loss


def innermost_grouping(graph: Graph, t: Tensor) -> int:
    """``poputil::detectInnermostGrouping``: the gcd of the first row's contiguous
    prefix and the longest run of it on one tile (1 unless it divides the row)."""
    row = t
    while row.rank() > 1:
        row = row[0]
    ids = row.flat_index()
    if ids.size == 0:
        return 1
    steps = np.flatnonzero(np.diff(ids) != 1)
    upper = int(steps[0]) + 1 if steps.size else int(ids.size)
    tiles = graph.elementTiles(row)
    breaks = np.flatnonzero(np.diff(tiles) != 0)
    edges = np.concatenate(([0], breaks + 1, [ids.size]))
    longest = int(np.diff(edges).max())
    grouping = math.gcd(longest, upper)
    return grouping if ids.size % grouping == 0 else 1


def _scalar_arg(graph, t, typ, fn, what) -> Tensor:
    t = _tensor(graph, t, f"{fn}: {what}")
    if t.numElements() != 1 or t.elementType() != typ:
        raise TypeMismatchError(
            f"{fn}: {what} '{t.name}' must be one {typ.name} element, got "
            f"{t.elementType().name} {t.shape()}"
        )
    element_tiles(graph, t, fn)
    return t.reshape([])


@bulk_construction
def calcLoss(
    graph: Graph,
    modelOutputs: Tensor,
    expected: Tensor,
    loss: Tensor,
    deltas: Tensor,
    deltasScale: Tensor | None = None,
    numCorrect: Tensor | None = None,
    lossType: LossType = LossType.CROSS_ENTROPY_LOSS,
    prog: _program.Sequence | None = None,
    debugName: str = "",
    modelOutputScaling: Tensor | None = None,
) -> _program.Sequence:
    """Loss per batch item, deltas and (optionally) the count of correct items.

    Parameters
    ----------
    modelOutputs
        ``[batch, classes]`` float or half.
    expected
        ``[batch]`` labels (unsigned int or int).
    loss, deltas
        Mapped outputs: ``[batch]`` and ``[batch, classes]`` of the model output type.
        ``deltas`` is remapped like ``modelOutputs``, as Poplibs' transform does.
    deltasScale
        Optional one-element tensor of the model output type scaling cross-entropy
        deltas (a constant 1 on tile 0 when omitted).
    numCorrect
        Optional one-element unsigned int / int tensor incremented by the correct count.
    lossType
        :class:`LossType`.
    prog
        Sequence to append to; a new one is made when omitted.
    modelOutputScaling
        Optional one-element tensor: the scaling of ``modelOutputs`` (62000 after a
        ``SOFTMAX_SCALED`` non-linearity); cross entropy only, 1 when omitted.

    Returns
    -------
    program.Sequence
        ``prog`` (or the new sequence) holding the loss compute sets.
    """
    fn = "calcLoss"
    prog = _check_graph_prog(graph, prog, fn)
    model, expected = _check_outputs_labels(graph, modelOutputs, expected, fn)
    if not isinstance(lossType, LossType):
        raise GraphError(f"{fn}: lossType {lossType!r} is not a LossType")
    typ = model.elementType()
    loss = _tensor(graph, loss, f"{fn}: loss")
    deltas = _tensor(graph, deltas, f"{fn}: deltas")
    for t, shape in ((loss, [model.dim(0)]), (deltas, model.shape())):
        if t.shape() != shape or t.elementType() != typ:
            raise TypeMismatchError(
                f"{fn}: '{t.name}' is {t.elementType().name} {t.shape()}; it must be "
                f"{typ.name} {shape} to match modelOutputs '{model.name}'"
            )
        element_tiles(graph, t, fn)
    cross = lossType is LossType.CROSS_ENTROPY_LOSS
    prefix = "LossCrossEntropy" if cross else "LossSumSquared"
    base = f"{debugName}/{prefix}" if debugName else prefix
    scales: dict[str, Tensor] = {}
    if cross:
        for what, given in (("deltasScale", deltasScale), ("modelOutputScaling",
                                                            modelOutputScaling)):  # fmt: skip
            if given is None:
                const = graph.addConstant(typ, [], 1.0, f"{base}/{what}")
                graph.setTileMapping(const, 0)
                scales[what] = const
            else:
                scales[what] = _scalar_arg(graph, given, typ, fn, what)
    elif deltasScale is not None:
        _scalar_arg(graph, deltasScale, typ, fn, "deltasScale")

    from poplar_api import popops  # the package: neq, cast and mul by name

    target = graph.getTarget()
    vw = target.getVectorWidth(typ)
    min_bytes = max(ATOMIC_STORE_GRANULARITY, target.getExchangeBytesPerCycle())
    if innermost_grouping(graph, model) * target.getTypeSize(typ) < min_bytes:
        one_hot = graph.addVariable(typ, model.shape(), f"{base}/OneHotEncoded")
        mapTensorLinearly(graph, one_hot, 0, vw)
    else:
        one_hot = cloneTensor(graph, model, f"{base}/OneHotEncoded")
    encodeOneHot(graph, expected, one_hot, prog, base)

    # onTileTransform
    cls = vx.loss_transform_vertex(typ, cross)
    cs = graph.addComputeSet(f"{base}/on_tile_transform")
    transformed = graph.addVariable(typ, model.shape(), f"{base}/Transformed")
    workers = target.getNumWorkerContexts()
    for tr in _tile_regions(graph, model, fn):
        split = split_regions(tr.sizes, vw, workers, _TRANSFORM_MIN_PER_VERTEX)
        for vertex in split:
            pos = np.concatenate([tr.regions[r][o : o + n] for r, o, n in vertex])
            d_view, t_view = deltas.elements(pos), transformed.elements(pos)
            graph.setTileMapping(d_view, tr.tile)
            graph.setTileMapping(t_view, tr.tile)
            conns = {
                "probs": model.elements(pos),
                "expected": one_hot.elements(pos),
                "deltas": d_view,
                "transformed": t_view,
                **scales,
            }
            graph.setTileMapping(graph.addVertex(cs, cls, conns), tr.tile)
    prog.add(_program.Execute(cs))

    # Masked labels: Poplibs does this for cross entropy with more than one label;
    # ipusim always (see the module docstring).
    label_type = expected.elementType()
    code = -1 if label_type == INT else MASKED_LABEL_CODE
    masked = graph.addConstant(label_type, [], code, f"{base}/maskedLabelCode")
    graph.setTileMapping(masked, 0)
    not_masked = popops.neq(graph, expected, masked, prog, f"{base}/maskNeq")
    mask_scale = popops.cast(graph, not_masked, typ, prog, f"{base}/maskCast")
    popops.mulInPlace(graph, deltas.transpose(), mask_scale, prog, f"{base}/maskDeltas")
    reduceWithOutput(
        graph, transformed, loss, [1], ReduceParams(Operation.ADD), prog, f"{base}/reduce_loss"
    )
    if not cross:
        popops.mulInPlace(graph, loss, mask_scale, prog, f"{base}/mask_loss")
    if numCorrect is not None:
        _accuracy(graph, model, expected, numCorrect, prog, debugName)
    return prog
