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
* A block that fits nowhere goes to a per-tile *overflow* area with the same rules;
  its bytes are the tile's ``overflowed`` figures and the tile is out of memory.

The allocator loops over blocks (a variable's piece on one tile, not its elements)
and lays out each distinct per-tile sequence of blocks once; the report is computed
with numpy over all placements at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipusim.errors import IpusimError

__all__ = [
    "ANY",
    "INTERLEAVED",
    "NON_INTERLEAVED",
    "OVERFLOW",
    "Block",
    "MemoryPlanError",
    "MemoryReport",
    "MemorySpec",
    "Placement",
    "align_up",
    "allocate",
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
        """Bank index of byte ``offset`` of ``region``; the interleaved banks follow
        the non-interleaved ones (the non-interleaved region is at the low addresses)."""
        base = 0 if region == NON_INTERLEAVED else self.non_interleaved_bytes
        return (base + int(offset)) // self.bank_bytes


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
    """

    name: str
    category: str
    tile: int
    size: int
    element_bytes: int = 1
    region: str = ANY
    live: tuple[int, int] | None = None


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


def _check(block: Block, num_tiles: int) -> None:
    where = f"memory block '{block.name}' ({block.category}) on tile {block.tile}"
    if not 0 <= block.tile < num_tiles:
        raise MemoryPlanError(f"{where}: tile is outside [0, {num_tiles})")
    if block.size < 0:
        raise MemoryPlanError(f"{where}: size {block.size} must be >= 0 bytes")
    if block.element_bytes < 1:
        raise MemoryPlanError(f"{where}: element_bytes {block.element_bytes} must be >= 1")
    if block.region not in _TRY_ORDER:
        raise MemoryPlanError(
            f"{where}: region {block.region!r} is not one of {sorted(_TRY_ORDER)}"
        )
    if block.live is not None and len(block.live) != 2:
        raise MemoryPlanError(f"{where}: live {block.live!r} must be (first, last) or None")


class _Area:
    """Blocks placed in one region of one tile: ``(start, end, live first, live last)``.

    While it holds only always-live blocks aligned to the minimum alignment, first fit
    is the aligned top (the holes below are alignment padding no such block can use),
    so that common case skips the scan.
    """

    __slots__ = ("packed", "placed", "top")

    def __init__(self) -> None:
        self.placed: list[tuple[int, int, int, int]] = []
        self.top = 0
        self.packed = True

    def first_fit(
        self, size: int, align: int, live: tuple[int, int], limit: int, fast: bool
    ) -> int | None:
        """Lowest aligned offset where ``size`` bytes overlap no block live with ``live``."""
        if fast and self.packed:
            addr = align_up(self.top, align)
        else:
            lo, hi = live
            busy = sorted((s, e) for s, e, a, b in self.placed if a <= hi and lo <= b)
            addr = 0
            for s, e in busy:
                if addr + size <= s:
                    break
                addr = max(addr, align_up(e, align))
        return addr if addr + size <= limit else None

    def add(self, start: int, end: int, live: tuple[int, int], fast: bool) -> None:
        self.placed.append((start, end, int(live[0]), int(live[1])))
        self.top = max(self.top, end)
        self.packed = self.packed and fast


def _live_range(block: Block) -> tuple[int, int]:
    if block.live is None:
        return _ALWAYS
    return _NEVER if block.live[1] < block.live[0] else (int(block.live[0]), int(block.live[1]))


def _allocate_tile(
    spec: MemorySpec, items: list[tuple[int, int, str, tuple[int, int], bool]]
) -> list[tuple[int, int]]:
    """Place one tile's blocks, given in placement order as ``(size, align, region,
    live range, always live)``; returns ``(region index, offset)`` for each."""
    areas = [_Area(), _Area(), _Area()]
    out = []
    for size, align, wanted, live, always in items:
        fast = always and align == spec.alignment_bytes
        for region in (*_TRY_ORDER[wanted], 2):
            offset = areas[region].first_fit(size, align, live, spec.region_bytes(region), fast)
            if offset is not None:
                break
        assert offset is not None  # the overflow area always fits
        if size:
            areas[region].add(offset, offset + size, live, fast)
        out.append((region, offset))
    return out


def allocate(spec: MemorySpec, num_tiles: int, blocks: Sequence[Block]) -> list[Placement]:
    """Place ``blocks`` by the module's rules; returns one placement per block, in order.

    Tiles are independent, and tiles given the same sequence of blocks (sizes,
    alignments, regions and live ranges) get the same layout, so each distinct
    sequence is laid out once.

    Raises
    ------
    MemoryPlanError
        A block has a tile outside the machine, a negative size or an unknown region.
    """
    for b in blocks:
        _check(b, num_tiles)
    order = sorted(
        range(len(blocks)),
        key=lambda i: (blocks[i].live is not None, (blocks[i].live or _ALWAYS)[0], i),
    )
    by_tile: dict[int, list[int]] = {}
    for i in order:
        by_tile.setdefault(blocks[i].tile, []).append(i)
    layouts: dict[tuple, list[tuple[int, int]]] = {}
    out: list[Placement | None] = [None] * len(blocks)
    for members in by_tile.values():
        items = tuple(
            (
                b.size,
                max(spec.alignment_bytes, b.element_bytes),
                b.region,
                _live_range(b),
                b.live is None,
            )
            for b in (blocks[i] for i in members)
        )
        layout = layouts.get(items)
        if layout is None:
            layout = layouts[items] = _allocate_tile(spec, list(items))
        for i, (region, offset) in zip(members, layout, strict=True):
            out[i] = Placement(blocks[i], _REGION_NAMES[region], offset)
    return [p for p in out if p is not None]


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
    neither region (``overflowed > 0``); ``placements`` says where every block went.
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
    placements: list[Placement] = field(default_factory=list, repr=False)

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
        sizes: dict[str, int] = {}
        for p in self.placements:
            b = p.block
            if b.tile == tile and b.category in ("variable", "constant"):
                sizes[b.name] = sizes.get(b.name, 0) + b.size
        return sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))


def _union_and_top(
    key: np.ndarray, start: np.ndarray, end: np.ndarray, num_keys: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per key: bytes covered by the union of ``[start, end)`` and the highest end."""
    covered = np.zeros(num_keys, np.int64)
    top = np.zeros(num_keys, np.int64)
    if key.size == 0:
        return covered, top
    order = np.lexsort((start, key))
    k, s, e = key[order], start[order], end[order]
    np.maximum.at(top, k, e)
    # running maximum of ends within each key (keys sorted, so a key offset separates them)
    shift = np.int64(1) << np.int64(40)
    run = np.maximum.accumulate(k * shift + e) - k * shift
    prev = np.concatenate(([0], run[:-1]))
    prev[np.concatenate(([True], k[1:] != k[:-1]))] = 0
    np.add.at(covered, k, np.maximum(0, e - np.maximum(s, prev)))
    return covered, top


def plan(
    spec: MemorySpec,
    num_tiles: int,
    blocks: Sequence[Block],
    point_names: Iterable[str] = (),
    by_compute_set: Mapping[str, np.ndarray] | None = None,
    by_vertex_type: Mapping[str, int] | None = None,
) -> MemoryReport:
    """Place ``blocks`` (see :func:`allocate`) and build the :class:`MemoryReport`.

    Parameters
    ----------
    point_names
        Name of each program point, for the liveness table.
    by_compute_set, by_vertex_type
        Attributions the caller computed (passed through to the report).
    """
    placements = allocate(spec, num_tiles, blocks)
    n = len(placements)
    tile = np.fromiter((p.block.tile for p in placements), np.int64, n)
    size = np.fromiter((p.block.size for p in placements), np.int64, n)
    region = np.fromiter((_REGION_INDEX[p.region] for p in placements), np.int64, n)
    start = np.fromiter((p.offset for p in placements), np.int64, n)
    covered, top = _union_and_top(tile * 3 + region, start, start + size, num_tiles * 3)
    covered, top = covered.reshape(num_tiles, 3), top.reshape(num_tiles, 3)
    by_tile: dict[str, np.ndarray] = {
        "total": covered.sum(axis=1),
        "totalIncludingGaps": top.sum(axis=1),
    }
    for r, name in enumerate(_REGION_NAMES):
        by_tile[name] = covered[:, r].copy()
        by_tile[f"{name}IncludingGaps"] = top[:, r].copy()

    categories = list(dict.fromkeys(p.block.category for p in placements))
    cat_index = {c: i for i, c in enumerate(categories)}
    cat = np.fromiter((cat_index[p.block.category] for p in placements), np.int64, n)
    per_cat = np.zeros((len(categories), num_tiles), np.int64)
    np.add.at(per_cat, (cat, tile), size)
    by_category = {c: per_cat[i] for i, c in enumerate(categories)}

    names = list(point_names)
    always = np.fromiter((p.block.live is None for p in placements), bool, n)
    lo = np.fromiter(((p.block.live or (0, -1))[0] for p in placements), np.int64, n)
    hi = np.fromiter(((p.block.live or (0, -1))[1] for p in placements), np.int64, n)
    diff = np.zeros(len(names) + 1, np.int64)
    ok = ~always & (lo <= hi) & (hi >= 0) & (lo < len(names))
    np.add.at(diff, np.clip(lo[ok], 0, len(names)), size[ok])
    np.add.at(diff, np.clip(hi[ok] + 1, 0, len(names)), -size[ok])
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
        placements=placements,
    )
