"""popops reductions: ``reduce`` and ``reduceWithOutput`` with a tile-aware plan.

The plan follows Poplibs' two-stage scheme:

* **Stage 1** runs on the tiles where the input lives. For every output element, the
  input elements it reduces are grouped by tile; each (output, tile) group becomes
  one partial, computed by a ``Reduce`` worker vertex on that tile. The groups of a
  tile are split over at most ``W`` vertices (one per worker context), balanced by
  element count.
* **Stage 2** exchanges the partials of every output that has inputs on more than one
  tile to the output's tile, where a final ``Reduce`` vertex combines them.

An output whose inputs all sit on one tile is finished in stage 1 (scale and update
applied there); when every output is like that, the reduction is a single compute set.
HALF inputs use FLOAT partials, as Poplibs does. A new output (``reduce``) maps an
output with a single source tile to that tile and the others linearly over the tiles
that hold input; ``reduceWithOutput`` keeps the mapping given.

Vertex names, specialisations and cycle estimates follow Poplibs
(``lib/popops/reduction/``, see :mod:`.reduce_estimators` and :func:`_specialisation`):
``ContinuousReduce`` (ALL_REGIONS_CONTINUOUS) when every output of a vertex has the
same number of partials, ``Reduce<…SCALAR_OUTPUT_SINGLE_INPUT>`` for a lone ADD output
that is not, ``Reduce<…SCALAR_OUTPUT_REGIONS>`` otherwise (and for MUL, LOGICAL_AND/OR).
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TensorIndexError, TypeMismatchError
from poplar_api.graph import OUTSIDE, ComputeSet, Graph, Segments
from poplar_api.graph_bulk import bulk_construction
from poplar_api.popops import reduce_plan as _rp
from poplar_api.popops.reduce_connect import Ctx
from poplar_api.popops.reduce_plan import accumulate_type, stable_order
from poplar_api.popops.reduce_vertices import (
    _ARITHMETIC_TYPES,
    _LOGICAL_OPS,
    _SCALABLE_OPS,
    Operation,
    _specialisation,
    reduce_vertex,
)
from poplar_api.poputil import mapTensorLinearly
from poplar_api.tensor import Tensor, concat
from poplar_api.types import BOOL, FLOAT, Type

__all__ = [
    "Operation",
    "ReduceParams",
    "SingleReduceOp",
    "allTrue",
    "reduce",
    "reduceMany",
    "reduceWithOutput",
]


class ReduceParams:
    """What a reduction computes: ``out (+)= scale * reduce_op(in)``.

    Parameters
    ----------
    op
        The :class:`Operation`.
    update
        Add the result to the existing output values instead of overwriting them
        (ADD and SQUARE_ADD only, as in Poplibs).
    scale
        Multiplies the result (ADD and SQUARE_ADD only, floating-point outputs).
    """

    def __init__(self, op: Operation = Operation.ADD, update: bool = False, scale: float = 1.0):
        if not isinstance(op, Operation):
            raise GraphError(
                f"ReduceParams: op {op!r} is not a popops Operation; hint: use "
                f"Operation.ADD, MUL, MAX, MIN, SQUARE_ADD, LOGICAL_AND or LOGICAL_OR"
            )
        if not isinstance(update, bool | np.bool_):
            raise GraphError(
                f"ReduceParams: update must be True or False, got {update!r}; hint: pass "
                f"the scale by keyword, ReduceParams(op, scale={update!r})"
            )
        if isinstance(scale, bool) or not isinstance(scale, int | float | np.number):
            raise GraphError(f"ReduceParams: scale must be a number, got {scale!r}")
        if (bool(update) or float(scale) != 1.0) and op not in _SCALABLE_OPS:
            raise GraphError(
                f"ReduceParams: update={update} scale={scale} with {op.name}; update and "
                f"scale are only supported with ADD and SQUARE_ADD"
            )
        self.op = op
        self.update = bool(update)
        self.scale = float(scale)

    def __repr__(self) -> str:
        return f"ReduceParams({self.op.name}, update={self.update}, scale={self.scale})"


# --------------------------------------------------------------------------- planning


def _check_args(graph: Any, t: Any, dims: Any, params: Any, prog: Any) -> tuple:
    if not isinstance(graph, Graph):
        raise GraphError(f"reduce: graph must be a poplar_api Graph, got {type(graph).__name__}")
    if not graph.owns(t):
        raise GraphError(
            f"reduce: input must be a Tensor of this graph, got {type(t).__name__} {t!r}"
        )
    if isinstance(params, Operation):
        params = ReduceParams(params)
    if not isinstance(params, ReduceParams):
        raise GraphError(f"reduce: params must be ReduceParams or an Operation, got {params!r}")
    if not isinstance(prog, _program.Sequence) and not _is_css(prog):
        raise GraphError(
            f"reduce: prog must be a program.Sequence to add the compute sets to, or a "
            f"list of ComputeSets to add the stages' vertices to, got {type(prog).__name__}"
        )
    if isinstance(dims, int | np.integer):
        dims = [dims]
    try:
        dim_list = [int(d) for d in dims]
    except TypeError:
        raise GraphError(f"reduce: dims {dims!r} must be a list of ints") from None
    rank = t.rank()
    for d in dim_list:
        if not 0 <= d < rank:
            raise TensorIndexError(
                f"reduce of tensor '{t.name}' (shape {t.shape()}): dimension {d} is out of "
                f"range; valid dimensions are 0..{rank - 1}"
            )
    if len(set(dim_list)) != len(dim_list):
        raise GraphError(f"reduce of tensor '{t.name}': dims {dim_list} repeat a dimension")
    in_type = t.elementType()
    logical = params.op in _LOGICAL_OPS
    allowed = (BOOL,) if logical else _ARITHMETIC_TYPES
    if in_type not in allowed:
        names = ", ".join(a.name for a in allowed)
        raise TypeMismatchError(
            f"reduce of tensor '{t.name}': {params.op.name} does not support element type "
            f"{in_type.name}; supported: {names}; hint: cast the tensor first"
        )
    if params.scale != 1.0 and not in_type.is_floating:
        raise TypeMismatchError(
            f"reduce of tensor '{t.name}': scale {params.scale} needs a float or half "
            f"tensor, got {in_type.name}"
        )
    return params, dim_list


def _is_css(x: Any) -> bool:
    return isinstance(x, list) and all(isinstance(c, ComputeSet) for c in x)


@bulk_construction
def _run(
    graph: Graph,
    t: Tensor,
    dims: list[int],
    params: ReduceParams,
    prog: Any,
    debugName: str,
    out: Tensor | None,
) -> Tensor:
    """Plan into ``prog``'s list of compute sets, or into new ones appended to the
    Sequence ``prog`` as Executes (``convertCssToProg``)."""
    if _is_css(prog):
        return _plan(graph, t, dims, params, _Stages(graph, prog), debugName, out)
    stages = _Stages(graph, [])
    result = _plan(graph, t, dims, params, stages, debugName, out)
    for cs in stages.css:
        prog.add(_program.Execute(cs))
    return result


def _split_chunks(sizes: list[int], parts: int) -> list[tuple[int, int]]:
    """Split items with element counts ``sizes`` into <= ``parts`` contiguous chunks.

    Plain Python: it runs once per tile of every reduction stage, on a handful of
    items, where numpy's per-call overhead dominates."""
    n = len(sizes)
    if n <= parts:
        return [(i, i + 1) for i in range(n)]
    cum = list(itertools.accumulate(sizes))
    total = cum[-1]
    if total == 0:
        bounds = np.linspace(0, n, parts + 1).astype(np.int64).tolist()
    else:
        cuts = (bisect.bisect_left(cum, total * i / parts) + 1 for i in range(1, parts))
        bounds = [0, *(min(max(c, 1), n - 1) for c in cuts), n]
    # bounds ascend, so dropping empty pairs leaves the chunks of the distinct bounds
    return [(a, b) for a, b in itertools.pairwise(bounds) if b > a]


class _Stages:
    """The compute sets of a reduction's stages (``ComputeSetList``,
    ``lib/popops/reduction/ComputeSetList.cpp``): stage ``i`` uses ``css[i]``,
    adding it when the list is shorter, so reductions given one list share their
    stages' compute sets."""

    def __init__(self, graph: Graph, css: list[ComputeSet]) -> None:
        self.graph = graph
        self.css = css
        self.pos = 0

    def next(self, name: str) -> ComputeSet:
        if self.pos == len(self.css):
            self.css.append(self.graph.addComputeSet(name))
        cs = self.css[self.pos]
        self.pos += 1
        return cs


class _Builder:
    """Adds one stage's vertices. Items are (tile, partials, output): the partials of
    item ``i`` are flat positions ``partial_pos[i]`` of the stage's source view, its
    output is flat position ``out_pos[i]`` of the output view."""

    def __init__(self, graph: Graph, cs: ComputeSet) -> None:
        self.graph = graph
        self.cs = cs
        self.workers = graph.getTarget().getNumWorkerContexts()
        self.count = 0

    def add(
        self,
        *,
        op: Operation,
        partials_type: Type,
        out_type: Type,
        update: bool,
        scale: float,
        tiles: np.ndarray,
        source: Tensor,
        partial_pos: list[np.ndarray],
        out: Tensor,
        out_pos: np.ndarray,
    ) -> None:
        if tiles.size == 0:
            return
        scaled = scale != 1.0
        order = stable_order(np.asarray(tiles, np.int64))
        tiles_sorted = tiles[order]
        uniq, starts = np.unique(tiles_sorted, return_index=True)
        ends = np.append(starts[1:], tiles_sorted.size)
        lengths_all = np.fromiter((a.size for a in partial_pos), np.int64, len(partial_pos))
        out_ids = out.flat_index()[out_pos].tolist()
        lengths_list = lengths_all.tolist()
        order_list = order.tolist()
        planned: list[tuple[int, int, type, np.ndarray]] = []  # (tile, tile index, class, items)
        for at, (tile, s, e) in enumerate(
            zip(uniq.tolist(), starts.tolist(), ends.tolist(), strict=True)
        ):
            items = order[s:e]
            item_list = order_list[s:e]
            sizes = [lengths_list[i] for i in item_list]
            for a, b in _split_chunks(sizes, self.workers):
                chunk = items[a:b]
                chunk_ids = [out_ids[i] for i in item_list[a:b]]
                spec = _specialisation(op, sizes[a:b], chunk_ids, update, scaled)
                vclass = reduce_vertex(op, partials_type, out_type, update, scaled, spec)
                planned.append((tile, at, vclass, chunk))
        const = None
        if scaled:
            const = self.graph.addConstant(FLOAT, [uniq.size], scale, f"{self.cs.name}/scale")
            self.graph.mapElements(const, uniq)
        if not planned:
            return
        chunks = [v[3] for v in planned]
        items = np.concatenate(chunks)
        vectors = np.fromiter((c.size for c in chunks), np.int64, len(chunks))
        positions = [partial_pos[i] for i in items.tolist()]
        flat = np.concatenate(positions) if positions else np.zeros(0, np.int64)
        conns: dict[str, Any] = {
            "partials": Segments(source.elements(flat), lengths_all[items], vectors),
            "out": Segments(out.elements(out_pos[items]), vectors),
        }
        if const is not None:
            conns["k"] = const.elements(np.fromiter((v[1] for v in planned), np.int64))
        tiles_of = np.fromiter((v[0] for v in planned), np.int64, len(planned))
        # the specialisations of one reduction share their fields: one call adds all
        self.graph.addVertices(self.cs, [v[2] for v in planned], tiles_of, conns)
        self.count += len(planned)


def _plan(
    graph: Graph,
    t: Tensor,
    dims: list[int],
    params: ReduceParams,
    stages: _Stages,
    debugName: str,
    out: Tensor | None,
) -> Tensor:
    in_type = t.elementType()
    rank = t.rank()
    kept = [d for d in range(rank) if d not in dims]
    out_shape = [t.dim(d) for d in kept]
    n_out = int(math.prod(out_shape))
    n_red = int(math.prod([t.dim(d) for d in dims]))
    flat_in = t.flatten()
    pos = np.transpose(np.arange(t.numElements(), dtype=np.int64).reshape(t.shape()), kept + dims)
    pos = pos.reshape(n_out, n_red)
    # tiles[pos], as one strided copy of the tiles laid out as pos is (no gather)
    tiles = graph.elementTiles(t, readonly=True).reshape(t.shape()).transpose(kept + dims)
    tiles = tiles.reshape(n_out, n_red)
    if (tiles < 0).any():
        bad = np.argwhere(tiles < 0)[0]
        why = (
            "elements mapped to tiles outside this virtual graph"
            if tiles[bad[0], bad[1]] == OUTSIDE
            else "unmapped elements"
        )
        raise GraphError(
            f"reduce{'/' + debugName if debugName else ''}: input tensor '{t.name}' has "
            f"{why} (first at output {int(bad[0])}, reduced position {int(bad[1])}); hint: "
            "map the input to this graph's tiles with graph.setTileMapping first"
        )
    name = debugName or "reduce"
    if out is not None:
        if not graph.owns(out):
            raise GraphError(f"reduceWithOutput: out must be a Tensor of this graph, got {out!r}")
        if out.elementType() != in_type:
            raise TypeMismatchError(
                f"reduceWithOutput: output '{out.name}' is {out.elementType().name} but the "
                f"input '{t.name}' is {in_type.name}; they must match"
            )
        if out.shape() != out_shape:
            raise GraphError(
                f"reduceWithOutput: output '{out.name}' has shape {out.shape()} but reducing "
                f"'{t.name}' (shape {t.shape()}) over dims {dims} gives shape {out_shape}"
            )
        out_tiles = graph.elementTiles(out)
        if (out_tiles < 0).any():
            raise GraphError(
                f"reduceWithOutput: output '{out.name}' has unmapped elements or elements "
                f"outside this graph's tiles (first: {int(np.flatnonzero(out_tiles < 0)[0])}); "
                "hint: map it or use reduce()"
            )
    else:
        out = graph.addVariable(in_type, out_shape, f"{name}/out")
        out_tiles = None
    flat_out = out.flatten()
    if n_out == 0:
        return out

    if n_red == 0:
        _empty_reduction(graph, stages, name, params, in_type, flat_in, flat_out, out_tiles)
        return out
    _plan_stages(graph, t, pos, tiles, params, stages, name, flat_out, out_tiles, out_shape)
    return out


def _empty_reduction(graph, stages, name, params, in_type, flat_in, flat_out, out_tiles):
    """Outputs with nothing to reduce: one vertex per tile writes the identity."""
    n_out = flat_out.numElements()
    if out_tiles is None:
        mapTensorLinearly(graph, flat_out)
        out_tiles = graph.elementTiles(flat_out)
    stage1 = _Builder(graph, stages.next(f"{name}/Reduce/Stage1"))
    empty = np.zeros(0, np.int64)
    stage1.add(
        op=params.op,
        partials_type=in_type,
        out_type=in_type,
        update=params.update,
        scale=params.scale,
        tiles=out_tiles,
        source=flat_in,
        partial_pos=[empty] * n_out,
        out=flat_out,
        out_pos=np.arange(n_out, dtype=np.int64),
    )


def _tiles_per_output(tiles: np.ndarray) -> tuple[bool, bool]:
    """Of ``tiles`` ``[outputs, reduced]``: whether every output's inputs are on one
    tile, and whether some output has two inputs on one tile. An output of more inputs
    than the tile numbers span has (pigeonhole), else the rows are sorted."""
    if tiles.size:
        if bool((tiles == tiles[:, :1]).all()):
            return True, tiles.shape[1] > 1
        if int(tiles.max()) - int(tiles.min()) + 1 < tiles.shape[1]:
            return False, True
    distinct = 1 + (np.diff(np.sort(tiles, axis=1), axis=1) != 0).sum(axis=1)
    return int(distinct.max()) == 1, bool((distinct < tiles.shape[1]).any())


def _plan_stages(graph, t, pos, tiles, params, stages, name, flat_out, out_tiles, out_shape):
    """Poplibs' stages (:mod:`.reduce_plan`): ``pos``/``tiles`` are ``[outputs, reduced]``."""
    target = graph.getTarget()
    in_type = t.elementType()
    flat_in = t.flatten()
    n_out = pos.shape[0]
    acc = accumulate_type(in_type, params.op)
    workers = target.getNumWorkerContexts()
    num_tiles = target.getNumTiles()
    one_tile, repeats = _tiles_per_output(tiles)
    base = {"workers": workers, "scale": params.scale}
    if one_tile:
        if out_tiles is None:
            graph.mapElements(flat_out, tiles[:, 0])
        ctx = Ctx(params.op, params.update, params.scale != 1.0, in_type, acc, in_type,
                  True, True, **base)  # fmt: skip
        _rp.on_tile_stage(graph, stages, f"{name}/ReduceOnTile", flat_in, pos, tiles,
                          num_tiles, ctx, flat_out, np.arange(n_out, dtype=np.int64))  # fmt: skip
        return
    op = params.op
    if repeats:
        ctx = Ctx(op, False, False, in_type, acc, acc, True, True, **base)
        ip = _rp.on_tile_stage(graph, stages, f"{name}/ReduceOnTile", flat_in, pos, tiles,
                               num_tiles, ctx, None, None)  # fmt: skip
        if op is Operation.SQUARE_ADD:
            op = Operation.ADD
    else:
        col = np.repeat(np.arange(n_out, dtype=np.int64), pos.shape[1])
        ip = _rp.Partials(flat_in, col, tiles.reshape(-1), pos.reshape(-1), in_type)
    if out_tiles is None:
        vw = target.getVectorWidth(ip.type)
        mapTensorLinearly(graph, flat_out, 4 * vw, vw)
        out_tiles = graph.elementTiles(flat_out)
    stage = 0
    while _rp.next_step(ip, n_out, target.getTilesPerIPU()) == "intermediate":
        first = _rp.start_tile(t.shape(), out_shape, params.op, params.update,
                               params.scale != 1.0, stage, 0, num_tiles)  # fmt: skip
        ctx = Ctx(op, False, False, ip.type, ip.type, acc, False, False, **base)
        ip = _rp.intermediate_stage(graph, stages, f"{name}/ReduceStage{stage}", ip, n_out,
                                    ctx, first)  # fmt: skip
        if op is Operation.SQUARE_ADD:
            op = Operation.ADD
        stage += 1
    ctx = Ctx(op, params.update, params.scale != 1.0, ip.type, ip.type, in_type, False, True,
              **base)  # fmt: skip
    _rp.output_stage(graph, stages, f"{name}/ReduceFinalStage", ip, n_out, ctx, flat_out,
                     out_tiles)  # fmt: skip


def reduce(
    graph: Graph,
    t: Tensor,
    dims: Sequence[int],
    params: ReduceParams | Operation,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """Reduce ``t`` over ``dims``; return a new tensor with the remaining dimensions.

    Parameters
    ----------
    graph
        The graph to add the vertices and the output to.
    t
        Input tensor (FLOAT, HALF, INT, UNSIGNED_INT; BOOL for the logical ops).
    dims
        Dimensions to reduce (distinct, each in ``0..rank-1``); the others remain, in order.
    params
        :class:`ReduceParams` or an :class:`Operation`.
    prog
        Sequence the compute sets are added to; or a list of ComputeSets (Poplibs'
        ``std::vector<ComputeSet> &css`` overload): stage ``i`` adds its vertices to
        ``prog[i]``, appending a new compute set when the list is shorter, and nothing
        is added to a program (the caller executes the compute sets).
    debugName
        Prefix of the compute-set and variable names.

    Raises
    ------
    TensorIndexError
        A dimension is out of range.
    TypeMismatchError
        The element type is not supported by the operation.
    GraphError
        Repeated dimensions, unmapped input, bad params or program.
    """
    params, dim_list = _check_args(graph, t, dims, params, prog)
    if params.update:
        raise GraphError(
            "reduce: update=True needs an existing output to add to; hint: use "
            "reduceWithOutput(graph, t, out, dims, params, prog)"
        )
    return _run(graph, t, dim_list, params, prog, debugName, None)


def reduceWithOutput(
    graph: Graph,
    t: Tensor,
    out: Tensor,
    dims: Sequence[int],
    params: ReduceParams | Operation,
    prog: _program.Sequence,
    debugName: str = "",
) -> None:
    """As :func:`reduce`, writing (or with ``update``, adding) into the mapped tensor ``out``.

    ``out`` must have the element type of ``t`` and the shape of the remaining
    dimensions; its tile mapping decides where stage 2 runs. ``prog`` may be a list
    of ComputeSets, as for :func:`reduce`.
    """
    params, dim_list = _check_args(graph, t, dims, params, prog)
    _run(graph, t, dim_list, params, prog, debugName, out)


class SingleReduceOp:
    """One reduction of :func:`reduceMany` (``popops::SingleReduceOp``).

    Parameters
    ----------
    in_
        The input tensor.
    dims
        Dimensions to reduce.
    params
        :class:`ReduceParams` or an :class:`Operation`.
    useOutType
        The output element type when ``reduceMany`` creates the outputs; None (the
        default) uses ``in_``'s type. ipusim reductions keep the input type, so any
        other type is rejected by ``reduceMany``.
    debugName
        Name prefix of this reduction's compute sets and variables.
    """

    def __init__(
        self,
        in_: Tensor,
        dims: Sequence[int],
        params: ReduceParams | Operation,
        useOutType: Type | None = None,
        debugName: str = "",
    ) -> None:
        if not isinstance(in_, Tensor):
            raise GraphError(
                f"SingleReduceOp: in_ must be a Tensor, got {type(in_).__name__} {in_!r}"
            )
        if useOutType is not None and not isinstance(useOutType, Type):
            raise GraphError(
                f"SingleReduceOp: useOutType must be a poplar_api Type or None, got {useOutType!r}"
            )
        self.in_ = in_
        self.dims = dims
        self.params = params
        self.useOutType = useOutType
        self.debugName = debugName

    def __repr__(self) -> str:
        return (
            f"SingleReduceOp('{self.in_.name}' {self.in_.shape()}, dims={list(self.dims)}, "
            f"{self.params!r})"
        )


def _mangle_to_2d(t: Tensor, dims: list[int]) -> Tensor:
    """``mangleTo2D``: reduced dimensions first, then the kept ones, as
    ``[reduced elements, outputs]``."""
    kept = [d for d in range(t.rank()) if d not in dims]
    n_red = int(math.prod([t.dim(d) for d in dims]))
    n_out = int(math.prod([t.dim(d) for d in kept]))
    return t.dimShuffle(dims + kept).reshape([n_red, n_out])


def reduceMany(
    graph: Graph,
    reductions: Sequence[SingleReduceOp],
    outputs: list[Tensor],
    prog: _program.Sequence,
    debugName: str = "",
) -> list[Tensor]:
    """Perform many reductions at once, sharing compute sets (``popops::reduceMany``).

    As ``lib/popops/reduction/Reduction.cpp`` ``reduceMany``: when ``outputs`` is empty
    the outputs are created (``reduce``'s output shape, mapped linearly) and appended
    to it; update reductions then raise. Each reduction is viewed as a 2-D problem
    (reduced elements x outputs, ``mangleTo2D``); reductions with the same input
    type, number of reduced elements, operation, update flag and scale are merged
    by concatenating their inputs and outputs. Every merged reduction then adds its
    stage ``i`` vertices to the shared compute set ``i`` (one ``ComputeSetList``), so
    all stage-1 work runs in one compute set, all stage-2 work in the next. Values
    equal ``reduce`` of each reduction.

    Returns
    -------
    list of Tensor
        ``outputs`` (filled in when it was empty).

    Raises
    ------
    GraphError
        ``outputs`` is neither empty nor one tensor per reduction; a reduction is not
        a :class:`SingleReduceOp`; update without outputs; an output type other than
        the input's.
    """
    if not isinstance(graph, Graph):
        raise GraphError(
            f"reduceMany: graph must be a poplar_api Graph, got {type(graph).__name__}"
        )
    if not isinstance(outputs, list):
        raise GraphError(
            f"reduceMany: outputs must be a list (empty to have the outputs created), got "
            f"{type(outputs).__name__}"
        )
    if not isinstance(prog, _program.Sequence):
        raise GraphError(f"reduceMany: prog must be a program.Sequence, got {type(prog).__name__}")
    reductions = list(reductions)
    for i, r in enumerate(reductions):
        if not isinstance(r, SingleReduceOp):
            raise GraphError(
                f"reduceMany: reductions[{i}] is {type(r).__name__}, not a SingleReduceOp; "
                f"hint: SingleReduceOp(t, dims, params)"
            )
    create = not outputs
    if not create and len(outputs) != len(reductions):
        raise GraphError(
            f"reduceMany: {len(outputs)} outputs for {len(reductions)} reductions; outputs "
            f"must be empty or hold one tensor per reduction"
        )
    checked = []
    for i, r in enumerate(reductions):
        params, dims = _check_args(graph, r.in_, r.dims, r.params, prog)
        in_type = r.in_.elementType()
        if r.useOutType is not None and r.useOutType != in_type:
            raise GraphError(
                f"reduceMany: reductions[{i}] asks for output type {r.useOutType.name} "
                f"from a {in_type.name} input; ipusim reductions keep the input type; "
                f"hint: cast the input or the result"
            )
        if create and params.update:
            raise GraphError(
                f"reduceMany: reductions[{i}] has update=True but no outputs were given; "
                f"hint: pass the tensors to update in outputs"
            )
        checked.append((params, dims))
    if create:
        for r, (_, dims) in zip(reductions, checked, strict=True):
            shape = [r.in_.dim(d) for d in range(r.in_.rank()) if d not in dims]
            out = graph.addVariable(
                r.in_.elementType(), shape, f"{debugName or 'reduceMany'}/output"
            )
            mapTensorLinearly(graph, out)
            outputs.append(out)
    else:
        for i, (r, (_, dims)) in enumerate(zip(reductions, checked, strict=True)):
            shape = [r.in_.dim(d) for d in range(r.in_.rank()) if d not in dims]
            o = outputs[i]
            if not graph.owns(o):
                raise GraphError(f"reduceMany: outputs[{i}] must be a Tensor of this graph")
            if o.shape() != shape or o.elementType() != r.in_.elementType():
                raise GraphError(
                    f"reduceMany: outputs[{i}] '{o.name}' is {o.elementType().name} "
                    f"{o.shape()}; reductions[{i}] gives {r.in_.elementType().name} {shape}"
                )
    # mangleTo2D, then merge neighbours with equal keys after a stable sort.
    items = []
    for i, (r, (params, dims)) in enumerate(zip(reductions, checked, strict=True)):
        edge = 0 in r.in_.shape()
        key = (
            edge,
            r.in_.elementType().name,
            params.op.name,
            params.update,
            params.scale,
        )
        if edge:
            items.append(((*key, i), r.in_, dims, outputs[i], params, r.debugName))
            continue
        flat = _mangle_to_2d(r.in_, dims)
        items.append(((*key, flat.dim(0)), flat, [0], outputs[i].flatten(), params, r.debugName))
    items.sort(key=lambda it: it[0])
    groups: list[list] = []
    for it in items:
        if groups and groups[-1][0][0] == it[0] and not it[0][0]:
            groups[-1].append(it)
        else:
            groups.append([it])
    stages = _Stages(graph, [])
    for n, group in enumerate(groups):
        _, _, dims, _, params, name = group[0]
        ins = [g[1] for g in group]
        outs = [g[3] for g in group]
        t = ins[0] if len(ins) == 1 else concat(ins, 1)
        out = outs[0] if len(outs) == 1 else concat(outs)
        stages.pos = 0
        label = name or f"{debugName + '/' if debugName else ''}reduction-{n}"
        _plan(graph, t, dims, params, stages, label, out)
    for cs in stages.css:
        prog.add(_program.Execute(cs))
    return outputs


def allTrue(graph: Graph, A: Tensor, prog: _program.Sequence, debugName: str = "") -> Tensor:
    """A BOOL scalar: whether every element of the BOOL tensor ``A`` is true.

    As ``lib/popops/AllTrue.cpp``: a LOGICAL_AND :func:`reduce` of ``A`` flattened
    over dimension 0 (``Reduce`` vertices, one or two stages).

    Raises
    ------
    TypeMismatchError
        ``A`` is not BOOL.
    """
    if not isinstance(graph, Graph):
        raise GraphError(f"allTrue: graph must be a poplar_api Graph, got {type(graph).__name__}")
    if not isinstance(A, Tensor):
        raise GraphError(f"allTrue: A must be a Tensor, got {type(A).__name__} {A!r}")
    if A.elementType() != BOOL:
        raise TypeMismatchError(
            f"allTrue: A '{A.name}' is {A.elementType().name}; allTrue only takes BOOL "
            f"tensors; hint: make one with e.g. popops.neq(graph, A, 0, prog)"
        )
    return reduce(graph, A.flatten(), [0], Operation.LOGICAL_AND, prog, debugName or "allTrue")
