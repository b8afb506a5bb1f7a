"""Memory order of a convolution's partials and output, as Poplibs allocates them.

Poplibs creates the partials of a convolution with the shape
``[numPartials][G / cgpg][Co / cpg][B][*field][cgpg][cpg]`` (``getPartialOutputShape``,
used by ``createPartialsTensor`` in ``lib/poplin/Convolution.cpp`` at graphcore/poplibs
``7eac0f26``): the ``cpg`` (``partialChansPerGroup``) output channels of a vertex's
group are innermost, the batch and field outside them. A tile's block of outputs is
then a few long runs of consecutive elements (one per channel group) instead of one
short run per field position, and what reads the output where it lies (the cast of the
partials, an elementwise update, the clone of the output) sees those few runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from poplar_api.graph import Graph
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = ["grouped_output", "partial_chans_per_group"]


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
