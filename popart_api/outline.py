"""Outlining of recomputed fragments: a recomputed node's program compiled once.

PopART outlines by default (``SessionOptions.enableOutlining``): its
``SubgraphOutline`` transform (graphcore/popart ``willow/src/transforms/
subgraphoutline.cpp``, ``SubgraphOutline::apply``) finds repeated identical op
sequences with the outliner of ``willow/src/subgraph/outliner.cpp`` and replaces
each by a ``CallOp`` of one subgraph. A recomputed fragment and its replay in the
backward pass are such a repeat (the same ops on the same tensors), so on a real IPU
the replay adds no code: both run one outlined subgraph.

Here each recomputed node's program becomes one poplar function
(``graph.addFunction``): the forward pass calls it, then runs the node's once-only
side effects (BatchNormalization's running statistics), and the backward replay
calls it again (:class:`popart_api.training._Recompute`). Poplar stores a function's
code once, and poplar_api's liveness keeps the variables a function touches at one
address from its first call to its last, as the outlined subgraph's tensors are.
Since the function reads and writes the forward pass's own tensors, no copies into or
out of it are needed (PopART's CallOp of a recomputed fragment also works in place on
the fragment's tensors).

Only recomputed nodes are outlined; general outlining of identical op sequences
(``outlineThreshold``) is not modelled. Outlining is off unless
``SessionOptions.enableOutlining`` is set (PopART's default is on): poplar_api places
a function's variables at one address kept from its first call to its last, with no
other variable using it between the calls, so an outlined recomputed node holds its
outputs and Poplibs temporaries from the forward pass to the replay. Its code is then
that of no recomputation but its data more than that of no recomputation (see
docs/popart.md, Recomputation); Poplar itself lets other variables use a function's
variables' memory between calls, which the allocator here does not model.
"""

from __future__ import annotations

from popart_api.lowered import LoweredModel
from poplar_api import Graph
from poplar_api import program as pprog
from poplar_api.graph import Function


def outline_recomputed(
    graph: Graph, lowered: LoweredModel, flags: list[bool]
) -> tuple[list[pprog.Program], dict[int, Function]]:
    """Make each recomputed node's program a function of ``graph``.

    Parameters
    ----------
    graph
        The session's (whole) graph; the functions are made on it.
    lowered
        The forward pass as the session lowered it.
    flags
        Per forward node: whether the backward pass recomputes it.

    Returns
    -------
    forward, functions
        Per node, the program the forward pass runs (a ``Call`` of the node's
        function then its side effects for a recomputed node, the node's program
        otherwise); and, per recomputed node index, its function, which the backward
        replay calls again.
    """
    functions: dict[int, Function] = {}
    forward: list[pprog.Program] = []
    for k, fwd in enumerate(lowered.fwd_progs):
        if k < len(flags) and flags[k]:
            fn = graph.addFunction(lowered.node_progs[k])
            functions[k] = fn
            call = pprog.Call(fn, debugContext=f"outlined/node{k}")
            forward.append(pprog.Sequence(call, lowered.side_progs[k]))
        else:
            forward.append(fwd)
    return forward, functions


__all__ = ["outline_recomputed"]
