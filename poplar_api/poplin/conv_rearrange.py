"""When Poplibs rearranges a convolution's operands before the exchange.

Before a convolution's exchange, Poplibs may copy an operand into a new tensor laid out
as the plan wants (``createInputImpl`` / ``createWeightsImpl``) and exchange from that
copy (graphcore/poplibs at ``7eac0f26``, ``lib/poplin/Convolution.cpp``, the system
level of ``convolutionImpl``'s transform step, then
``convolutionPreprocess``). It does so for an operand when

* the pass is a weight update (``TRAINING_WU`` / ``FC_TRAINING_WU``:
  ``inputRearrangementIsExpensive`` / ``weightRearrangementIsExpensive``), since the
  update changes the operands' innermost dimension;
* the operand is broadcast to more than 7 tiles (``inViewMaxBroadcastDests`` /
  ``weightViewMaxBroadcastDests``): the activations to ``kernelSplit * outChanSplit``
  tiles, the weights to ``batchSplit * fieldSplit`` tiles. The copy trades cycles for
  less exchange code on every receiving tile;
* the plan expands dimensions or flattens output channels (``expandDims`` /
  ``outChanFlattenDims``);
* the plan's input-channel grain is above 1 and the operand's innermost dimension
  (its input channels) has no grouping (``detectInnermostGrouping`` returns 1), as the
  transposed weights of a fully-connected input-gradient pass.

The copy is a ``Copy`` program before the convolution's compute set, into a tensor
laid out as ``createInput`` / ``createWeights`` lay it out
(:mod:`.conv_layout`): where the operand already lies as the plan wants it is a copy
on each tile, otherwise an exchange too. ``matMul`` and every pass of
``poplin.convolution`` (forward, backward-data, weight update) apply these rules; an
expanded plan copies its expanded input, gathering the zeros of its padding from one
constant on tile 0.
Not modelled: ``regroupIfBeneficialForPlan``'s transpose compute set before the copy
(when both groupings are multiples of the minimum regroup grain).

**Copies Poplar elides** (:func:`rearranged`). Poplibs adds each rearranging copy as a
plain ``Copy`` program (``convolutionPreprocess`` appends it to the transform program's
``postTransposeActs`` / ``postTransposeWeights``); it does not test the layouts itself.
The comment above the call says "these copies will be elided if the inputs already use
the expected memory layout and tile mapping": Poplar's copy merging leaves such a copy
out (``lib/popops/DynamicSlice.cpp``, ``regroupBaseTensor``, names the mechanism,
"copy merging in poplar", and checks the same condition itself where it "cannot/does
not elide copies"). That condition is the one restated here: on every tile holding
elements of the source, the source's and the destination's sorted contiguous regions
(``Graph::getSortedContiguousRegions`` of the flattened tensors on the tile: intervals
of flat positions contiguous in memory, in address order) are the same. Memory order
is element-id order here (as :meth:`~poplar_api.tensor.Tensor.isContiguous` takes it).
An operand made by ``createInput`` / ``createWeights`` (``createMatMulInputLHS`` /
``RHS``) of the same plan meets it; a source that holds an element twice (an expanded
plan's zero padding) does not. When elided, the plan's partials read the source where
it lies, and the destination is not made: the condition is tested against the layout
the destination would have (:func:`input_layout`, :func:`weights_layout`: its elements'
memory order and tiles), and the variable is added only for a copy that stays, so an
elided copy takes neither cycles nor tile memory (an elided copy's destination in Poplar
is its source: there is no second tensor to hold).

A padded operand is never elided (:func:`pads_operand`): ``convolutionPreprocess`` pads
the conv groups, input channels and (weights) output channels to the plan's system-level
grains before it makes the copy (``popops::pad`` with a zero constant, mapped to tile 0
by default), so the copy's source holds the padding, which the destination lays out
with the operand's elements. The system-level grains are the vertex's groupings
(``getInChanGrainSizes`` / ``getOutChanGrainSizes`` in ``lib/poplin/ConvModel.cpp``:
``inChansPerGroup`` and ``partialChansPerGroup`` unless the plan flattens output
channels or combines conv groups). ipusim does not pad (a partial group is a smaller
block), so this is where the padding shows: a 1000-channel HALF product grouped by 16
keeps its copies.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numba
import numpy as np

from poplar_api.errors import TensorError
from poplar_api.graph import Graph
from poplar_api.lowering.runs import read_only
from poplar_api.poplin.conv_layout import (
    _grouping,
    _weight_groups,
    grouped_ids,
    input_tiles_in_memory_order,
    weight_tiles_in_memory_order,
)
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.popops.rearrange import detectInnermostGrouping
from poplar_api.program import Copy
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor

#: ``inViewMaxBroadcastDests`` / ``weightViewMaxBroadcastDests`` (Convolution.cpp).
MAX_BROADCAST_DESTS = 7

#: Passes whose operands are always rearranged (``inputRearrangementIsExpensive``).
_WEIGHT_UPDATE_PASSES = ("TRAINING_WU", "FC_TRAINING_WU")

#: ``poputil::detectInnermostGrouping``, kept under this module's name.
detect_innermost_grouping = detectInnermostGrouping

__all__ = [
    "MAX_BROADCAST_DESTS",
    "detect_innermost_grouping",
    "input_layout",
    "operand_rearrangements",
    "pads_operand",
    "rearranged",
    "same_layout",
    "weights_layout",
]


def operand_rearrangements(
    graph: Graph, plan: ConvPlan, conv_pass: str | None, acts: Tensor, weights: Tensor
) -> tuple[bool, bool]:
    """Whether Poplibs copies the activations and the weights before the exchange.

    Parameters
    ----------
    plan
        The convolution's plan (its ``parts`` are ``(G, B, *field, Co, Ci)``).
    conv_pass
        The convolution option ``pass`` (None for a plain convolution).
    acts, weights
        The operands as views with the input channels innermost: activations
        ``[G, B, *field, Ci]``, weights ``[G, Co, *kernel, Ci]``.

    Returns
    -------
    tuple of bool
        ``(rearrange activations, rearrange weights)``.
    """
    parts = plan.parts
    wu = conv_pass in _WEIGHT_UPDATE_PASSES
    transform = bool(plan.expanded)
    # activations go to the tiles of the output-channel and kernel splits (Poplibs'
    # inNumDests, ``convolutionPreprocess`` in Convolution.cpp at 7eac0f26)
    in_dests = int(parts[-2]) * plan.kernel_split
    weight_dests = int(math.prod(parts[1:-2]))
    re_acts = wu or transform or in_dests > MAX_BROADCAST_DESTS
    re_weights = wu or transform or weight_dests > MAX_BROADCAST_DESTS
    if plan.in_chans_per_group > 1:
        re_acts = re_acts or detect_innermost_grouping(graph, acts) == 1
        re_weights = re_weights or detect_innermost_grouping(graph, weights) == 1
    return re_acts, re_weights


#: Elements whose tiles :func:`same_layout` compares first: operands laid out apart
#: differ within the first few (the convolutions' rearranged operands of
#: ``benchmarks/bench_conv.py`` at their 1st to 144th element), so most checks end
#: without the tile of every element.
_PROBE = 4096


def _leading(t: Tensor, limit: int) -> Tensor:
    """A view of ``t``'s first flat elements, at most ``limit`` (at least one): rows
    of its leading dimensions, so no index of all of ``t`` is made (flattening a
    transposed view copies its whole index)."""
    while t.numElements() > limit:
        per_row = t.numElements() // t.dim(0)
        if per_row <= limit:
            return t[0 : limit // per_row]
        t = t[0]
    return t


def _first_tiles_differ(graph: Graph, src: Tensor, dst: Tensor) -> bool:
    """Whether the first (up to :data:`_PROBE`) flat elements of ``src`` and ``dst``
    (one shape) lie on different tiles, or one of them on none of ``graph``'s."""
    if src.numElements() <= _PROBE:
        return False  # (the whole check is as cheap)
    a = graph.elementTiles(_leading(src, _PROBE))
    b = graph.elementTiles(_leading(dst, _PROBE))
    return int(a.min()) < 0 or not np.array_equal(a, b)


def _first_layout_tiles_differ(
    graph: Graph, src: Tensor, ids: np.ndarray, tiles: np.ndarray
) -> bool:
    """:func:`_first_tiles_differ` of ``src`` and a destination given as its layout
    (``ids``, the memory position of each element, and ``tiles``, the tile of each
    position, as :func:`rearranged` takes them): its first flat positions only."""
    if src.numElements() <= _PROBE:
        return False
    a = graph.elementTiles(_leading(src, _PROBE))
    return int(a.min()) < 0 or not np.array_equal(a, tiles[ids.flat[: a.size]])


def _tiles(graph: Graph, t: Tensor) -> np.ndarray:
    """The tile of each of ``t``'s flat elements, negative where unmapped or on a tile
    outside ``graph`` (:meth:`~poplar_api.graph.Graph.elementTiles`: one lookup per
    element rather than the intervals of ``getTileMapping`` expanded again)."""
    return graph.elementTiles(t)


def same_layout(graph: Graph, src: Tensor, dst: Tensor) -> bool:
    """Whether Poplar elides ``Copy(src, dst)``: both mapped alike, with the same sorted
    contiguous regions on every tile (the module docstring; graphcore/poplibs
    ``7eac0f26``, ``lib/popops/DynamicSlice.cpp``, ``regroupBaseTensor``).

    Parameters
    ----------
    graph
        The graph both tensors belong to.
    src, dst
        The copy's source and destination, of one shape and element type.

    Returns
    -------
    bool
        True when every tile holds the same flat positions of both, in the same memory
        order and cut into the same contiguous runs; False when either has an unmapped
        element or ``src`` holds an element more than once.
    """
    if src.shape() != dst.shape():
        raise TensorError(
            f"same_layout: source '{src.name}' has shape {src.shape()} and destination "
            f"'{dst.name}' {dst.shape()}; a copy needs one shape (hint: reshape one first)"
        )
    if src.numElements() == 0:
        return True
    if src.elementType() != dst.elementType():
        return False
    if _first_tiles_differ(graph, src, dst):
        return False
    return _same(_tiles(graph, src), _tiles(graph, dst), src.flat_index(), dst.flat_index())


def _same(ts: np.ndarray, td: np.ndarray, s_ids: np.ndarray, d_ids: np.ndarray) -> bool:
    """:func:`same_layout` of a source and a destination given per flat position as their
    tiles (negative where unmapped or outside the graph) and memory ids (only their
    order and adjacency matter)."""
    # (equal arrays: the destination has no negative tile where the source has none)
    if int(ts.min()) < 0 or not np.array_equal(ts, td):
        return False
    # positions in memory order on each tile (lexsort: last key first); the rest is one
    # compiled walk along this order, not a second sort for the destination's
    s_order = np.lexsort((s_ids, ts))
    arrays = (read_only(np.asarray(a, np.int64).reshape(-1)) for a in (ts, s_ids, d_ids, s_order))
    return bool(_same_along(*arrays))


@numba.njit(cache=True, nogil=True)
def _same_along(ts, s_ids, d_ids, order):  # pragma: no cover - compiled
    """Along ``order`` (the positions by tile, then source id): whether the source holds
    no element twice (an element lies on one tile, so a repeat is next to itself), the
    destination's own order is ``order`` too (its ids, then its positions, ascending on
    every tile: ``np.lexsort((d_ids, ts))`` then gives ``order``) and both are cut into
    the same contiguous regions (a region starts at a new tile, or where the next
    position or the next id does not follow on)."""
    for k in range(1, order.size):
        p = order[k]
        q = order[k - 1]
        if s_ids[p] == s_ids[q]:
            return False
        if ts[p] == ts[q]:
            if d_ids[p] < d_ids[q] or (d_ids[p] == d_ids[q] and p < q):
                return False
            step = p == q + 1
            if (step and s_ids[p] == s_ids[q] + 1) != (step and d_ids[p] == d_ids[q] + 1):
                return False
    return True


def pads_operand(params: ConvParams, plan: ConvPlan, acts: bool) -> bool:
    """Whether ``convolutionPreprocess`` pads the activations (``acts``) or the weights
    of ``params`` to ``plan``'s grains before rearranging them (the module docstring):
    conv groups to ``conv_groups_per_group``, input channels to ``in_chans_per_group``
    and, for the weights, output channels to the partials' grouping (the AMP's
    ``out_chans_per_group``; 1 for the MAC and outer-product vertices)."""
    grains = [
        (params.numConvGroups, plan.conv_groups_per_group),
        (params.inputChannelsPerConvGroup, plan.in_chans_per_group),
    ]
    if not acts:
        ocg = plan.out_chans_per_group if plan.method == "AMP" else 1
        grains.append((params.outputChannelsPerConvGroup, ocg))
    return any(int(n) % max(int(grain), 1) for n, grain in grains)


def input_layout(params: ConvParams, plan: ConvPlan) -> tuple[np.ndarray, np.ndarray]:
    """The layout of the input :func:`~.conv_layout.grouped_input` would make for
    ``plan``, without making it: the memory position of each element of its canonical
    view ``[G, B, Ci, *field]`` (in the memory order ``[G][Ci / icg][B][*field][icg]``) and
    the tile of each memory position."""
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    field = [int(x) for x in params.inputFieldShape]
    nd = len(field)
    icg = _grouping(ci, plan.in_chans_per_group)  # (grouped_input's own)
    # [G, Ci/icg, B, *F, icg] -> [G, B, *F, Ci]: summed from each dimension's offsets
    # (an arange transposed and reshaped copies every id across, three times slower)
    perm = [0, 2, *range(3, 3 + nd), 1, 3 + nd]
    view = grouped_ids(0, [g, ci // icg, b, *field, icg], perm)
    view = view.transpose([0, 1, 2 + nd, *range(2, 2 + nd)])
    return view, np.asarray(input_tiles_in_memory_order(plan, params), np.int64).reshape(-1)


def weights_layout(params: ConvParams, plan: ConvPlan) -> tuple[np.ndarray, np.ndarray]:
    """The layout of the weights :func:`~.conv_layout.grouped_weights` would make for
    ``plan``, without making them: the memory position of each element of ``[G, Co, Ci,
    *kernel]`` (memory order ``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``) and the tile
    of each memory position."""
    g, co, ci, kernel, ocg, icg = _weight_groups(params, plan)  # (grouped_weights' own)
    nk = len(kernel)
    mem = np.arange(g * co * ci * math.prod(kernel), dtype=np.int64)
    mem = mem.reshape([g, co // ocg, ci // icg, *kernel, ocg, icg])
    view = mem.transpose([0, 1, 3 + nk, 2, 4 + nk, *range(3, 3 + nk)])
    view = view.reshape([g, co, ci, *kernel])
    return view, np.asarray(weight_tiles_in_memory_order(plan, params), np.int64).reshape(-1)


def rearranged(
    graph: Graph,
    src: Tensor,
    dst: Tensor | Callable[[], Tensor],
    prog: ProgramSequence,
    name: str,
    padded: bool = False,
    layout: tuple[np.ndarray, np.ndarray] | None = None,
) -> Tensor:
    """The operand the partials read after Poplibs' rearranging ``Copy(src, dst)``:
    ``src`` itself where Poplar elides the copy (not ``padded``, :func:`pads_operand`,
    and :func:`same_layout`), else ``dst`` after the copy, added to ``prog`` as ``name``.
    ``padded`` is also given for a source known to hold an element twice, which
    :func:`same_layout` never elides: the copy stays without a test.

    ``dst`` may be a function making the destination; with ``layout``, the destination's
    memory positions per element of ``src``'s shape and the tile of each position (as
    :func:`input_layout` gives them, viewed as ``src``), the condition is tested on that
    layout and the destination is made only when the copy stays (module docstring).
    """
    if not padded:
        if layout is not None:
            ids, tiles = layout
            if tuple(ids.shape) != tuple(src.shape()):
                raise TensorError(
                    f"rearranged: '{name}' has a layout of shape {list(ids.shape)} for a "
                    f"source of shape {src.shape()}; they must be equal (hint: view the "
                    "layout's ids as the source is viewed)"
                )
            if src.numElements() == 0:
                return src
            if not _first_layout_tiles_differ(graph, src, ids, tiles):
                flat = ids.reshape(-1)
                if _same(_tiles(graph, src), tiles[flat], src.flat_index(), flat):
                    return src
        else:
            dst = dst() if callable(dst) else dst
            if same_layout(graph, src, dst):
                return src
    dst = dst() if callable(dst) else dst
    prog.add(Copy(src, dst, debugContext=name))
    return dst
