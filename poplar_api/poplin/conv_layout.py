"""Memory order of a convolution's partials and output, as Poplibs allocates them.

Poplibs creates the partials of a convolution with the shape
``[numPartials][G / cgpg][Co / cpg][B][*field][cgpg][cpg]`` (``getPartialOutputShape``,
used by ``createPartialsTensor`` in ``lib/poplin/Convolution.cpp`` at graphcore/poplibs
``7eac0f26``): the ``cpg`` (``partialChansPerGroup``) output channels of a vertex's
group are innermost, the batch and field outside them. A tile's block of outputs is
then a few long runs of consecutive elements (one per channel group) instead of one
short run per field position, and what reads the output where it lies (the cast of the
partials, an elementwise update, the clone of the output) sees those few runs.

The operands are laid out the same way (``createInputImpl`` / ``createWeightsImpl``):
the input ``[G][Ci / icg][B][*field][icg]`` and the weights
``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``, on the tiles of the plan's blocks that
read them. ``createInput``/``createWeights`` return such tensors, and a convolution
copies an operand into one where Poplibs rearranges it (:mod:`.conv_rearrange`); the
partial vertices' ``in`` and ``weights`` vectors are then long runs of consecutive
elements, which the graph keeps as runs (:mod:`poplar_api.run_ids`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from poplar_api.graph import Graph
from poplar_api.poplin.conv_params import ConvParams, expand_all_dims
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.conv_serial import co_ranges
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = [
    "grouped_input",
    "grouped_output",
    "grouped_weights",
    "input_tiles",
    "partial_chans_per_group",
    "weight_tiles",
]


def partial_chans_per_group(method: str, out_chans: int, out_chans_per_group: int) -> int:
    """The innermost channel grouping of the partials of a plan.

    The AMP vertices write ``out_chans_per_group`` channels together; when the output
    channels are not a multiple of it, the largest common divisor keeps the view exact
    (Poplibs pads the channels instead). The MAC vertices (``partialChansPerGroup`` 1
    for float partials in ``ConvVertexType.cpp``) group one channel.
    """
    if method != "AMP":
        return 1
    return math.gcd(int(out_chans), int(out_chans_per_group)) or 1


def grouped_output(
    graph: Graph,
    type_: Type,
    lead: Sequence[int],
    groups: int,
    batch: int,
    field: Sequence[int],
    chans: int,
    cpg: int,
    name: str,
) -> Tensor:
    """A new variable ``[*lead, G, B, *field, Co]`` whose memory order is Poplibs'
    ``[*lead, G, Co / cpg, B, *field, cpg]`` (see the module docstring)."""
    lead, field = [int(x) for x in lead], [int(x) for x in field]
    nl, nd = len(lead), len(field)
    var = graph.addVariable(type_, [*lead, groups, chans // cpg, batch, *field, cpg], name)
    perm = [*range(nl), nl, nl + 2, *range(nl + 3, nl + 3 + nd), nl + 1, nl + 3 + nd]
    return var.dimShuffle(perm).reshape([*lead, groups, batch, *field, chans])


# ------------------------------------------------------------------ operand layouts
def input_tiles(plan: ConvPlan, params: ConvParams) -> np.ndarray:
    """The tile of every input element ``[G, B, *field, Ci]`` in the layout ``plan`` wants.

    Each input element goes to a tile whose block reads it: along every field dimension
    the input is cut in proportion to the output blocks, and the result is spread over
    the output-channel blocks, so the tiles only receive halos and the other channel
    blocks' share.
    """
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    fshape = list(params.inputFieldShape)
    nd = len(fshape)
    grid = plan.tiles  # [G, B, *O, Co, Ci]
    gi = np.minimum(np.arange(g) // plan.blocks[0], plan.parts[0] - 1)
    bi = np.minimum(np.arange(b) // plan.blocks[1], plan.parts[1] - 1)
    ktot = int(np.prod(params.kernelShape)) if plan.expanded else 1
    ci_i = np.minimum(np.arange(ci) * ktot // plan.blocks[-1], plan.parts[-1] - 1)
    field_idx = [
        np.minimum(np.arange(fshape[d]) * plan.parts[2 + d] // fshape[d], plan.parts[2 + d] - 1)
        for d in range(nd)
    ]
    pco = plan.parts[-2]
    last = np.arange(fshape[-1])
    co_i = (last * pco * plan.parts[1 + nd] // fshape[-1]) % pco
    # the grid taken one axis at a time (whole rows copied), the innermost field
    # position choosing its field part and output-channel part together
    tiles = grid
    for axis, take in enumerate([gi, bi, *field_idx[:-1]]):
        tiles = np.take(tiles, take, axis=axis)
    tiles = tiles[..., field_idx[-1], co_i, :]  # [G, B, *F, Ci parts]
    return np.take(tiles, ci_i, axis=-1).astype(np.int64, copy=False)


def weight_tiles(plan: ConvPlan, params: ConvParams) -> np.ndarray:
    """The tile of every weight ``[G, Co, Ci, *kernel]``: each plan block's weights
    spread over the tiles that use it."""
    eff = expand_all_dims(params) if plan.expanded else params
    out_field = eff.getOutputFieldShape()
    sizes = [eff.numConvGroups, eff.batchSize, *out_field,
             eff.outputChannelsPerConvGroup, eff.inputChannelsPerConvGroup]  # fmt: skip
    rng = [plan.ranges(d, s) for d, s in enumerate(sizes)]
    g, co = params.numConvGroups, params.outputChannelsPerConvGroup
    tiles = np.empty(params.weightsShape(), np.int64).reshape(
        g, co, eff.inputChannelsPerConvGroup, -1
    )
    for gi, (g0, g1) in enumerate(rng[0]):
        for oi, o0, o1 in co_ranges(plan, co):
            for ii, (i0, i1) in enumerate(rng[-1]):
                users = plan.tiles[gi, ..., oi, ii].reshape(-1)
                blk = tiles[g0:g1, o0:o1, i0:i1]
                n = blk.size
                owner = users[np.arange(n) * users.size // max(n, 1)]
                blk[...] = owner.reshape(blk.shape)
    return tiles.reshape(params.weightsShape())


def _grouping(chans: int, per_group: int) -> int:
    """The plan's channel grouping where it divides ``chans`` (Poplibs pads the
    channels to a multiple instead; the largest common divisor keeps the view exact)."""
    return math.gcd(int(chans), max(int(per_group), 1)) or 1


def grouped_input(graph: Graph, params: ConvParams, plan: ConvPlan, name: str) -> Tensor:
    """A new input ``[G, B, C, *field]`` (the canonical view) laid out as the plan wants.

    Its memory order is Poplibs' ``[G][Ci / icg][B][*field][icg]`` (``createInputImpl``
    in ``lib/poplin/Convolution.cpp``, graphcore/poplibs ``7eac0f26``, with one conv
    group per group): the ``icg`` input channels a partial vertex reads together are
    innermost and a tile's window of one channel group is a few long runs. Its tiles
    are :func:`input_tiles`.
    """
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    field = [int(x) for x in params.inputFieldShape]
    nd = len(field)
    icg = _grouping(ci, plan.in_chans_per_group)
    var = graph.addVariable(params.inputType, [g, ci // icg, b, *field, icg], name)
    # [G, Ci/icg, B, *F, icg] -> [G, B, *F, Ci/icg, icg] -> [G, B, *F, Ci]
    view = var.dimShuffle([0, 2, *range(3, 3 + nd), 1, 3 + nd]).reshape([g, b, *field, ci])
    graph.mapElements(view, input_tiles(plan, params))
    return view.dimShuffle([0, 1, 2 + nd, *range(2, 2 + nd)])


def grouped_weights(graph: Graph, params: ConvParams, plan: ConvPlan, name: str) -> Tensor:
    """New weights ``[G, Co, Ci, *kernel]`` laid out as the plan wants.

    Their memory order is Poplibs' ``[G][Co / ocg][Ci / icg][*kernel][ocg][icg]``
    (``createWeightsImpl``, as :func:`grouped_input`): the weights of one partial
    vertex's output- and input-channel group are one run. Their tiles are
    :func:`weight_tiles`.
    """
    g, co, ci = (params.numConvGroups, params.outputChannelsPerConvGroup,
                 params.inputChannelsPerConvGroup)  # fmt: skip
    kernel = [int(x) for x in params.kernelShape]
    nk = len(kernel)
    icg = _grouping(ci, plan.in_chans_per_group)
    ocg = _grouping(co, plan.out_chans_per_group)
    var = graph.addVariable(params.inputType, [g, co // ocg, ci // icg, *kernel, ocg, icg], name)
    # -> [G, Co/ocg, ocg, Ci/icg, icg, *K] -> [G, Co, Ci, *K]
    perm = [0, 1, 3 + nk, 2, 4 + nk, *range(3, 3 + nk)]
    view = var.dimShuffle(perm).reshape([g, co, ci, *kernel])
    graph.mapElements(view, weight_tiles(plan, params))
    return view
