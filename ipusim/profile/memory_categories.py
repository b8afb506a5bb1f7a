"""Tile memory by Poplar's storage categories, in the graph profile's shape.

Poplar's graph profile holds ``memory.byCategory[category][region][kind]``: for each
storage category (Poplar Profile Data, 1.2 "Storage categories"), each region
(``nonInterleaved``, ``interleaved``, ``overflowed``) and each kind (``overlapped``:
bytes of blocks that share an address with another block, as variables that are
never live together do; ``nonOverlapped``: the rest), the bytes on every tile. The
shape is the one Poplibs' tests read (``graphProfile["memory"]["byCategory"]
["internalExchangeCode"]["nonInterleaved"]["nonOverlapped"]``, graphcore/poplibs,
the popops multiUpdate tests).

:func:`by_category` builds it from a placed :class:`~ipusim.tile.memory.MemoryReport`:
every block the memory model placed is counted, in the region it went to, under the
Poplar category of what it holds (:data:`IPUSIM_TO_POPLAR`). Categories the model
does not place are present with zeros, so a reader finds every category the guide
lists. A block counts in full as ``overlapped`` when any of its bytes share an
address with another block of the same tile.

:func:`by_compute_set` and :func:`by_vertex_type` build ``memory.byComputeSet`` and
``memory.byVertexType``: tables with a row per compute set (vertex type) of the
profile and a value per tile, of code (``codeBytes``) and of vertex data split as
Poplar splits it (``vertexDataBytes``, ``edgePtrBytes``, ``descriptorBytes``,
``copyPtrBytes``: the names a Graphcore tool reads from Poplar's profile,
graphcore/poplibs ``tools/plot_metric_variation.py``), from the same report's
``vertexCode`` blocks and vertex state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "DATA_PARTS",
    "IPUSIM_TO_POPLAR",
    "KINDS",
    "REGIONS",
    "STORAGE_CATEGORIES",
    "by_category",
    "by_compute_set",
    "by_vertex_type",
    "category_totals",
    "liveness",
    "overlapped_blocks",
]

#: Poplar's storage categories with where each name was read. ``guide``: the
#: opening of Table 1.1 of *Poplar Profile Data* (docs.graphcore.ai,
#: projects/profile-data, "1.2 Storage categories") and its index; ``graphcore``:
#: Graphcore's own code reading these categories from profiles
#: (graphcore/ipu_tensorflow_addons, its saved-model converter's list of
#: non-layer memory, graphcore/ipu_tensorflow_addons' profile-analysis tests, and
#: graphcore/poplibs tests); ``unconfirmed``: a name recalled from the guide's table
#: that no public Graphcore page or code read here confirms (docs/profiles.md says
#: so). Poplar has 27 categories; the one missing here was not found.
STORAGE_CATEGORIES: dict[str, str] = {
    "constant": "guide",
    "controlCode": "guide",
    "controlId": "guide",
    "controlTable": "guide",
    "copyDescriptor": "guide",
    "globalExchangeCode": "graphcore",
    "globalExchangePacketHeader": "graphcore",
    "globalMessage": "unconfirmed",
    "hostExchangeCode": "graphcore",
    "hostExchangePacketHeader": "graphcore",
    "hostMessage": "unconfirmed",
    "instrumentation": "unconfirmed",
    "instrumentationResults": "graphcore",
    "internalExchangeCode": "graphcore",
    "message": "unconfirmed",
    "multiple": "unconfirmed",
    "outputEdge": "unconfirmed",
    "rearrangement": "unconfirmed",
    "sharedCodeStorage": "unconfirmed",
    "sharedDataStorage": "unconfirmed",
    "stack": "graphcore",
    "variable": "guide",
    "vectorListDescriptor": "graphcore",
    "vertexCode": "graphcore",
    "vertexFieldData": "graphcore",
    "vertexInstanceState": "graphcore",
}

#: The memory model's category of a block -> Poplar's. Every category the model
#: places is one of Poplar's except the exchange buffers of an ``Execute``, which
#: Poplar keeps as ``message`` storage.
IPUSIM_TO_POPLAR: dict[str, str] = {
    "variable": "variable",
    "constant": "constant",
    "vertexCode": "vertexCode",
    "vertexInstanceState": "vertexInstanceState",
    "vectorListDescriptor": "vectorListDescriptor",
    "copyDescriptor": "copyDescriptor",
    "controlCode": "controlCode",
    "internalExchangeCode": "internalExchangeCode",
    "globalExchangeCode": "globalExchangeCode",
    "hostExchangeCode": "hostExchangeCode",
    "stack": "stack",
    "messageBuffer": "message",
}

#: Regions in the order of :class:`~ipusim.tile.memory.MemoryReport`'s
#: ``block_region`` codes (0, 1, 2).
REGIONS = ("nonInterleaved", "interleaved", "overflowed")
KINDS = ("nonOverlapped", "overlapped")


def overlapped_blocks(
    tile: np.ndarray, region: np.ndarray, start: np.ndarray, size: np.ndarray
) -> np.ndarray:
    """Which blocks share at least one byte address with another block of their tile
    and region (empty blocks never do).

    Blocks are sorted by tile, region and start; a block overlaps one before it when
    it starts below the furthest end so far in its (tile, region), and one after it
    when the next block of its (tile, region) starts below its own end. The furthest
    end is a running maximum per group, so one numpy pass finds both.
    """
    # the report keeps its columns in the narrowest integer types: widen before adding
    tile, region, start, size = (np.asarray(a, np.int64) for a in (tile, region, start, size))
    n = int(tile.size)
    out = np.zeros(n, bool)
    live = np.flatnonzero(size > 0)
    if live.size < 2:
        return out
    order = live[np.lexsort((start[live], region[live], tile[live]))]
    t, r, s = tile[order], region[order], start[order]
    e = s + size[order]
    group = np.concatenate(([True], (t[1:] != t[:-1]) | (r[1:] != r[:-1])))
    # running maximum of the ends within each group: offset each group above the last
    gid = np.cumsum(group) - 1
    span = int(e.max()) + 1
    run_end = np.maximum.accumulate(e + gid * span) - gid * span
    prev_end = np.concatenate(([0], run_end[:-1]))
    hit = ~group & (s < prev_end)  # starts inside an earlier block of the group
    same_next = np.concatenate((~group[1:], [False]))
    next_start = np.concatenate((s[1:], [0]))
    hit |= same_next & (next_start < e)  # a later block starts inside it
    out[order] = hit
    return out


def by_category(report: Any) -> dict[str, dict[str, dict[str, list[int]]]]:
    """``memory.byCategory`` of the graph profile from a placed memory report.

    Parameters
    ----------
    report
        A :class:`~ipusim.tile.memory.MemoryReport` (its ``blocks``,
        ``block_region`` and ``block_offset``).

    Returns
    -------
    dict
        ``category -> region -> kind -> bytes per tile`` for every name of
        :data:`STORAGE_CATEGORIES` (see the module docstring).
    """
    nt = int(report.num_tiles)
    blocks = report.blocks
    names = [IPUSIM_TO_POPLAR.get(c, c) for c in blocks.categories]
    cats = list(dict.fromkeys([*STORAGE_CATEGORIES, *names]))
    index = {c: i for i, c in enumerate(cats)}
    cat = (
        np.array([index[c] for c in names], np.int64)[blocks.category] if names else blocks.category
    )
    region = np.asarray(report.block_region, np.int64)
    over = overlapped_blocks(blocks.tile, region, np.asarray(report.block_offset), blocks.size)
    # one bincount over (category, region, kind, tile) cells
    cells = ((cat * len(REGIONS) + region) * len(KINDS) + over) * nt + blocks.tile
    total = np.bincount(cells, weights=blocks.size, minlength=len(cats) * 6 * nt)
    table = np.rint(total).astype(np.int64).reshape(len(cats), len(REGIONS), len(KINDS), nt)
    return {
        c: {
            reg: {kind: table[i, j, k].tolist() for k, kind in enumerate(KINDS)}
            for j, reg in enumerate(REGIONS)
        }
        for i, c in enumerate(cats)
    }


def category_totals(by_cat: dict[str, Any]) -> dict[str, np.ndarray]:
    """Bytes per tile of each category, all regions and both kinds added."""
    return {
        c: np.sum([np.asarray(kinds[k], np.int64) for kinds in regions.values() for k in kinds], 0)
        for c, regions in by_cat.items()
    }


def _code_by_type(report: Any, type_names: list[str]) -> np.ndarray:
    """Vertex code bytes of each type (rows, in ``type_names`` order) on each tile,
    from the ``vertexCode`` blocks the memory model placed (one per type and tile)."""
    nt = int(report.num_tiles)
    table = np.zeros((len(type_names), nt), np.int64)
    blocks = report.blocks
    if "vertexCode" not in blocks.categories or not type_names:
        return table
    rows = np.flatnonzero(blocks.category == blocks.categories.index("vertexCode"))
    row_of = {n: i for i, n in enumerate(type_names)}
    # block name index -> row of its type (-1: a type no compute set lists)
    lookup = np.array([row_of.get(n, -1) for n in blocks.names], np.int64)
    which = lookup[blocks.name[rows]]
    keep = which >= 0
    cells = which[keep] * nt + blocks.tile[rows][keep]
    sums = np.bincount(cells, weights=blocks.size[rows][keep], minlength=table.size)
    return np.rint(sums).astype(np.int64).reshape(table.shape)


#: The parts of vertex data besides the vertices' own state, in the row order of the
#: lowering's ``vertex_data_parts`` tables.
DATA_PARTS = ("edgePtrBytes", "descriptorBytes", "copyPtrBytes")


def _parts(report: Any, key: str, names: list[str]) -> np.ndarray:
    """Rows of :data:`DATA_PARTS` (first axis) per name (second) on every tile, from
    the lowering's ``vertex_data_parts[key]`` (zeros where it has none)."""
    nt = int(report.num_tiles)
    out = np.zeros((len(DATA_PARTS), len(names), nt), np.int64)
    held = (getattr(report, "vertex_data_parts", None) or {}).get(key, {})
    for i, name in enumerate(names):
        if name in held:
            out[:, i] = held[name]
    return out


def _breakdown(code: np.ndarray, data: np.ndarray, parts: np.ndarray) -> dict[str, Any]:
    """The tables of one breakdown: ``data`` is all vertex data, of which ``parts``
    (rows of :data:`DATA_PARTS`) are edge pointers, descriptors and copy pointers and
    the rest, ``vertexDataBytes``, the vertices' own state."""
    out = {"codeBytes": code.tolist(), "vertexDataBytes": (data - parts.sum(0)).tolist()}
    out.update({name: parts[k].tolist() for k, name in enumerate(DATA_PARTS)})
    out["totalBytes"] = (code + data).tolist()
    return out


def by_vertex_type(report: Any, type_names: list[str]) -> dict[str, list[list[int]]]:
    """``memory.byVertexType``: tables with one entry per name of ``type_names`` (the
    profile's ``vertexTypes.names``), each the bytes on every tile: ``codeBytes`` (the
    type's ``vertexCode`` block), its vertices' data split as Poplar's graph profile
    splits it (graphcore/poplibs ``tools/plot_metric_variation.py``, 4a2c5f11, reads
    these names) into ``vertexDataBytes`` (the vertex header), ``edgePtrBytes``
    (field pointers and size words), ``descriptorBytes`` (vector-list descriptors)
    and ``copyPtrBytes`` (state of on-tile copy vertices), and ``totalBytes``, code
    and all vertex data (ipusim's sum)."""
    nt = int(report.num_tiles)
    data = np.zeros((len(type_names), nt), np.int64)
    held = getattr(report, "vertex_data_by_type", {}) or {}
    for i, name in enumerate(type_names):
        if name in held:
            data[i] = held[name]
    parts = _parts(report, "byType", type_names)
    return _breakdown(_code_by_type(report, type_names), data, parts)


def by_compute_set(
    report: Any, computes: list[Any], type_names: list[str]
) -> dict[str, list[list[int]]]:
    """``memory.byComputeSet``: the tables of :func:`by_vertex_type`, with one entry
    per compute step of ``computes`` (the profile's ``computeSets``).

    A compute set's code on a tile is the code of every vertex type it runs there (a
    type's code is stored once per tile and counts in each compute set that uses it,
    so these add up to more than the ``vertexCode`` category when sets share types).
    Its vertex data is the memory model's state of the compute set of that name;
    compute steps that share a name list it under the first of them.
    """
    nt = int(report.num_tiles)
    code_table = _code_by_type(report, type_names)
    row_of = {n: i for i, n in enumerate(type_names)}
    code = np.zeros((len(computes), nt), np.int64)
    data = np.zeros((len(computes), nt), np.int64)
    parts = np.zeros((len(DATA_PARTS), len(computes), nt), np.int64)
    held = (getattr(report, "vertex_data_parts", None) or {}).get("byComputeSet", {})
    seen: set[str] = set()
    for i, step in enumerate(computes):
        rows = np.array([row_of[n] for n in step.vertex_type_names], np.int64)
        kinds = np.zeros(0, np.int64) if step.vertex_type is None else step.vertex_type
        if len(kinds) != len(step.vertex_tile):
            kinds = np.zeros(len(step.vertex_tile), np.int64)
        pairs = np.unique(rows[np.asarray(kinds, np.int64)] * nt + step.vertex_tile)
        np.add.at(code[i], pairs % nt, code_table.reshape(-1)[pairs])
        if step.name not in seen and step.name in report.by_compute_set:
            data[i] = report.by_compute_set[step.name]
            if step.name in held:
                parts[:, i] = held[step.name]
        seen.add(step.name)
    return _breakdown(code, data, parts)


def liveness(report: Any) -> dict[str, Any]:
    """``memory.liveness`` in the shape Graphcore's readers of Poplar's graph profile
    use (graphcore/poplibs ``tools/bench.py`` and graphcore/tensorflow's Poplar test
    utilities read ``alwaysLive.bytesByTile`` and ``notAlwaysLive.maxBytesByTile``),
    with ipusim's per-program-point totals under ``programPoints``.

    ``alwaysLive.bytesByTile`` are the bytes of always-live blocks on each tile;
    ``notAlwaysLive.maxBytesByTile`` the most bytes of not-always-live blocks live at
    one program point on each tile (a block is live from its first to its last point;
    one that ends at a point and one that starts at the next never count together);
    ``notAlwaysLive.byProgram`` the tree of ``bytes`` and ``children`` that
    graphcore/tensorflow's Poplar test utilities walk for the peak (Poplar nests it by
    program; here every program point is a leaf with its not-always-live bytes summed
    over tiles); ``programPoints`` one entry per program point: its name and the bytes
    of not-always-live and of always-live blocks, summed over tiles.
    """
    nt = int(report.num_tiles)
    b = report.blocks
    points = len(report.liveness)
    always = np.asarray(b.always, bool)
    # the report keeps its columns in the narrowest integer types: widen before adding
    tile, size, lo, hi = (
        np.asarray(a, np.int64) for a in (b.tile, b.size, b.live_first, b.live_last)
    )
    held = np.bincount(tile[always], weights=size[always], minlength=nt)
    ok = ~always & (lo <= hi) & (hi >= 0) & (lo < points)
    tiles = np.concatenate((tile[ok], tile[ok]))
    where = np.concatenate((np.clip(lo[ok], 0, points), np.clip(hi[ok] + 1, 0, points)))
    delta = np.concatenate((size[ok], -size[ok]))
    # by tile, then point, ends before starts: every tile's deltas add up to 0, so one
    # running sum over all of them is each tile's live bytes after each event
    order = np.lexsort((delta, where, tiles))
    running = np.cumsum(delta[order])
    peak = np.zeros(nt, np.int64)
    np.maximum.at(peak, tiles[order], running)
    return {
        "alwaysLive": {"bytesByTile": np.rint(held).astype(np.int64).tolist()},
        "notAlwaysLive": {
            "maxBytesByTile": peak.tolist(),
            "byProgram": [
                {"name": str(n), "bytes": int(a), "children": []} for n, a, _ in report.liveness
            ],
        },
        "programPoints": [
            {"name": str(n), "notAlwaysLive": int(a), "alwaysLive": int(c)}
            for n, a, c in report.liveness
        ],
    }
