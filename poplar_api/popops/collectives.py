"""Poplibs' older replicated collectives (``popops/Collectives.hpp``), as thin aliases
of :mod:`poplar_api.gcl`.

Before the GCL library, Poplibs offered ``popops::replicatedAllReduce`` and friends
over all the replicas of a replicated graph. They map onto the GCL functions with the
group of every replica:

* ``replicatedAllReduce(graph, data, op, prog, debugContext="", options={})`` (and
  the older ``replicatedAllReduce(graph, parentGraph, data, op, prog, ...)``, whose
  parent graph is not needed here) is ``gcl.allReduceCrossReplica``;
* ``replicatedAllReduceInPlace`` and ``replicatedAllReduceWithOutput(graph, data,
  output, op, ...)`` are ``gcl.allReduceInPlaceCrossReplica`` and
  ``gcl.allReduceToDestinationCrossReplica``;
* ``replicatedReduceScatter`` and ``replicatedAllGather`` are
  ``gcl.reduceScatterCrossReplica`` and ``gcl.allGatherCrossReplica``.

``op`` is a :class:`CollectiveOperator` or a ``popops.Operation`` of the same name
(``ADD``, ``MUL``, ``MIN``, ``MAX``, ``LOGICAL_AND``, ``LOGICAL_OR``,
``SQUARE_ADD``); options such as ``useReplicatedImplementation`` are accepted and
ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from poplar_api import gcl
from poplar_api.graph import Graph
from poplar_api.tensor import Tensor

#: The operators of the collectives (the same enumeration as ``gcl.CollectiveOperator``).
CollectiveOperator = gcl.CollectiveOperator

__all__ = [
    "CollectiveOperator",
    "replicatedAllGather",
    "replicatedAllReduce",
    "replicatedAllReduceInPlace",
    "replicatedAllReduceWithOutput",
    "replicatedReduceScatter",
]


def _tail(debugContext: str, options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    opts = {k: v for k, v in dict(options or {}).items() if k != "method"}
    return debugContext, opts


def replicatedAllReduce(graph: Graph, *args: Any, **kwargs: Any) -> Tensor | list[Tensor]:
    """``replicatedAllReduce(graph, [parentGraph,] data, op, prog, debugContext="",
    options={})``: ``op`` over every replica's ``data``, in a new tensor."""
    if args and isinstance(args[0], Graph):  # the older form names the parent graph
        args = args[1:]
    return _all_reduce(graph, *args, **kwargs)


def _all_reduce(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: Any,
    prog: Any,
    debugContext: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor | list[Tensor]:
    debug, opts = _tail(debugContext, options)
    return gcl.allReduceCrossReplica(graph, data, op, prog, debug, opts)


def replicatedAllReduceInPlace(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: Any,
    prog: Any,
    debugContext: str = "",
    options: Mapping[str, Any] | None = None,
) -> None:
    """``op`` over every replica's ``data``, written into ``data``."""
    debug, opts = _tail(debugContext, options)
    gcl.allReduceInPlaceCrossReplica(graph, data, op, prog, debug, opts)


def replicatedAllReduceWithOutput(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    output: Tensor | Sequence[Tensor],
    op: Any,
    prog: Any,
    debugContext: str = "",
    options: Mapping[str, Any] | None = None,
) -> None:
    """``op`` over every replica's ``data``, written into ``output``."""
    debug, opts = _tail(debugContext, options)
    gcl.allReduceToDestinationCrossReplica(graph, data, output, op, prog, debug, opts)


def replicatedReduceScatter(
    graph: Graph,
    data: Tensor,
    op: Any,
    prog: Any,
    debugContext: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """``op`` over every replica's 1-D ``data``; replica ``k`` keeps chunk ``k``."""
    debug, opts = _tail(debugContext, options)
    return gcl.reduceScatterCrossReplica(graph, data, op, prog, debug, opts)


def replicatedAllGather(
    graph: Graph,
    data: Tensor,
    prog: Any,
    debugContext: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """Every replica's ``data`` gathered into ``[replicas, *data.shape]`` in each."""
    debug, opts = _tail(debugContext, options)
    return gcl.allGatherCrossReplica(graph, data, prog, debug, opts)
