"""Exchange planning: which elements must cross tiles, as IR exchange steps.

An element needed on a tile other than the one it comes from must be sent there.
Each receiving tile gets every element once, however many of its vertices read it;
each sender sends an element once however many tiles receive it (a broadcast).
Elements with consecutive ids from one sender travel as one message. The on-chip part
is an IR ``Exchange`` in its per-tile form (:meth:`ExchangePlanner.build`); only
per-tile totals are kept.

Vertices mostly read slices, so references come in runs of consecutive ids
(:mod:`~poplar_api.lowering.runs` finds them in one compiled pass). On one IPU the
planner merges the runs of each receiving tile into disjoint id intervals: their
lengths are the elements it receives, and an interval is one message plus one per
change of owning tile inside it (:meth:`ExchangePlanner.add_pieces`). The general
path (:meth:`ExchangePlanner.add_grouped`) works element by element, for every
receiving tile at once; it serves references that cross IPUs and the other callers.

Elements that cross IPUs (multi-IPU targets)
--------------------------------------------
An element needed on a tile of another IPU travels over the IPU-Links in a global
exchange (:meth:`ExchangePlanner.build_global`: one transfer per (sending tile,
receiving tile) pair with its total bytes). It crosses the links **once per
destination IPU**: the first tile of that IPU that needs it (in planning order, the
lowest tile id) receives it from its owner, the *landing* tile; every other tile of
that IPU that needs it receives it from the landing tile in the on-chip exchange
that follows (a broadcast from the landing tile, counted once at it). Links carry a
few tens of GB/s per IPU against several TB/s on chip, so a compiler lands data once
per IPU and fans it out on chip rather than sending one copy per tile over the
links. The global exchange therefore runs first, then the on-chip exchange
(emit.py: external sync, global exchange, internal sync, internal exchange).
"""

from __future__ import annotations

import itertools

import numba
import numpy as np

from ipusim import ir
from ipusim.tile.layout import tile_coordinates
from poplar_api.lowering import bus, crossing, pieces, received, runs, strided
from poplar_api.types import Type

#: Runs planned together at most (bounds the planner's temporary arrays), when the runs
#: of each receiving tile come together.
PIECES_PER_PASS = 1 << 20

#: Ids of span per interval up to which the union of sent intervals is found by
#: counting cover over the span (a pass over it) rather than by sorting the intervals
#: (a sort of them costs tens of passes over its entries).
COVER_SPAN_PER_INTERVAL = 16

#: Turns a map of tile pairs serves before it is zeroed (its stamps are uint8).
MAX_STAMP = 255


class OwnerCache:
    """Where the owning tile of each element space changes, found once per lowering
    (tile mappings do not change while a graph is lowered) and shared by its
    planners: each finding is a pass over a whole space."""

    def __init__(self) -> None:
        #: element size -> ids where the owning tile changes
        self.changes: dict[int, np.ndarray] = {}
        #: element size -> stretches of one owner by tile
        self.stretches: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        #: element size -> the owner of each stretch between its changes
        self.stretch_owner: dict[int, np.ndarray] = {}
        #: (receiving, sending) pair maps that planners have finished with, by tile
        #: count: a lowering plans an exchange or two per compute set, and a fresh map
        #: of ``tiles ** 2`` bytes each time costs its zeroing and page faults
        self.free_pairs: dict[int, list[tuple[np.ndarray, np.ndarray, int]]] = {}
        #: element size -> stretches of ids owned on one IPU (multi-IPU targets)
        self.ipu_stretches: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: space size -> all-False bool map of its ids (:func:`pieces.flat_pieces`)
        self.marks: dict[int, np.ndarray] = {}

    def take_pairs(self, num_tiles: int) -> tuple[np.ndarray, np.ndarray, int]:
        """A map of ``num_tiles ** 2`` (receiving, sending) pairs, sender counts (all
        zero) and the stamp that marks a pair seen in this planner's turn.

        The map is uint8 stamps: a map handed back is not cleared, the next planner
        marks with the next stamp, so no pair looks seen to it (clearing 2 MB per
        exchange cost more than a merge of small exchanges); after 255 turns it is
        zeroed once and the stamps start again.
        """
        free = self.free_pairs.get(num_tiles)
        if free:
            seen, senders, stamp = free.pop()
            stamp += 1
            if stamp > MAX_STAMP:
                seen.fill(0)
                stamp = 1
            senders[:] = 0
            return seen, senders, stamp
        return np.zeros(num_tiles * num_tiles, np.uint8), np.zeros(num_tiles, np.int64), 1

    def give_back_pairs(self, pairs: tuple[np.ndarray, np.ndarray, int]) -> None:
        """Keep ``pairs`` (of :meth:`take_pairs`) for the next :meth:`take_pairs`."""
        self.free_pairs.setdefault(pairs[1].size, []).append(pairs)

    def changes_of(self, size: int, owner: np.ndarray, space: int) -> np.ndarray:
        """Ids where the owning tile changes in the space of element ``size``."""
        cached = self.changes.get(size)
        if cached is None:
            cached = self.changes[size] = runs.change_points(owner, space)
        return cached

    def stretch_owners_of(self, size: int, owner: np.ndarray, space: int) -> np.ndarray:
        """:func:`~poplar_api.lowering.received.stretch_owners` of the space of element
        ``size`` (one entry per stretch, read by each merge of received ranges)."""
        cached = self.stretch_owner.get(size)
        if cached is None:
            changes = self.changes_of(size, owner, space)
            cached = self.stretch_owner[size] = received.stretch_owners(owner, changes)
        return cached

    def ipu_stretches_of(
        self, size: int, owner: np.ndarray, space: int, tiles_per_ipu: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~poplar_api.lowering.crossing.ipu_stretches` of the space of element
        ``size``."""
        found = self.ipu_stretches.get(size)
        if found is None:
            changes = self.changes_of(size, owner, space)
            found = crossing.ipu_stretches(owner, changes, tiles_per_ipu, space)
            self.ipu_stretches[size] = found
        return found

    def stretches_of(
        self, size: int, owner: np.ndarray, space: int, read: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:func:`~poplar_api.lowering.pieces.tile_stretches` of the space of element
        ``size``, or None when there are not far fewer stretches than the ``read``
        elements they would save looking at."""
        changes = self.changes_of(size, owner, space)
        if 4 * changes.size > read:
            return None
        found = self.stretches.get(size)
        if found is None:
            found = self.stretches[size] = pieces.tile_stretches(owner, changes, space)
        return found


class ExchangePlanner:
    """Accumulates the references of one exchange, destination tile by destination tile.

    Parameters
    ----------
    target
        The graph's target (tile count, tiles per IPU, layout).
    state
        The graph state (element spaces).
    """

    def __init__(self, target, state, owners: OwnerCache | None = None) -> None:
        self.cfg = target.config
        self.state = state
        n = target.getNumTiles()
        self.num_tiles = n
        self.tiles_per_ipu = int(self.cfg.tile.tiles_per_ipu)
        self.num_ipus = max(1, n // self.tiles_per_ipu)
        self.received = np.zeros(n, np.int64)
        self.messages_received = np.zeros(n, np.int64)
        self.max_distance = np.zeros(n, np.int64)
        #: element size -> (ids, sending tiles) of the elements planned one by one that
        #: a tile other than their owner sends (a write's vertex) and, once there are
        #: some, of everything planned after them, in planning order: an id's last
        #: sender sends it (:func:`_last_senders`);
        #: types of one size share element ids, so a reinterpreted view's element is sent
        #: once. Kept per planned part, not as an array over the element space: a
        #: planner of a multi-IPU graph's copy would fill one of hundreds of MB
        self.sender: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        #: (element size, IPU) -> element id -> tile of that IPU the element landed on
        #: from another IPU (sparse: only the elements that crossed into that IPU)
        self.landing: dict[tuple[int, int], crossing.LandingMap] = {}
        #: (element size, IPU) -> ids of elements the landing tile sends on chip
        self.relayed: dict[tuple[int, int], list[np.ndarray]] = {}
        #: global transfers so far: keys ``src * num_tiles + dst`` and their bytes
        self.global_keys: list[np.ndarray] = []
        self.global_bytes: list[np.ndarray] = []
        #: where owners change, shared by the planners of one lowering
        self.owners = OwnerCache() if owners is None else owners
        #: element size -> id intervals ``[a, b)`` some tile receives, with the owner
        #: array (sent by their owners; :meth:`_add_intervals`, and the runs of the
        #: elements planned one by one that their owners send, :meth:`sent_one_by_one`)
        self.intervals: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        #: keys ``receiving tile * num_tiles + sending tile`` of the on-chip messages
        #: planned so far (a tile's distinct senders size its receive code)
        self.sender_keys: list[np.ndarray] = []
        #: element size -> (receiving tile, id interval begin, end) of what tiles receive
        #: on chip, for the bytes that tiles sharing an exchange bus both receive
        self.received_runs: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
        #: which tiles each tile receives from, ``[dst * tiles + sender]``, and how many
        #: per receiving tile (made on first use; with too many tiles for a bitmap,
        #: ``sender_keys`` holds them instead)
        self.pair_map: tuple[np.ndarray, np.ndarray, int] | None = None
        #: element size -> progressions ``(first, count, stride)`` some tile receives,
        #: sent by their owners (:meth:`_add_strided`), with the owner array, like
        #: ``intervals``
        self.strided: dict[int, list[tuple[np.ndarray, ...]]] = {}
        #: int64 per tile: bytes of progressions counted as such (:meth:`add_strided`)
        #: that its exchange-bus partner receives too, or None when there are none
        self.strided_shared: np.ndarray | None = None
        #: distinct senders per receiving tile, once :meth:`build` has counted them
        #: (no more elements may be added then)
        self.senders_counted: np.ndarray | None = None

    def add(self, element_type: Type, dst: int, ids: np.ndarray, src: np.ndarray) -> None:
        """Elements ``ids`` (from tiles ``src``) needed on tile ``dst``.

        Every reference of ``element_type`` (or another type of its size) bound for
        ``dst`` must come in one call, so that an element is received once.
        """
        ids = np.asarray(ids)
        self.add_grouped(element_type, ids, src, np.full(ids.size, dst, np.int64))

    def add_grouped(
        self, element_type: Type, ids: np.ndarray, src: np.ndarray, dst: np.ndarray
    ) -> None:
        """References with arbitrary destinations, planned for every receiving tile at
        once as if tile after tile (:func:`~poplar_api.lowering.crossing.plan_references`:
        each tile receives an id once; an id from another IPU lands once per IPU)."""
        crossing.plan_references(self, element_type, ids, src, dst)

    def owned_senders(self, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The list that the (ids, sending tiles) of elements of ``size`` planned one
        by one go to (``sender``; made with the intervals planned so far)."""
        sender = self.sender.get(size)
        if sender is None:  # the intervals planned before, then what comes
            sender = self.sender[size] = [
                _interval_senders(a, b, owner) for a, b, owner in self.intervals.pop(size, [])
            ]
            for first, count, step, owner in self.strided.pop(size, []):
                ids = strided.expand(first, count, step)
                sender.append((ids, owner[ids]))
        return sender

    def sent_one_by_one(self, element_type: Type, ids: np.ndarray, src: np.ndarray) -> None:
        """Elements ``ids`` (repeats allowed) that tiles ``src`` send on chip, planned one
        by one. When their owners send them (every reference but a write's) and no other
        sender of the size was planned, they join the intervals as runs of ids: an
        id's sender is then its owner whatever the order, and the intervals of the
        other tiles stay intervals (as ids and senders they would cost bytes per element
        every tile receives). Otherwise they go to :meth:`owned_senders`, in order."""
        size = element_type.size
        space = self.state.space(element_type)
        if ids.size and size not in self.sender and (space.tile[ids] == src).all():
            u = np.unique(ids)
            cut = np.flatnonzero(np.diff(u) != 1) + 1
            a, b = u[np.append(0, cut)], u[np.append(cut - 1, u.size - 1)] + 1
            self.changes_of(size, space.tile, space.size)  # (_sent_runs reads them)
            self.intervals.setdefault(size, []).append((a, b, space.tile))
        elif ids.size:
            self.owned_senders(size).append((ids, src))

    def add_owned(
        self,
        element_type: Type,
        ids: np.ndarray,
        dst: np.ndarray,
        owner: np.ndarray,
        src: np.ndarray | None = None,
        local: np.ndarray | None = None,
    ) -> None:
        """References ``ids`` needed on tiles ``dst``, each sent by the tile that owns
        it (``owner[id]``, the element space's tile array, or ``src`` per reference when
        known; or ``local``, whether each is on its receiving tile already):
        :meth:`add_grouped` with ``src = owner[ids]``, planned as runs when no element
        crosses IPUs."""
        ids, dst, n = np.asarray(ids), np.asarray(dst), self.num_tiles
        found = pieces.flat_pieces(ids, dst, owner, src, n, self.owners.marks, local)
        self.add_pieces(element_type, *found, owner, scratch=True)

    def add_pieces(
        self,
        element_type: Type,
        begin: np.ndarray,
        length: np.ndarray,
        dst: np.ndarray,
        owner: np.ndarray,
        scratch: bool = False,
    ) -> None:
        """Id runs ``[begin, begin + length)`` needed on tiles ``dst``, no element of a
        run on ``dst`` (:mod:`~poplar_api.lowering.runs` finds them), each element sent
        by its owner. With ``scratch`` the arrays are the caller's no longer: the sort
        keys and merged intervals are written over them (fresh temporaries of a large
        exchange cost more in page faults than the passes that fill them).

        Every run bound for a tile must come in one call. The runs are planned as
        intervals (:meth:`_add_intervals`), except on a target of several IPUs those of
        the tiles that receive some element from another IPU: these are planned element
        by element (:meth:`add_grouped`), as an element crossing IPUs lands once per IPU
        (:func:`~poplar_api.lowering.crossing.receivers_from_other_ipus` tells them).
        """
        if begin.size == 0:
            return
        if self.num_ipus > 1:
            size, tpi = element_type.size, self.tiles_per_ipu
            space = self.state.space(element_type).size
            stretches = self.owners.ipu_stretches_of(size, owner, space, tpi)
            far = crossing.receivers_from_other_ipus(begin, length, dst, stretches, tpi)
            if far.any():
                ids = runs.expand(begin[far], length[far])
                to = np.repeat(dst[far], length[far])
                self.add_grouped(element_type, ids, owner[ids].astype(np.int64), to)
                del ids, to
                near = ~far
                begin, length, dst = begin[near], length[near], dst[near]
                if begin.size == 0:
                    return
        if begin.size > PIECES_PER_PASS:
            cuts = _tile_blocks(dst, self.num_tiles, PIECES_PER_PASS)
            if cuts is not None:  # each tile's runs in one block: plan a block of tiles at a time
                for lo, hi in itertools.pairwise(cuts):
                    self._add_intervals(
                        element_type, begin[lo:hi], length[lo:hi], dst[lo:hi], owner, scratch
                    )
                return
        self._add_intervals(element_type, begin, length, dst, owner, scratch)

    def add_strided(
        self,
        element_type: Type,
        ordinary: tuple[np.ndarray, np.ndarray, np.ndarray],
        found: tuple[np.ndarray, ...],
        owner: np.ndarray,
    ) -> np.ndarray:
        """Plan the strided pieces ``found`` ``(first, count, stride, dst, sender)``
        (:mod:`~poplar_api.lowering.strided`; ``sender`` owns every element of its
        piece) of the tiles where counting them as progressions is exact
        (:func:`~poplar_api.lowering.strided.isolated_tiles`: one IPU, a map of tile
        pairs, nothing of the size planned before); bool per piece, whether it was.

        The ordinary pieces ``(begin, length, dst)`` and the strided pieces not
        planned here (as one-element runs) must be planned next, in one
        :meth:`add_pieces`. On the tiles planned here every element is a message of
        its own, received once (the union of each residue class), from the pieces'
        senders.
        """
        begin, length, dst = ordinary
        size = element_type.size
        first, count, stride, sdst, sender = found
        self.changes_of(size, owner, self.state.space(element_type).size)  # (_sent_runs)
        pairs = None
        if self.num_ipus == 1 and not (size in self.sender or size in self.received_runs):
            pairs = self.take_pair_map()
        if pairs is None:
            fit = np.zeros(first.size, bool)
        else:
            n, tpi = self.num_tiles, self.tiles_per_ipu
            fit = strided.isolated_tiles(begin, length, dst, found, n, tpi)
        if fit.any():
            u_first, u_count, u_stride, u_tile = strided.merge_classes(
                first[fit], count[fit], stride[fit], sdst[fit]
            )
            elements = np.bincount(u_tile, weights=u_count, minlength=self.num_tiles)
            elements = elements.astype(np.int64)
            common = np.zeros(self.num_tiles, np.int64)
            strided.pair_common(u_first, u_count, u_stride, u_tile, self.tiles_per_ipu, common)
            if common.any():
                earlier = self.strided_shared
                self.strided_shared = common * size if earlier is None else earlier + common * size
            self.received += elements * size
            self.messages_received += elements
            column, row = tile_coordinates(self.cfg.tile)
            seen, senders, stamp = pairs
            strided.mark_senders(
                sdst[fit], sender[fit], self.tiles_per_ipu, column, row, seen, senders,
                self.max_distance, stamp,
            )  # fmt: skip
            self.strided.setdefault(size, []).append((u_first, u_count, u_stride, owner))
        return fit

    def take_pair_map(self) -> tuple[np.ndarray, np.ndarray, int] | None:
        """The map of (receiving, sending) tile pairs, the senders counted per
        receiving tile and the stamp of a pair seen (:meth:`OwnerCache.take_pairs`),
        taken on first use, or None when the tiles are too many for a map (2^26
        pairs)."""
        if self.senders_counted is not None:
            raise RuntimeError(
                "ExchangePlanner: elements added after build(); hint: plan each exchange "
                "with a new planner"
            )
        n = self.num_tiles
        if self.pair_map is None and n * n <= 1 << 26:
            self.pair_map = self.owners.take_pairs(n)
        return self.pair_map

    def _add_intervals(
        self,
        element_type: Type,
        begin: np.ndarray,
        lengths: np.ndarray,
        dst: np.ndarray,
        owner: np.ndarray,
        scratch: bool = False,
    ) -> None:
        """Id ranges ``[begin, begin + lengths)`` needed on tiles ``dst`` (all remote,
        on one IPU), each element sent by its owner (``scratch``: :meth:`add_pieces`).

        The ranges of each receiving tile are merged into disjoint intervals, which
        give the bytes it receives; a message is a run of consecutive ids from one
        sender, so an interval is one message plus one per change of owner inside it.
        """
        size = element_type.size
        space = self.state.space(element_type).size
        stride = space + 1  # a range ends at most at ``space``: tiles never touch
        n = self.num_tiles
        given = lengths
        keys, lengths, bits = received.tile_sorted_keys(dst, begin, lengths, stride, scratch)
        changes = self.changes_of(size, owner, space)
        pairs = self.take_pair_map()
        seen, stamp = (None, 1) if pairs is None else (pairs[:2], pairs[2])
        # the keys are this call's own: the intervals are written over them unless the
        # keys are read again (senders counted without a map of pairs)
        a, b, receiver, elements, messages, distance = received.merge_received(
            keys, lengths, stride, changes, owner, tile_coordinates(self.cfg.tile), n, seen,
            bits, stamp, in_place=pairs is not None,
            scratch=(given, dst) if scratch and pairs is not None else None,
            stretch_owner=self.owners.stretch_owners_of(size, owner, space),
        )  # fmt: skip
        self.received += elements * size
        self.messages_received += messages
        self.received_runs.setdefault(size, []).append((receiver, a, b))
        if pairs is None:  # too many tiles for a bitmap of pairs
            lo_key, lengths = received.unpack(keys, lengths, bits)
            self.sender_keys.append(_sender_keys(lo_key, lengths, stride, changes, owner, n))
        np.maximum(self.max_distance, distance, out=self.max_distance)
        sender = self.sender.get(size)
        if sender is not None:  # elements planned one by one too: after them in order
            sender.append(_interval_senders(a, b, owner))
        else:
            self.intervals.setdefault(size, []).append((a, b, owner))

    def _sent_runs(
        self,
        size: int,
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
        progressions: list[tuple[np.ndarray, ...]] = (),
    ) -> tuple[np.ndarray, np.ndarray]:
        """Elements and messages each tile sends of intervals (and ``progressions``,
        :attr:`strided`) received by some tile: per tile, of every run of consecutive
        ids of one owner in their union.

        When the intervals' span is small beside their count, the union is found by
        counting how many intervals cover each id of the span (one compiled pass,
        :func:`_sent_by_cover`); else the intervals are sorted and merged. A
        progression's elements are one-element intervals here (those of several tiles
        may make runs together)."""
        owner = (parts or progressions)[0][-1]
        n = self.num_tiles
        elements, messages = np.zeros(n, np.int64), np.zeros(n, np.int64)
        if progressions:
            first, count, step = (np.concatenate([p[k] for p in progressions]) for k in range(3))
            s_lo, s_hi = runs.span(first)[0], runs.span(first + (count - 1) * step)[1] + 1
            s_elements = int(count.sum())
        else:
            first = count = step = _NO_KEYS
            s_lo, s_hi, s_elements = runs.INT64_MAX, 0, 0
        if len(parts) == 1:
            a, b = parts[0][:2]
        elif parts:
            a, b = (np.concatenate([p[k] for p in parts]) for k in range(2))
        else:
            a = b = _NO_KEYS
        if a.size + s_elements == 0:
            return elements, messages
        lo, hi = s_lo, s_hi
        if a.size:
            lo, hi = min(lo, runs.span(a)[0]), max(hi, runs.span(b)[1])
        if hi - lo <= COVER_SPAN_PER_INTERVAL * (a.size + s_elements):
            _sent_by_cover(a, b, first, count, step, lo, hi, owner, elements, messages)
            return elements, messages
        if s_elements:  # the progressions' elements as one-element intervals
            ids = strided.expand(first, count, step)
            a, b = np.concatenate((a, ids)), np.concatenate((b, ids + 1))
        u_lo, u_hi = _merge(a, b)
        changes = self.owners.changes[size]
        c_lo = np.searchsorted(changes, u_lo, side="right")
        c_hi = np.searchsorted(changes, u_hi, side="left")  # changes strictly inside
        total = u_lo.size + int((c_hi - c_lo).sum())
        tiles, counts = np.empty(total, np.int64), np.empty(total, np.int64)
        _owner_runs(u_lo, u_hi, changes, c_lo, c_hi, owner, tiles, counts)
        elements += np.bincount(tiles, weights=counts, minlength=n).astype(np.int64)
        messages += np.bincount(tiles, minlength=n).astype(np.int64)
        return elements, messages

    def stretches_of(
        self, size: int, owner: np.ndarray, space: int, read: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`OwnerCache.stretches_of` (see there)."""
        return self.owners.stretches_of(size, owner, space, read)

    def changes_of(self, size: int, owner: np.ndarray, space: int) -> np.ndarray:
        """:meth:`OwnerCache.changes_of` (see there)."""
        return self.owners.changes_of(size, owner, space)

    def build(self, name: str, program_id: int) -> ir.Exchange | None:
        """The IR on-chip exchange of everything added, or None when nothing crosses
        tiles on chip (elements from other IPUs are in :meth:`build_global`)."""
        n = self.num_tiles
        sent = np.zeros(n, np.int64)
        messages_sent = np.zeros(n, np.int64)
        for element_size, parts in self.sender.items():
            ids, tiles = _last_senders(parts)
            sent += np.bincount(tiles, minlength=n).astype(np.int64) * element_size
            messages_sent += np.bincount(tiles[_runs(ids, tiles)], minlength=n).astype(np.int64)
        for element_size in {**self.intervals, **self.strided}:
            parts = self.intervals.get(element_size, [])
            elements, messages = self._sent_runs(
                element_size, parts, self.strided.get(element_size, [])
            )
            sent += elements * element_size
            messages_sent += messages
        for (element_size, ipu), parts in self.relayed.items():
            ids = np.unique(np.concatenate(parts))
            tiles = self.landing[(element_size, ipu)].get(ids)
            sent += np.bincount(tiles, minlength=n).astype(np.int64) * element_size
            messages_sent += np.bincount(tiles[_runs(ids, tiles)], minlength=n).astype(np.int64)
        senders = self._senders()
        tiles = np.flatnonzero((sent > 0) | (self.received > 0))
        if tiles.size == 0:
            return None
        shared = self._bus_shared()
        return ir.Exchange(
            name=name,
            program_id=program_id,
            tile=tiles,
            bytes_sent=sent[tiles],
            bytes_received=self.received[tiles],
            messages_sent=messages_sent[tiles],
            messages_received=self.messages_received[tiles],
            max_distance=self.max_distance[tiles],
            senders_received=senders[tiles],
            bytes_shared=shared[tiles] if np.count_nonzero(shared) else None,
        )

    def _senders(self) -> np.ndarray:
        """int64 per tile: the distinct tiles it receives from on chip. The first call
        ends the planning (the pair bitmap goes back to ``owners`` for the next
        planner); later calls give the same counts."""
        if self.senders_counted is None:
            n = self.num_tiles
            if self.pair_map is not None:
                self.senders_counted = self.pair_map[1].copy()
                self.owners.give_back_pairs(self.pair_map)
                self.pair_map = None
            else:
                keys = self.sender_keys
                keys = _distinct(np.concatenate(keys), n * n) if keys else _NO_KEYS
                self.senders_counted = np.bincount(keys // n, minlength=n).astype(np.int64)
        return self.senders_counted

    def _bus_shared(self) -> np.ndarray:
        """int64 per tile: bytes it receives on chip that its exchange-bus partner
        receives too (:func:`~poplar_api.lowering.bus.shared_bytes` of the intervals
        received, plus what the pair both receive of progressions counted as such)."""
        shared = bus.shared_bytes(self.received_runs, self.num_tiles, self.tiles_per_ipu)
        if self.strided_shared is not None:
            shared += self.strided_shared
        return shared

    def build_global(self, name: str, program_id: int) -> ir.GlobalExchange | None:
        """The IR global exchange of the elements that cross IPUs, or None.

        One transfer per (sending tile, receiving tile) pair, carrying the bytes of
        every element the receiving tile lands from that sender.
        """
        if not self.global_keys:
            return None
        keys = np.concatenate(self.global_keys)
        nbytes = np.concatenate(self.global_bytes)
        pairs, where = np.unique(keys, return_inverse=True)
        total = np.zeros(pairs.size, np.int64)
        np.add.at(total, where.reshape(-1), nbytes)
        return ir.GlobalExchange(
            name=name,
            program_id=program_id,
            src_tile=pairs // self.num_tiles,
            dst_tile=pairs % self.num_tiles,
            num_bytes=total,
        )


def exchange_ipus(step: ir.Exchange | ir.GlobalExchange, tiles_per_ipu: int) -> tuple[int, ...]:
    """The IPUs an exchange step involves: those of its tiles (sorted)."""
    if isinstance(step, ir.GlobalExchange):
        tiles = np.concatenate((step.src_tile, step.dst_tile))
    elif step.is_totals:
        tiles = step.tile
    else:
        tiles = np.concatenate((step.src_tile, step.dst_tile))
    return tuple(int(i) for i in np.unique(tiles // tiles_per_ipu))


def _interval_senders(
    a: np.ndarray, b: np.ndarray, owner: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ids of intervals ``[a, b)`` and their owners, who send them."""
    ids = runs.expand(a, b - a)
    return ids, owner[ids]


def _last_senders(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct ids of ``parts`` (ids, sending tiles) and the int64 tile that
    sends each: the last given for it."""
    ids = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    tiles = np.concatenate([p[1] for p in parts])
    order = np.argsort(ids, kind="stable")
    ids, tiles = ids[order], tiles[order]
    last = np.ones(ids.size, bool)
    last[:-1] = ids[1:] != ids[:-1]
    return ids[last], tiles[last].astype(np.int64)


def _runs(ids: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Start index of each message: a run of consecutive element ids from one sender.

    ``ids`` must be sorted; elements laid out contiguously travel as one message.
    """
    if ids.size == 0:
        return np.zeros(0, np.int64)
    new = np.ones(ids.size, bool)
    new[1:] = (np.diff(ids) != 1) | (np.diff(src) != 0)
    return np.flatnonzero(new)


@numba.njit(cache=True, nogil=True)
def _owner_runs(lo, hi, changes, c_lo, c_hi, owner, out_tile, out_count):  # pragma: no cover
    # the runs of one owner in disjoint sorted intervals [lo, hi): each interval is
    # cut at the owner changes changes[c_lo[k]:c_hi[k]] strictly inside it
    m = 0
    for k in range(lo.size):
        a = lo[k]
        for c in range(c_lo[k], c_hi[k]):
            out_tile[m] = owner[a]
            out_count[m] = changes[c] - a
            a = changes[c]
            m += 1
        out_tile[m] = owner[a]
        out_count[m] = hi[k] - a
        m += 1


@numba.njit(cache=True, nogil=True)
def _sent_by_cover(
    a, b, first, count, step, lo, hi, owner, elements, messages
):  # pragma: no cover - compiled
    # intervals [a, b) and the elements of progressions first + k * step (k < count)
    # within [lo, hi): an id is in their union when the intervals begun at or before it
    # outnumber those ended; a message is a run of consecutive ids of the union with
    # one owner (touching intervals are one run)
    delta = np.zeros(hi - lo + 1, np.int32)
    for k in range(a.size):
        delta[a[k] - lo] += 1
        delta[b[k] - lo] -= 1
    for k in range(first.size):
        for i in range(first[k] - lo, first[k] - lo + count[k] * step[k], step[k]):
            delta[i] += 1
            delta[i + 1] -= 1
    depth = 0
    inside = False
    prev = 0
    for i in range(hi - lo):
        depth += delta[i]
        if depth > 0:
            t = owner[lo + i]
            if not inside or t != prev:
                messages[t] += 1
                prev = t
                inside = True
            elements[t] += 1
        else:
            inside = False


def _tile_blocks(dst: np.ndarray, num_tiles: int, step: int) -> list[int] | None:
    """Cut points splitting ``dst`` into parts of about ``step`` entries without
    splitting the entries of a tile, or None when some tile's entries are not
    contiguous."""
    cuts, contiguous = runs.tile_cuts(dst, num_tiles, step)
    return cuts.tolist() if contiguous else None


def _merge(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ranges ``[lo, hi)`` as sorted disjoint ranges (touching ones
    joined: consecutive ids travel together)."""
    return runs.union_sorted(*received.sort_ranges(lo, hi))


_NO_KEYS = np.zeros(0, np.int64)


def _sender_keys(
    lo_key: np.ndarray,
    length: np.ndarray,
    stride: int,
    changes: np.ndarray,
    owner: np.ndarray,
    num_tiles: int,
) -> np.ndarray:
    """Distinct ``receiving tile * num_tiles + sending tile`` of ranges ``[lo_key,
    lo_key + length)`` of keys ``tile * stride + id`` (``lo_key`` sorted): the owner
    of the first id of every range's union interval and of every owner change inside."""
    if lo_key.size == 0:
        return _NO_KEYS
    reach = np.maximum.accumulate(lo_key + length)
    first = np.ones(lo_key.size, bool)
    first[1:] = lo_key[1:] > reach[:-1]  # a range that starts a union interval
    starts = np.flatnonzero(first)
    key_lo = lo_key[starts]
    key_hi = reach[np.append(starts[1:] - 1, lo_key.size - 1)]
    tile = key_lo // stride
    lo, hi = key_lo - tile * stride, key_hi - tile * stride
    inner, inner_ids = _changes_within(changes, lo, hi)
    ids = np.concatenate((lo, inner_ids))
    tiles = np.concatenate((tile, np.repeat(tile, inner)))
    return _distinct(tiles * num_tiles + owner[ids].astype(np.int64), num_tiles * num_tiles)


def _distinct(keys: np.ndarray, bound: int) -> np.ndarray:
    """The distinct values of ``keys`` (all in ``[0, bound)``), sorted: marked on a
    bitmap when there are many keys and ``bound`` is small enough, else sorted
    (``np.unique`` hashes int64 arrays, several times slower on the hundreds of
    thousands of sender keys of a big exchange)."""
    if keys.size == 0:
        return _NO_KEYS
    if bound <= 1 << 26 and keys.size * 16 >= bound:  # many keys: the bitmap scan is cheap
        seen = np.zeros(bound, bool)
        seen[keys] = True
        return np.flatnonzero(seen)
    s = np.sort(keys)
    return s[np.concatenate(([True], s[1:] != s[:-1]))]


def _changes_within(
    changes: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """For each range ``[lo, hi)``: how many owner changes lie strictly inside it, and
    all those change ids, range after range."""
    c_lo = np.searchsorted(changes, lo, side="right")
    inner = np.searchsorted(changes, hi, side="left") - c_lo
    at = np.arange(int(inner.sum())) - np.repeat(np.cumsum(inner) - inner - c_lo, inner)
    return inner, changes[at]
