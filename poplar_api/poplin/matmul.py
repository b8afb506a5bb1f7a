"""Matrix multiplication on the tiles: ``matMul``, ``matMulGrouped``, ``matMulAcc`` and
the ``createMatMulInput*`` layout helpers.

As in Poplibs (``lib/poplin/MatMul.cpp``), a product ``[G, M, K] x [G, K, N]`` is a
convolution: conv groups ``G``, batch 1, a 1-D field of ``M`` positions, a 1-wide
kernel, ``K`` input and ``N`` output channels. It is planned and lowered by
:mod:`poplar_api.poplin.conv`, so profiles show the Poplibs vertices
(``ConvPartial1x1Out`` where the AMP applies) and, when ``K`` is split over tiles,
``ReduceAdd``. Operands are read where they live, except where Poplibs first copies one
into the plan's layout (:mod:`.conv_rearrange`: weight-update passes, operands broadcast
to more than 7 tiles, an ungrouped innermost dimension) and Poplar does not elide that
copy (an operand already laid out as the copy's destination, with no padding, is read
where it lies); the engine exchanges what a tile lacks. ``fullyConnectedPass`` becomes
the convolution's ``pass``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.graph_bulk import bulk_construction
from poplar_api.poplin import conv as _conv
from poplar_api.poplin.conv_params import CONV_TYPES as MATMUL_TYPES
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import (
    OUTER_PRODUCT,
    ConvPlan,
    bound_step,
    memory_limit,
    parse_options,
)
from poplar_api.poplin.conv_rearrange import (
    input_layout,
    operand_rearrangements,
    pads_operand,
    rearranged,
    weights_layout,
)
from poplar_api.poplin.conv_serial import PLAN_CACHE, plan_cache_key
from poplar_api.poplin.fc_joint import (
    FC_TRAINING,
    JointPlan,
    fwd_layer,
    pass_product,
    plan_joint,
    separate_wins,
)
from poplar_api.poplin.fc_transpose import group_sizes, weight_transpose
from poplar_api.poplin.outer_product import outer_product_conv
from poplar_api.poplin.poplibs_plans import adopted_plan
from poplar_api.poplin.poplibs_release import poplibs_release
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, Type


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


#: matMul option names (Poplibs' ``MatMulOptions``); those a convolution has are passed on.
_MATMUL_OPTIONS = {
    "availableMemoryProportion", "partialsType", "fullyConnectedPass", "planConstraints",
    "use128BitConvUnitLoad", "enableMultiStageReduce", "enableFastReduce",
    "remapOutputTensor", "gatherOutput", "inputRHSIsPreArranged", "disableSRForAMPVertices",
}  # fmt: skip
_PASSED_ON = {
    "availableMemoryProportion", "partialsType", "planConstraints", "use128BitConvUnitLoad",
    "enableMultiStageReduce", "enableFastReduce", "remapOutputTensor",
    "disableSRForAMPVertices",
}  # fmt: skip


#: ``fullyConnectedPass`` -> the convolution's ``pass`` (Poplibs' ``getConvOptionFlags``
#: in ``MatMul.cpp``).
_FC_PASSES = {
    "NONE": "NONE_MATMUL", "INFERENCE_FWD": "FC_INFERENCE_FWD", "TRAINING_FWD": "FC_TRAINING_FWD",
    "TRAINING_BWD": "FC_TRAINING_BWD", "TRAINING_WU": "FC_TRAINING_WU",
}  # fmt: skip


def _conv_options(options: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    """The convolution options (as strings) that matMul ``options`` become: ``pass`` is
    ``fullyConnectedPass``'s, ``NONE_MATMUL`` for a plain product (``getConvOptionFlags``
    in Poplibs' ``MatMul.cpp``)."""
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise GraphError(f"{what} options must be a mapping of str to str, got {options!r}")
    unknown = sorted(set(map(str, options)) - _MATMUL_OPTIONS)
    if unknown:
        raise GraphError(
            f"{what} options {unknown} are not recognised; known options: {sorted(_MATMUL_OPTIONS)}"
        )
    conv = {str(k): str(v) for k, v in options.items() if str(k) in _PASSED_ON}
    fc = str(options.get("fullyConnectedPass", "NONE"))
    if fc not in _FC_PASSES:
        raise GraphError(
            f"{what}: option fullyConnectedPass={fc!r}; required one of {sorted(_FC_PASSES)}"
        )
    conv["pass"] = _FC_PASSES[fc]
    return conv


def _form_options(conv: Mapping[str, str], swap: bool) -> dict[str, str]:
    """``conv`` with the ``planConstraints`` transform ``swapOperands`` set to ``swap``:
    the options of one operand order, under which its convolution is planned, laid out
    and lowered (one plan-cache entry per order)."""
    data = json.loads(conv.get("planConstraints") or "{}")
    level = data if isinstance(data.get("transform"), dict) else data.setdefault("0", {})
    level.setdefault("transform", {})["swapOperands"] = swap
    return {**conv, "planConstraints": json.dumps(data, sort_keys=True)}


def _options(options: Mapping[str, Any] | None, what: str = "matMul") -> dict[str, Any]:
    """Checked matMul options, as the convolution options they become."""
    return parse_options(_conv_options(options, what), what)


def _params(shape: tuple[int, int, int, int], in_type: Type, out_type: Type) -> ConvParams:
    """The convolution of a ``(G, M, K, N)`` product (Poplibs' matmul-as-conv mapping)."""
    g, m, k, n = (int(x) for x in shape)
    return ConvParams(in_type, 1, [m], [1], k, n, g, outputType=out_type)


#: A product ``(G, M, K, N)`` or a fully-connected layer ``(G, B, I, O)``; convolution
#: options as strings; a product's convolution, plan and the options it runs with.
_Dims = tuple[int, int, int, int]
_Opts = Mapping[str, str]
_Planned = tuple[ConvParams, ConvPlan, dict[str, str]]


def _swap_candidates(opts: Mapping[str, Any]) -> tuple[bool, ...]:
    """Whether to plan the swapped product, in the order Poplibs tries them.

    Poplibs' ``getSwapOperandCandidates`` (``lib/poplin/ConvPlan.cpp`` at graphcore/poplibs
    ``7eac0f26``) tries swapped operands first for ``NONE_MATMUL`` and the
    fully-connected passes, so for every matMul. A ``planConstraints``
    ``transform.swapOperands`` leaves the one it names."""
    forced = opts.get("swap")
    return (True, False) if forced is None else (bool(forced),)


def _plan_alone(
    graph: Graph, dims: _Dims, in_type: Type, out_type: Type, conv: _Opts, what: str
) -> _Planned:
    """The product planned on its own (not as a pass of a joint fully-connected plan).

    Poplibs' ``createPlan`` searches the product (batch ``M``, ``N`` output channels) and
    its swapped form (``swapOperands``: batch ``N``, ``M`` output channels, i.e. ``B^T
    A^T``), swapped first, and a later candidate replaces the best only at a strictly
    lower ``(cycles, temporary bytes)`` (``PlanningObjective::lowerCost``), so a tie
    keeps the swapped plan. Both are planned here with ipusim's cost model (which charges
    the operand and output rearrangements as Poplibs does:
    :func:`~poplar_api.poplin.conv_transform.transform_estimates`) and compared at the
    first memory bound of ``runPlanner`` that either meets
    (:func:`~poplar_api.poplin.conv_planner.bound_step`).
    """
    g, m, k, n = dims
    target = graph.getTarget()
    adopted = _adopted(graph, dims, in_type, out_type, conv, what)
    if adopted is not None:
        return adopted
    limit = memory_limit(target, conv)
    best: tuple[tuple[int, int, int], ConvParams, ConvPlan, dict[str, str]] | None = None
    for swap in _swap_candidates(parse_options(conv, what)):
        form = _form_options(conv, swap)
        params = _params((g, n, k, m) if swap else dims, in_type, out_type)
        plan = _conv._plan(graph, params, parse_options(form, what))
        key = (
            bound_step(plan.memory_bytes, limit, target.getBytesPerTile()),
            int(plan.cost["total"]),
            int(plan.memory_bytes),
        )
        if best is None or key < best[0]:
            best = (key, params, plan, form)
    assert best is not None
    return best[1], best[2], best[3]


#: Name of the graph's library cache of the products Poplibs' plan is taken for.
POPLIBS_PLANS_CACHE = "poplin.poplibs_plans"


def _adopted(
    graph: Graph, dims: _Dims, in_type: Type, out_type: Type, conv: _Opts, what: str
) -> _Planned | None:
    """Poplibs' plan of the product planned alone where ipusim takes it
    (:func:`~poplar_api.poplin.poplibs_plans.adopted_plan`), put in the plan cache under
    its operand order's options so that the lowering runs it; None where ipusim plans the
    product itself. Cached per graph."""
    target = graph.getTarget()
    key = (target.getNumTiles(), poplibs_release(target), dims, in_type.name, out_type.name,
           tuple(sorted(conv.items())))  # fmt: skip
    cache = graph.libraryCache(POPLIBS_PLANS_CACHE)
    if key not in cache:
        found = adopted_plan(dims, in_type, out_type, parse_options(conv, what), target)
        if found is not None:
            params, plan = found
            form = _form_options(conv, plan.swapped)
            plan_key = plan_cache_key(target, params, parse_options(form, what))
            graph.libraryCache(PLAN_CACHE)[plan_key] = plan
            found = (params, plan, form)
        cache[key] = found
    return cache[key]


#: Name of the graph's library cache of fully-connected layers' plans.
FC_LAYER_CACHE = "poplin.fc.layers"


def _separate_cost(
    graph: Graph, layer: _Dims, in_type: Type, out_type: Type, conv: _Opts, what: str
) -> tuple[int, int]:
    """``(summed cycles, largest temporary bytes)`` of the fully-connected layer's three
    training passes each planned alone (Poplibs' separate plans)."""
    alone = [
        _plan_alone(graph, pass_product(p, layer), in_type, out_type, {**conv, "pass": p}, what)[1]
        for p in FC_TRAINING
    ]
    return sum(int(q.cost["total"]) for q in alone), max(q.memory_bytes for q in alone)


def _fc_layer(
    graph: Graph, layer: _Dims, in_type: Type, out_type: Type, conv: _Opts, what: str
) -> JointPlan | None:
    """The joint plan of the fully-connected layer ``(G, B, I, O)``, or None when Poplibs
    plans its passes separately (:func:`~poplar_api.poplin.fc_joint.separate_wins`
    against the three passes planned alone); cached per graph."""
    target = graph.getTarget()
    rest = tuple(sorted((k, v) for k, v in conv.items() if k != "pass"))
    key = (target.getNumTiles(), poplibs_release(target), layer, in_type.name, out_type.name,
           rest)  # fmt: skip
    cache = graph.libraryCache(FC_LAYER_CACHE)
    if key not in cache:
        fwd = {**conv, "pass": "FC_TRAINING_FWD"}
        joint = plan_joint(layer, in_type, out_type, parse_options(fwd, what), target)
        if joint is not None:
            cycles, memory = _separate_cost(graph, layer, in_type, out_type, conv, what)
            if separate_wins(joint, cycles, memory, memory_limit(target, conv)):
                joint = None
        cache[key] = joint
    return cache[key]


def _plan_product(
    graph: Graph, dims: _Dims, in_type: Type, out_type: Type, conv: _Opts, what: str
) -> _Planned:
    """The convolution ``matMul`` runs for a ``(G, M, K, N)`` product, its plan and the
    convolution options (strings) it is planned, laid out and lowered with.

    A fully-connected training pass gets its pass of the layer's joint plan when Poplibs
    would plan the layer jointly (:mod:`~poplar_api.poplin.fc_joint`; always swapped),
    other products and passes are planned alone (:func:`_plan_alone`). A swapped plan
    has ``swapped`` set; its split dimensions are ``(G, 1, N, M, K)``.
    """
    opts = parse_options(conv, what)
    conv_pass = opts.get("pass")
    if conv_pass in FC_TRAINING and opts.get("swap") is None:
        joint = _fc_layer(graph, fwd_layer(conv_pass, dims), in_type, out_type, conv, what)
        if joint is not None:
            form = _form_options(conv, True)
            params, plan = joint.params[conv_pass], joint.plans[conv_pass]
            key = plan_cache_key(graph.getTarget(), params, parse_options(form, what))
            graph.libraryCache(PLAN_CACHE)[key] = plan
            return params, plan, form
    return _plan_alone(graph, dims, in_type, out_type, conv, what)


def getPlan(
    graph: Graph,
    shape: tuple[int, int, int, int],
    inputType: Type,
    outputType: Type | None = None,
    options: Mapping[str, Any] | None = None,
) -> ConvPlan:
    """The convolution plan ``matMul`` uses for a ``(G, M, K, N)`` product (cached).

    Its split dimensions are ``(G, batch = 1, M, N, K)``, or ``(G, 1, N, M, K)`` when
    ``plan.swapped`` (the product is run as ``B^T A^T``).
    """
    conv = _conv_options(options, "getPlan")
    out_type = inputType if outputType is None else outputType
    dims = tuple(int(x) for x in shape)
    return _plan_product(graph, dims, inputType, out_type, conv, "getPlan")[1]


def matMulReportPlan(
    out: Any,
    graph: Graph,
    inputType: Type,
    outputType: Type,
    aShape: Sequence[int],
    bShape: Sequence[int],
    options: Mapping[str, Any] | None = None,
) -> None:
    """Write the plan of ``aShape x bShape`` to the text stream ``out`` (Poplibs'
    ``matMulReportPlan`` / ``matMulGroupedReportPlan``: the plan of the convolution the
    product becomes, as :func:`~poplar_api.poplin.reportPlanInfo` prints it).

    ``aShape``/``bShape`` are ``[M, K]``/``[K, N]`` or grouped ``[G, M, K]``/``[G, K, N]``.
    """
    from poplar_api.poplin.plan_report import format_plan

    _check_type(inputType, "matMulReportPlan")
    dims = _dims(aShape, bShape, "matMulReportPlan", ("aShape", "bShape"))
    conv = _conv_options(options, "matMulReportPlan")
    params, plan, _ = _plan_product(graph, dims, inputType, outputType, conv, "matMulReportPlan")
    out.write(format_plan(params, plan, poplibs_release(graph.getTarget())))


def _as3(t: Tensor) -> Tensor:
    return t.expand([0]) if t.rank() == 2 else t


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
    conv = _conv_options(options, what)
    params, plan, conv_opts = _plan_product(graph, (g, m, k, n), type_, type_, conv, what)
    # the left operand is the convolution's input, or its weights when swapped
    if lhs != plan.swapped:
        t3 = _laid_out(graph, params, name, conv_opts, True)  # [G, M, K] (or [G, N, K])
    else:
        t3 = _laid_out(graph, params, name, conv_opts, False)  # [G, N, K] (or [G, M, K])
    if not lhs:
        t3 = t3.dimShuffle([0, 2, 1])  # [G, K, N]
    return t3 if len(aShape) == 3 else t3[0]


def _layout(params: ConvParams, plan: ConvPlan, acts: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """The layout :func:`_laid_out` would give the operand, as
    :func:`~poplar_api.poplin.conv_rearrange.rearranged` tests it (``[G, field, Ci]`` or
    ``[G, Co, Ci]`` memory positions and each position's tile); None for a flattened plan,
    laid out as another convolution's."""
    if plan.flattened:
        return None
    if acts:  # [G, 1, Ci, field] -> [G, field, Ci]
        ids, tiles = input_layout(params, plan)
        return ids[:, 0].transpose(0, 2, 1), tiles
    ids, tiles = weights_layout(params, plan)  # [G, Co, Ci, 1]
    return ids.reshape(ids.shape[:3]), tiles


def _laid_out(
    graph: Graph, params: ConvParams, name: str, conv_opts: Mapping[str, Any], acts: bool
) -> Tensor:
    """A new operand of the convolution ``params`` laid out as its plan wants (the
    convolution's ``createInput`` / ``createWeights``), with the input channels innermost:
    ``[G, field, Ci]`` (``acts``) or ``[G, Co, Ci]``."""
    g, f, k, n = (params.numConvGroups, params.inputFieldShape[0],
                  params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup)  # fmt: skip
    if acts:
        act = _conv.createInput(graph, params, name, conv_opts)  # [1, G*K, F]
        return act.reshape([g, k, f]).dimShuffle([0, 2, 1])
    return _conv.createWeights(graph, params, name, conv_opts).reshape([g, n, k])  # [G, N, K, 1]


@bulk_construction
def createMatMulInputLHS(
    graph: Graph,
    type: Type,
    aShape: Sequence[int],
    bShape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """A left operand of shape ``aShape``, laid out as the plan of ``aShape x bShape`` wants
    (the convolution's ``createInput``: each tile holds most of the rows it multiplies)."""
    return _create_input(graph, type, aShape, bShape, name, options, lhs=True)


@bulk_construction
def createMatMulInputRHS(
    graph: Graph,
    type: Type,
    aShape: Sequence[int],
    bShape: Sequence[int],
    name: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """A right operand of shape ``bShape``, laid out as the plan of ``aShape x bShape`` wants
    (the convolution's ``createWeights``)."""
    return _create_input(graph, type, aShape, bShape, name, options, lhs=False)


# ------------------------------------------------------------------ the product
def _check_operands(graph: Graph, A: Any, B: Any, what: str) -> tuple[Type, tuple]:
    for t, label in ((A, "A"), (B, "B")):
        if not isinstance(t, Tensor):
            raise TensorError(f"{what}: operand {label} must be a Tensor, got {type(t).__name__}")
        if not graph.owns(t):
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
) -> Tensor:
    """Add the compute sets of ``C = A B`` to ``prog`` and return C."""
    in_type, (g, m, k, n) = _check_operands(graph, A, B, name)
    if not isinstance(prog, ProgramSequence):
        raise GraphError(f"{name}: prog must be a program.Sequence, got {type(prog).__name__}")
    _check_type(out_type, f"{name}: outputType")
    conv = _conv_options(options, name)
    params, plan, conv_opts = _plan_product(graph, (g, m, k, n), in_type, out_type, conv, name)
    opts = parse_options(conv_opts, name)
    a3, b3 = _as3(A), _as3(B)
    # the convolution's operands, input channels innermost: A [G, M, K] and B^T [G, N, K]
    # are the activations and weights, or the weights and activations when swapped
    acts, weights = (
        (b3.dimShuffle([0, 2, 1]), a3) if plan.swapped else (a3, b3.dimShuffle([0, 2, 1]))
    )
    if opts.get("pass") == "FC_TRAINING_BWD" and plan.joint:
        acts = _transposed_weights(graph, acts, (g, m, k, n), params, plan, (conv, conv_opts),
                                   prog, name)  # fmt: skip
    # Poplibs copies an operand into the plan's layout before the exchange where its
    # convolutionPreprocess does (see conv_rearrange)
    re_a, re_w = operand_rearrangements(graph, plan, opts.get("pass"), acts, weights)
    # (a copy Poplar elides, the destination laid out as the operand already is, is left out)
    # (the destination is made only for a copy that stays)
    for is_acts, what in ((True, "acts"), (False, "weights")):
        if not (re_a if is_acts else re_w):
            continue
        where = f"{name}/{what}Rearranged"
        src = acts if is_acts else weights
        make = functools.partial(_laid_out, graph, params, where, conv_opts, is_acts)
        pad = pads_operand(params, plan, is_acts)
        layout = None if pad else _layout(params, plan, is_acts)
        got = rearranged(graph, src, make, prog, where, pad, layout)
        acts, weights = (got, weights) if is_acts else (acts, got)
    if plan.method == OUTER_PRODUCT:  # [G, Co, field] from [G, field, 1] and [G, Co, 1]
        out = outer_product_conv(graph, acts, weights, params, plan, prog, name)
    else:
        act = acts.dimShuffle([0, 2, 1]).expand([1])  # [G, 1, K, field]
        ker = weights.expand([3])  # [G, Co, K, 1]
        out = _conv._conv(graph, act, ker, params, opts, prog, name).squeeze([1])
    c3 = out if plan.swapped else out.dimShuffle([0, 2, 1])
    return c3 if A.rank() == 3 else c3[0]


def _transposed_weights(
    graph: Graph,
    acts: Tensor,
    dims: _Dims,
    params: ConvParams,
    plan: ConvPlan,
    conv: tuple[_Opts, _Opts],
    prog: ProgramSequence,
    name: str,
) -> Tensor:
    """The weights of a jointly planned layer's input-gradient pass (``acts``: ``[G, I,
    O]``) as Poplibs' ``fullyConnectedWeightTranspose`` makes them (:mod:`.fc_transpose`),
    or the view ``acts`` itself when its group sizes leave nothing to transpose."""
    layer = fwd_layer("FC_TRAINING_BWD", dims)
    joint = _fc_layer(graph, layer, params.inputType, params.outputType, conv[0], name)
    assert joint is not None and plan.swapped
    fwd_icg = joint.plans["FC_TRAINING_FWD"].in_chans_per_group
    sizes = group_sizes(fwd_icg, plan.in_chans_per_group, layer[2], layer[3])
    if min(sizes) == 1:  # useCopyImpl
        return acts
    laid_out = _laid_out(graph, params, f"{name}/weightTranspose/transposed", conv[1], True)
    return weight_transpose(graph, acts, laid_out, sizes, prog, f"{name}/weightTranspose")


def _check_scale(k: Any, name: str) -> Any:
    if isinstance(k, Tensor):
        if k.elementType() != FLOAT or k.numElements() != 1:
            raise TypeMismatchError(
                f"{name}: scale tensor '{k.name}' must be a FLOAT tensor of 1 element, got "
                f"{k.elementType().name} of shape {k.shape()}"
            )
        return k
    try:
        return float(k)
    except (TypeError, ValueError):
        raise TypeMismatchError(
            f"{name}: scale k={k!r} must be a number or a 1-element FLOAT tensor"
        ) from None


@bulk_construction
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
        Prefix of the compute sets (``<name>/Convolve``, ``<name>/Reduce``) and the
        result's name.
    options
        Poplibs matMul options: ``partialsType`` ("float", default, or "half"),
        ``availableMemoryProportion`` (default "0.6"), ``planConstraints`` (its
        ``method``), and the other names Poplibs documents (accepted).
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


@bulk_construction
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


@bulk_construction
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

    The product is computed as by :func:`matMul` and added by ``popops.scaledAddTo``;
    ``C`` keeps its own tile mapping.
    """
    from poplar_api import popops

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
    scale = _check_scale(k, name)
    product = _build(graph, A, B, prog, name, options, C.elementType())
    popops.scaledAddTo(graph, C, product, scale, prog, f"{name}/accumulate")


__all__ = [
    "createMatMulInputLHS",
    "createMatMulInputRHS",
    "getPlan",
    "matMul",
    "matMulAcc",
    "matMulGrouped",
    "matMulReportPlan",
]
