"""The convolution planner: which vertex family, and how to split a convolution over tiles.

A plan splits the conv groups ``G``, the batch ``B``, every output field dimension,
the output channels ``Co`` and the input channels ``Ci`` into blocks, one tile per
block combination, and picks the vertex family (AMP ``ConvPartialnx1`` /
``ConvPartial1x1Out`` or the horizontal MAC). Like Poplibs' planner
(``lib/poplin/ConvPlan.cpp``, ``ConvModel.cpp`` at graphcore/poplibs ``7eac0f26``) it
weighs, for every candidate:

* **compute**: the partial-sum vertex of the largest block. Candidates are first
  ranked with a closed form of the vertex estimators (below); the best
  :data:`REFINE` are then costed with the Poplibs estimator on the worklists the
  lowering would build, and the cheapest wins;
* **exchange**: bytes a tile receives (its input window and weights block, less what
  :func:`~poplar_api.poplin.conv.createInput` / ``createWeights`` put on it),
  at the target's exchange rate, plus a fixed phase cost;
* **reduction**: when ``Ci`` is split, each output block is cut into as many chunks
  as ``Ci`` parts; each tile receives the other parts' partials of its chunk and runs
  ``ReduceAdd`` (casting to the output type); without a split, partials of another
  type than the output are cast in place by ``popops.cast`` (as Poplibs does),
  costed by Poplibs' ``estimateCastCycles``;
* **memory**: Poplibs' temporary memory (``addConvTempMemoryEstimate``): the tile's
  input window and weights block and its partials (not the operands' and output's
  own storage); candidates over ``availableMemoryProportion`` of tile memory are
  dropped. When no one-pass candidate fits, every serial split joins the search
  (:mod:`.serial_estimates`: ``S`` passes over ``Co / S`` output channels, Poplibs'
  ``outChanSplit.serial``, or over ``Ci / S`` input channels, ``inChanSplit.serial``,
  each with Poplibs' per-iteration slice, update and accumulation costs) and the
  cheapest fitting one is taken. When still none fits, the
  bound is doubled until a candidate fits or it reaches twice the tile's bytes, and
  past that the cheapest candidate is taken whatever its memory (Poplibs'
  ``runPlanner`` ``minimizeMemory`` step in ``ConvPlan.cpp``); a plan that does not
  fit then shows up as out-of-memory tiles in the memory report.

Every split whose parts multiply to at most the tile count is costed (enumerated by
:mod:`.conv_splits`); only beyond its ``MAX_CANDIDATES`` are the longest option lists
thinned.

The closed forms (derived: they keep the Poplibs estimators' leading terms, so the
ranking follows them; the final choice uses the estimators themselves):

* AMP, per conv group x input group x output group x kernel position:
  ``62 + W (20 + ceil(P / W) * core)`` with ``P`` output positions, ``core`` 4 (HALF)
  or 8 (FLOAT) cycles per position, channels padded to the AMP groups;
* HMAC, per conv group x kernel position: ``W (16 + ceil(P / W) (7 + Co (2 +
  ceil(Ci / vw))))`` with vector width ``vw`` (``getConvPartialHorizontalMacCycleEstimate``'s
  leading term).

The lowering plans both the convolution as given and its ``expandDims`` form
(:func:`~poplar_api.poplin.conv_params.expand_all_dims`) and keeps the cheaper; a
``planConstraints`` ``expandDims`` naming some dimensions only plans that form
(:func:`~poplar_api.poplin.conv_params.expand_dims`, ``ConvPlan.expanded_dims``).

The vertical MAC (``ConvPartialVerticalMac``) is a candidate for HALF depthwise
convolutions (:func:`vmac_groups`); its closed form is derived from the leading terms
of ``getConvPartialVerticalMacCycleEstimate``.

Swapped operands (Poplibs' ``swapOperands``) are a candidate for every matMul product:
:mod:`~poplar_api.poplin.matmul` plans the product and its swap, each with
:func:`~poplar_api.poplin.conv_transform.transform_estimates`, and keeps the cheaper
(:func:`bound_step`); the training passes of a fully-connected layer may instead be
planned jointly (:mod:`~poplar_api.poplin.fc_joint`, which costs given splits with
:func:`_candidates`). Option parsing is in :mod:`~poplar_api.poplin.conv_options`.

The outer product (``OuterProduct``, :mod:`.outer_product`) is a candidate for a matMul
product with one input channel and batch 1 (:func:`outer_product_applies`; one pass,
its closed form being Poplibs' own estimate) and the weight update of a joint
fully-connected plan whose forward pass runs the horizontal MAC.

A kernel split over tiles (Poplibs' ``kernelSplit`` of the outer kernel dimension,
:mod:`.conv_kernel_split`) is planned when asked for (``planConstraints``
``partition.kernelSplit``) or taken from Poplibs' plan (:mod:`.poplibs_conv2d_plans`);
ipusim's own search does not try one.

Not modelled: multi-stage reductions, the SLIC family,
input-channel serial splits of an expanded convolution and the planner's other
transforms (swapping the operands of a convolution that is not a matMul, expanding
some dimensions only unasked, flattening the batch into the field); docs/planner.md compares
ipusim's plans with Poplibs'. A HALF matMul product the Poplibs model covers is planned
by it instead (:mod:`~poplar_api.poplin.poplibs_plans`), and so is a HALF convolution
whose batch and field flatten into one dimension, as its flattened form
(:mod:`~poplar_api.poplin.poplibs_conv_plans`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.poplin.conv_closed_forms import AMP, HMAC, OUTER, VMAC, closed_forms
from poplar_api.poplin.conv_kernel_split import kernel_block_tiles
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_splits import enumerate_splits as _enumerate
from poplar_api.poplin.conv_splits import kept_dim_maps
from poplar_api.poplin.conv_splits import windows as _windows
from poplar_api.poplin.conv_transform import MATMUL_PASSES, transform_estimates
from poplar_api.poplin.serial_estimates import serial_options, serial_terms, split_params
from poplar_api.types import FLOAT, HALF, Type

#: The outer-product method (Poplibs' ``Plan::OuterProduct``; :mod:`.outer_product`).
OUTER_PRODUCT = "OUTER_PRODUCT"

__all__ = [
    "ConvPlan", "amp_groups", "amp_unit_options", "bound_step", "hmac_partial_chans",
    "parse_options",
    "plan_convolution", "vmac_groups",
]  # fmt: skip

#: Cycles per extra BSP phase (sync + exchange set-up), as the matmul planner charges.
PHASE_OVERHEAD_CYCLES = 190
#: The phases of a plan's estimated cycles (``ConvPlan.cost``), ``total`` their sum.
COST_KEYS = ("compute", "exchange", "reduce", "transform", "serial_copy", "total")
#: Default share of tile memory a convolution may use (Poplibs' default).
DEFAULT_AVAILABLE_MEMORY_PROPORTION = 0.6
#: Candidates re-costed with the Poplibs estimators on real worklists.
REFINE = 6

#: ipu2 AMP instantiations ``(fp, partials) -> (allowed numConvUnits, convInputLoadElems)``
#: (``ConvPartial1x1Out`` / ``ConvPartialnx1`` template arguments in Poplibs).
AMP_UNITS = {
    ("half", "half"): ((16, 8), 4),
    ("half", "float"): ((8,), 4),
    ("float", "float"): ((16, 8), 2),
}
#: AMP chain length (``getConvUnitMaxPipelineDepth``).
AMP_CHAIN = 4
#: Thread cycles per field position of one AMP pass (the Poplibs worker loop).
AMP_CORE_CYCLES = {"half": 4, "float": 8}


def vmac_groups(params: ConvParams) -> int:
    """Conv groups per VMAC group for ``params`` (16, 8 or 4), 0 when VMAC does not apply.

    Poplibs' vertical MAC (``ConvPartialVerticalMac``) takes HALF inputs with one input
    and one output channel per conv group (depthwise convolutions); it processes 4, 8 or
    16 conv groups at once (the largest that does not exceed the groups).
    """
    if params.inputType != HALF:
        return 0
    if params.inputChannelsPerConvGroup != 1 or params.outputChannelsPerConvGroup != 1:
        return 0
    for n in (16, 8, 4):
        if params.numConvGroups >= n:
            return n
    return 0


def amp_unit_options(in_type: Type, partials_type: Type, target: Any) -> list[int]:
    """The AMP unit counts the planner may use on ``target`` (see :func:`amp_groups`)."""
    key = (in_type.name, partials_type.name)
    if key not in AMP_UNITS:
        key = (in_type.name, "float")
    allowed, elems = AMP_UNITS[key]
    peak_macs = target.getFpFlopsPerCycle(in_type) // 2
    if key == ("half", "float"):
        peak_macs //= 2
    per_unit = AMP_CHAIN * elems / AMP_CORE_CYCLES[in_type.name]
    fitting = sorted(u for u in allowed if u * per_unit <= peak_macs)
    return fitting or [min(allowed)]


def hmac_partial_chans(method: str, partials: Type) -> int:
    """Output (partial) channels per group of a MAC vertex: the horizontal MAC
    processes two partials per inner loop when they are not FLOAT, so Poplibs groups
    them in twos (``getConvVertexHMACCandidates``, ConvVertexType.cpp at 7eac0f26);
    the vertical MAC and a FLOAT horizontal MAC write one channel per group."""
    return 2 if method == "HMAC" and partials != FLOAT else 1


def amp_groups(
    in_type: Type, partials_type: Type, target: Any = None, units: int | None = None
) -> tuple[int, int, int, int]:
    """``(inChansPerGroup, outChansPerGroup, numConvUnits, convInputLoadElems)`` of the AMP.

    ``numConvUnits`` is the largest instantiated count whose rate does not exceed the
    target's peak (derived: Poplar's ``getNumConvUnits`` is closed). One unit does
    ``AMP_CHAIN * convInputLoadElems`` multiply-accumulates per field position every
    ``core`` tile cycles (4 half, 8 float), so mk2 (32 float / 128 half flops per cycle)
    gets 16 units and mk1 (16 / 64) 8; half inputs with float partials run at half the
    half rate, 8 units. Without a target, the smallest count; ``units`` picks one.
    The planner also tries the smaller counts (fewer padded output channels).
    """
    key = (in_type.name, partials_type.name)
    if key not in AMP_UNITS:  # float inputs accumulate in float
        key = (in_type.name, "float")
    allowed, elems = AMP_UNITS[key]
    if units is None:
        units = max(amp_unit_options(in_type, partials_type, target)) if target else min(allowed)
    elif units not in allowed:
        raise ValueError(f"amp_groups: units={units}; instantiated: {allowed}")
    return AMP_CHAIN * elems, units, units, elems


def weights_per_conv_unit(params: ConvParams) -> int:
    """Poplibs' ``getWeightsPerConvUnit`` of the input type: the AMP chain times its
    input load elements (16 HALF, 8 FLOAT), the input-channel grouping Poplibs assumes
    the next layer wants."""
    return amp_groups(params.inputType, FLOAT if params.inputType == FLOAT else HALF)[0]


@dataclass(frozen=True)
class ConvPlan:
    """A chosen split of a convolution.

    Attributes
    ----------
    method
        ``"AMP"`` (``ConvPartialnx1``, or ``ConvPartial1x1Out`` where it applies),
        ``"HMAC"``, ``"VMAC"`` or ``"OUTER_PRODUCT"`` (:mod:`.outer_product`; planned
        only as a pass of a fully-connected layer's joint plan, :mod:`.fc_joint`).
    parts, blocks
        Per split dimension ``(G, B, *outField, Co, Ci)``: number of blocks and block size.
    in_chans_per_group, out_chans_per_group
        Nominal channel groups of the vertex (the estimate pads to them).
    partials_type
        Type of the vertex outputs.
    tiles
        ``int64[*parts]``: the tile of each block.
    cost
        Estimated cycles: ``compute``, ``exchange``, ``reduce``, ``total``.
    memory_bytes
        Estimated temporary memory (received operands, partials) of the largest tile.
    """

    method: str
    parts: tuple[int, ...]
    blocks: tuple[int, ...]
    in_chans_per_group: int
    out_chans_per_group: int
    num_conv_units: int
    conv_input_load_elems: int
    partials_type: Type
    tiles: np.ndarray = field(compare=False, repr=False)
    cost: dict[str, int] = field(compare=False, default_factory=dict)
    memory_bytes: int = 0
    #: VMAC: conv groups a vertex processes together (4, 8 or 16); 1 otherwise.
    conv_groups_per_group: int = 1
    #: Whether the plan is for an expanded (im2col) form of the convolution: of
    #: :func:`~poplar_api.poplin.conv_params.expand_dims` of ``expanded_dims``
    #: (None: every field dimension, the 1x1 form).
    expanded: bool = False
    expanded_dims: tuple[int, ...] | None = None
    #: Poplibs' ``flattenDims`` after a partial expansion (:mod:`.conv_flatten`: 0 the
    #: batch, ``d + 1`` field dimension ``d``, folded into the last); ``parts`` and
    #: ``blocks`` are then of the expanded and flattened convolution. Empty: none.
    flatten_dims: tuple[int, ...] = ()
    #: Whether the plan is for the flattened form of the convolution (Poplibs'
    #: ``flattenDims``: batch and field as one field dimension,
    #: :func:`~poplar_api.poplin.poplibs_conv_model.flat_params`); ``parts`` and
    #: ``blocks`` are of that form (:mod:`.poplibs_conv_plans`).
    flattened: bool = False
    #: Output-channel serial split: the convolution runs as ``serial`` passes over
    #: ``Co / serial`` channels each; ``parts`` and ``blocks`` describe one pass.
    serial: int = 1
    #: Input-channel serial split (Poplibs' ``inChanSplit.serial``; never with
    #: ``serial``): ``in_serial`` passes over ``Ci / in_serial`` channels each, their
    #: partials added up in the partials type and cast once after the loop.
    in_serial: int = 1
    #: Channels of one serial iteration when a split pads its last iteration (Poplibs'
    #: ``getOutChansPerSerialSplit`` / ``getInChansPerSerialSplit``: whole channel
    #: grains, the last iteration computing the rest); 0 when every iteration has the
    #: channels divided by the split. :func:`~.conv_serial.iteration_chans` reads it.
    serial_chans: int = 0
    #: Poplibs' ``broadcastInputBeforeLoop`` (an output-channel serial split only): the
    #: inputs are copied once, before the loop, to every tile that reads them
    #: (:func:`~.conv_serial.broadcast_inputs`), and each iteration's vertices read
    #: their tile's copy, so no iteration exchanges inputs.
    broadcast: bool = False
    #: The ``enableFastReduce`` option: single-input ReduceAdd whenever the output
    #: grain allows it, with the partials in interleaved memory (``constrainPartials``).
    fast_reduce: bool = False
    #: Swapped operands (Poplibs' ``swapOperands`` transform): the plan is of the
    #: convolution whose batch (field) and output channels are exchanged, i.e. a matmul
    #: ``A B`` planned and run as ``(B^T A^T)^T`` (:mod:`~poplar_api.poplin.matmul`).
    swapped: bool = False
    #: A pass of the joint plan of a fully-connected layer's training passes (Poplibs'
    #: ``isJointPlan``, :mod:`~poplar_api.poplin.fc_joint`).
    joint: bool = False
    #: The Poplibs release whose planner picked the plan (:mod:`.poplibs_plans`); empty
    #: for a plan of ipusim's own search.
    release: str = field(default="", compare=False)
    #: Parts of the outer kernel dimension over tiles (Poplibs' ``kernelSplit[0]``,
    #: :mod:`.conv_kernel_split`): each block runs on this many tiles, one a part of the
    #: kernel rows, and ``tiles`` is then ``int64[kernel_split, *parts]``.
    kernel_split: int = 1

    @property
    def num_tiles_used(self) -> int:
        return int(math.prod(self.parts)) * self.kernel_split

    def ranges(self, dim: int, size: int) -> list[tuple[int, int]]:
        """Block ranges of split dimension ``dim`` (of ``size`` elements)."""
        b = self.blocks[dim]
        return [(p * b, min((p + 1) * b, size)) for p in range(self.parts[dim])]

    def __str__(self) -> str:
        return (
            f"ConvPlan({self.method}, parts {list(self.parts)}, blocks {list(self.blocks)}, "
            f"groups in {self.in_chans_per_group} out {self.out_chans_per_group}, partials "
            f"{self.partials_type.name}, {self.num_tiles_used} tiles, cost {self.cost}, "
            f"{self.memory_bytes} B/tile{', expanded' if self.expanded else ''}"
            f"{', flattened' if self.flattened else ''}"
            f"{f', serial {self.serial}' if self.serial > 1 else ''}"
            f"{f', input-channel serial {self.in_serial}' if self.in_serial > 1 else ''}"
            f"{f', {self.serial_chans} channels a pass' if self.serial_chans else ''}"
            f"{', inputs broadcast before the loop' if self.broadcast else ''}"
            f"{', swapped operands' if self.swapped else ''}"
            f"{', joint' if self.joint else ''}"
            f"{f', kernel split {self.kernel_split}' if self.kernel_split > 1 else ''}"
            f"{f', Poplibs {self.release} plan' if self.release else ''})"
        )


def memory_limit(target: Any, options: Mapping[str, Any]) -> float:
    """Bytes per tile a convolution may use under ``availableMemoryProportion``."""
    raw = options.get("availableMemoryProportion", DEFAULT_AVAILABLE_MEMORY_PROPORTION)
    try:
        prop = float(raw)
    except (TypeError, ValueError):
        prop = -1.0
    if not 0.0 < prop <= 1.0:
        raise GraphError(
            f"convolution option availableMemoryProportion={raw!r} is invalid; it must be a "
            f"number in (0, 1], e.g. '0.6'"
        )
    return prop * target.getBytesPerTile()


def bound_step(memory: int, limit: float, tile_bytes: int) -> int:
    """At which memory bound of Poplibs' ``runPlanner`` a plan of ``memory`` temporary
    bytes becomes a candidate: 0 within ``limit``, ``k`` within ``2**k limit`` (the
    ``minimizeMemory`` steps, which double the bound while it is below twice
    ``tile_bytes``), and one more step past the last bound (the search without one).

    Comparing plans of two problems (a matmul and its swapped product) by ``(step,
    cycles, bytes)`` is what one ``createPlan`` over both does at each bound."""
    bound, step = limit, 0
    while memory > bound:
        if bound >= 2 * tile_bytes:
            return step + 1
        bound *= 2
        step += 1
    return step


def _fitting(memory: np.ndarray, limit: float, tile_bytes: int) -> np.ndarray:
    """Which candidates the planner may take: those within ``limit`` bytes; when none
    is, those within the first of ``2 limit``, ``4 limit``, ... that some candidate
    meets, up to twice ``tile_bytes``; past that every candidate (Poplibs' planner
    then minimises cycles without a memory bound)."""
    bound = limit
    fits = memory <= bound
    while not fits.any() and bound < 2 * tile_bytes:
        bound *= 2
        fits = memory <= bound
    return fits if fits.any() else np.ones(memory.shape, bool)


def _candidates(
    params: ConvParams,
    method: str,
    partials: Type,
    target: Any,
    maps: list[np.ndarray],
    fast: bool = False,
    splits: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
    field_grain: int = 1,
    co_unsplit: bool = False,
    kernel_split: int = 1,
) -> dict[str, np.ndarray]:
    """Every split of one method with its closed-form costs (arrays of equal length).

    ``splits`` (``parts``, ``blocks``: one array per split dimension) costs the given
    splits instead; ``field_grain`` makes the innermost field dimension's blocks
    multiples of it and ``co_unsplit`` keeps the output channels on every tile (the
    joint plan of the fully-connected passes, :mod:`.fc_joint`). ``kernel_split``: the
    splits are of one kernel part's convolution (:mod:`.conv_kernel_split`), each block
    on that many tiles: an input block is spread over the tiles of its output-channel
    and kernel parts, and the partials reduced are those of ``Ci`` times the kernel
    parts."""
    tiles = target.getNumTiles()
    workers = target.getNumWorkerContexts()
    in_t, out_t = params.inputType, params.outputType
    isz, osz, psz = in_t.size, out_t.size, partials.size
    method, units = method if isinstance(method, tuple) else (method, None)
    cgpg = 1
    if method == "AMP":
        icg, ocg, _, _ = amp_groups(in_t, partials, target, units)
    elif method == OUTER_PRODUCT:  # ``units``: the output channels per group
        icg, ocg, partials = 1, int(units or 1), in_t
        psz = partials.size
    else:  # HMAC / VMAC; ``("HMAC", icg)`` groups the input channels by ``icg``
        icg, ocg = int(units or 1), hmac_partial_chans(method, partials)
    if method == "VMAC":
        cgpg = vmac_groups(params)
    out_field = params.getOutputFieldShape()
    nd = len(out_field)
    sizes = [params.numConvGroups, params.batchSize, *out_field,
             params.outputChannelsPerConvGroup, params.inputChannelsPerConvGroup]  # fmt: skip
    if splits is None:
        parts, blocks, options = _enumerate(
            sizes,
            [cgpg, 1, *([1] * (nd - 1)), field_grain, ocg, icg],
            tiles // kernel_split,
            co_unsplit,
        )
    else:
        parts, blocks = splits
        options = [np.unique(b, return_inverse=True) for b in blocks]
    # the input window of each distinct field block, then of every split
    wins = [_windows(maps, options[2 + d][0], d)[options[2 + d][1]] for d in range(nd)]
    # the closed forms (the module docstring) of every split in one compiled pass; the
    # reduction is Poplibs' ReduceAdd as estimateReduceCycles picks its variant (one
    # stage, PerformanceEstimation.hpp at 7eac0f26), without an input-channel split the
    # partials' cast (popops cast on the tile that wrote them, ``estimateCastCycles``),
    # the memory Poplibs' temporary bytes (``addConvTempMemoryEstimate`` and
    # ``totalTempBytes`` in ``addEstimates``, lib/poplin/ConvModel.cpp at 7eac0f26): the
    # tile's input window, weights block and partials (:mod:`.conv_closed_forms`)
    code = {"AMP": AMP, OUTER_PRODUCT: OUTER, "VMAC": VMAC}.get(method, HMAC)
    consts = {
        "kernel_split": kernel_split, "kpos": int(math.prod(params.kernelShape)),
        "in_elems": params.batchSize * int(math.prod(params.inputFieldShape)),
        "isz": isz, "osz": osz, "psz": psz, "workers": workers,
        "exchange_rate": target.getExchangeBytesPerCycle(), "phase": PHASE_OVERHEAD_CYCLES,
        "icg": icg, "ocg": ocg, "cgpg": cgpg, "core": 8 if in_t == FLOAT else 4,
        "vw": target.getVectorWidth(in_t), "cast": partials != out_t,
        "bank": int(target.config.memory.bank_bytes), "tile_bytes": target.getBytesPerTile(),
        "fast": fast, "pvw": target.getVectorWidth(partials),
        "ovw": target.getVectorWidth(out_t), "is_float": in_t == FLOAT,
    }  # fmt: skip
    p2, b2 = np.array(parts, np.int64), np.array(blocks, np.int64)
    w2 = np.array(wins, np.int64).reshape(nd, p2.shape[1])
    used, compute, exchange, reduce, memory = closed_forms(code, p2, b2, w2, consts)
    return {
        "parts": p2.T, "blocks": b2.T,
        "used": used, "compute": compute, "exchange": exchange, "reduce": reduce,
        "total": compute + exchange + reduce, "memory": memory,
        "icg": np.full(used.size, icg), "ocg": np.full(used.size, ocg),
        "cgpg": np.full(used.size, cgpg),
    }  # fmt: skip


def _join(arrays: list[np.ndarray]) -> np.ndarray:
    """The candidates of ``arrays`` one after another (split rows: the transposed
    ``int64[dims, n]`` arrays of :func:`_candidates`, laid out column after column)."""
    if arrays[0].ndim == 2:
        return np.concatenate([a.T for a in arrays], axis=1).T
    return np.concatenate(arrays)


def _first_in_order(keys: tuple[np.ndarray, ...], k: int) -> np.ndarray:
    """The first ``k`` positions of ``np.lexsort(keys)`` (last key primary, ties in
    position order), sorting only the candidates whose primary key is within the
    ``k`` smallest."""
    primary = keys[-1]
    if primary.size <= k:
        return np.lexsort(keys)
    kth = np.partition(primary, k - 1)[k - 1]
    near = np.flatnonzero(primary <= kth)
    return near[np.lexsort(tuple(key[near] for key in keys))[:k]]


def _gather(
    params: ConvParams,
    methods: list[Any],
    partials: Type,
    target: Any,
    serial: int,
    rearrange: bool = False,
    fast: bool = False,
    conv_pass: str | None = None,
    swapped: bool = False,
    kind: str = "out",
    splits: tuple[list[np.ndarray], list[np.ndarray]] | None = None,
    chans: int | None = None,
    kernel_split: int = 1,
) -> dict[str, np.ndarray]:
    """The candidates of every method for ``serial`` iterations over ``1 / serial`` of the
    ``kind`` ("out" or "in") channels each, with their costs for the whole convolution
    (``splits``: only those of one iteration's convolution, as :func:`_candidates`;
    ``kernel_split``: of one kernel part's convolution, as :func:`_candidates`).

    Poplibs' model of a serial split (``addEstimates``, ``ConvModel.cpp`` at 7eac0f26):
    the cycles of one iteration, with its dynamic slices, update or in-place addition
    (:func:`~.serial_estimates.serial_terms`, cost ``"serial"``), times ``serial``, plus
    the cast after an input-channel loop (whose iterations cast nothing); the temporary
    memory of one iteration (``convTempBytes`` does not outlive it), plus the accumulated
    partials of an input-channel loop, plus, when split and ``rearrange`` (the
    fully-connected passes planned alone, i.e. not as Poplibs' joint plan of
    :mod:`.fc_joint`), the weights a tile holds before the loop slices them
    (``addRearrangeBeforeSliceEstimate``; its rearranging copy is not costed).
    ``chans``, when given, is one iteration's channels of a split whose last iteration
    is padded (:func:`~.serial_estimates.serial_chans`).
    """
    sub = split_params(params, kind, serial, chans=chans) if serial > 1 else params
    maps = kept_dim_maps(sub)
    cands = [
        _candidates(sub, m, partials, target, maps, fast, splits, kernel_split=kernel_split)
        for m in methods
    ]
    cat = {k: _join([c[k] for c in cands]) for k in cands[0]}
    cycles, temp = transform_estimates(sub, conv_pass, swapped, cat["icg"], cat["ocg"],
                                       cat["used"], target, weights_per_conv_unit(sub))  # fmt: skip
    cat["transform"] = cycles
    cat["memory"] = np.maximum(cat["memory"], temp)
    cat["method"] = np.concatenate([np.full(c["used"].size, i) for i, c in enumerate(cands)])
    n = cat["used"].size
    cat["serial"] = np.full(n, serial if kind == "out" else 1)
    cat["in_serial"] = np.full(n, serial if kind == "in" else 1)
    cat["serial_copy"] = np.zeros(n, np.int64)
    if chans is not None and serial > 1:
        cat["serial_chans"] = np.full(n, chans)
    if serial > 1:
        per_iter, once, extra = serial_terms(params, cat, serial, kind, partials, target)
        if kind == "in":  # an iteration's partials are cast only after the loop
            cat["reduce"] = np.where(cat["parts"][:, -1] > 1, cat["reduce"], 0)
        for k in ("compute", "exchange", "reduce", "transform"):
            cat[k] = cat[k] * serial
        cat["serial_copy"] = per_iter * serial + once
        cat["memory"] = cat["memory"] + extra
        if rearrange:  # a fully-connected pass that is not planned jointly
            weights = (
                params.inputType.size
                * params.numConvGroups
                * int(math.prod(params.kernelShape))
                * params.inputChannelsPerConvGroup
                * params.outputChannelsPerConvGroup
            )
            cat["memory"] = cat["memory"] + -(-weights // cat["used"])
    cat["total"] = cat["compute"] + cat["exchange"] + cat["reduce"] + cat["transform"]
    cat["total"] = cat["total"] + cat["serial_copy"]
    return cat


def block_tiles(parts: tuple[int, ...], num_tiles: int, tiles_per_ipu: int) -> np.ndarray:
    """``int64[*parts]``: the tile of each block of a split ``(G, B, *field, Co, Ci)``.

    On one IPU, Poplibs' order (``linearizeTileIndices``, ``linearizeConvIndices`` in
    graphcore/poplibs ``lib/poplin/Convolution.cpp`` at ``7eac0f26``; start tile 0,
    ascending, as ``getStartTile`` gives without ``enableConvDithering``): block ``(g,
    b, *f, co, ci)`` is on tile ``(((g Pci + ci) Pb + b) Pf + f) Pco + co``, the output
    channels innermost, so the output-channel parts of one input block sit on
    consecutive tiles and both tiles of an exchange-bus pair ``2k``, ``2k + 1`` receive
    the same inputs. On several IPUs (Poplibs' level per IPU is not modelled) the
    blocks are spread evenly over all tiles in block order."""
    used = int(math.prod(parts))
    if num_tiles != tiles_per_ipu:
        return (np.arange(used, dtype=np.int64) * num_tiles // used).reshape(parts)
    nd = len(parts)
    order = (0, nd - 1, *range(1, nd - 1))  # G, Ci, B, *field, Co
    linear = np.arange(used, dtype=np.int64).reshape([parts[k] for k in order])
    return np.ascontiguousarray(np.moveaxis(linear, 1, nd - 1))


def plan_from(
    cat: Mapping[str, np.ndarray],
    j: int,
    methods: list[Any],
    params: ConvParams,
    partials: Type,
    target: Any,
    cost: dict[str, int],
    fast: bool = False,
    swapped: bool = False,
    tiles: np.ndarray | None = None,
) -> ConvPlan:
    """The :class:`ConvPlan` of candidate ``j`` of ``cat`` (a :func:`_gather` result)
    with ``cost``; its blocks go to the tiles :func:`block_tiles` gives, or to ``tiles``
    when given."""
    parts = tuple(int(x) for x in cat["parts"][j])
    if tiles is None:
        tiles = block_tiles(parts, target.getNumTiles(), target.getTilesPerIPU())
    m, units = methods[int(cat["method"][j])], None
    if isinstance(m, tuple):
        m, units = m
    if m != "AMP":  # the second element groups channels, not conv units
        units = None
    _, _, units, elems = amp_groups(params.inputType, partials, target, units)
    # the outer product's products are in the input type (nothing accumulated); every
    # other vertex runs the partials asked for (FLOAT for FLOAT inputs, set above)
    vertex_partials = params.inputType if m == OUTER_PRODUCT else partials
    return ConvPlan(
        method=m,
        parts=parts,
        blocks=tuple(int(x) for x in cat["blocks"][j]),
        in_chans_per_group=int(cat["icg"][j]),
        out_chans_per_group=int(cat["ocg"][j]),
        num_conv_units=units,
        conv_input_load_elems=elems,
        partials_type=vertex_partials,
        conv_groups_per_group=int(cat["cgpg"][j]),
        tiles=tiles,
        cost=cost,
        memory_bytes=int(cat["memory"][j]),
        serial=int(cat["serial"][j]),
        in_serial=int(cat["in_serial"][j]) if "in_serial" in cat else 1,
        serial_chans=int(cat["serial_chans"][j]) if "serial_chans" in cat else 0,
        fast_reduce=fast,
        swapped=swapped,
    )


def outer_product_applies(params: ConvParams, conv_pass: str | None) -> bool:
    """Whether the outer product is a candidate for ``params`` planned alone: Poplibs
    offers it for every convolution (``getConvMethodCandidates``) whose vertex output
    may be the input type (``getConvVertexOuterProductCandidates``) and constrains the
    tile's batch and input channels to 1, the kernel to 1 and no field transforms
    (``addOuterProductConstraints``, ``ConvModel.cpp``). ipusim runs it for matMul
    products (1-wide, untransformed) with one input channel, batch 1 and one type."""
    return (
        conv_pass in MATMUL_PASSES
        and params.inputChannelsPerConvGroup == 1
        and params.batchSize == 1
        and params.outputType == params.inputType
        and int(math.prod(params.kernelShape)) == 1
    )


def plan_convolution(
    params: ConvParams,
    target: Any,
    options: Mapping[str, Any],
    exact_compute: Any = None,
    in_serial: bool = True,
    kernel_split: int = 1,
) -> ConvPlan:
    """The cheapest plan of ``params`` on ``target`` (see the module docstring).

    Parameters
    ----------
    params
        The convolution.
    target
        The graph's target.
    options
        Parsed convolution options (``partialsType``, ``availableMemoryProportion``,
        ``method`` constraint).
    exact_compute
        ``exact_compute(plan) -> cycles``: the Poplibs estimate of a plan's largest
        vertex (used to refine the best candidates); None ranks by the closed forms.
    in_serial
        Whether input-channel serial splits are candidates (not for an expanded
        convolution: its lowering slices the unexpanded operands).
    kernel_split
        Parts of the outer kernel dimension over tiles (:mod:`.conv_kernel_split`):
        ``params`` is then the convolution of the part with the most kernel rows, the
        splits of the other dimensions are searched for it on ``1 / kernel_split`` of
        the tiles, and the plan runs in one pass (the serial loops take no kernel split).
    """
    if options.get("swap") and options.get("pass") not in MATMUL_PASSES:
        raise GraphError(
            f"planConstraints transform.swapOperands=true is not modelled for {params}: ipusim "
            f"swaps the operands of matMul products only (hint: drop the constraint, or "
            f"express the product with poplin.matMul)"
        )
    partials = options["partialsType"]
    if params.inputType == FLOAT:
        partials = FLOAT
    methods: list[Any] = [options["method"]] if options.get("method") else ["AMP", "HMAC"]
    if options.get("method") in (None, "VMAC") and vmac_groups(params):
        methods = [m for m in methods if m != "VMAC"] + ["VMAC"]
    elif options.get("method") == "VMAC":
        raise GraphError(
            f"planConstraints method VMAC does not apply to {params}: it needs HALF inputs, "
            f"one input and one output channel per conv group and at least 4 conv groups"
        )
    if options.get("method") is None and outer_product_applies(params, options.get("pass")):
        methods.append((OUTER_PRODUCT, target.getVectorWidth(params.inputType)))
    if "AMP" in methods:
        i = methods.index("AMP")
        units = amp_unit_options(params.inputType, partials, target)
        methods[i : i + 1] = [("AMP", u) for u in sorted(units, reverse=True)]
    limit = memory_limit(target, options)
    rearrange = options.get("pass") in MATMUL_PASSES[1:]  # planned alone (not jointly)
    fast = str(options.get("enableFastReduce", "false")).lower() == "true"
    conv_pass, swapped = options.get("pass"), bool(options.get("swap"))
    cat = _gather(params, methods, partials, target, 1, False, fast, conv_pass, swapped,
                  kernel_split=kernel_split)  # fmt: skip
    if kernel_split == 1 and not (cat["memory"] <= limit).any():
        # nothing fits in one pass: every serial split over the output channels, and
        # (``in_serial``) over the input channels, joins the candidates; the outer
        # product (last when present) runs in one pass only: its lowering has no serial
        # loop; the other methods keep their indices
        one_pass = methods[:-1] if methods[-1][0] == OUTER_PRODUCT else methods
        kinds = [("out", params.outputChannelsPerConvGroup)]
        if in_serial:
            kinds.append(("in", params.inputChannelsPerConvGroup))
        more = [
            _gather(params, one_pass, partials, target, s, rearrange, fast, conv_pass, swapped, k)
            for k, chans in kinds
            for s in serial_options(chans)
        ]
        cat = {k: _join([cat[k]] + [m[k] for m in more]) for k in cat}
    method_ix = cat["method"]
    fits = _fitting(cat["memory"], limit, target.getBytesPerTile())
    primary = np.where(fits, cat["total"], np.iinfo(np.int64).max // 4)
    top = _first_in_order((method_ix, cat["in_serial"], cat["serial"], cat["used"], primary),
                          REFINE if exact_compute is not None else 1)  # fmt: skip

    # the refined candidates' estimates do not read the tiles: only the plan returned
    # is given them
    no_tiles = np.zeros(0, np.int64)
    best: tuple[int, ConvPlan] | None = None
    for j in top.tolist():
        cost = {k: int(cat[k][j]) for k in COST_KEYS}
        plan = plan_from(cat, j, methods, params, partials, target, cost, fast, swapped,
                         no_tiles)  # fmt: skip
        if exact_compute is not None and plan.method != OUTER_PRODUCT:  # (its closed
            # form is already Poplibs' estimate)
            exact = int(exact_compute(plan)) * plan.serial * plan.in_serial
            cost["compute"] = exact  # (the plan holds this dict: no copy of it made)
            cost["total"] = sum(cost[k] for k in COST_KEYS[:-1])
        key = cost["total"] if fits[j] else np.iinfo(np.int64).max
        if best is None or key < best[0]:
            best = (key, plan)
    assert best is not None
    plan = best[1]
    if kernel_split > 1:
        tiles = kernel_block_tiles(plan.parts, kernel_split, target.getNumTiles(),
                                   target.getTilesPerIPU())  # fmt: skip
        return replace(plan, tiles=tiles, kernel_split=kernel_split)
    return replace(plan, tiles=block_tiles(plan.parts, target.getNumTiles(),
                                           target.getTilesPerIPU()))  # fmt: skip
