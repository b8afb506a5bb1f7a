"""The weights' transposition before the input-gradient pass of a jointly planned
fully-connected layer, as Poplibs makes it (``fullyConnectedWeightTranspose``).

Poplibs' ``matMul`` of a ``TRAINING_BWD`` product (``matMulImpl``, ``lib/poplin/MatMul.cpp``
at graphcore/poplibs f927358 and 7eac0f26, unless ``inputRHSIsPreArranged``) does not
read the transposed weights as a view: ``fullyConnectedWeightTranspose``
(``lib/poplin/Convolution.cpp``) creates them anew, laid out as the backward plan wants
(``createWeights`` of the backward convolution), and fills them with a compute set of
transpose vertices:

* the weights ``W`` (``I x O``) are cut into blocks of ``fwdGroupSize`` input by
  ``bwdGroupSize`` output channels, each one transposition; in a joint plan the sizes are
  the largest common divisors of each pass's input grouping and its dimension
  (``getGroupSizes``: ``commonDivisors``, largest first, taken as they are by
  ``pickGroupSizes`` for a joint plan, whose planner "will have accounted for this
  layer" - its cost model has no term for it);
* with a group size of 1, or a pass whose operands are not swapped, nothing is
  transposed (``useCopyImpl``): the view is passed on and the convolution rearranges it;
* every transposition runs on the tile of its block's first element
  (``blockTileMapping``), which also holds its output
  (``popops::rearrange::addTransposeVertices``, ``lib/popops/Rearrange.cpp``): 2-byte
  blocks whose sides are multiples of 4 take the fast vertices, any other (every FLOAT
  block) ``Transpose2d``, the tile's transpositions dealt over its workers. A tile
  holding one transposition runs it on one worker, so a ``40 x 40`` FLOAT block takes
  ``6 x 1,298`` tile cycles (``Transpose2d``'s estimate, ``popopsCycleEstimators.cpp``).

ipusim models the joint plans' transposition (:func:`weight_transpose`); a layer whose
passes are planned separately keeps the view (Poplibs then picks the group sizes by its
``blockScore`` of the tile mapping, not modelled).
"""

from __future__ import annotations

import math

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import Graph
from poplar_api.popops.rearrange import addTransposeVertices
from poplar_api.program import Execute
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor

__all__ = ["group_sizes", "weight_transpose"]


def group_sizes(fwd_icg: int, bwd_icg: int, inputs: int, outputs: int) -> tuple[int, int]:
    """``(fwdGroupSize, bwdGroupSize)`` of a joint plan's transposition
    (``getGroupSizes``): the largest common divisor of the forward input grouping and
    the layer's ``inputs``, and of the backward input grouping and its ``outputs``."""
    return math.gcd(int(fwd_icg), int(inputs)), math.gcd(int(bwd_icg), int(outputs))


def weight_transpose(
    graph: Graph,
    weights: Tensor,
    laid_out: Tensor,
    sizes: tuple[int, int],
    prog: ProgramSequence,
    name: str,
) -> Tensor:
    """Fill ``laid_out`` (``[G, I, O]``, the backward convolution's input as its plan lays
    it out) with ``weights`` (a ``[G, I, O]`` view of the layer's weights) by Poplibs'
    transposition of ``sizes`` blocks (see the module docstring); returns ``laid_out``.

    Each block is re-mapped to the tile of its source's first element, as
    ``addTransposeVertices`` maps its outputs.
    """
    gf, gb = sizes
    g, i, o = weights.shape()
    # source blocks (g, ib, ob): gb rows of output channels by gf input channels
    src = weights.reshape([g, i // gf, gf, o // gb, gb]).dimShuffle([0, 1, 3, 4, 2]).flatten()
    # their outputs: gf rows of input channels by gb output channels
    dst = laid_out.reshape([g, i // gf, gf, o // gb, gb]).dimShuffle([0, 1, 3, 2, 4]).flatten()
    block = gf * gb
    first = graph.elementTiles(src)[::block]
    if first.size and int(first.min()) < 0:
        raise GraphError(
            f"{name}: the weights '{weights.name}' have {int((first < 0).sum())} of "
            f"{first.size} transposition blocks on no tile of this graph; Poplibs transposes "
            "each block on its first element's tile (hint: map the weights, e.g. with "
            "createMatMulInputRHS, before the input-gradient product)"
        )
    order = np.argsort(first, kind="stable")  # a tile's transpositions together
    tile_of = first[order]
    idx = (order[:, None] * block + np.arange(block)).reshape(-1)
    pre, out = src.elements(idx), dst.elements(idx)
    graph.mapElements(out, np.repeat(tile_of, block))
    cs = graph.addComputeSet(f"{name}/Transpose")
    t = weights.elementType()
    addTransposeVertices(graph, cs, t, gb, gf, tile_of, pre, out, name)
    prog.add(Execute(cs, debugContext=f"{name}/Transpose"))
    return laid_out
