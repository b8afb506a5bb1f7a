"""Collectives between replicas and between the IPUs of a replica, as Poplar's GCL.

Names and argument order follow the Graphcore Communication Library (``gcl::``):

* across replicas (the tensor is a tensor of a replicated graph; each replica holds
  its own values of it): :func:`allReduceCrossReplica`,
  :func:`allReduceInPlaceCrossReplica`, :func:`allReduceToDestinationCrossReplica`,
  :func:`reduceScatterCrossReplica`, :func:`reduceScatterToDestinationCrossReplica`,
  :func:`allGatherCrossReplica`, :func:`allGatherToDestinationCrossReplica` and
  :func:`broadcastCrossReplica`, each over the replicas of a :class:`CommGroup`;
* within a replica (a tensor whose outer dimension indexes IPUs: row ``i`` lies on
  one IPU, the rows on distinct IPUs): :func:`allReduceWithinReplica`,
  :func:`reduceScatterWithinReplica` and :func:`allGatherWithinReplica`.

Every function appends one program to ``prog`` and, except the in-place and
``ToDestination`` forms, returns new tensors mapped like the input. ``data`` may be a
tensor or a list of tensors (of one element type); a list is one collective step
(fused, as GCL fuses them) whose result is a list. The reduction operators are
:class:`CollectiveOperator` (all nine of GCL's are implemented, see
:func:`reduce_values`).

Replica groups (:class:`CommGroup`): ``ALL`` is every replica; ``CONSECUTIVE`` with
size ``k`` groups replicas ``{0..k-1}, {k..2k-1}, ...``; ``ORTHOGONAL`` with size
``k`` and ``m = replicas / k`` groups ``{0, m, 2m, ...}, {1, m+1, ...}, ...``;
``replicaGroupStride`` ``s`` (GCL's third field) makes groups of ``k`` replicas ``s``
apart within blocks of ``s·k``. The group size must divide the replication factor.

The collective is lowered to one IR ``Collective`` step (a ring over the IPUs of each
group, timed by the machine); its values are computed across replicas by one global
effect. The engine option-free GCL option ``method`` picks the ring: ``auto``,
``clockwise_ring`` and ``anticlockwise_ring`` give a ring, ``bidirectional_ring_pair``
and ``meet_in_middle_ring`` a bidirectional ring; other options are accepted and
ignored.

Deviations from GCL, documented here because ipusim has no GCL headers to match:

* :func:`reduceScatterWithinReplica` returns a ``[ipus, chunk]`` tensor (row ``i`` on
  row ``i``'s IPU holds chunk ``i`` of the reduction) instead of GCL's ``Chunks``,
  and :func:`allGatherWithinReplica` takes such a tensor (or any ``[ipus, ...]``
  tensor) and returns ``[ipus, ipus, ...]``: row ``i``, on IPU ``i``, is the whole
  input.
* :func:`reduceScatterCrossReplica` flattens its input; when the size is not a
  multiple of the group size the last chunk is padded (padding values are
  unspecified). Output element ``e`` lies on the tile of input element ``e``.
* :func:`broadcastCrossReplica` is ``broadcastCrossReplica(graph, data, prog, group,
  rootReplica, debugContext, options)`` with ``rootReplica`` the position of the
  broadcasting replica *within each group*.
* ``MEAN`` of an integral type is computed in float64 and truncated toward zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import Graph
from poplar_api.program import Program
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = [
    "CollectiveOperator",
    "CommGroup",
    "CommGroupType",
    "GclCollective",
    "allGatherCrossReplica",
    "allGatherToDestinationCrossReplica",
    "allGatherWithinReplica",
    "allReduceCrossReplica",
    "allReduceInPlaceCrossReplica",
    "allReduceToDestinationCrossReplica",
    "allReduceWithinReplica",
    "broadcastCrossReplica",
    "reduceScatterCrossReplica",
    "reduceScatterToDestinationCrossReplica",
    "reduceScatterWithinReplica",
    "reduce_values",
]


class CollectiveOperator(Enum):
    """How a collective combines the values of its members (``gcl::CollectiveOperator``).

    ``LOCAL`` combines nothing: an all-reduce leaves every member its own values and a
    reduce-scatter gives each member its own chunk.
    """

    ADD = "ADD"
    MEAN = "MEAN"
    MUL = "MUL"
    MIN = "MIN"
    MAX = "MAX"
    LOGICAL_AND = "LOGICAL_AND"
    LOGICAL_OR = "LOGICAL_OR"
    SQUARE_ADD = "SQUARE_ADD"
    LOCAL = "LOCAL"


class CommGroupType(Enum):
    """How replicas are grouped (``gcl::CommGroupType``)."""

    ALL = "ALL"
    CONSECUTIVE = "CONSECUTIVE"
    ORTHOGONAL = "ORTHOGONAL"


class CommGroup:
    """Groups of replicas a cross-replica collective runs in (``gcl::CommGroup``).

    Parameters
    ----------
    type
        ``ALL`` (every replica; the size is ignored), ``CONSECUTIVE`` or
        ``ORTHOGONAL``.
    replicaGroupSize
        Replicas per group (``CONSECUTIVE``/``ORTHOGONAL``); 0 means every replica.
    replicaGroupStride
        Distance between the replicas of a group (``CONSECUTIVE`` only; default 1).

    Raises
    ------
    GraphError
        A type that is not a :class:`CommGroupType`, or a size or stride that is not
        an int (size >= 0, stride >= 1).
    """

    def __init__(
        self,
        type: CommGroupType = CommGroupType.ALL,
        replicaGroupSize: int = 0,
        replicaGroupStride: int = 1,
    ) -> None:
        try:
            self.type = CommGroupType(type)
        except ValueError:
            raise GraphError(
                f"CommGroup: type {type!r} is not a CommGroupType; hint: CommGroupType.ALL, "
                "CONSECUTIVE or ORTHOGONAL"
            ) from None
        for name, value, low in (
            ("replicaGroupSize", replicaGroupSize, 0),
            ("replicaGroupStride", replicaGroupStride, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise GraphError(f"CommGroup: {name} {value!r} must be an int >= {low}")
        self.replicaGroupSize = int(replicaGroupSize)
        self.replicaGroupStride = int(replicaGroupStride)

    def groups(self, replicas: int, what: str = "CommGroup") -> list[list[int]]:
        """The replica groups over ``replicas`` replicas, each in ring order.

        Raises
        ------
        GraphError
            The group size does not divide the replication factor (or the stride does
            not fit), naming both.
        """
        size = self.replicaGroupSize
        if self.type is CommGroupType.ALL or size == 0:
            return [list(range(replicas))]
        if replicas % size:
            raise GraphError(
                f"{what}: {self} has group size {size}, which does not divide the "
                f"replication factor {replicas}; hint: a group size that divides "
                f"{replicas}, e.g. {[d for d in range(1, replicas + 1) if replicas % d == 0]}"
            )
        if self.type is CommGroupType.ORTHOGONAL:
            stride = replicas // size
        else:
            stride = self.replicaGroupStride
        block = stride * size
        if replicas % block:
            raise GraphError(
                f"{what}: {self} spans blocks of stride x size = {block} replicas, which do "
                f"not divide the replication factor {replicas}; hint: a stride s with "
                f"s x {size} dividing {replicas}"
            )
        return [
            [b + j + m * stride for m in range(size)]
            for b in range(0, replicas, block)
            for j in range(stride)
        ]

    def __repr__(self) -> str:
        stride = f", {self.replicaGroupStride}" if self.replicaGroupStride != 1 else ""
        return f"CommGroup({self.type.name}, {self.replicaGroupSize}{stride})"


#: GCL's ``method`` option -> the ring the IR Collective step uses.
METHODS = {
    "auto": "ring",
    "clockwise_ring": "ring",
    "anticlockwise_ring": "ring",
    "bidirectional_ring_pair": "bidirectional_ring",
    "meet_in_middle_ring": "bidirectional_ring",
}


class GclCollective(Program):
    """The program a GCL function appends: one collective over replicas or IPUs.

    Attributes
    ----------
    kind
        ``all_reduce``, ``reduce_scatter``, ``all_gather`` or ``broadcast``.
    op
        The :class:`CollectiveOperator` (None for ``all_gather`` and ``broadcast``).
    inputs, outputs
        Tensors, paired (an in-place all-reduce has ``outputs == inputs``).
    crossReplica
        Across replicas (True) or across the IPUs of a replica (False).
    group, root, algorithm
        The replica group, the broadcasting position in each group, the IR ring.
    """

    def __init__(
        self,
        kind: str,
        op: CollectiveOperator | None,
        inputs: list[Tensor],
        outputs: list[Tensor],
        crossReplica: bool,
        group: CommGroup,
        root: int,
        algorithm: str,
        debugContext: str = "",
    ) -> None:
        super().__init__(debugContext)
        self.kind = kind
        self.op = op
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.crossReplica = crossReplica
        self.group = group
        self.root = root
        self.algorithm = algorithm


# ------------------------------------------------------------------ argument parsing
def _api_name(kind: str, cross: bool, in_place: bool = False, destination: bool = False) -> str:
    """The GCL function's name, for messages: ``allReduce`` + ``InPlace`` or
    ``ToDestination`` + ``CrossReplica`` or ``WithinReplica``."""
    base = {
        "all_reduce": "allReduce",
        "reduce_scatter": "reduceScatter",
        "all_gather": "allGather",
        "broadcast": "broadcast",
    }[kind]
    form = "InPlace" if in_place else "ToDestination" if destination else ""
    return base + form + ("CrossReplica" if cross else "WithinReplica")


def _tail(args: tuple[Any, ...], kwargs: dict[str, Any], what: str, with_group: bool) -> tuple:
    """``(group, debugContext, options)`` from the optional arguments, by type."""
    group = kwargs.pop("group", None)
    debug = kwargs.pop("debugContext", "")
    options = kwargs.pop("options", None)
    if kwargs:
        raise GraphError(
            f"{what}: unknown argument(s) {sorted(kwargs)}; known: group, debugContext, options"
        )
    for a in args:
        if isinstance(a, CommGroup) and with_group and group is None:
            group = a
        elif isinstance(a, str):
            debug = a
        elif isinstance(a, Mapping):
            options = a
        else:
            raise GraphError(
                f"{what}: argument {a!r} ({type(a).__name__}) fits no overload; the "
                f"optional arguments are {'group (CommGroup), ' if with_group else ''}"
                "debugContext (str) and options (dict)"
            )
    if group is not None and not isinstance(group, CommGroup):
        raise GraphError(f"{what}: group {group!r} must be a CommGroup")
    if not isinstance(debug, str):
        raise GraphError(f"{what}: debugContext {debug!r} must be a str")
    return group or CommGroup(), debug, dict(options or {})


def _algorithm(options: dict[str, Any], what: str) -> str:
    method = str(options.get("method", "auto"))
    if method not in METHODS:
        raise GraphError(
            f"{what}: option method={method!r} is not supported; ipusim models "
            f"{sorted(METHODS)}; hint: leave it 'auto'"
        )
    return METHODS[method]


def _operator(op: Any, what: str) -> CollectiveOperator:
    if isinstance(op, CollectiveOperator):
        return op
    name = getattr(op, "name", op)
    try:
        return CollectiveOperator[str(name)]
    except KeyError:
        raise GraphError(
            f"{what}: operator {op!r} is not a CollectiveOperator; hint: one of "
            f"{[o.name for o in CollectiveOperator]}"
        ) from None


def _graph(graph: Any, what: str) -> Graph:
    """The graph the collective's tensors belong to; the non-replicated top level of
    ``createReplicatedGraph`` (which GCL callers often pass) stands for its replicated
    graph."""
    if not isinstance(graph, Graph):
        raise GraphError(f"{what}: expected a Graph, got {type(graph).__name__}")
    return graph.getReplicatedGraph()


def _tensors(graph: Graph, data: Any, what: str) -> tuple[list[Tensor], bool]:
    """The input tensors (checked: of the graph, one element type) and whether a list
    was given."""
    many = not isinstance(data, Tensor)
    items = list(data) if many and isinstance(data, Sequence | tuple) else [data]
    if many and not isinstance(data, Sequence | tuple):
        raise GraphError(
            f"{what}: data must be a Tensor or a list of Tensors, got {type(data).__name__}"
        )
    if not items:
        raise GraphError(f"{what}: data is an empty list; give at least one tensor")
    tensors = []
    for i, t in enumerate(items):
        where = f"{what}: data[{i}]" if many else f"{what}: data"
        if graph.isNonReplicated(t):
            raise GraphError(
                f"{where}: tensor '{t.name}' is a non-replicated view (getNonReplicatedTensor); "
                "collectives take the replicated tensor itself; hint: pass the tensor of "
                "the replicated graph"
            )
        tensors.append(graph.checkTensor(t, where))
    first = tensors[0]
    for i, t in enumerate(tensors[1:], start=1):
        if t.elementType() != first.elementType():
            raise GraphError(
                f"{what}: data[{i}] '{t.name}' has element type {t.elementType().name} but "
                f"data[0] '{first.name}' has {first.elementType().name}; the tensors of one "
                "collective must share an element type; hint: cast, or make two calls"
            )
    return tensors, many


def _new_mapped(graph: Graph, typ: Type, shape: list[int], tiles: np.ndarray, name: str) -> Tensor:
    """A new variable of ``shape`` whose flat element ``e`` lies on root tile ``tiles[e]``."""
    out = graph.addVariable(typ, shape, name)
    tiles = np.asarray(tiles, np.int64).reshape(-1)
    mapped = np.flatnonzero(tiles >= 0)  # elements of unmapped inputs stay unmapped
    _top(graph).mapElements(out.flatten().elements(mapped), tiles[mapped])
    return out


def _top(graph: Graph) -> Graph:
    """The graph over every tile of one replica: collectives place by top-level tile
    (IPU = tile // tiles per IPU)."""
    return graph.getTopLevelGraph().getReplicatedGraph()


def _tiles_of(graph: Graph, t: Tensor) -> np.ndarray:
    """Top-level tile of every flat element of ``t`` (-1: unmapped)."""
    return _top(graph).elementTiles(t)


def _check_destination(
    data: Tensor, dest: Any, graph: Graph, what: str, shape: list[int]
) -> Tensor:
    dest = graph.checkTensor(dest, f"{what}: destination")
    if dest.elementType() != data.elementType() or dest.shape() != list(shape):
        raise GraphError(
            f"{what}: destination '{dest.name}' ({dest.elementType().name}, shape "
            f"{dest.shape()}) does not match the result of data '{data.name}' "
            f"({data.elementType().name}, shape "
            f"{list(shape)}); they must be equal"
        )
    return dest


def _replicas(graph: Graph) -> int:
    return graph.getReplicationFactor()


def _result_shape(kind: str, t: Tensor, group_size: int) -> list[int]:
    if kind == "reduce_scatter":
        return [math.ceil(t.numElements() / group_size)]
    if kind == "all_gather":
        return [group_size, *t.shape()]
    return t.shape()


def _result_tiles(kind: str, tiles: np.ndarray, shape: list[int]) -> np.ndarray:
    """Tile of each element of a cross-replica result (see the module notes)."""
    n = int(np.prod(shape, dtype=np.int64))
    if tiles.size == 0:
        return np.zeros(n, np.int64)
    return tiles[np.arange(n) % tiles.size]


def _cross(
    kind: str,
    graph: Any,
    data: Any,
    op: Any,
    prog: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    destination: Any = None,
    in_place: bool = False,
    root: int = 0,
) -> Any:
    """Build a cross-replica collective; returns its result as GCL does."""
    what = _api_name(kind, True, in_place, destination is not None)
    graph = _graph(graph, what)
    if not isinstance(prog, ProgramSequence):
        raise GraphError(f"{what}: prog must be a program.Sequence, got {type(prog).__name__}")
    operator = None if kind in ("all_gather", "broadcast") else _operator(op, what)
    group, debug, options = _tail(args, dict(kwargs), what, True)
    algorithm = _algorithm(options, what)
    tensors, many = _tensors(graph, data, what)
    groups = group.groups(_replicas(graph), what)
    size = len(groups[0])
    if kind == "reduce_scatter":
        for t in tensors:
            if t.rank() != 1:
                raise GraphError(
                    f"{what}: data '{t.name}' has shape {t.shape()}; a reduce-scatter takes "
                    "1-D tensors; hint: data.flatten()"
                )
    if kind == "broadcast" and not 0 <= root < size:
        raise GraphError(
            f"{what}: rootReplica {root} is not a position in a group of {size} replica(s) "
            f"({group}); it must be in [0, {size})"
        )
    label = debug or what
    outputs: list[Tensor] = []
    dests = None
    if destination is not None:
        dests = [destination] if isinstance(destination, Tensor) else list(destination)
        if len(dests) != len(tensors):
            raise GraphError(
                f"{what}: {len(tensors)} data tensor(s) but {len(dests)} destination(s); "
                "give one destination per data tensor"
            )
    for i, t in enumerate(tensors):
        shape = _result_shape(kind, t, size)
        if in_place:
            outputs.append(t)
        elif dests is not None:
            outputs.append(_check_destination(t, dests[i], graph, what, shape))
        else:
            tiles = _result_tiles(kind, _tiles_of(graph, t), shape)
            outputs.append(_new_mapped(graph, t.elementType(), shape, tiles, f"{label}/out{i}"))
    prog.add(GclCollective(kind, operator, tensors, outputs, True, group, root, algorithm, label))
    if in_place or dests is not None:
        return None
    return outputs if many else outputs[0]


# ------------------------------------------------------------------ cross replica
def allReduceCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> Tensor | list[Tensor]:
    """``allReduceCrossReplica(graph, data, op, prog, [group,] debugContext="",
    options={})``: every replica of each group gets ``op`` of the group's values of
    ``data``, in a new tensor mapped like ``data`` (a list for a list of tensors).

    Raises
    ------
    GraphError
        Bad arguments: a tensor of another graph, tensors of different element types,
        an operator that is not a :class:`CollectiveOperator`, a group size that does
        not divide the replication factor, an unknown ``method`` option.
    """
    return _cross("all_reduce", graph, data, op, prog, args, kwargs)


def allReduceInPlaceCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    """As :func:`allReduceCrossReplica`, writing the result into ``data``."""
    _cross("all_reduce", graph, data, op, prog, args, kwargs, in_place=True)


def allReduceToDestinationCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    destination: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    """As :func:`allReduceCrossReplica`, writing the result into ``destination`` (same
    element type and shape as ``data``)."""
    _cross("all_reduce", graph, data, op, prog, args, kwargs, destination=destination)


def reduceScatterCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> Tensor | list[Tensor]:
    """``reduceScatterCrossReplica(graph, data, op, prog, [group,] debugContext="",
    options={})``: ``op`` over each group of 1-D ``data``, of which the replica at
    position ``p`` of its group keeps chunk ``p`` (``ceil(n / groupSize)`` elements)."""
    return _cross("reduce_scatter", graph, data, op, prog, args, kwargs)


def reduceScatterToDestinationCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    destination: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    """As :func:`reduceScatterCrossReplica`, writing each chunk into ``destination``."""
    _cross("reduce_scatter", graph, data, op, prog, args, kwargs, destination=destination)


def allGatherCrossReplica(
    graph: Graph, data: Tensor | Sequence[Tensor], prog: Any, *args: Any, **kwargs: Any
) -> Tensor | list[Tensor]:
    """``allGatherCrossReplica(graph, data, prog, [group,] debugContext="",
    options={})``: every replica gets ``[groupSize, *data.shape]``, row ``p`` being
    the values of the replica at position ``p`` of its group."""
    return _cross("all_gather", graph, data, None, prog, args, kwargs)


def allGatherToDestinationCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    destination: Tensor | Sequence[Tensor],
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> None:
    """As :func:`allGatherCrossReplica`, writing into ``destination``
    (``[groupSize, *data.shape]``)."""
    _cross("all_gather", graph, data, None, prog, args, kwargs, destination=destination)


def broadcastCrossReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    prog: Any,
    group: CommGroup | None = None,
    rootReplica: int = 0,
    debugContext: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor | list[Tensor]:
    """Every replica of each group gets the values of ``data`` of the replica at
    position ``rootReplica`` of its group, in a new tensor mapped like ``data``."""
    what = "broadcastCrossReplica"
    if isinstance(rootReplica, bool) or not isinstance(rootReplica, int | np.integer):
        raise GraphError(f"{what}: rootReplica {rootReplica!r} must be an int")
    kwargs: dict[str, Any] = {"debugContext": debugContext, "options": options}
    if group is not None:
        kwargs["group"] = group
    return _cross("broadcast", graph, data, None, prog, (), kwargs, root=int(rootReplica))


# ------------------------------------------------------------------ within a replica
def _within(
    kind: str, graph: Any, data: Any, op: Any, prog: Any, args: tuple, kwargs: dict
) -> Tensor | list[Tensor]:
    what = _api_name(kind, False)
    graph = _graph(graph, what)
    if not isinstance(prog, ProgramSequence):
        raise GraphError(f"{what}: prog must be a program.Sequence, got {type(prog).__name__}")
    operator = None if kind == "all_gather" else _operator(op, what)
    _, debug, options = _tail(args, dict(kwargs), what, False)
    algorithm = _algorithm(options, what)
    tensors, many = _tensors(graph, data, what)
    tpi = graph.getRootTarget().getTilesPerIPU()
    label = debug or what
    order: list[int] | None = None
    outputs = []
    for i, t in enumerate(tensors):
        if t.rank() < 1 or t.dim(0) < 1:
            raise GraphError(
                f"{what}: data '{t.name}' has shape {t.shape()}; its outer dimension must "
                "index the IPUs taking part (one row per IPU)"
            )
        rows = t.dim(0)
        tiles = _tiles_of(graph, t).reshape(rows, -1)
        ipus = []
        for row in range(rows):
            on = np.unique(tiles[row] // tpi)
            if on.size != 1 or on[0] < 0:
                raise GraphError(
                    f"{what}: row {row} of data '{t.name}' lies on IPU(s) "
                    f"{[int(v) for v in on if v >= 0] or 'none (unmapped)'}; each row must "
                    "lie on one IPU; hint: map data[i] to the tiles of IPU i"
                )
            ipus.append(int(on[0]))
        if len(set(ipus)) != rows:
            raise GraphError(
                f"{what}: rows of data '{t.name}' lie on IPUs {ipus}; each row must be on its "
                "own IPU"
            )
        if order is not None and ipus != order:
            raise GraphError(
                f"{what}: data[{i}] '{t.name}' has rows on IPUs {ipus} but data[0] on "
                f"{order}; the tensors of one collective must use the IPUs in the same order"
            )
        order = ipus
        if kind == "reduce_scatter":
            chunk = math.ceil(tiles.shape[1] / rows) if tiles.shape[1] else 0
            shape = [rows, chunk]
            out_tiles = (
                tiles[:, np.arange(chunk) % tiles.shape[1]] if tiles.shape[1] else tiles[:, :0]
            )
        elif kind == "all_gather":
            shape = [rows, *t.shape()]
            out_tiles = np.broadcast_to(tiles[:, None, :], (rows, rows, tiles.shape[1]))
        else:
            shape = t.shape()
            out_tiles = tiles
        out = _new_mapped(graph, t.elementType(), shape, out_tiles.reshape(-1), f"{label}/out{i}")
        outputs.append(out)
    prog.add(
        GclCollective(kind, operator, tensors, outputs, False, CommGroup(), 0, algorithm, label)
    )
    return outputs if many else outputs[0]


def allReduceWithinReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> Tensor | list[Tensor]:
    """``allReduceWithinReplica(graph, data, op, prog, debugContext="", options={})``:
    ``data`` is ``[ipus, ...]`` with row ``i`` on one IPU; every row of the result (on
    the same IPU as the input row) holds ``op`` over the rows."""
    return _within("all_reduce", graph, data, op, prog, args, kwargs)


def reduceScatterWithinReplica(
    graph: Graph,
    data: Tensor | Sequence[Tensor],
    op: CollectiveOperator,
    prog: Any,
    *args: Any,
    **kwargs: Any,
) -> Tensor | list[Tensor]:
    """``reduceScatterWithinReplica(graph, data, op, prog, debugContext="",
    options={})``: ``op`` over the rows of ``[ipus, ...]`` data, flattened per row;
    row ``i`` of the ``[ipus, chunk]`` result (on row ``i``'s IPU) is chunk ``i``."""
    return _within("reduce_scatter", graph, data, op, prog, args, kwargs)


def allGatherWithinReplica(
    graph: Graph, data: Tensor | Sequence[Tensor], prog: Any, *args: Any, **kwargs: Any
) -> Tensor | list[Tensor]:
    """``allGatherWithinReplica(graph, data, prog, debugContext="", options={})``:
    row ``i`` of the ``[ipus, *data.shape]`` result, on row ``i``'s IPU, is all of
    ``data``."""
    return _within("all_gather", graph, data, None, prog, args, kwargs)


# ------------------------------------------------------------------ the arithmetic
def reduce_values(op: CollectiveOperator, block: np.ndarray) -> np.ndarray:
    """``op`` over axis 0 of ``block`` (``[members, n]``), in a wide type.

    Floating types reduce in float64, integral ones in int64 (the caller converts to
    the element type, rounding or wrapping as the device would). ``LOCAL`` is not a
    reduction (the caller keeps each member's own values).
    """
    k = block.shape[0]
    if k and block.dtype.kind == "f" and op in (CollectiveOperator.ADD, CollectiveOperator.MEAN):
        total = _member_sum(block)
        return total if op is CollectiveOperator.ADD else total / k
    if block.dtype.kind == "f":
        wide = block.astype(np.float64)
    elif block.dtype.kind == "b":
        wide = block.astype(np.int64)
    else:
        wide = block.astype(np.int64)
    if op is CollectiveOperator.ADD:
        return wide.sum(axis=0)
    if op is CollectiveOperator.MEAN:
        mean = wide.astype(np.float64).sum(axis=0) / k
        return mean if block.dtype.kind == "f" else np.trunc(mean)
    if op is CollectiveOperator.MUL:
        return wide.prod(axis=0)
    if op is CollectiveOperator.MIN:
        return wide.min(axis=0)
    if op is CollectiveOperator.MAX:
        return wide.max(axis=0)
    if op is CollectiveOperator.LOGICAL_AND:
        return (wide != 0).all(axis=0).astype(np.int64)
    if op is CollectiveOperator.LOGICAL_OR:
        return (wide != 0).any(axis=0).astype(np.int64)
    if op is CollectiveOperator.SQUARE_ADD:
        return (wide * wide).sum(axis=0)
    raise GraphError(f"reduce_values: {op} is not a reduction")  # LOCAL is handled by callers


def _member_sum(block: np.ndarray) -> np.ndarray:
    """Float64 sum of the rows of ``block``, member after member: what
    ``block.astype(np.float64).sum(axis=0)`` gives on rows laid out one after another
    (each row widened exactly, then added in order), without a float64 copy of the
    whole block."""
    total = block[0].astype(np.float64)
    for row in block[1:]:
        total += row
    return total


def collective_values(
    kind: str, op: CollectiveOperator | None, block: np.ndarray, root: int
) -> list[np.ndarray]:
    """The result of each member (row of ``block``, ``[members, n]``) of one group."""
    k, n = block.shape
    if kind == "all_gather":
        whole = block.reshape(-1)
        return [whole] * k
    if kind == "broadcast":
        return [block[root]] * k
    if kind == "all_reduce":
        if op is CollectiveOperator.LOCAL:
            return [block[p] for p in range(k)]
        red = reduce_values(op, block)
        return [red] * k
    chunk = math.ceil(n / k) if n else 0
    padded = np.zeros((k, k * chunk), block.dtype)
    padded[:, :n] = block
    if op is CollectiveOperator.LOCAL:
        return [padded[p, p * chunk : (p + 1) * chunk] for p in range(k)]
    red = reduce_values(op, padded)
    return [red[p * chunk : (p + 1) * chunk] for p in range(k)]
