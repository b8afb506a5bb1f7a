"""Machine program IR: the contract between lowering and the machine.

A machine program is a tree of control nodes whose leaves are steps. Control flow is
global: every tile group follows the same path, and predicates are answered by the
data plane. Per-vertex and per-transfer data are numpy arrays, never objects, so that
timing can be computed for a whole IPU at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Union

import numpy as np

from ipusim.errors import IRValidationError


class SyncKind(str, Enum):
    """Scope of a sync: one IPU, all IPUs, or all IPUs plus the host."""

    INTERNAL = "internal"
    EXTERNAL = "external"
    HOST = "host"


class Direction(str, Enum):
    """Direction of a host or Streaming Memory transfer."""

    HOST_TO_DEVICE = "host_to_device"
    DEVICE_TO_HOST = "device_to_host"


def _array(values: object, dtype: type) -> np.ndarray:
    """``values`` as a read-only flat array of ``dtype``: a copy, unless it is one already
    (a read-only contiguous 1-D array of that dtype, which nothing can change: IR arrays
    are shared so; a writable one of that dtype is copied without the conversions)."""
    if type(values) is np.ndarray and values.ndim == 1 and values.dtype.type is dtype:
        if not values.flags.writeable and values.flags.c_contiguous:
            return values
        arr = values.copy()
        arr.flags.writeable = False
        return arr
    raw = np.asarray(values)
    if dtype is np.int64 and raw.dtype.kind == "f" and not np.array_equal(raw, np.round(raw)):
        bad = raw.reshape(-1)[np.flatnonzero(raw.reshape(-1) != np.round(raw.reshape(-1)))[0]]
        raise IRValidationError(
            [f"value {float(bad)!r} is not a whole number; IR counts are integers"]
        )
    arr = np.array(raw, dtype=dtype).reshape(-1)
    arr.flags.writeable = False
    return arr


def read_only(values: np.ndarray) -> np.ndarray:
    """``values`` itself when read-only (as IR arrays are), else a read-only copy: for
    results worked out later from the same values (a cost's deferred details)."""
    if not values.flags.writeable:
        return values
    copy = values.copy()
    copy.flags.writeable = False
    return copy


# ---------------------------------------------------------------- step vocabulary
@dataclass(frozen=True)
class StepKind:
    """One kind of leaf step: its Poplar program tag, the phase its cycles count in,
    and the timing component (and method) that costs it."""

    name: str
    tag: str
    phase: str
    component: str | None
    method: str = "cost"


#: The closed vocabulary of step kinds, keyed by ``Step.kind``.
STEP_KINDS: dict[str, StepKind] = {
    k.name: k
    for k in (
        StepKind("compute", "OnTileExecute", "compute", "compute"),
        StepKind("exchange", "DoExchange", "internal_exchange", "exchange"),
        StepKind("global_exchange", "GlobalExchange", "global_exchange", "links"),
        StepKind("collective", "GlobalExchange", "global_exchange", "links", "collective"),
        StepKind("stream_copy", "StreamCopy", "host_exchange", "host", "demand"),
        StepKind("remote_buffer_copy", "StreamCopy", "host_exchange", "remote", "demand"),
        StepKind("sync", "Sync", "sync", None),
    )
}

#: Phases a step's cycles count in, in report order (that of :data:`STEP_KINDS`).
PHASES: tuple[str, ...] = tuple(dict.fromkeys(k.phase for k in STEP_KINDS.values()))


@dataclass(frozen=True)
class PhaseNames:
    """What Poplar's profiles call a phase.

    ``profile_key`` is its key in an execution profile's ``simulation.tileCycles``;
    ``label`` the words of its line in the profile summary (``Total <label> cycles``).
    """

    profile_key: str
    label: str


#: Poplar's names of every phase of :data:`PHASES`, in the same order.
PHASE_NAMES: dict[str, PhaseNames] = {
    "compute": PhaseNames("compute", "compute"),
    "internal_exchange": PhaseNames("doExchange", "IPU exchange"),
    "global_exchange": PhaseNames("globalExchange", "global exchange"),
    "host_exchange": PhaseNames("streamCopy", "host exchange"),
    "sync": PhaseNames("sync", "sync"),
}


def kinds_of(*classes: type) -> frozenset[str]:
    """The step kinds whose steps are instances of ``classes`` (subclasses included),
    e.g. ``kinds_of(StreamCopy)`` for every host or Streaming Memory copy."""
    return frozenset(k for k, cls in STEP_CLASSES.items() if issubclass(cls, classes))


# --------------------------------------------------------------------------- steps
@dataclass(frozen=True, eq=False, kw_only=True)
class Step:
    """A leaf of the program tree.

    Parameters
    ----------
    name
        Debug name, shown in traces and profiles (for example the compute set name).
    effect
        Id of the functional effect the data plane applies when the step runs, or None.
    program_id
        Id of the user-level program the step was lowered from (for profiles), -1 if none.
    """

    kind: ClassVar[str] = "step"
    name: str
    effect: int | None = None
    program_id: int = -1

    @property
    def phase(self) -> str:
        """The phase this step's cycles count in (from :data:`STEP_KINDS`)."""
        return STEP_KINDS[self.kind].phase

    @property
    def tag(self) -> str:
        """Poplar's program type tag of this step (``OnTileExecute``, ...)."""
        return STEP_KINDS[self.kind].tag


@dataclass(frozen=True, eq=False, kw_only=True)
class Compute(Step):
    """One compute set: per vertex its tile, estimate, kind and type.

    ``vertex_cycles`` are thread cycles for worker vertices and tile cycles for
    multi-vertices (``vertex_multi`` True). ``vertex_type`` indexes
    ``vertex_type_names``.
    """

    kind: ClassVar[str] = "compute"
    vertex_tile: np.ndarray
    vertex_cycles: np.ndarray
    vertex_multi: np.ndarray | None = None
    vertex_type: np.ndarray | None = None
    vertex_type_names: tuple[str, ...] = ("Vertex",)

    def __post_init__(self) -> None:
        tile = _array(self.vertex_tile, np.int64)
        object.__setattr__(self, "vertex_tile", tile)
        object.__setattr__(self, "vertex_cycles", _array(self.vertex_cycles, np.int64))
        multi = np.zeros(tile.size, bool) if self.vertex_multi is None else self.vertex_multi
        object.__setattr__(self, "vertex_multi", _array(multi, np.bool_))
        vtype = np.zeros(tile.size, np.int64) if self.vertex_type is None else self.vertex_type
        object.__setattr__(self, "vertex_type", _array(vtype, np.int64))
        object.__setattr__(self, "vertex_type_names", tuple(self.vertex_type_names))

    @property
    def num_vertices(self) -> int:
        """Number of vertices in the compute set."""
        return int(self.vertex_tile.size)


@dataclass(frozen=True, eq=False, kw_only=True)
class Exchange(Step):
    """An internal (on-chip) exchange, as explicit transfers or as per-tile totals.

    Transfers: transfer ``k`` moves ``num_bytes[k]`` from ``src_tile[k]`` to
    ``dst_tile[k]``; transfers sharing a ``message`` id are one broadcast, counted once
    at the sender (when ``message`` is None every transfer is its own message).

    Totals (for large graphs, where one transfer per element would not fit in host
    memory): ``tile`` lists the tiles taking part and, aligned with it,
    ``bytes_sent`` (a broadcast counted once), ``bytes_received``, ``messages_sent``,
    ``messages_received`` and ``max_distance`` (layout distance to the farthest peer).

    ``host`` marks the on-chip side of a host stream copy (data delivered to, or
    gathered from, the tiles); its code is the copy's host exchange code.

    ``senders_received`` (optional, aligned with ``tile``): how many distinct tiles
    each tile receives from; it sizes the tile's receive code (memory placement),
    not its time.

    ``bytes_shared`` (optional, aligned with ``tile``): of the bytes a tile receives,
    those its exchange-bus partner (tile ``2k`` with ``2k + 1`` of the same IPU)
    receives too, in the same message; with ``exchange.tiles_per_shared_bus`` 2 they
    arrive at twice the tile's rate (:mod:`ipusim.exchange.internal`).
    """

    kind: ClassVar[str] = "exchange"
    src_tile: np.ndarray | None = None
    dst_tile: np.ndarray | None = None
    num_bytes: np.ndarray | None = None
    message: np.ndarray | None = None
    tile: np.ndarray | None = None
    bytes_sent: np.ndarray | None = None
    bytes_received: np.ndarray | None = None
    messages_sent: np.ndarray | None = None
    messages_received: np.ndarray | None = None
    max_distance: np.ndarray | None = None
    host: bool = False
    senders_received: np.ndarray | None = None
    bytes_shared: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.tile is not None:
            for name in TOTALS:
                value = getattr(self, name)
                object.__setattr__(self, name, _array([] if value is None else value, np.int64))
            for name in ("senders_received", "bytes_shared"):
                value = getattr(self, name)
                if value is not None:
                    object.__setattr__(self, name, _array(value, np.int64))
            return
        src = _array([] if self.src_tile is None else self.src_tile, np.int64)
        object.__setattr__(self, "src_tile", src)
        object.__setattr__(self, "dst_tile", _array(_or_empty(self.dst_tile), np.int64))
        object.__setattr__(self, "num_bytes", _array(_or_empty(self.num_bytes), np.int64))
        msg = np.arange(src.size) if self.message is None else self.message
        object.__setattr__(self, "message", _array(msg, np.int64))

    @property
    def is_totals(self) -> bool:
        """Whether the exchange is given as per-tile totals."""
        return self.tile is not None


#: Fields of the per-tile form of an Exchange, in order.
TOTALS = (
    "tile",
    "bytes_sent",
    "bytes_received",
    "messages_sent",
    "messages_received",
    "max_distance",
)


def _or_empty(values: object) -> object:
    return [] if values is None else values


@dataclass(frozen=True, eq=False, kw_only=True)
class Sync(Step):
    """A sync: internal (one IPU), external (several IPUs) or host.

    ``ipus`` lists the IPUs taking part (None: every IPU). An internal sync is then
    run by each listed IPU on its own and skipped by the others; an external sync
    joins the listed IPUs (a host sync always joins every IPU). In a replicated
    program the ids are those of replica 0 and every replica takes part alike.

    ``tiles`` (internal and host syncs): only these tiles (global ids of replica 0,
    ascending) take part; the other tiles go on. A tile set that does its own host
    copies (I/O tiles) syncs with the host without stopping the tiles that compute.
    """

    kind: ClassVar[str] = "sync"
    sync_kind: SyncKind = SyncKind.INTERNAL
    ipus: tuple[int, ...] | None = None
    tiles: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sync_kind", SyncKind(self.sync_kind))
        if self.ipus is not None:
            object.__setattr__(self, "ipus", tuple(sorted({int(i) for i in self.ipus})))
        if self.tiles is not None:
            object.__setattr__(self, "tiles", _array(np.unique(self.tiles), np.int64))


@dataclass(frozen=True, eq=False, kw_only=True)
class StreamCopy(Step):
    """A host data-stream transfer: bytes per tile, in one direction.

    ``exchanged`` says that the on-chip side of the transfer (delivering the data to
    its tiles, or gathering it from them) is a separate ``Exchange`` step of the
    program; otherwise the copy itself lasts at least as long as its busiest tile
    needs at the exchange rate.

    ``prefetch`` (host-to-device copies only) lets the host send the data of the
    stream's next copy ahead of time: when this copy ends, the transfer of the next
    copy of ``stream`` starts in the background over the host link, and that copy
    waits only for what remains of it (docs/machine.md, "Prefetch"). Whether the host
    had that data ready is the data plane's answer to ``prefetch_predicate`` (asked
    after this step's effect; non-zero: ready); without a predicate it is assumed
    ready.

    ``tiles``: only these tiles (global ids of replica 0, ascending; I/O tiles) wait
    for the copy; None: every tile of each IPU the copy moves bytes for.
    """

    kind: ClassVar[str] = "stream_copy"
    direction: Direction
    tile: np.ndarray
    num_bytes: np.ndarray
    stream: str = ""
    exchanged: bool = False
    prefetch: bool = False
    prefetch_predicate: int | None = None
    tiles: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))
        object.__setattr__(self, "tile", _array(self.tile, np.int64))
        object.__setattr__(self, "num_bytes", _array(self.num_bytes, np.int64))
        if self.tiles is not None:
            object.__setattr__(self, "tiles", _array(np.unique(self.tiles), np.int64))


@dataclass(frozen=True, eq=False, kw_only=True)
class RemoteBufferCopy(StreamCopy):
    """A transfer between tiles and a remote buffer in Streaming Memory.

    ``stream`` names the remote buffer. Costed by the ``remote`` timing component:
    Streaming Memory's own link per IPU (``streaming_memory``), or the host link
    (``host_link``). Never prefetched.
    """

    kind: ClassVar[str] = "remote_buffer_copy"


@dataclass(frozen=True, eq=False, kw_only=True)
class GlobalExchange(Step):
    """Inter-IPU transfers over IPU-Links (tile ids are global).

    The IPUs taking part are those its transfers leave from or arrive at, plus
    ``ipus`` when given; only they spend time in the step. In a replicated program
    the tile ids are those of replica 0, and every replica makes the same transfers
    between its own IPUs at the same time (they share the links they cross); with
    ``replicated`` False the ids are machine-wide and the step runs once (a copy
    between replicas).
    """

    kind: ClassVar[str] = "global_exchange"
    src_tile: np.ndarray
    dst_tile: np.ndarray
    num_bytes: np.ndarray
    ipus: tuple[int, ...] | None = None
    replicated: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "src_tile", _array(self.src_tile, np.int64))
        object.__setattr__(self, "dst_tile", _array(self.dst_tile, np.int64))
        object.__setattr__(self, "num_bytes", _array(self.num_bytes, np.int64))
        if self.ipus is not None:
            object.__setattr__(self, "ipus", tuple(sorted({int(i) for i in self.ipus})))


#: Collective operations a :class:`Collective` step can perform.
COLLECTIVE_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
#: Algorithms a :class:`Collective` step can use.
COLLECTIVE_ALGORITHMS = ("ring", "bidirectional_ring")


@dataclass(frozen=True, eq=False, kw_only=True)
class Collective(Step):
    """A collective over IPU-Links: each group of IPUs runs ``op`` as a ring.

    ``groups[k]`` is the ring order of group ``k``'s IPUs (machine-wide ids, never
    replicated: a cross-replica collective names the IPUs of every replica).
    ``num_bytes[k]`` is the size of the data each member of group ``k`` holds
    (for ``all_gather``, the size of the gathered result), ``max_tile_bytes[k]`` the
    most any one tile of a member holds of it (the on-chip side of each ring step),
    ``member_tiles[k]`` how many tiles of a member hold some of it (each sends its part
    of a chunk as one message in every ring step; 1 when not given),
    ``element_bytes`` the size of one element (reductions). ``root`` is the
    position in each group of the member that broadcasts. Groups run at the same
    time; the IPUs of all groups take part in the step. The cost model is in
    docs/machine.md ("Collectives").
    """

    kind: ClassVar[str] = "collective"
    op: str
    groups: tuple[tuple[int, ...], ...]
    num_bytes: tuple[int, ...]
    max_tile_bytes: tuple[int, ...] = ()
    member_tiles: tuple[int, ...] = ()
    element_bytes: int = 4
    algorithm: str = "ring"
    root: int = 0

    def __post_init__(self) -> None:
        groups = tuple(tuple(int(i) for i in g) for g in self.groups)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "num_bytes", tuple(int(b) for b in self.num_bytes))
        tile_bytes = self.max_tile_bytes or self.num_bytes
        object.__setattr__(self, "max_tile_bytes", tuple(int(b) for b in tile_bytes))
        tiles = self.member_tiles or (1,) * len(groups)
        object.__setattr__(self, "member_tiles", tuple(int(t) for t in tiles))

    @property
    def ipus(self) -> tuple[int, ...]:
        """Every IPU taking part, sorted."""
        return tuple(sorted({i for g in self.groups for i in g}))


# ------------------------------------------------------------------- control nodes
@dataclass(frozen=True, eq=False)
class Sequence:
    """Run the children in order."""

    body: tuple[Node, ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "body", tuple(self.body))


@dataclass(frozen=True, eq=False)
class Block(Sequence):
    """A lightweight-profiling block: run the children in order and record, per tile,
    the clock when the block starts and ends (``Trace.blocks``).

    It is a :class:`Sequence` to every walk of the tree (memory, profiles, the CPU
    interpreter); only the machine treats it specially. ``name`` is the block's name
    and ``program_id`` the user-level program it came from.
    """

    program_id: int = -1


@dataclass(frozen=True, eq=False)
class Repeat:
    """Run ``body`` ``count`` times."""

    count: int
    body: Node


@dataclass(frozen=True, eq=False)
class RepeatWhile:
    """Run ``condition``, test ``predicate``; run ``body`` and loop while it equals
    ``while_true``."""

    condition: Node
    predicate: int
    body: Node
    while_true: bool = True


@dataclass(frozen=True, eq=False)
class If:
    """Run ``then`` when the predicate is non-zero, else ``else_``."""

    predicate: int
    then: Node
    else_: Node = field(default_factory=Sequence)


@dataclass(frozen=True, eq=False)
class Switch:
    """Run the case whose value equals the control value, else ``default``."""

    control: int
    cases: tuple[tuple[int, Node], ...]
    default: Node = field(default_factory=Sequence)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cases", tuple((int(v), n) for v, n in self.cases))


@dataclass(frozen=True, eq=False)
class Call:
    """Run function ``function`` of the program."""

    function: int


Node = Union[Step, Sequence, Block, Repeat, RepeatWhile, If, Switch, Call]  # noqa: UP007
#: The classes a node is an instance of (for ``isinstance``).
NODE_CLASSES: tuple[type, ...] = (Step, Sequence, Repeat, RepeatWhile, If, Switch, Call)

#: The step class of every kind of :data:`STEP_KINDS`.
STEP_CLASSES: dict[str, type[Step]] = {
    cls.kind: cls
    for cls in (Compute, Exchange, GlobalExchange, Collective, StreamCopy, RemoteBufferCopy, Sync)
}


@dataclass(frozen=True, eq=False)
class Program:
    """A machine program: entry points (run by index) and callable functions."""

    entries: tuple[Node, ...]
    functions: tuple[Node, ...] = ()
    #: Replicas of the program: steps (except collectives) name the tiles and IPUs of
    #: replica 0, the first ``num_ipus / replicas`` IPUs; replica ``r`` runs the same
    #: steps on its own IPUs, ``r * num_ipus / replicas`` onwards.
    replicas: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(self.entries))
        object.__setattr__(self, "functions", tuple(self.functions))


def as_program(program: Program | Node) -> Program:
    """Wrap a bare node as a single-entry program."""
    return program if isinstance(program, Program) else Program(entries=(program,))


# ---------------------------------------------------------------------- traversal
def children(node: Node) -> list[Node]:
    """The child nodes of a node, in execution-tree order (none for steps and calls).

    This is the one definition of the tree's shape; every walk of the IR uses it
    (directly, through :func:`named_children` or :class:`Visitor`).
    """
    if isinstance(node, Sequence):
        return list(node.body)
    if isinstance(node, Repeat):
        return [node.body]
    if isinstance(node, RepeatWhile):
        return [node.condition, node.body]
    if isinstance(node, If):
        return [node.then, node.else_]
    if isinstance(node, Switch):
        return [case for _, case in node.cases] + [node.default]
    return []


def named_children(node: Node) -> list[tuple[str, Node]]:
    """:func:`children` with the role of each in its parent, for messages: a
    sequence's position, ``body``, ``condition``, ``then``, ``else``, ``case <value>``
    or ``default``."""
    kids = children(node)
    if isinstance(node, Sequence):
        roles = [str(i) for i in range(len(kids))]
    elif isinstance(node, Switch):
        roles = [*(f"case {v}" for v, _ in node.cases), "default"]
    else:
        roles = list(_ROLES.get(type(node), ()))
    return list(zip(roles, kids, strict=True))


#: Roles of the children of the control nodes with a fixed number of them.
_ROLES: dict[type, tuple[str, ...]] = {
    Repeat: ("body",),
    RepeatWhile: ("condition", "body"),
    If: ("then", "else"),
}


def walk(node: Node) -> Iterator[Node]:
    """Every node below ``node`` (itself first), depth first, without following calls."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


class Visitor:
    """Base of a walk that treats each kind of node in its own way.

    :meth:`visit` calls ``visit_<node class>`` (``visit_step`` for every step,
    ``visit_block``, ``visit_sequence``, ``visit_repeat``, ``visit_repeat_while``,
    ``visit_if``, ``visit_switch``, ``visit_call``) with the node and any further
    arguments. A class without its own method falls back to its base class's (a
    :class:`Block` is visited as a :class:`Sequence` unless ``visit_block`` is
    overridden); each falls back to :meth:`generic_visit`, which visits
    :func:`children`. An object that is no IR node goes to :meth:`visit_other`.
    """

    def visit(self, node: Node, *args: object) -> object:
        """Dispatch ``node`` to the method for its class."""
        method = _VISIT_METHODS.get(type(node))
        if method is None:
            method = _visit_method(type(node))
        return getattr(self, method)(node, *args)

    def generic_visit(self, node: Node, *args: object) -> None:
        """Visit every child of ``node`` in order."""
        for child in children(node):
            self.visit(child, *args)

    def visit_step(self, node: Step, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_sequence(self, node: Sequence, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_block(self, node: Block, *args: object) -> object:
        return self.visit_sequence(node, *args)

    def visit_repeat(self, node: Repeat, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_repeat_while(self, node: RepeatWhile, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_if(self, node: If, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_switch(self, node: Switch, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_call(self, node: Call, *args: object) -> object:
        return self.generic_visit(node, *args)

    def visit_other(self, node: object, *args: object) -> object:
        return None


_METHOD_OF_CLASS = {
    Step: "visit_step",
    Block: "visit_block",
    Sequence: "visit_sequence",
    Repeat: "visit_repeat",
    RepeatWhile: "visit_repeat_while",
    If: "visit_if",
    Switch: "visit_switch",
    Call: "visit_call",
}
_VISIT_METHODS: dict[type, str] = {}


def _visit_method(cls: type) -> str:
    """The visit method of a node class: that of the nearest class in its MRO."""
    for base in cls.__mro__:
        if base in _METHOD_OF_CLASS:
            _VISIT_METHODS[cls] = _METHOD_OF_CLASS[base]
            return _METHOD_OF_CLASS[base]
    return "visit_other"


#: Items of :class:`ExecutionOrder` marking where a block starts and ends.
BLOCK_ENTER = "enter"
BLOCK_EXIT = "exit"


class ExecutionOrder(Visitor):
    """The path a program takes: its steps in the order they run.

    ``ExecutionOrder(program, predicate).visit(node)`` is an iterator of the steps
    run, control flow decided by ``predicate(id)`` (the data plane's value of a
    predicate), asked at the moment the path reaches the decision, so after every
    step before it has been taken from the iterator. Loops repeat their steps; calls
    follow into the program's functions. With ``blocks`` each :class:`Block` adds
    ``(BLOCK_ENTER, block)`` before its steps and ``(BLOCK_EXIT, block)`` after them.

    Every executor walks programs this way: the machine (which times the steps) and
    a values-only interpreter (which only applies their effects).
    """

    def __init__(
        self, program: Program, predicate: Callable[[int], int], blocks: bool = False
    ) -> None:
        self.functions = program.functions
        self.predicate = predicate
        self.blocks = blocks

    def visit_step(self, node: Step) -> Iterator[Step]:
        yield node

    def visit_sequence(self, node: Sequence) -> Iterator[object]:
        for child in node.body:
            if isinstance(child, Step):  # no nested generator for a step
                yield child
            else:
                yield from self.visit(child)

    def visit_block(self, node: Block) -> Iterator[object]:
        if not self.blocks:
            yield from self.visit_sequence(node)
            return
        yield (BLOCK_ENTER, node)
        yield from self.visit_sequence(node)
        yield (BLOCK_EXIT, node)

    def visit_repeat(self, node: Repeat) -> Iterator[object]:
        for _ in range(int(node.count)):
            yield from self.visit(node.body)

    def visit_repeat_while(self, node: RepeatWhile) -> Iterator[object]:
        while True:
            yield from self.visit(node.condition)
            if bool(self.predicate(node.predicate)) != node.while_true:
                break
            yield from self.visit(node.body)

    def visit_if(self, node: If) -> Iterator[object]:
        yield from self.visit(node.then if self.predicate(node.predicate) else node.else_)

    def visit_switch(self, node: Switch) -> Iterator[object]:
        value = self.predicate(node.control)
        yield from self.visit(next((n for v, n in node.cases if v == value), node.default))

    def visit_call(self, node: Call) -> Iterator[object]:
        yield from self.visit(self.functions[node.function])


def iter_steps(program: Program) -> list[Step]:
    """Every distinct step object reachable from the program, in tree order."""
    seen: dict[int, Step] = {}
    for root in (*program.entries, *program.functions):
        for node in walk(root):
            if isinstance(node, Step):
                seen.setdefault(id(node), node)
    return list(seen.values())
