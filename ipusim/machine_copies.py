"""Cycles of Poplar's runtime on-tile copy vertices (gather and scatter).

Poplar makes data contiguous for a vertex's ``Vector`` fields by on-tile copies it
inserts itself: a compute set of copy vertices (``poplar_rt::`` vertex types, such as
``StridedCopyDA32``, ``DstStridedCopyDA32``, ``DstLongStridedCopy``, ``ShortMemcpy``,
``Memcpy64Bit``, named in the Poplar user guide's memory report and in the SDK 1.x
profiles of thorbenlouw/lbm-graphcore ``experiments/halo-exchange-approaches``), a
few per tile, one per worker. Two kinds are told apart, because Poplar uses different
vertices for them and H measures both:

* **gather**: strided source regions into one contiguous buffer (H's ``pre``, before the
  compute set: the worker's rows of the image into its ``in`` field);
* **scatter**: a contiguous buffer out to strided destination regions (H's ``post``,
  after it: the ``out`` field back into the image rows).

A copy vertex runs on one worker context; its thread cycles are a fixed part (vertex
entry, reading its state), a part per region (the loop set-up of each contiguous piece)
and the bytes at the rate of the load/store path: Colossus' ``ldst64pace`` loads 64 bits
and stores 64 bits in one instruction (the Tile Vertex ISA; Poplibs' estimators price
loops built on it at one instruction per 8 bytes, e.g. ``BitwiseNot`` in
``popopsCycleEstimators.cpp``), so a copy moves ``min(memory.load_bytes_per_cycle,
memory.store_bytes_per_cycle)`` bytes per thread cycle (8 on every preset, the store
side). The rate is the ISA's, not fitted; the fixed and per-region parts
(``code.copy_{gather,scatter}_{fixed,region}_cycles``) are fitted on H's copy rows
(docs/calibration.md, "On-tile copies"). The measured difference between ``float``
and ``half4`` copies of the same rows on one IPU is one thread cycle per 8.0 bytes
(``pre``), the rate of the ISA.

They are applied when a graph is built or a program compiled (Poplar decides its copy
vertices when it compiles), so ``ipusim calibrate``, which re-times a lowered program,
cannot fit them; ``examples/calibration/_fit_hardware.py copies`` fits them on the
workload's geometry.

**The ``Copy`` program's on-tile part** (:func:`on_tile_copy_vertices`) is made of the
same kind of vertices: the elements a ``Copy`` moves within a tile form pieces (runs
contiguous on both sides), a tile's bytes are split between its worker contexts in
chunks of whole 64-bit words (one copy vertex per worker, as the SDK 1.x profiles
above show, so the chunks split pieces where they fall), and each vertex is costed by
``code.copy_estimate``:

* ``planner`` (the default): Poplibs' planner estimate of the copies that rearrange a
  convolution's or matMul's operands and output (graphcore/poplibs 7eac0f26,
  ``lib/poplin/ConvModel.cpp``, ``addTransformCycleEstimate`` with
  ``getScaleFactorForTransform``), line by line: ``reorderBytesPerCycle =
  min(target.getMemcpyBytesPerCycle(), bytes per element)`` (the memcpy rate here being
  :func:`copy_bytes_per_cycle`, 8 B on every preset); a transform factor ``{5, 4}``
  when the transformed dimension's size is a multiple of the type's granularity (2
  elements for FLOAT, 4 for every other type), else ``{5, 3}``; and
  ``copyCycles = ceildiv(bytesPerTile * 5, reorderBytesPerCycle * 4 or 3)``, rounded up
  once, with no part per piece, per region or per vertex. Poplibs' estimate is a
  tile's: its bytes at that rate per tile cycle. Here a tile's bytes are shared by its
  worker vertices, each moving its chunk at the same rate per thread cycle (a thread
  cycle is ``worker_contexts`` tile cycles, so six workers together keep Poplibs'
  rate), rounded up once per vertex (:func:`planner_copy_cycles`). Poplibs' dimension
  is a channel count of the convolution (``inputChannelsPerConvGroup *
  outputChannelsPerConvGroup`` for inputs and weights, ``outputChannelsPerConvGroup``
  for the output), which a ``Copy`` program does not know; its analogue here is what
  the copy regroups, each piece's length in elements (a piece of whole granules moves
  in whole 64-bit words for FLOAT and HALF). Poplibs' planner has no fixed part, but a
  vertex has one (its entry, reading its state, its exit): the scatter's fixed part of
  the H fit, the one without the gather's unexplained extra ("H with the runtime copy
  vertices" in docs/calibration.md);
* ``runtime``: the H fit above (fixed + regions x per region + the moves), a region
  being a strided run of pieces (one length, constant strides on both sides), the kind
  a gather where the tile's source side has more runs than its destination side;
* ``poplibs``: Poplibs' ``LongMemcpy`` estimate (``popopsCycleEstimators.cpp``,
  ``BroadcastSelectorSelectCycles``: 11 + 1 thread cycles per vertex, then per row
  ``12 + 23 + bytes / 4 + (bytes % 4) * 5``), each piece a row.

H's rows are the only measured on-tile copies, and they are not ``Copy`` programs:
Poplar's copies for a vertex's ``Vector`` fields, contiguous rows of about 200 bytes.
A ``Copy`` that rearranges an operand (a matMul's, say) moves many pieces of a few
bytes, for which the per-row part fitted on H (48 thread cycles a row) would cost
several times the copy's bytes; Poplibs' planner, which prices those very copies,
charges them by their bytes and element type alone. So the planner is the default for
``Copy`` programs, and :func:`copy_vertex_cycles` (H's copies) keeps the fit.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numba
import numpy as np
from numpy.typing import ArrayLike

from ipusim.config import MachineConfig

__all__ = [
    "COPY_KINDS",
    "ELEMENT_BYTES",
    "copy_bytes_per_cycle",
    "copy_vertex_cycles",
    "on_tile_copy_vertices",
    "planner_copy_cycles",
    "poplibs_memcpy_cycles",
    "transform_factor",
]

#: The kinds of runtime copy vertex (module docstring).
COPY_KINDS = ("gather", "scatter")

#: Bytes of one element of each Poplar element type, by Poplar's spelling.
ELEMENT_BYTES = {
    "float": 4, "half": 2, "int": 4, "unsigned int": 4, "short": 2, "unsigned short": 2,
    "char": 1, "unsigned char": 1, "bool": 1,
}  # fmt: skip


def copy_bytes_per_cycle(cfg: MachineConfig) -> int:
    """Bytes a copy vertex moves per thread cycle: one 64-bit load and one 64-bit store
    per ``ldst64pace``, so the slower of the tile's load and store paths."""
    return int(min(cfg.memory.load_bytes_per_cycle, cfg.memory.store_bytes_per_cycle))


def copy_vertex_cycles(
    cfg: MachineConfig, region_bytes: ArrayLike, kind: Literal["gather", "scatter"]
) -> int:
    """Thread cycles of one runtime copy vertex moving ``region_bytes`` (one entry per
    contiguous region of its strided side) as a ``kind`` copy (``gather`` or
    ``scatter``): fixed + regions x per region + each region's bytes at
    :func:`copy_bytes_per_cycle`, rounded up per region (a region's last 64-bit
    access is a whole instruction).

    Raises
    ------
    ValueError
        ``kind`` is not a copy kind, or a region has a negative size.
    """
    if kind not in COPY_KINDS:
        raise ValueError(
            f"copy_vertex_cycles: kind={kind!r}; expected one of {', '.join(COPY_KINDS)} "
            "(gather: strided regions into a contiguous buffer; scatter: the reverse)"
        )
    b = np.asarray(region_bytes, np.int64).reshape(-1)
    if b.size and b.min() < 0:
        raise ValueError(
            f"copy_vertex_cycles: a region of {int(b.min())} bytes; sizes must be >= 0"
        )
    code = cfg.code
    if kind == "gather":
        fixed, per_region = code.copy_gather_fixed_cycles, code.copy_gather_region_cycles
    else:
        fixed, per_region = code.copy_scatter_fixed_cycles, code.copy_scatter_region_cycles
    rate = copy_bytes_per_cycle(cfg)
    moves = int((-(-b // rate)).sum())
    return round(fixed + b.size * per_region) + moves


#: The numerator of Poplibs' transform factor ``{5, f1}`` (:func:`transform_factor`).
_F0 = 5


def transform_factor(element_type: str, size: ArrayLike) -> tuple[int, np.ndarray]:
    """Poplibs' scale factor of a rearranging copy, ``(5, 4)`` when ``size`` (elements)
    is a multiple of the type's granularity, 2 for FLOAT and 4 for every other type,
    else ``(5, 3)`` (graphcore/poplibs 7eac0f26, ``lib/poplin/ConvModel.cpp``,
    ``getScaleFactorForTransform``): the copy moves ``rate * f1 / 5`` bytes a cycle.
    Returns ``5`` and ``f1`` (an array shaped as ``size``)."""
    grain = _granularity(element_type)
    return _F0, np.where(np.asarray(size, np.int64) % grain == 0, 4, 3)


def _granularity(element_type: str) -> int:
    """Elements of ``element_type`` a transform's dimension is a multiple of for the
    faster factor (:func:`transform_factor`): 2 for FLOAT, 4 for every other type."""
    return 2 if element_type == "float" else 4


@numba.njit(cache=True, nogil=True)
def _granular_pieces(nbytes, size, grain):  # pragma: no cover - compiled
    # per piece of ``size``-byte elements whether its length in elements is a multiple
    # of ``grain`` (transform factor 4, else 3), in one pass; and the first piece that
    # is not whole elements (-1: none). A piece of whole elements is ``grain`` of them
    # times some count when its bytes are a multiple of ``size * grain``; with both
    # powers of two (every Poplar type's) the two remainders are masks, not divisions
    # by a value known only at run time (ten times faster per piece)
    four = np.empty(nbytes.size, np.bool_)
    block = size * grain
    if size > 0 and grain > 0 and (size & (size - 1)) == 0 and (block & (block - 1)) == 0:
        part, whole = size - 1, block - 1  # (x & (m - 1) is x % m for a power of two m)
        for k in range(nbytes.size):
            x = nbytes[k]
            if x & part:
                return four, k
            four[k] = (x & whole) == 0
        return four, -1
    for k in range(nbytes.size):
        if nbytes[k] % size:
            return four, k
        four[k] = (nbytes[k] // size) % grain == 0
    return four, -1


def planner_copy_cycles(
    cfg: MachineConfig, piece_bytes: ArrayLike, element_type: str | ArrayLike
) -> int:
    """Thread cycles of one copy vertex moving ``piece_bytes`` (one entry per piece, each
    piece of ``element_type``: one name for all or one per piece) by Poplibs' planner
    rule (module docstring): each piece at ``min(memcpy bytes per cycle, element
    bytes) * f1 / 5`` bytes a cycle (:func:`transform_factor` of its length in
    elements), the sum rounded up once, plus the vertex's entry and exit."""
    b = np.asarray(piece_bytes, np.int64).reshape(-1)
    weight, scale = _planner_weights(cfg, b, element_type)
    moved = int((b * weight).sum())
    return round(cfg.code.copy_scatter_fixed_cycles) + -(-moved // scale)


def _planner_weights(
    cfg: MachineConfig, nbytes: np.ndarray, element_type: str | ArrayLike | None
) -> tuple[np.ndarray, int]:
    """Per piece, the cycles a byte costs by the planner rule, as an integer count of
    ``1 / scale`` cycles: ``5 * scale / (rate * f1)``, ``scale`` the least common
    multiple of the pieces' ``rate * f1`` (so that summing and rounding are exact)."""
    if element_type is None:
        raise ValueError(
            "on-tile copy: code.copy_estimate='planner' needs the copied elements' type "
            "(element_type=None); Poplibs' planner rate is min(memcpy bytes per cycle, "
            "element bytes); hint: pass the tensor's element type name, e.g. 'half'"
        )
    names = np.asarray(element_type).reshape(-1)
    if names.size not in (1, nbytes.size):
        raise ValueError(
            f"on-tile copy: {names.size} element types for {nbytes.size} pieces; give one "
            "type for the whole copy or one per piece"
        )
    # one type for the whole copy (every Copy program's): no grouping by type
    kinds, which = (names, None) if names.size == 1 else np.unique(names, return_inverse=True)
    memcpy = copy_bytes_per_cycle(cfg)
    groups = []  # per type: its pieces, their rate, and per piece whether f1 is 4
    for k, name in enumerate(kinds.tolist()):
        size = ELEMENT_BYTES.get(name)
        if size is None:
            raise ValueError(
                f"on-tile copy: element type {name!r} is not a Poplar element type; "
                f"expected one of {', '.join(ELEMENT_BYTES)}"
            )
        mine = slice(None) if which is None else which.reshape(-1) == k
        mine_bytes = nbytes[mine]
        four, bad = _granular_pieces(mine_bytes, size, _granularity(name))
        if bad >= 0:
            raise ValueError(
                f"on-tile copy: a piece of {int(mine_bytes[bad])} bytes of {name}; pieces "
                f"must be whole elements of {size} bytes"
            )
        groups.append((mine, min(memcpy, size), four))
    # the denominators ``rate * f1`` that occur (f1 is 4 or 3: transform_factor), then
    # each piece's weight ``f0 * scale / (rate * f1)``
    denominators = set()
    for _, rate, four in groups:
        n_four = int(np.count_nonzero(four))
        denominators.update([rate * 4] if n_four else [])
        denominators.update([rate * 3] if n_four < four.size else [])
    scale = math.lcm(*denominators) if denominators else 1
    weight = np.empty(nbytes.size, np.int64)
    for mine, rate, four in groups:
        weight[mine] = np.where(four, _F0 * (scale // (rate * 4)), _F0 * (scale // (rate * 3)))
    return weight, scale


def poplibs_memcpy_cycles(region_bytes: ArrayLike) -> int:
    """Thread cycles of one copy vertex moving ``region_bytes`` (one entry per row) by
    Poplibs' ``LongMemcpy`` estimate (graphcore/poplibs 7eac0f26,
    ``lib/popops/popopsCycleEstimators.cpp``, ``BroadcastSelectorSelectCycles``):
    ``11 + 1`` for the vertex, then ``12 + 23 + bytes // 4 + (bytes % 4) * 5`` per row."""
    b = np.asarray(region_bytes, np.int64).reshape(-1)
    return 12 + int(_row_cycles(b).sum())


def _row_cycles(nbytes: Any) -> Any:
    """The per-row part of :func:`poplibs_memcpy_cycles`, ``12 + 23 + bytes // 4 +
    (bytes % 4) * 5``, of a count of bytes (not negative) or an array of them."""
    return 35 + (nbytes >> 2) + (nbytes & 3) * 5


#: :func:`_row_cycles` for the compiled copy planners, which add it up segment by
#: segment (one statement of the estimate for numpy and compiled code).
memcpy_row_cycles = numba.njit(cache=True, nogil=True, inline="always")(_row_cycles)


@numba.njit(cache=True, nogil=True)
def _chunk_walk(tile, nbytes, fresh, weight, contexts, rate):  # pragma: no cover - compiled
    # pieces sorted by tile; each tile's bytes cut into chunks of ceil(bytes / (contexts
    # * 8)) * 8, a vertex per chunk: its tile, its first piece, the thread cycles of its
    # moves at ``rate``, Poplibs' memcpy estimate of its segments, its region setups and
    # its bytes times their pieces' ``weight`` (the planner rule's cost of a byte)
    n = tile.size
    shift = -1  # log2 of a rate that is a power of two (8 on every preset): a segment's
    if rate > 0 and (rate & (rate - 1)) == 0:  # moves are a shift, not a division
        shift = 0
        while (1 << shift) < rate:
            shift += 1
    room = 0
    k = 0
    while k < n:  # at most ``contexts`` vertices per tile
        j = k
        while j < n and tile[j] == tile[k]:
            j += 1
        room += contexts
        k = j
    v_tile = np.empty(room, np.int64)
    v_row = np.empty(room, np.int64)
    moves = np.zeros(room, np.int64)
    memcpy = np.zeros(room, np.int64)
    setups = np.zeros(room, np.int64)
    weighed = np.zeros(room, np.int64)
    m = 0
    k = 0
    while k < n:
        j = k
        total = 0
        while j < n and tile[j] == tile[k]:
            total += nbytes[j]
            j += 1
        chunk = -(-total // (contexts * 8)) * 8
        offset = 0
        limit = 0  # where the current chunk ends (segments never cross it)
        for p in range(k, j):
            x = offset
            end = offset + nbytes[p]
            while x < end:
                starts = x == limit
                if starts:
                    limit += chunk
                y = min(end, limit)
                if starts:  # a vertex starts: it sets up its first region
                    v_tile[m] = tile[p]
                    v_row[m] = p
                    m += 1
                    setups[m - 1] += 1
                elif x == offset and fresh[p]:
                    setups[m - 1] += 1
                seg = y - x  # (> 0: shifts and masks are its divisions)
                if shift >= 0:
                    moves[m - 1] += (seg + rate - 1) >> shift
                else:
                    moves[m - 1] += -(-seg // rate)
                memcpy[m - 1] += memcpy_row_cycles(seg)
                weighed[m - 1] += seg * weight[p]
                x = y
            offset = end
        k = j
    return v_tile[:m], v_row[:m], moves[:m], memcpy[:m], setups[:m], weighed[:m]


def on_tile_copy_vertices(
    cfg: MachineConfig,
    region_tile: ArrayLike,
    region_bytes: ArrayLike,
    gather: ArrayLike,
    new_region: ArrayLike | None = None,
    element_type: str | ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The copy vertices of an on-tile copy: ``(vertex tile, thread cycles)``.

    Piece ``k`` (contiguous on both sides) lies on ``region_tile[k]`` and holds
    ``region_bytes[k]`` (> 0) bytes; ``gather[k]`` says whether its tile's copy is a
    gather (else a scatter); ``new_region[k]`` (default all True) whether the piece
    starts a region of its own, False where it continues a strided region (pieces of
    one length at constant source and destination strides, which one loop of a strided
    copy vertex walks); ``element_type`` is the Poplar name of the pieces' element type
    (one for all, or one per piece), which the ``planner`` rule needs. A tile's pieces,
    in the order given, are cut into one chunk per worker context of
    ``ceil(tile bytes / (contexts * 8)) * 8`` bytes (whole 64-bit words), so a chunk
    boundary splits the piece it falls in; each chunk is one vertex, costed by
    ``code.copy_estimate`` (module docstring): ``planner`` by
    :func:`planner_copy_cycles` over its segments (a split piece's segments keep the
    piece's transform factor), ``runtime`` by :func:`copy_vertex_cycles`' fixed and
    per-region parts plus every segment at the ``ldst64pace`` rate rounded up,
    ``poplibs`` by :func:`poplibs_memcpy_cycles`.

    Raises
    ------
    ValueError
        With ``planner``: no element type, an unknown one, or a piece that is not a
        whole number of elements.
    """
    tile = np.asarray(region_tile, np.int64).reshape(-1)
    nbytes = np.asarray(region_bytes, np.int64).reshape(-1)
    kind = np.asarray(gather, bool).reshape(-1)
    fresh = np.ones(tile.size, bool) if new_region is None else np.asarray(new_region, bool)
    if not tile.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    estimate = cfg.code.copy_estimate
    weight, scale = np.zeros(tile.size, np.int64), 1
    if estimate == "planner":
        weight, scale = _planner_weights(cfg, nbytes, element_type)
    if tile.size > 1 and np.any(tile[1:] < tile[:-1]):  # (a Copy's pieces come in tile order)
        order = np.argsort(tile, kind="stable")
        tile, nbytes, kind, fresh = tile[order], nbytes[order], kind[order], fresh[order]
        weight = weight[order]
    contexts = int(cfg.tile.worker_contexts)
    v_tile, row, moves, memcpy, count, weighed = _chunk_walk(
        tile, nbytes, fresh, weight, contexts, copy_bytes_per_cycle(cfg)
    )
    if estimate == "poplibs":
        return v_tile, 12 + memcpy
    if estimate == "planner":  # plus the vertex's entry and exit (module docstring)
        return v_tile, round(cfg.code.copy_scatter_fixed_cycles) + -(-weighed // scale)
    code = cfg.code
    is_gather = kind[row]
    fixed = np.where(is_gather, code.copy_gather_fixed_cycles, code.copy_scatter_fixed_cycles)
    per = np.where(is_gather, code.copy_gather_region_cycles, code.copy_scatter_region_cycles)
    cycles = np.rint(fixed + count * per).astype(np.int64) + moves
    return v_tile, cycles
