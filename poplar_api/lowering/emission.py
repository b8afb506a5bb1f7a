"""The state of one emission: what lowering a graph's programs shares between steps.

:class:`Emission` holds the target's layout, the device memory effects are registered
in (:class:`~poplar_api.lowering.context.Lowered`), the host side of effects
(:class:`HostIO`), the problems found so far (collected, not raised), the owner change
points every exchange planner of the lowering shares, and what liveness and memory
placement need afterwards: the elements each IR node accesses (:meth:`Emission.touch`),
the ``WriteUndef`` nodes and the lowered compute sets. Its methods are the helpers
every program's lowering uses (ids of programs, syncs, exchanges, host transfers);
the lowering of each kind of program is a function of an ``Emission``
(:mod:`~poplar_api.lowering.emit` dispatches).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ipusim import ir
from poplar_api import program as P  # noqa: N812 - short alias for program classes
from poplar_api.errors import EngineError
from poplar_api.graph import DataStream
from poplar_api.lowering import runs
from poplar_api.lowering.computeset import ComputeSetRecord
from poplar_api.lowering.context import Lowered
from poplar_api.lowering.exchange import ExchangePlanner, OwnerCache, exchange_ipus
from poplar_api.lowering.liveness import Accesses, VariableIndex
from poplar_api.tensor import Tensor
from poplar_api.vertices import id_array

__all__ = ["Emission", "HostIO", "prefetch_option", "stream_exchange", "with_effect"]


def _filter(options: Mapping[str, str], name: str) -> re.Pattern[str] | None:
    """The compiled regular expression of option ``name`` (None when empty or unset).

    The Engine validates its options first; the error here only guards a lowering
    made without an Engine.
    """
    value = str(options.get(name, "") or "")
    if not value:
        return None
    try:
        return re.compile(value)
    except re.error as exc:
        raise EngineError(
            f"engine option {name!r}: value {value!r} is not a valid regular expression "
            f"({exc}); hint: the filter must match whole block or program names, e.g. "
            "'stage.*' or 'op1|op2'"
        ) from None


def prefetch_option(options: Mapping[str, str]) -> bool:
    """The engine option ``exchange.enablePrefetch`` (default true, as in Poplar)."""
    return str(options.get("exchange.enablePrefetch", "true")).strip().lower() == "true"


class HostIO:
    """What the host side of effects needs: stream buffers, callbacks, remote buffers
    and stdout (``poplar_api.streams.HostStreams`` is the engine's)."""

    def pull(self, stream: DataStream) -> np.ndarray:  # pragma: no cover - interface
        """The data of one copy from a host-to-device stream."""
        raise NotImplementedError

    def pulled(self, stream: DataStream) -> None:  # pragma: no cover - interface
        """The data of the last :meth:`pull` is on the device."""

    def prefetched(self, stream: DataStream) -> bool:  # pragma: no cover - interface
        """Whether the data of the stream's next copy is ready on the host now."""
        return False

    def push(self, stream: DataStream, values: np.ndarray) -> None:  # pragma: no cover
        """Hand the data of one copy to a device-to-host stream."""
        raise NotImplementedError

    def plain_replicas(self, stream: DataStream) -> bool:
        """Whether one effect may serve every replica's end of ``stream`` in turn
        (:meth:`pull_replica`, :meth:`push_replica`) instead of the data plane selecting
        each replica; False here, so that a host without replicas needs neither."""
        return False

    def pull_rows(self, stream: DataStream) -> np.ndarray | None:
        """Every replica's :meth:`pull_replica` at once (``[replicas, n]``), or None:
        then replica by replica."""
        return None

    def push_rows(self, stream: DataStream, values: np.ndarray) -> bool:
        """Every replica's :meth:`push_replica` of its row of ``values`` at once; whether
        it was done (False: nothing done)."""
        return False

    def pull_replica(self, stream: DataStream, replica: int) -> np.ndarray:  # pragma: no cover
        """:meth:`pull` and :meth:`pulled` of replica ``replica``'s end."""
        raise NotImplementedError

    def push_replica(  # pragma: no cover - interface
        self, stream: DataStream, replica: int, values: np.ndarray
    ) -> None:
        """:meth:`push` to replica ``replica``'s end."""
        raise NotImplementedError

    def remote_data(self, buffer: Any) -> np.ndarray:  # pragma: no cover - interface
        """The contents of a remote buffer, [repeats, numElements] (written in place)."""
        raise NotImplementedError

    def print(self, text: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError


def stream_exchange(
    label: str,
    pid: int,
    tiles: np.ndarray,
    nbytes: np.ndarray,
    messages: np.ndarray,
    to_device: bool,
) -> ir.Exchange:
    """The on-chip exchange of a host transfer: ``tiles`` receive (``to_device``) or
    send ``nbytes[k]`` bytes in ``messages[k]`` messages each, to or from the host."""
    none = np.zeros(tiles.size, np.int64)
    return ir.Exchange(
        name=f"{label}/StreamExchange",
        program_id=pid,
        host=True,
        tile=tiles,
        bytes_sent=none if to_device else nbytes,
        bytes_received=nbytes if to_device else none,
        messages_sent=none if to_device else messages,
        messages_received=messages if to_device else none,
        max_distance=none,
    )


class Emission:
    """What the lowering of one graph's programs shares; problems are collected, not
    raised.

    Parameters
    ----------
    state
        The graph state.
    lowered
        Where effects and predicates are registered (closures over its storage).
    host
        The host side of stream and remote-buffer effects.
    options
        Engine options (``profiler.*.filter``, ``exchange.enablePrefetch``).
    """

    def __init__(
        self,
        state: Any,
        lowered: Lowered,
        host: HostIO,
        options: Mapping[str, str] | None = None,
    ) -> None:
        target = state.target
        self.state = state
        self.target = target
        self.cfg = target.config
        self.num_tiles = target.getNumTiles()
        self.tiles_per_ipu = int(self.cfg.tile.tiles_per_ipu)
        self.num_ipus = max(1, self.num_tiles // self.tiles_per_ipu)
        self.lowered = lowered
        self.host = host
        self.problems: list[str] = []
        #: where element owners change, for every planner of this lowering
        self.owners = OwnerCache()
        #: which variable owns each element (arrays made once per lowering)
        self.variables = VariableIndex(state)
        self.copy_vertex_type: tuple[str, ...] = ("Copy",)
        self._io_tiles: np.ndarray | None = None  # see sync_tiles
        #: id of an id array -> (the array, its slice or itself): see :meth:`index`
        self._indices: dict[int, tuple[np.ndarray, np.ndarray | slice]] = {}
        #: id of an id array -> (the array, its span): see :meth:`span`
        self._spans: dict[int, tuple[np.ndarray, tuple[int, int]]] = {}
        self._constants: np.ndarray | None = None  # see _constant_flags
        self.program_ids: dict[int, int] = {}
        self.programs: list[P.Program] = []  # keeps lowered programs alive (ids stay unique)
        #: id(IR node) -> (element type, element ids) its steps read or write (liveness)
        self.touches: dict[int, list[tuple[Any, Any]]] = {}
        #: (element size, id of an id array, or a range's start, stop and step) -> (the
        #: ids, what :meth:`touch` records of them): a copy lowered in two programs
        #: records one object twice, which liveness marks once
        self._touched_ids: dict[tuple[int, ...], tuple[Any, Any]] = {}
        #: id(IR node of a WriteUndef) -> (element type, element ids) it makes undefined
        self.undefs: dict[int, list[tuple[Any, np.ndarray | range]]] = {}
        #: compute set id -> its lowered compute set (each is lowered once)
        self.compute_sets: dict[int, ComputeSetRecord] = {}
        #: id of a checked Copy between tensors -> (the program, its planned steps): a
        #: program met again gets copies of them (lowering.copies.device_copy)
        self.device_copies: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        options = options or {}
        #: the engine options (``debug.vertexCycles`` chooses counted execution)
        self.options = options
        self.blocks_filter = _filter(options, "profiler.blocks.filter")
        self.programs_filter = _filter(options, "profiler.programs.filter")
        #: exchange.enablePrefetch: host-to-device stream copies are prefetched
        self.prefetch = prefetch_option(options)

    def accesses(self) -> Accesses:
        """What liveness needs of this emission."""
        executes = frozenset(id(r.node) for r in self.compute_sets.values())
        return Accesses(dict(self.touches), dict(self.undefs), executes)

    def pid(self, prog: P.Program) -> int:
        """Program id for profiles: numbered in lowering order, so deterministic."""
        return self.program_ids.setdefault(id(prog), len(self.program_ids))

    def tensor(self, t: Any, what: str) -> Tensor | None:
        """``t`` when it is a tensor of this graph, else None and a problem naming
        ``what``."""
        if not isinstance(t, Tensor) or t.graph is not self.state:
            self.problems.append(f"{what}: expected a tensor of this graph, got {t!r}")
            return None
        return t

    def index(self, ids: np.ndarray) -> np.ndarray | slice:
        """:func:`~poplar_api.lowering.runs.as_index` of a tensor's id array, once per
        array (a tensor's flat ids are one cached array, checked by several copies)."""
        known = self._indices.get(id(ids))
        if known is None or known[0] is not ids:
            known = self._indices[id(ids)] = (ids, runs.as_index(ids))
        return known[1]

    def span(self, ids: np.ndarray | range) -> tuple[int, int]:
        """``(min, max + 1)`` of a tensor's non-empty ids as :meth:`Tensor._flat_ids`
        gives them, once per array (a copy's overlap check, its constant check and its
        liveness record each ask for both sides' spans)."""
        if isinstance(ids, range) and ids.step == 1:
            return ids.start, ids.stop
        known = self._spans.get(id(ids))
        if known is None or known[0] is not ids:
            known = self._spans[id(ids)] = (ids, runs.span(id_array(ids)))
        return known[1]

    def keep_span(self, ids: np.ndarray, span: tuple[int, int]) -> None:
        """Keep ``span``, found elsewhere, as :meth:`span` of the id array ``ids``."""
        self._spans[id(ids)] = (ids, span)

    def where(self, ids: np.ndarray | range) -> np.ndarray | slice:
        """:meth:`index` of a tensor's ids as :meth:`Tensor._flat_ids` gives them."""
        return runs.as_index(ids) if isinstance(ids, range) else self.index(ids)

    def tiles(self, t: Tensor, dtype: type = np.int64) -> np.ndarray:
        """Tile of each element of ``t`` (int64, or ``dtype``; in its row-major order)."""
        return self.state.space(t.elementType()).tile[t._id_index()].astype(dtype, copy=False)

    def predicate(
        self, t: Any, what: str, integral: bool = False, cases: tuple[int, ...] | None = None
    ) -> int | None:
        """Register the predicate that reads control tensor ``t`` (a scalar); its index,
        or None and a problem naming ``what``.

        ``integral`` asks for an integral type (a Switch's control: the value selects
        the case); with ``cases`` a value matching none of them stops the run. Otherwise
        any non-zero value is true.
        """
        t = self.tensor(t, what)
        if t is None:
            return None
        if t.numElements() != 1:
            self.problems.append(
                f"{what}: predicate tensor '{t.name}' has {t.numElements()} elements (shape "
                f"{t.shape()}); it must be a scalar"
            )
            return None
        if integral and t.elementType().is_floating:
            self.problems.append(
                f"{what}: control tensor '{t.name}' has element type {t.elementType()}; it "
                "must be of an integral type (INT, UNSIGNED_INT, ...); hint: cast it with popops"
            )
            return None
        storage, typ, ids = self.lowered.storage, t.elementType(), t.flat_index()
        if cases is not None:  # a Switch that must match a case
            name = t.name

            def checked() -> int:
                value = int(storage.read(typ, ids)[0])
                if value not in cases:
                    raise EngineError(
                        f"{what}: control tensor '{name}' has value {value}, which matches "
                        f"no case (cases: {list(cases)}); this Switch has no default to run; "
                        "hint: keep the control within the case values"
                    )
                return value

            return self.lowered.predicate(checked)
        if integral:  # Switch: the value itself selects the case
            return self.lowered.predicate(lambda: int(storage.read(typ, ids)[0]))
        # If / RepeatWhile: any non-zero value is true (int() would turn 0.5 into false)
        return self.lowered.predicate(lambda: int(storage.read(typ, ids)[0] != 0))

    def sync(
        self,
        pid: int,
        kind: str = "internal",
        name: str = "Sync",
        ipus: tuple[int, ...] | None = None,
        tiles: np.ndarray | None = None,
    ) -> ir.Sync:
        """A sync step of ``kind`` (``internal``, ``external``, ``host``) for program
        ``pid``; ``ipus`` lists the IPUs taking part (None: all), ``tiles`` the tiles
        (None: all of them)."""
        return ir.Sync(name=name, program_id=pid, sync_kind=kind, ipus=ipus, tiles=tiles)

    def predicate_sync(self, pid: int) -> ir.Sync:
        """The sync before a control-flow predicate is read: internal on one IPU; on
        several, external over all of them (each IPU needs the predicate's value)."""
        return self.sync(pid, "external" if self.num_ipus > 1 else "internal")

    def exchange_steps(
        self, planner: ExchangePlanner, name: str, sync_name: str, pid: int, suffix: str = ""
    ) -> list[ir.Node]:
        """The steps of a planned exchange, in order (none when nothing moves).

        Elements that cross IPUs: an external sync of the IPUs involved and a
        ``GlobalExchange``; then the on-chip part: an internal sync and the
        ``Exchange``. On a target of several IPUs the
        internal sync lists the IPUs its exchange involves; on one IPU it stays
        without ``ipus``, as before. Names: ``{name}`` for the on-chip exchange,
        ``{sync_name}`` for its sync, ``{base}/GlobalExchange{suffix}`` and
        ``{base}/ExternalSync{suffix}`` for the global part (``base`` is ``name``
        up to its last ``/``).
        """
        nodes: list[ir.Node] = []
        if _planned_nothing(planner):
            return nodes
        base = name.rsplit("/", 1)[0]
        glob = planner.build_global(f"{base}/GlobalExchange{suffix}", pid)
        if glob is not None:
            ipus = exchange_ipus(glob, self.tiles_per_ipu)
            sync = self.sync(pid, "external", f"{base}/ExternalSync{suffix}", ipus)
            nodes += [sync, glob]
        on_chip = planner.build(name, pid)
        if on_chip is not None:
            ipus = exchange_ipus(on_chip, self.tiles_per_ipu) if self.num_ipus > 1 else None
            tiles = self.sync_tiles(on_chip)
            nodes += [self.sync(pid, name=sync_name, ipus=ipus, tiles=tiles), on_chip]
        return nodes

    def sync_tiles(self, exchange: ir.Exchange) -> np.ndarray | None:
        """The tiles of the internal sync before ``exchange``: all (None), except that an
        exchange among the other tiles leaves the I/O tiles out, so their host copies
        go on while the compute tiles sync (docs/machine.md, "I/O tiles"). I/O tiles are
        those of streams made on a virtual graph covering part of an IPU."""
        if self._io_tiles is None:
            io = [np.asarray(s.tiles, np.int64) for s in self.state.streams.values() if s.tiles]
            io = np.unique(np.concatenate(io)) if io else np.zeros(0, np.int64)
            per_ipu = np.bincount(io // self.tiles_per_ipu)
            whole = np.flatnonzero(per_ipu == self.tiles_per_ipu)
            self._io_tiles = io[~np.isin(io // self.tiles_per_ipu, whole)]
        if not self._io_tiles.size:
            return None
        if exchange.tile is not None:
            used = exchange.tile
        else:
            used = np.union1d(exchange.src_tile, exchange.dst_tile)
        if np.isin(used, self._io_tiles).any():
            return None
        return np.setdiff1d(np.arange(self.num_tiles, dtype=np.int64), self._io_tiles)

    def touch(self, node: Any, *tensors: Any) -> Any:
        """Record that ``node``'s steps access ``tensors`` (for memory liveness): their
        ids, or one run ``(begin, end)`` for a tensor of consecutive ids or for one whose
        span lies in a single variable (liveness asks only which variables own the
        elements, and then that variable alone does: its elements are not read again
        one by one)."""
        parts = [
            (t.elementType(), self._touched_tensor(t))
            for t in tensors
            if isinstance(t, Tensor) and t.graph is self.state
        ]
        self.touches.setdefault(id(node), []).extend(parts)
        return node

    def _touched_tensor(self, t: Tensor) -> Any:
        """What :meth:`touch` records of ``t``: of a tensor repeating one row along
        dimension 0 (a broadcast, whose ids repeat and so are never one run), the block
        of that row's span when one variable holds it, found from the row alone."""
        row = t._broadcast_row()
        if row is not None and row.size:
            lo, hi = self.span(row)
            if self.variables.in_one_variable(t.elementType(), lo, hi):
                return np.array([lo], np.int64), np.array([hi], np.int64)
        return self._touched(t.elementType(), t._flat_ids())

    def field_touched(self, typ: Any, part: Any) -> Any:
        """What a compute set's field touches, as liveness takes it: its id runs, or its
        ids (``part``, :meth:`~poplar_api.lowering.field_tables.FieldTable.touched`);
        ids whose span lies in a single variable as the run of that span (:meth:`touch`'s
        rule). Their span is found here, as the compute set is lowered, right after its
        exchange planning read the ids: liveness, which reads them again otherwise, comes
        after every program is lowered (2 of the 2.8 million ids it read in the PopART
        CNN's step lie in one variable each)."""
        if isinstance(part, tuple) or not part.size:
            return part
        lo, hi = runs.span(part)
        if self.variables.in_one_variable(typ, lo, hi):
            return np.array([lo], np.int64), np.array([hi], np.int64)
        return part

    def _touched(self, typ: Any, ids: np.ndarray | range) -> Any:
        """What :meth:`touch` records of a tensor's ids (see there), one object per id
        array or range."""
        key: tuple[int, ...] = (
            (typ.size, ids.start, ids.stop, ids.step)
            if isinstance(ids, range)
            else (typ.size, id(ids))
        )
        known = self._touched_ids.get(key)
        if known is not None and (known[0] is ids or isinstance(ids, range)):
            return known[1]
        part = runs.ids_or_run(ids)
        if not isinstance(part, tuple) and part.size:
            lo, hi = self.span(ids)
            if self.variables.in_one_variable(typ, lo, hi):
                part = (np.array([lo], np.int64), np.array([hi], np.int64))
        self._touched_ids[key] = (ids, part)
        return part

    def constant_of(self, t: Tensor) -> str | None:
        """Name of a constant that ``t`` has elements of, or None."""
        typ = t.elementType()
        if self.state.find_space(typ) is None or t.numElements() == 0:
            return None
        where = self.where(t._flat_ids())
        if isinstance(where, slice):  # one block of ids: the variables it overlaps
            block = (np.array([where.start], np.int64), np.array([where.stop], np.int64))
        else:  # the variables of the ids' span first (a rearranged tensor's is one)
            lo, hi = self.span(where)
            block = (np.array([lo], np.int64), np.array([hi], np.int64))
        vids = self.variables.mark([(typ, block)])
        constant = self._constant_flags()
        if not isinstance(where, slice) and constant[vids].any():
            vids = self.variables.mark([(typ, where)])  # the variables of the ids themselves
        found = vids[constant[vids]]
        return self.state.variables[int(found[0])].name if found.size else None

    def _constant_flags(self) -> np.ndarray:
        """Whether each variable is a constant (by id), made once per lowering (no
        variable object per variable a copy's span holds)."""
        variables = self.state.variables
        if self._constants is None or self._constants.size != len(variables):
            self._constants = variables.constant_flags()
        return self._constants

    def host_transfer(
        self,
        prog: P.Program,
        t: Tensor,
        label: str,
        to_device: bool,
        effect: int,
        prefetch: int | None = None,
        remote: str | None = None,
        scope: tuple[int, ...] | None = None,
    ) -> ir.Node:
        """A host transfer as the machine runs it: a host sync, then the host link part
        (``StreamCopy``) and the on-chip part (an ``Exchange`` delivering the data to its
        tiles, or gathering it from them first).

        The on-chip part moves each tile's bytes in messages, one per run of elements
        that are consecutive in the stream and in the tensor's element ids.
        ``prefetch`` is the predicate telling whether the stream's next data is ready
        (the copy is then prefetched). With ``remote`` (a remote buffer's handle) it is a
        Streaming Memory transfer instead: an internal sync (the host takes no part)
        and a ``RemoteBufferCopy``. With ``scope`` (the tiles of the virtual graph
        that made the stream) covering part of an IPU (I/O tiles), only those tiles
        sync with the host and wait for the copy; the others go on (docs/machine.md,
        "I/O tiles"). A virtual graph of whole IPUs keeps the copy IPU-wide.
        """
        space = self.state.space(t.elementType())
        ids = t._flat_ids()
        changes = None
        if type(ids) is range and len(ids) >= runs.STRETCHES_FROM:
            changes = self.owners.changes_of(t.elementType().size, space.tile, space.size)
        elements, messages = runs.transfer_counts(ids, space.tile, self.num_tiles, changes)
        nbytes = elements * t.elementType().size
        tiles = np.flatnonzero(nbytes)
        pid = self.pid(prog)
        common = {
            "name": label,
            "effect": effect,
            "program_id": pid,
            "direction": "host_to_device" if to_device else "device_to_host",
            "tile": tiles,
            "num_bytes": nbytes[tiles],
            "exchanged": True,
        }
        if remote is not None:
            step: ir.StreamCopy = ir.RemoteBufferCopy(stream=remote, **common)
        else:
            scoped = None
            if scope is not None:  # the stream's tiles, and any tile of the tensor outside
                scoped = np.union1d(np.asarray(scope, np.int64), tiles)
                per_ipu = np.bincount(scoped // self.tiles_per_ipu)
                if np.all(per_ipu[per_ipu > 0] == self.tiles_per_ipu):
                    scoped = None  # whole IPUs (a graph per IPU): not an I/O tile set
            step = ir.StreamCopy(
                stream=label,
                prefetch=prefetch is not None,
                prefetch_predicate=prefetch,
                tiles=scoped,
                **common,
            )
        on_chip = stream_exchange(label, pid, tiles, nbytes[tiles], messages[tiles], to_device)
        parts = [step, on_chip] if to_device else [on_chip, step]
        if remote is not None:
            sync = self.sync(pid, "internal", f"{label}/Sync")
        else:
            sync = self.sync(pid, "host", f"{label}/HostSync", tiles=step.tiles)
        node = ir.Sequence([sync, *parts], name=label)
        return self.touch(node, t)


def with_effect(step: ir.Step, effect: int) -> ir.Step:
    """A copy of ``step`` carrying ``effect``."""
    return dataclasses.replace(step, effect=effect)


def _planned_nothing(planner: ExchangePlanner) -> bool:
    """Whether no element crosses tiles in what ``planner`` was given (then its
    ``build`` and ``build_global`` give None): a compute set whose vertices read and
    write only their own tiles' elements, found before any per-tile totals are made."""
    return (
        not (planner.sender or planner.intervals or planner.strided or planner.relayed)
        and not planner.global_keys
        and planner.pair_map is None
        and not np.count_nonzero(planner.received)  # (no ndarray.any wrapper: 6x)
    )
