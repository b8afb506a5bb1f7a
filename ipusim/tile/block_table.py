"""Blocks of tile memory as columns: what lowering asks :mod:`ipusim.tile.memory` to place.

A :class:`Block` is one thing on one tile (a variable's elements there, a compute
set's vertex state, code, a stack, a buffer): its bytes, element size, the region it
asks for and its live range. Lowering hands hundreds of thousands of them over as a
:class:`BlockTable` (one row per block, integer columns in the narrowest type that
holds them) rather than as objects; the region names and request codes are here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import filterfalse

import numpy as np

from ipusim.errors import IpusimError

__all__ = [
    "ANY",
    "INTERLEAVED",
    "NON_INTERLEAVED",
    "REGION_CODE",
    "Block",
    "BlockTable",
    "MemoryPlanError",
]

NON_INTERLEAVED = "nonInterleaved"
INTERLEAVED = "interleaved"
ANY = "any"


class MemoryPlanError(IpusimError, ValueError):
    """A block handed to the allocator is malformed (negative size, unknown region, ...)."""


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
