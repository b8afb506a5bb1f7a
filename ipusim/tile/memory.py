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

Blocks are handed over as columns (:class:`~ipusim.tile.block_table.BlockTable`,
one row per block: a variable's piece on one tile, not its elements). A compiled pass lays out each
distinct per-tile sequence of blocks once, and the report is computed with numpy
over all blocks at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ipusim.tile.banks import bank_of
from ipusim.tile.block_table import (
    ANY,
    INTERLEAVED,
    NON_INTERLEAVED,
    Block,
    BlockTable,
    MemoryPlanError,
    _narrowest,
)
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
class Placement:
    """Where a block went: region (``nonInterleaved``, ``interleaved``, ``overflowed``)
    and byte offset in it."""

    block: Block
    region: str
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.block.size


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
        if table.joint is None:  # no groups: every block leads itself, links nowhere
            lead = np.arange(m, dtype=np.int64)
            after = np.full(m, -1, np.int64)
            link = np.zeros(m, np.int64)
        else:
            lead, after = joint_links(table.tile[rows], table.joint[rows])
            table.check_joint(lead, rows)
            link = np.arange(m, dtype=np.int64) - lead
        c_starts, c_ends = starts[t0:t1] - r0, ends[t0:t1] - r0
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


def _category_bytes(table: BlockTable, num_tiles: int) -> dict[str, np.ndarray]:
    """Bytes of each category's blocks per tile (categories in the order their first
    block appears): one weighted count over ``category * num_tiles + tile``."""
    n_cat = len(table.categories)
    if len(table) == 0:
        return {}
    key = table.category.astype(np.int64) * num_tiles
    key += table.tile
    # integral float64 sums: exact below 2**53 bytes per category and tile
    sums = np.bincount(key, weights=table.size, minlength=n_cat * num_tiles)
    sums = sums.astype(np.int64).reshape(n_cat, num_tiles)
    # categories come in runs of rows: the first value of each run, in order
    cat = table.category
    starts = np.flatnonzero(cat[1:] != cat[:-1]) + 1
    present = dict.fromkeys([int(cat[0]), *cat[starts].tolist()])
    return {table.categories[c]: sums[c] for c in present}


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
    size = table.size
    by_tile: dict[str, np.ndarray] = {
        "total": covered.sum(axis=1),
        "totalIncludingGaps": top.sum(axis=1),
    }
    for r, name in enumerate(_REGION_NAMES):
        by_tile[name] = covered[:, r].copy()
        by_tile[f"{name}IncludingGaps"] = top[:, r].copy()

    by_category = _category_bytes(table, num_tiles)

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
