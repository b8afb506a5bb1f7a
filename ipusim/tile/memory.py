"""Tile memory: regions, alignment, and an allocator that lets dead data share space.

Each tile has a *non-interleaved* region (code and data) and an *interleaved* region
(data only), sizes from ``MachineConfig.memory``. Lowering describes what must live
in tile memory as :class:`Block` s (one per thing per tile: a variable's elements on
that tile, a compute set's vertex state, code, stacks, buffers) and :func:`plan`
places them and summarises the result in a :class:`MemoryReport`.

Placement rules
---------------
* Every block starts at a multiple of ``max(alignment_bytes, element_bytes)`` of its
  region (offsets are relative to the region start). The bytes skipped to align are
  gaps: "including gaps" figures are the region's high-water mark, "excluding gaps"
  figures count the bytes that some block occupies.
* Region: a block asks for ``"nonInterleaved"`` (code, stacks), ``"interleaved"`` (a
  field declared interleaved), or ``"any"``: data goes to the interleaved region
  first (it is the larger one and the only one served by 128-bit loads) and spills to
  the non-interleaved region when it does not fit there.
* Liveness: a block is live over an inclusive range of program points, or always
  (``live=None``). Two blocks may overlap in memory only if their live ranges are
  disjoint; always-live blocks never share.
* Order: always-live blocks first, then the others by live start; ties keep the
  order the blocks were given in. Each block takes the lowest aligned address of the
  first region (in the order above) where it overlaps no placed block it is live
  together with (first fit).
* Joint groups: blocks sharing a ``joint`` key on one tile are the disjoint live
  ranges of one thing with one address (a variable a Poplar function touches, whose
  code is compiled once for one address). They are placed together when the last
  of their ranges comes up in the order above, at the lowest address free over the
  union of their ranges (:mod:`ipusim.tile.first_fit`); other blocks may use that
  address between them. By then every block live together with one of the earlier
  ranges is placed (it began before that range ended), so the address is chosen
  knowing all of them, as an ordinary block's is at its start.
* A block that fits nowhere goes to a per-tile *overflow* area with the same rules;
  its bytes are the tile's ``overflowed`` figures and the tile is out of memory.

Blocks are handed over as columns (:class:`BlockTable`, one row per block: a
variable's piece on one tile, not its elements). A compiled pass lays out each
distinct per-tile sequence of blocks once, and the report is computed with numpy
over all blocks at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import filterfalse
from typing import Any

import numpy as np

from ipusim.errors import IpusimError
from ipusim.tile.banks import bank_of
from ipusim.tile.first_fit import joint_links, place, sequence_hash

__all__ = [
    "ANY",
    "INTERLEAVED",
    "NON_INTERLEAVED",
    "OVERFLOW",
    "Block",
    "BlockTable",
    "MemoryPlanError",
    "MemoryReport",
    "MemorySpec",
    "Placement",
    "align_up",
    "allocate",
    "allocate_table",
    "plan",
]

NON_INTERLEAVED = "nonInterleaved"
INTERLEAVED = "interleaved"
ANY = "any"
OVERFLOW = "overflowed"
#: Region index of each name in placements: 0, 1, and 2 for the overflow area.
_REGION_INDEX = {NON_INTERLEAVED: 0, INTERLEAVED: 1, OVERFLOW: 2}
_REGION_NAMES = (NON_INTERLEAVED, INTERLEAVED, OVERFLOW)
#: Regions tried, in order, for each requested region.
_TRY_ORDER = {
    NON_INTERLEAVED: (0,),
    INTERLEAVED: (1,),
    ANY: (1, 0),
}
#: Program-point range standing for "always live" (overlaps every other range).
_ALWAYS = (-1, np.iinfo(np.int64).max // 4)
#: Range standing for "live at no point": overlaps only the always-live range.
_NEVER = (-1, -1)


class MemoryPlanError(IpusimError, ValueError):
    """A block handed to the allocator is malformed (negative size, unknown region, ...)."""


def align_up(value: int, alignment: int) -> int:
    """Smallest multiple of ``alignment`` that is ``>= value``."""
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class MemorySpec:
    """The memory of one tile: region sizes, bank size and minimum alignment (bytes)."""

    non_interleaved_bytes: int
    interleaved_bytes: int
    bank_bytes: int
    alignment_bytes: int

    @classmethod
    def from_config(cls, memory: Any) -> MemorySpec:
        """From a ``MachineConfig.memory`` section."""
        return cls(
            int(memory.non_interleaved_bytes),
            int(memory.interleaved_bytes),
            int(memory.bank_bytes),
            int(memory.alignment_bytes),
        )

    @property
    def capacity(self) -> dict[str, int]:
        """Bytes per tile: ``nonInterleaved``, ``interleaved`` and ``total``."""
        return {
            NON_INTERLEAVED: self.non_interleaved_bytes,
            INTERLEAVED: self.interleaved_bytes,
            "total": self.non_interleaved_bytes + self.interleaved_bytes,
        }

    def region_bytes(self, region: int) -> int:
        """Size of region index ``region`` (the overflow area is unbounded)."""
        if region == 0:
            return self.non_interleaved_bytes
        if region == 1:
            return self.interleaved_bytes
        return np.iinfo(np.int64).max // 4

    def bank(self, region: str, offset: int) -> int:
        """Bank of byte ``offset`` of ``region`` (:func:`ipusim.tile.banks.bank_of`)."""
        return bank_of(self, 0 if region == NON_INTERLEAVED else 1, offset)


@dataclass(frozen=True)
class Block:
    """Something that needs ``size`` bytes of one tile's memory.

    Attributes
    ----------
    name
        What it is (variable name, compute set, ...), for reports.
    category
        Profile category (``variable``, ``constant``, ``vertexCode``, ...).
    tile
        Tile id.
    size
        Bytes.
    element_bytes
        Size of its elements; the block is aligned to ``max(alignment, element_bytes)``.
    region
        ``"nonInterleaved"``, ``"interleaved"`` or ``"any"``.
    live
        Inclusive ``(first, last)`` program point it is live at, or None when always
        live. ``last < first`` means live at no point (it still gets an address).
    joint
        Joint group key, ``-1`` for none: the blocks of one key on one tile are the
        live ranges of one thing that keeps one address (a variable a function
        touches: the function's code is compiled for one address); they must have
        equal sizes, element sizes and regions, and are placed at the lowest address
        free over all their ranges. Other blocks may use it between the ranges.
    """

    name: str
    category: str
    tile: int
    size: int
    element_bytes: int = 1
    region: str = ANY
    live: tuple[int, int] | None = None
    joint: int = -1


@dataclass(frozen=True)
class Placement:
    """Where a block went: region (``nonInterleaved``, ``interleaved``, ``overflowed``)
    and byte offset in it."""

    block: Block
    region: str
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.block.size


#: The integer columns of a :class:`BlockTable`, in field order.
_INT_COLUMNS = (
    "name", "category", "tile", "size", "element_bytes", "region", "live_first", "live_last",
)  # fmt: skip


def _narrowest_type(lo: int, hi: int) -> type:
    """The narrowest signed integer type (int8 to int64) holding ``lo`` and ``hi``."""
    for dtype in (np.int8, np.int16, np.int32):
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
            return dtype
    return np.int64


def _narrowest(values: np.ndarray) -> np.ndarray:
    """``values`` as the narrowest signed integer type (int8 to int64) holding them all
    (the array itself when it already has that type)."""
    if values.size == 0:
        return values
    return values.astype(_narrowest_type(int(values.min()), int(values.max())), copy=False)


def _joined(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``parts`` concatenated into the narrowest signed integer type holding them all
    (one output array, no widened copy of any part)."""
    full = [p for p in parts if p.size]
    if not full:
        return np.zeros(0, np.int64)
    lo, hi = _bounds(full)
    return np.concatenate(full, dtype=_narrowest_type(lo, hi))


#: Rows up to which small parts are joined to find their bounds in one pass.
_BOUNDS_CHUNK_ROWS = 1 << 16


def _bounds(parts: Sequence[np.ndarray]) -> tuple[int, int]:
    """Least and greatest value of non-empty integer ``parts``, a chunk of about
    :data:`_BOUNDS_CHUNK_ROWS` rows at a time (a large part alone, not widened): a pass
    per chunk, not two calls per part (memory placement's hundreds of per-tile tables)."""
    bounds, chunk, rows = [], [], 0
    for p in [*parts, None]:
        if chunk and (p is None or rows + p.size > _BOUNDS_CHUNK_ROWS):
            joined = chunk[0] if len(chunk) == 1 else np.concatenate(chunk, dtype=np.int64)
            bounds += [int(joined.min()), int(joined.max())]
            chunk, rows = [], 0
        if p is not None:
            chunk.append(p)
            rows += p.size
    return min(bounds), max(bounds)


#: Request code of each region name in a :class:`BlockTable`.
REGION_CODE = {NON_INTERLEAVED: 0, INTERLEAVED: 1, ANY: 2}
_REQUEST_NAMES = (NON_INTERLEAVED, INTERLEAVED, ANY)


@dataclass
class BlockTable:
    """Blocks as columns (one row per block), so that lowering can hand over hundreds
    of thousands of them without making an object for each.

    ``name`` and ``category`` index :attr:`names` and :attr:`categories`; ``region``
    is 0 (non-interleaved), 1 (interleaved) or 2 (any); a block is always live where
    ``always`` is set, else live over ``live_first..live_last`` (as
    :attr:`Block.live`). ``joint`` (None: no block is in a group) gives each block's
    joint group key, ``-1`` for none (as :attr:`Block.joint`).
    """

    names: list[str]
    categories: list[str]
    name: np.ndarray
    category: np.ndarray
    tile: np.ndarray
    size: np.ndarray
    element_bytes: np.ndarray
    region: np.ndarray
    live_first: np.ndarray
    live_last: np.ndarray
    always: np.ndarray
    joint: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.tile.size)

    @classmethod
    def empty(cls) -> BlockTable:
        """A table without blocks."""
        ints = np.zeros(0, np.int64)
        return cls([], [], ints, ints, ints, ints, ints, ints, ints, ints, np.zeros(0, bool))

    @classmethod
    def per_tile(
        cls,
        name: str,
        category: str,
        nbytes: np.ndarray,
        element_bytes: int = 1,
        region: str = ANY,
        live: tuple[int, int] | None = None,
    ) -> BlockTable:
        """One block of ``nbytes[t]`` bytes on every tile ``t`` where that is not 0."""
        tiles = np.flatnonzero(nbytes)
        sizes = np.asarray(nbytes)[tiles]
        return cls.rows(name, category, tiles, sizes, element_bytes, region, live)

    @classmethod
    def rows(
        cls,
        name: str,
        category: str,
        tiles: np.ndarray,
        sizes: np.ndarray,
        element_bytes: int = 1,
        region: str | np.ndarray = ANY,
        live: tuple[int, int] | None = None,
    ) -> BlockTable:
        """Blocks of one name on ``tiles`` with ``sizes``; ``region`` a name or an array
        of request codes (one per block)."""
        n = int(np.size(tiles))
        if isinstance(region, str):
            if region not in REGION_CODE:
                on = f" on tile {int(np.ravel(tiles)[0])}" if n == 1 else ""
                raise MemoryPlanError(
                    f"memory block '{name}' ({category}){on}: region {region!r} is not one "
                    f"of {sorted(REGION_CODE)}"
                )
            region = np.full(n, REGION_CODE[region], np.int64)
        first, last = (0, 0) if live is None else (int(live[0]), int(live[1]))
        return cls(
            names=[name],
            categories=[category],
            name=np.zeros(n, np.int64),
            category=np.zeros(n, np.int64),
            tile=np.asarray(tiles, np.int64).reshape(-1),
            size=np.asarray(sizes, np.int64).reshape(-1),
            element_bytes=np.full(n, element_bytes, np.int64),
            region=np.asarray(region, np.int64).reshape(-1),
            live_first=np.full(n, first, np.int64),
            live_last=np.full(n, last, np.int64),
            always=np.full(n, live is None, bool),
        )

    @classmethod
    def from_blocks(cls, blocks: Sequence[Block]) -> BlockTable:
        """The table of a list of :class:`Block` objects, checked."""
        parts = []
        for b in blocks:
            where = f"memory block '{b.name}' ({b.category}) on tile {b.tile}"
            if b.live is not None and len(b.live) != 2:
                raise MemoryPlanError(f"{where}: live {b.live!r} must be (first, last) or None")
            row = cls.rows(
                b.name, b.category, [b.tile], [b.size], b.element_bytes, b.region, b.live
            )
            if b.joint >= 0:
                row.joint = np.array([b.joint], np.int64)
            parts.append(row)
        return cls.concat(parts)

    @classmethod
    def concat(cls, tables: Sequence[BlockTable], release: bool = False) -> BlockTable:
        """The rows of ``tables``, in order, each integer column in the narrowest signed
        integer type holding all its values (int8 to int64).

        ``release=True`` empties each column of ``tables`` once it is copied, so that a
        caller handing over its only references (memory placement's millions of
        variable blocks) holds one column twice at a time, not the whole table.
        """
        if not tables:
            return cls.empty()
        names: dict[str, int] = {}
        categories: dict[str, int] = {}
        name_parts, cat_parts = [], []
        for t in tables:
            if len(set(t.names)) == len(t.names) and names.keys().isdisjoint(t.names):
                # distinct and new (a table of variables' blocks): numbered in order
                start = len(names)
                names.update(zip(t.names, range(start, start + len(t.names)), strict=True))
                name_parts.append(np.add(t.name, start, dtype=np.int64) if start else t.name)
            else:  # numbered in order of first appearance (C-level passes over the names)
                fresh = list(filterfalse(names.__contains__, dict.fromkeys(t.names)))
                names.update(zip(fresh, range(len(names), len(names) + len(fresh)), strict=True))
                remap = np.fromiter(map(names.__getitem__, t.names), np.int64, len(t.names))
                name_parts.append(remap[t.name] if t.name.size else t.name)
            remap = np.array([categories.setdefault(x, len(categories)) for x in t.categories])
            cat_parts.append(remap.astype(np.int64)[t.category] if t.category.size else t.category)
        grouped = any(t.joint is not None for t in tables)
        lengths = [len(t) for t in tables]

        def cat(attr: str) -> np.ndarray:
            if attr == "joint":
                parts = [t.joint if t.joint is not None else np.full(k, -1, np.int8)
                         for t, k in zip(tables, lengths, strict=True)]  # fmt: skip
            else:
                parts = [getattr(t, attr) for t in tables]
            out = np.concatenate(parts) if attr == "always" else _joined(parts)
            if release:
                for t in tables:
                    setattr(t, attr, None if attr == "joint" else parts[0][:0])
            return out

        name, category = _joined(name_parts), _joined(cat_parts)
        del name_parts, cat_parts
        if release:
            for t in tables:
                t.name, t.category = t.name[:0], t.category[:0]
        columns = {a: cat(a) for a in _INT_COLUMNS[2:]}
        return cls(
            names=list(names),
            categories=list(categories),
            name=name,
            category=category,
            **columns,
            always=cat("always"),
            joint=cat("joint") if grouped else None,
        )

    def joint_keys(self) -> np.ndarray:
        """Each block's joint group key (``-1``: none), as int64."""
        if self.joint is None:
            return np.full(len(self), -1, np.int64)
        return self.joint.astype(np.int64, copy=False)

    def take(self, rows: np.ndarray) -> BlockTable:
        """The table of rows ``rows`` (in that order)."""
        return BlockTable(
            self.names,
            self.categories,
            *(getattr(self, a)[rows] for a in (*_INT_COLUMNS, "always")),
            None if self.joint is None else self.joint[rows],
        )

    def compact(self) -> BlockTable:
        """The same rows, each column in the narrowest signed integer type holding its
        values (int8 to int64).

        A placed :class:`MemoryReport` keeps its table for the engine's life; there
        every column was int64, 65 bytes a block (1.8 M blocks, 115 MB, in ResNet-50
        inference). Values read from the table are unchanged; sums over a column are
        taken in int64 by numpy.
        """
        return BlockTable(
            self.names,
            self.categories,
            *(_narrowest(getattr(self, a)) for a in _INT_COLUMNS),
            self.always,
            None if self.joint is None else _narrowest(self.joint),
        )

    def block(self, i: int) -> Block:
        """Row ``i`` as a :class:`Block`."""
        live = None if self.always[i] else (int(self.live_first[i]), int(self.live_last[i]))
        return Block(
            self.names[self.name[i]],
            self.categories[self.category[i]],
            int(self.tile[i]),
            int(self.size[i]),
            int(self.element_bytes[i]),
            _REQUEST_NAMES[self.region[i]],
            live,
            -1 if self.joint is None else int(self.joint[i]),
        )

    def check(self, num_tiles: int) -> None:
        """Raise :class:`MemoryPlanError` naming the first malformed block."""
        bad = (self.tile < 0) | (self.tile >= num_tiles) | (self.size < 0)
        bad |= self.element_bytes < 1
        if not bad.any():
            return
        i = int(np.argmax(bad))
        b = self.block(i)
        where = f"memory block '{b.name}' ({b.category}) on tile {b.tile}"
        if not 0 <= b.tile < num_tiles:
            raise MemoryPlanError(f"{where}: tile is outside [0, {num_tiles})")
        if b.size < 0:
            raise MemoryPlanError(f"{where}: size {b.size} must be >= 0 bytes")
        raise MemoryPlanError(f"{where}: element_bytes {b.element_bytes} must be >= 1")

    def check_joint(self, lead: np.ndarray, order: np.ndarray) -> None:
        """Raise :class:`MemoryPlanError` naming the first block of a joint group whose
        size, element size or region differs from its group's first block (``lead``:
        per position of ``order``, the position of the group's first block)."""
        rows, leads = order, order[lead]
        bad = (self.size[rows] != self.size[leads]) | (self.region[rows] != self.region[leads])
        bad |= self.element_bytes[rows] != self.element_bytes[leads]
        if not bad.any():
            return
        k = int(np.argmax(bad))
        b, first = self.block(int(rows[k])), self.block(int(leads[k]))
        raise MemoryPlanError(
            f"memory block '{b.name}' ({b.category}) on tile {b.tile}: joint group {b.joint} "
            f"needs one size, element size and region for all its blocks; this one has "
            f"{b.size} B, {b.element_bytes} B elements, region {b.region!r}, the group's "
            f"first ('{first.name}') {first.size} B, {first.element_bytes} B, "
            f"{first.region!r}; hint: give each live range of one thing the same block"
        )


def allocate_table(
    spec: MemorySpec, num_tiles: int, table: BlockTable
) -> tuple[np.ndarray, np.ndarray]:
    """Place the blocks of ``table`` by the module's rules: :func:`_allocate`'s region
    and byte offset of every block."""
    region, offset, _, _ = _allocate(spec, num_tiles, table)
    return region, offset


def _placement_order(tile: np.ndarray, later: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Row order of placement: by tile, then always-live blocks first, then by first
    live point, then by row; one sort of packed int64 keys when they fit in 63 bits,
    else a lexicographic sort."""
    n = tile.size
    if n == 0:
        return np.zeros(0, np.int64)
    f_lo = int(first.min())
    widths = [int(tile.max()).bit_length(), 1, (int(first.max()) - f_lo).bit_length(),
              (n - 1).bit_length()]  # fmt: skip
    if int(tile.min()) < 0 or sum(widths) > 63:
        return np.lexsort((np.arange(n), first, later, tile))
    # built in place, the row added a slice at a time: one int64 array over the blocks
    key = tile.astype(np.int64)
    key <<= widths[1]
    key |= later
    key <<= widths[2]
    key += first
    key -= f_lo
    key <<= widths[3]
    step = 1 << 20
    for at in range(0, n, step):
        key[at : at + step] += np.arange(at, min(at + step, n), dtype=np.int64)
    # keys are distinct (the row is in them): sorting them and keeping the row bits
    # gives the argsort, several times faster (in place: no second array of keys)
    key.sort()
    key &= (1 << widths[3]) - 1
    return key


def _last_range_starts(tile: np.ndarray, joint: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``first`` with each joint group's blocks given the latest first point of the
    group (its last range's start), as the placement order uses it.

    A group is a joint key on one tile. When the grouped blocks come in key order, as
    lowering gives them (variables by id, each one's tiles in order), each group is one
    run of rows and its latest start is a reduction over the run; otherwise the keys
    are sorted (``np.unique``).
    """
    grouped = np.flatnonzero(joint >= 0)
    if not grouped.size:
        return first
    key = joint[grouped].astype(np.int64) * (int(tile.max()) + 1) + tile[grouped]
    out = first.copy()
    if bool((key[1:] >= key[:-1]).all()):
        bounds = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
        del key
        latest = np.maximum.reduceat(first[grouped], bounds)
        out[grouped] = np.repeat(latest, np.diff(bounds, append=grouped.size))
        return out
    _, where = np.unique(key, return_inverse=True)
    latest = np.full(int(where.max()) + 1, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(latest, where, first[grouped])
    out[grouped] = latest[where]
    return out


#: Blocks laid out per pass of :func:`_allocate` (whole tiles): bounds the per-block
#: arrays the compiled layout needs, whatever the size of the table.
ALLOCATE_CHUNK_BLOCKS = 1 << 19


def _tile_chunks(ends: np.ndarray, chunk: int) -> list[tuple[int, int]]:
    """Ranges ``[t0, t1)`` of tiles whose blocks (ending at ``ends[t]`` in placement
    order) number about ``chunk`` each; a tile is never split."""
    nt = ends.size
    if nt == 0:
        return []
    cuts = np.searchsorted(ends, np.arange(chunk, int(ends[-1]), chunk), side="left") + 1
    bounds = np.unique(np.concatenate(([0], np.minimum(cuts, nt), [nt])))
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True))


def _allocate(
    spec: MemorySpec, num_tiles: int, table: BlockTable
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Place the blocks of ``table`` by the module's rules.

    Tiles are independent, and tiles given the same sequence of blocks (sizes,
    alignments, regions and live ranges) get the same layout, so each distinct
    sequence is laid out once (in compiled code).

    Returns
    -------
    tuple of numpy.ndarray
        Region index (0 non-interleaved, 1 interleaved, 2 overflow) and byte offset
        of every block, in table order; per tile and region (``[num_tiles, 3]``) the
        bytes the blocks cover (their union) and the highest end of a block.

    Raises
    ------
    MemoryPlanError
        A block has a tile outside the machine, a negative size or an element size
        below 1.
    """
    table.check(num_tiles)
    n = len(table)
    first = np.where(table.always, _ALWAYS[0], table.live_first)
    if table.joint is not None:  # a joint group comes up when its last range begins
        first = _last_range_starts(table.tile, table.joint, first)
    order = _placement_order(table.tile, ~table.always, first)
    del first
    counts = np.bincount(table.tile, minlength=num_tiles)
    ends = np.cumsum(counts)
    starts = ends - counts
    limits = np.array([spec.region_bytes(r) for r in range(3)], np.int64)
    covered = np.zeros((num_tiles, 3), np.int64)
    top = np.zeros((num_tiles, 3), np.int64)
    region = np.empty(n, np.int8)  # 0, 1 or 2
    offset = np.empty(n, np.int64)
    # tiles are independent: laid out a chunk of whole tiles at a time, so that the
    # per-block arrays of the compiled pass exist for one chunk only (a training step
    # of ResNet-50 places tens of millions of blocks)
    for t0, t1 in _tile_chunks(ends, ALLOCATE_CHUNK_BLOCKS):
        r0, r1 = int(starts[t0]), int(ends[t1 - 1])
        rows = order[r0:r1]
        m = rows.size
        always_o = table.always[rows]
        first_o = table.live_first[rows].astype(np.int64)
        last_o = table.live_last[rows].astype(np.int64)
        # effective live ranges: always live overlaps everything, "live at no point" only that
        never = ~always_o & (last_o < first_o)
        lo_o = np.where(always_o | never, _ALWAYS[0], first_o)
        hi_o = np.where(always_o, _ALWAYS[1], np.where(never, _NEVER[1], last_o))
        del first_o, last_o, never
        sizes = table.size[rows].astype(np.int64)
        aligns = np.maximum(spec.alignment_bytes, table.element_bytes[rows].astype(np.int64))
        regions = table.region[rows].astype(np.int64)
        ident = regions * 2 + always_o  # what else, with size, alignment and range, a layout uses
        joint = np.full(m, -1, np.int64) if table.joint is None else table.joint[rows]
        lead, after = joint_links(table.tile[rows], joint)
        del joint
        if table.joint is not None:
            table.check_joint(lead, rows)
        c_starts, c_ends = starts[t0:t1] - r0, ends[t0:t1] - r0
        link = np.arange(m, dtype=np.int64) - lead
        hashes = sequence_hash(sizes, aligns, ident, lo_o, hi_o, link, c_starts, c_ends)
        del link
        tile_order = np.argsort(hashes, kind="stable")
        region_o = np.zeros(m, np.int64)
        offset_o = np.zeros(m, np.int64)
        place(
            sizes, aligns, regions, ident, lo_o, hi_o, always_o, lead, after, c_starts, c_ends,
            tile_order, hashes,
            spec.alignment_bytes, limits, region_o, offset_o, covered[t0:t1], top[t0:t1],
        )  # fmt: skip
        region[rows] = region_o
        offset[rows] = offset_o
    return region, offset, covered, top


def allocate(spec: MemorySpec, num_tiles: int, blocks: Sequence[Block]) -> list[Placement]:
    """Place ``blocks`` by the module's rules; returns one placement per block, in order.

    Raises
    ------
    MemoryPlanError
        A block has a tile outside the machine, a negative size or an unknown region.
    """
    region, offset = allocate_table(spec, num_tiles, BlockTable.from_blocks(blocks))
    return [
        Placement(b, _REGION_NAMES[r], int(o))
        for b, r, o in zip(blocks, region.tolist(), offset.tolist(), strict=True)
    ]


@dataclass
class MemoryReport:
    """Tile memory after placement: per-tile use against capacity, by category and more.

    ``by_tile`` keys: ``total``, ``nonInterleaved``, ``interleaved`` and ``overflowed``
    (bytes some block occupies; blocks sharing addresses count once) and each
    ``...IncludingGaps`` (the high-water mark of the region, so alignment gaps and
    holes count). ``by_category`` sums block sizes per tile (shared bytes count once
    per block). ``liveness`` has one entry per program point: its name, the bytes of
    blocks live there that are not always live, and the always-live bytes, summed
    over tiles. ``tiles_out_of_memory`` are the tiles where some block fitted in
    neither region (``overflowed > 0``); ``blocks`` with ``block_region`` (0, 1, 2 for
    non-interleaved, interleaved, overflowed) and ``block_offset`` say where every
    block went (``placements`` lists them as objects).
    """

    num_tiles: int
    capacity: dict[str, int]
    by_tile: dict[str, np.ndarray]
    by_category: dict[str, np.ndarray]
    by_compute_set: dict[str, np.ndarray]
    by_vertex_type: dict[str, int]
    liveness: list[tuple[str, int, int]]
    out_of_memory: bool
    tiles_out_of_memory: np.ndarray
    blocks: BlockTable = field(default_factory=BlockTable.empty, repr=False)
    block_region: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    block_offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    #: vertex type -> bytes of its vertices' state on each tile (set by the lowering)
    vertex_data_by_type: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @cached_property
    def placements(self) -> list[Placement]:
        """Where every block went, in block order."""
        regions, offsets = self.block_region.tolist(), self.block_offset.tolist()
        return [
            Placement(self.blocks.block(i), _REGION_NAMES[regions[i]], offsets[i])
            for i in range(len(self.blocks))
        ]

    def worst_tiles(self, n: int = 5) -> list[tuple[int, int, int]]:
        """The ``n`` tiles needing most memory: ``(tile, need incl. gaps, capacity)``.

        Out-of-memory tiles come first (most overflow first), then by need.
        """
        need = self.by_tile["totalIncludingGaps"]
        over = self.by_tile["overflowedIncludingGaps"]
        order = np.lexsort((np.arange(self.num_tiles), -need, -over))[: max(int(n), 0)]
        cap = self.capacity["total"]
        return [(int(t), int(need[t]), cap) for t in order]

    def variables_on_tile(self, tile: int) -> list[tuple[str, int]]:
        """Variables and constants on ``tile``: ``(name, bytes)``, largest first."""
        b = self.blocks
        data = [k for k, c in enumerate(b.categories) if c in ("variable", "constant")]
        rows = np.flatnonzero((b.tile == tile) & np.isin(b.category, data))
        sizes: dict[str, int] = {}
        for name, size in zip(b.name[rows].tolist(), b.size[rows].tolist(), strict=True):
            sizes[b.names[name]] = sizes.get(b.names[name], 0) + size
        return sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))


def plan(
    spec: MemorySpec,
    num_tiles: int,
    blocks: Sequence[Block] | BlockTable,
    point_names: Iterable[str] = (),
    by_compute_set: Mapping[str, np.ndarray] | None = None,
    by_vertex_type: Mapping[str, int] | None = None,
) -> MemoryReport:
    """Place ``blocks`` (see :func:`allocate_table`) and build the :class:`MemoryReport`.

    Parameters
    ----------
    blocks
        :class:`Block` objects, or the same as a :class:`BlockTable`.
    point_names
        Name of each program point, for the liveness table.
    by_compute_set, by_vertex_type
        Attributions the caller computed (passed through to the report).
    """
    table = blocks if isinstance(blocks, BlockTable) else BlockTable.from_blocks(blocks)
    region, start, covered, top = _allocate(spec, num_tiles, table)
    tile, size = table.tile, table.size
    by_tile: dict[str, np.ndarray] = {
        "total": covered.sum(axis=1),
        "totalIncludingGaps": top.sum(axis=1),
    }
    for r, name in enumerate(_REGION_NAMES):
        by_tile[name] = covered[:, r].copy()
        by_tile[f"{name}IncludingGaps"] = top[:, r].copy()

    # categories in the order their first block appears
    present, first = np.unique(table.category, return_index=True)
    by_category: dict[str, np.ndarray] = {}
    for c in present[np.argsort(first)].tolist():
        rows = table.category == c
        by_category[table.categories[c]] = np.bincount(
            tile[rows], weights=size[rows], minlength=num_tiles
        ).astype(np.int64)

    names = list(point_names)
    always = table.always
    lo, hi = table.live_first, table.live_last
    diff = np.zeros(len(names) + 1, np.int64)
    ok = ~always & (lo <= hi) & (hi >= 0) & (lo < len(names))
    # per point, bytes of blocks live from there on minus those dead (integral sums of
    # float64 weights: exact below 2**53 bytes)
    weights, bins = size[ok], len(names) + 1
    diff += np.bincount(np.clip(lo[ok], 0, len(names)), weights, bins).astype(np.int64)
    diff -= np.bincount(np.clip(hi[ok] + 1, 0, len(names)), weights, bins).astype(np.int64)
    live_bytes = np.cumsum(diff)[: len(names)]
    always_bytes = int(size[always].sum())
    liveness = [(nm, int(b), always_bytes) for nm, b in zip(names, live_bytes, strict=True)]

    oom_tiles = np.flatnonzero(by_tile["overflowedIncludingGaps"] > 0).astype(np.int64)
    return MemoryReport(
        num_tiles=num_tiles,
        capacity=spec.capacity,
        by_tile=by_tile,
        by_category=by_category,
        by_compute_set=dict(by_compute_set or {}),
        by_vertex_type=dict(by_vertex_type or {}),
        liveness=liveness,
        out_of_memory=bool(oom_tiles.size),
        tiles_out_of_memory=oom_tiles,
        blocks=table.compact(),
        block_region=region.astype(np.int8, copy=False),
        block_offset=_narrowest(start),
    )
