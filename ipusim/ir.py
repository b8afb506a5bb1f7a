"""Machine program IR: the contract between lowering and the machine.

A machine program is a tree of control nodes whose leaves are steps. Control flow is
global: every tile group follows the same path, and predicates are answered by the
data plane. Per-vertex and per-transfer data are numpy arrays, never objects, so that
timing can be computed for a whole IPU at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Union

import numba
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

#: Phases a step's cycles count in, in report order.
PHASES = ("compute", "internal_exchange", "global_exchange", "host_exchange", "sync")


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

    def __post_init__(self) -> None:
        if self.tile is not None:
            for name in TOTALS:
                value = getattr(self, name)
                object.__setattr__(self, name, _array([] if value is None else value, np.int64))
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
    """

    kind: ClassVar[str] = "sync"
    sync_kind: SyncKind = SyncKind.INTERNAL
    ipus: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "sync_kind", SyncKind(self.sync_kind))
        if self.ipus is not None:
            object.__setattr__(self, "ipus", tuple(sorted({int(i) for i in self.ipus})))


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
    """

    kind: ClassVar[str] = "stream_copy"
    direction: Direction
    tile: np.ndarray
    num_bytes: np.ndarray
    stream: str = ""
    exchanged: bool = False
    prefetch: bool = False
    prefetch_predicate: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "direction", Direction(self.direction))
        object.__setattr__(self, "tile", _array(self.tile, np.int64))
        object.__setattr__(self, "num_bytes", _array(self.num_bytes, np.int64))


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
    element_bytes: int = 4
    algorithm: str = "ring"
    root: int = 0

    def __post_init__(self) -> None:
        groups = tuple(tuple(int(i) for i in g) for g in self.groups)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "num_bytes", tuple(int(b) for b in self.num_bytes))
        tile_bytes = self.max_tile_bytes or self.num_bytes
        object.__setattr__(self, "max_tile_bytes", tuple(int(b) for b in tile_bytes))

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

    This is the one definition of the tree's shape; every walk of the IR uses it.
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


def walk(node: Node) -> Iterator[Node]:
    """Every node below ``node`` (itself first), depth first, without following calls."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(children(current)))


def iter_steps(program: Program) -> list[Step]:
    """Every distinct step object reachable from the program, in tree order."""
    seen: dict[int, Step] = {}
    for root in (*program.entries, *program.functions):
        for node in walk(root):
            if isinstance(node, Step):
                seen.setdefault(id(node), node)
    return list(seen.values())


# --------------------------------------------------------------------- validation
def validate_program(program: Program | Node, num_tiles: int, tiles_per_ipu: int) -> Program:
    """Check a program against a machine size; raise with every problem found.

    Raises
    ------
    IRValidationError
        Listing each problem with the step's name, the field, the value and what
        was required.
    """
    program = as_program(program)
    problems: list[str] = []
    num_ipus = max(1, num_tiles // tiles_per_ipu)
    replicas = program.replicas
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int | np.integer)
        or replicas < 1
        or num_ipus % replicas
    ):
        raise IRValidationError(
            [
                f"program replicas: found {replicas!r}; it must be an int >= 1 that divides "
                f"the machine's {num_ipus} IPU(s); hint: a replica needs a whole number of IPUs"
            ]
        )
    full_tiles = num_tiles
    num_tiles //= replicas  # steps name the tiles of replica 0
    replica_ipus = num_ipus // replicas

    def where(step: Step, fld: str) -> str:
        return f"{step.kind} step '{step.name}' field '{fld}'"

    def check_ipus(step: Step, fld: str, ipus: tuple[int, ...] | None, limit: int) -> None:
        bad = [i for i in ipus or () if not 0 <= i < limit]
        if bad:
            scope = "the machine" if limit == num_ipus else "replica 0"
            problems.append(
                f"{where(step, fld)}: IPU {bad[0]} is out of range [0, {limit}) of {scope}; "
                f"hint: the machine has {num_ipus} IPU(s) in {replicas} replica(s)"
            )

    def check_tiles(step: Step, fld: str, arr: np.ndarray, limit: int | None = None) -> None:
        limit = num_tiles if limit is None else limit
        first, count = _outside(arr, 0, limit - 1)
        if count:
            scope = "the machine has" if limit == full_tiles else "replica 0 has"
            problems.append(
                f"{where(step, fld)}: tile {int(arr[first])} at index {first} is out of "
                f"range [0, {limit}) ({count} bad entr{'y' if count == 1 else 'ies'}); "
                f"hint: {scope} {limit} tiles"
            )

    def check_nonneg(step: Step, fld: str, arr: np.ndarray) -> None:
        first, count = _outside(arr, 0, _INT64_MAX)
        if count:
            problems.append(
                f"{where(step, fld)}: value {int(arr[first])} at index {first} is "
                f"negative; required >= 0"
            )

    def check_lengths(step: Step, names: tuple[str, ...]) -> bool:
        sizes = {n: getattr(step, n).size for n in names}
        if len(set(sizes.values())) > 1:
            desc = ", ".join(f"{n}={s}" for n, s in sizes.items())
            problems.append(
                f"{step.kind} step '{step.name}': array lengths differ ({desc}); "
                "required one entry per vertex/transfer in each"
            )
            return False
        return True

    for step in iter_steps(program):
        if isinstance(step, Compute):
            fields = ("vertex_tile", "vertex_cycles", "vertex_multi", "vertex_type")
            if check_lengths(step, fields):
                check_tiles(step, "vertex_tile", step.vertex_tile)
                check_nonneg(step, "vertex_cycles", step.vertex_cycles)
                nt = len(step.vertex_type_names)
                first, count = _outside(step.vertex_type, 0, nt - 1)
                if count:
                    problems.append(
                        f"{where(step, 'vertex_type')}: type index {int(step.vertex_type[first])}"
                        f" is out of range [0, {nt}) of vertex_type_names"
                    )
        elif isinstance(step, Exchange) and step.is_totals:
            if check_lengths(step, TOTALS):
                check_tiles(step, "tile", step.tile)
                for name in TOTALS[1:]:
                    check_nonneg(step, name, getattr(step, name))
                if _repeats(step.tile, num_tiles):
                    problems.append(f"{where(step, 'tile')}: a tile is listed more than once")
        elif isinstance(step, Exchange | GlobalExchange):
            names = ("src_tile", "dst_tile", "num_bytes")
            if isinstance(step, Exchange):
                names = (*names, "message")
            limit = num_tiles
            if isinstance(step, GlobalExchange):
                wide = not step.replicated
                limit = full_tiles if wide else num_tiles
                check_ipus(step, "ipus", step.ipus, num_ipus if wide else replica_ipus)
            if check_lengths(step, names):
                check_tiles(step, "src_tile", step.src_tile, limit)
                check_tiles(step, "dst_tile", step.dst_tile, limit)
                check_nonneg(step, "num_bytes", step.num_bytes)
                k = _wrong_ipu(
                    step.src_tile, step.dst_tile, limit, tiles_per_ipu, isinstance(step, Exchange)
                )
                if k >= 0:
                    s, d = int(step.src_tile[k]), int(step.dst_tile[k])
                    if isinstance(step, Exchange):
                        msg = "crosses IPUs; hint: use a GlobalExchange step"
                    else:
                        msg = "stays on one IPU; hint: use an Exchange step"
                    problems.append(f"{where(step, 'dst_tile')}: transfer {k} ({s}->{d}) {msg}")
        elif isinstance(step, Sync):
            check_ipus(step, "ipus", step.ipus, replica_ipus)
        elif isinstance(step, Collective):
            _check_collective(step, num_ipus, problems)
        elif isinstance(step, StreamCopy) and check_lengths(step, ("tile", "num_bytes")):
            check_tiles(step, "tile", step.tile)
            check_nonneg(step, "num_bytes", step.num_bytes)
            prefetchable = step.direction is Direction.HOST_TO_DEVICE and not isinstance(
                step, RemoteBufferCopy
            )
            if step.prefetch and not prefetchable:
                problems.append(
                    f"{where(step, 'prefetch')}: True on a {step.kind} step of direction "
                    f"{step.direction.value}; only host-to-device stream copies are "
                    "prefetched; hint: set prefetch=False"
                )

    def check_node(node: Node, path: str) -> None:
        if isinstance(node, Step):
            return
        if isinstance(node, Sequence):
            for i, child in enumerate(node.body):
                check_node(child, f"{path}/{i}")
        elif isinstance(node, Repeat):
            if not isinstance(node.count, int | np.integer) or node.count < 0:
                problems.append(f"Repeat at {path}: count {node.count!r} must be an int >= 0")
            check_node(node.body, f"{path}/body")
        elif isinstance(node, RepeatWhile):
            check_node(node.condition, f"{path}/condition")
            check_node(node.body, f"{path}/body")
        elif isinstance(node, If):
            check_node(node.then, f"{path}/then")
            check_node(node.else_, f"{path}/else")
        elif isinstance(node, Switch):
            values = [v for v, _ in node.cases]
            if len(set(values)) != len(values):
                problems.append(f"Switch at {path}: duplicate case values {sorted(values)}")
            for v, case in node.cases:
                check_node(case, f"{path}/case {v}")
            check_node(node.default, f"{path}/default")
        elif isinstance(node, Call):
            if not 0 <= node.function < len(program.functions):
                problems.append(
                    f"Call at {path}: function {node.function} does not exist "
                    f"(the program has {len(program.functions)} function(s))"
                )
        else:
            problems.append(f"{path}: {type(node).__name__} is not an IR node")

    for i, entry in enumerate(program.entries):
        check_node(entry, f"entry {i}")
    for i, fn in enumerate(program.functions):
        check_node(fn, f"function {i}")
    _check_call_cycles(program, problems)
    if problems:
        raise IRValidationError(problems)
    return program


#: Upper bound of the non-negative checks.
_INT64_MAX = int(np.iinfo(np.int64).max)


@numba.njit(cache=True)
def _outside(values, lo, hi):  # pragma: no cover - compiled
    """(first index of a value outside ``[lo, hi]``, how many) or (-1, 0)."""
    first = -1
    count = 0
    for i in range(values.shape[0]):
        v = values[i]
        if v < lo or v > hi:
            if first < 0:
                first = i
            count += 1
    return first, count


@numba.njit(cache=True)
def _repeats(tiles, limit):  # pragma: no cover - compiled
    """Whether a tile id in ``[0, limit)`` occurs more than once (others are ignored)."""
    seen = np.zeros(limit, np.bool_)
    for i in range(tiles.shape[0]):
        t = tiles[i]
        if 0 <= t < limit:
            if seen[t]:
                return True
            seen[t] = True
    return False


@numba.njit(cache=True)
def _wrong_ipu(src, dst, limit, tiles_per_ipu, same):  # pragma: no cover - compiled
    """First transfer with both ends in ``[0, limit)`` whose ends are on different IPUs
    (``same``) or on one IPU (not ``same``); -1 if none."""
    for k in range(src.shape[0]):
        s = src[k]
        d = dst[k]
        inside = 0 <= s < limit and 0 <= d < limit
        if inside and (s // tiles_per_ipu == d // tiles_per_ipu) != same:
            return k
    return -1


def _check_collective(step: Collective, num_ipus: int, problems: list[str]) -> None:
    """Problems of a collective step: op, algorithm, groups, sizes and root."""
    where = f"collective step '{step.name}'"
    if step.op not in COLLECTIVE_OPS:
        problems.append(
            f"{where} field 'op': found {step.op!r}; expected one of {', '.join(COLLECTIVE_OPS)}"
        )
    if step.algorithm not in COLLECTIVE_ALGORITHMS:
        problems.append(
            f"{where} field 'algorithm': found {step.algorithm!r}; expected one of "
            f"{', '.join(COLLECTIVE_ALGORITHMS)}"
        )
    if len(step.num_bytes) != len(step.groups) or len(step.max_tile_bytes) != len(step.groups):
        problems.append(
            f"{where}: {len(step.groups)} group(s) but {len(step.num_bytes)} num_bytes and "
            f"{len(step.max_tile_bytes)} max_tile_bytes; required one of each per group"
        )
    if any(b < 0 for b in (*step.num_bytes, *step.max_tile_bytes)) or step.element_bytes < 1:
        problems.append(f"{where}: byte counts must be >= 0 and element_bytes >= 1")
    seen: set[int] = set()
    for k, group in enumerate(step.groups):
        if not group:
            problems.append(f"{where} group {k}: it is empty; a group needs at least one IPU")
        bad = [i for i in group if not 0 <= i < num_ipus]
        if bad:
            problems.append(
                f"{where} group {k}: IPU {bad[0]} is out of range [0, {num_ipus}); hint: "
                "collectives name machine-wide IPU ids"
            )
        twice = sorted(set(group) & seen | {i for i in group if group.count(i) > 1})
        if twice:
            problems.append(
                f"{where} group {k}: IPU {twice[0]} takes part more than once (in this or "
                "an earlier group); every IPU belongs to at most one group"
            )
        seen |= set(group)
        if group and not 0 <= step.root < len(group):
            problems.append(
                f"{where} field 'root': {step.root} is not a position in group {k} of "
                f"{len(group)} IPU(s)"
            )


def _check_call_cycles(program: Program, problems: list[str]) -> None:
    """Functions may not call themselves, directly or not (no recursion on the IPU)."""

    def calls(node: Node) -> set[int]:
        return {n.function for n in walk(node) if isinstance(n, Call)}

    graph = {i: calls(fn) for i, fn in enumerate(program.functions)}
    for start in graph:
        stack, seen = list(graph[start]), set()
        while stack:
            f = stack.pop()
            if f == start:
                problems.append(f"function {start} calls itself (recursion is not supported)")
                break
            if f in seen or f not in graph:
                continue
            seen.add(f)
            stack.extend(graph[f])
