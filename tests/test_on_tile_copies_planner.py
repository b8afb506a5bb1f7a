"""The ``planner`` rule of the on-tile copy vertices (ipusim.machine_copies) against
Poplibs' planner estimate of a rearranging copy, written out here from
graphcore/poplibs 7eac0f26 ``lib/poplin/ConvModel.cpp``: ``addTransformCycleEstimate``
moves ``min(memcpy bytes per cycle, element bytes)`` bytes a cycle scaled by
``getScaleFactorForTransform`` (``{5, 4}`` when the dimension is a multiple of 2
elements for FLOAT and 4 for other types, else ``{5, 3}``), the bytes rounded up once;
here each piece's length in elements is the dimension and each worker vertex rounds
once. FLOAT, HALF and INT copies run as ``Copy`` programs; a mixed copy (pieces of
several types on one tile) through :func:`on_tile_copy_vertices`."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from test_on_tile_copies import _copy_step, _vertices

from ipusim.config import load_config
from ipusim.machine_copies import on_tile_copy_vertices, planner_copy_cycles, transform_factor
from poplar_api import FLOAT, HALF, INT, Graph
from poplar_api import program as prog

MEMCPY = 8  # bytes a cycle: the tile's 64-bit load/store path on the presets
BYTES = {"float": 4, "half": 2, "int": 4, "char": 1}
GRAIN = {"float": 2, "half": 4, "int": 4, "char": 4}  # getScaleFactorForTransform


#: The vertex's entry and exit: the scatter's fixed part of the H fit (the default).
ENTRY = {"code.copy_scatter_fixed_cycles": load_config("tiny").code.copy_scatter_fixed_cycles}


def entry() -> int:
    """The vertex's entry and exit in thread cycles."""
    return round(ENTRY["code.copy_scatter_fixed_cycles"])


def share(seg: int, piece: int, name: str) -> Fraction:
    """Cycles of ``seg`` bytes of a ``piece``-byte piece of ``name`` (Poplibs' rule)."""
    f1 = 4 if (piece // BYTES[name]) % GRAIN[name] == 0 else 3
    return Fraction(seg * 5, min(MEMCPY, BYTES[name]) * f1)


def test_transform_factor_is_poplibs_table() -> None:
    f0, f1 = transform_factor("float", np.array([1, 2, 3, 4, 6]))
    assert f0 == 5 and f1.tolist() == [3, 4, 3, 4, 4]
    for name in ("half", "int", "unsigned short", "char"):
        assert transform_factor(name, np.array([2, 4, 6, 8]))[1].tolist() == [3, 4, 3, 4]


def _copy_vertices(typ, n: int) -> list[tuple[int, int]]:
    """Vertices of ``Copy(a, b)`` of ``n`` elements of ``typ``, both on tile 0 of
    ``tiny`` (one piece), with the default estimate."""

    def build(graph: Graph) -> prog.Program:
        a = graph.addVariable(typ, [n], "a")
        b = graph.addVariable(typ, [n], "b")
        graph.setTileMapping(a, 0)
        graph.setTileMapping(b, 0)
        return prog.Copy(a, b)

    step = _copy_step({"code.copy_estimate": "planner", **ENTRY}, build)
    return _vertices(step)


@pytest.mark.parametrize(
    ("typ", "n"),
    [(FLOAT, 240), (FLOAT, 241), (HALF, 480), (HALF, 482), (INT, 240), (INT, 242)],
)
def test_a_copy_moves_at_poplibs_rate_for_its_type(typ, n: int) -> None:
    name = typ.name
    total = n * BYTES[name]
    chunk = math.ceil(total / (6 * 8)) * 8  # a worker's share, whole 64-bit words
    sizes = [min(chunk, total - k) for k in range(0, total, chunk)]
    want = [(0, entry() + math.ceil(share(b, total, name))) for b in sizes]
    assert _copy_vertices(typ, n) == sorted(want)


def test_half_moves_at_a_fifth_of_the_memcpy_rate_float_at_two_fifths() -> None:
    # the same 1,920 bytes: HALF moves 2 x 4 / 5 = 1.6 B a cycle, FLOAT 3.2, INT 3.2
    # (960 ints: a multiple of 4), each worker 320 B
    cycles = {t.name: _copy_vertices(t, 1920 // t.size)[0][1] - entry() for t in (FLOAT, HALF, INT)}
    assert cycles == {"float": 100, "half": 200, "int": 100}


def test_a_mixed_copy_sums_each_piece_at_its_own_rate() -> None:
    cfg = load_config("tiny")
    # tile 5: 10 floats (40 B, factor 5/4), 6 halves (12 B, 6 % 4: 5/3), 4 chars (4 B,
    # 5/4), 3 ints (12 B, 5/3): 68 B in chunks of ceil(68 / 48) x 8 = 16 B
    pieces = [(40, "float"), (12, "half"), (4, "char"), (12, "int")]
    tiles, cycles = on_tile_copy_vertices(
        cfg, [5] * 4, [b for b, _ in pieces], [False] * 4, None, [t for _, t in pieces]
    )
    chunks: list[Fraction] = []
    offset = 0
    for b, name in pieces:
        x = offset
        while x < offset + b:
            v = x // 16
            y = min(offset + b, (v + 1) * 16)
            while len(chunks) <= v:
                chunks.append(Fraction(0))
            chunks[v] += share(y - x, b, name)
            x = y
        offset += b
    assert tiles.tolist() == [5] * len(chunks)
    assert cycles.tolist() == [entry() + math.ceil(c) for c in chunks]
    # one vertex over the same pieces, by the function that prices one vertex
    whole = planner_copy_cycles(cfg, [b for b, _ in pieces], [t for _, t in pieces])
    assert whole == entry() + math.ceil(sum(share(b, b, t) for b, t in pieces))


def test_six_workers_keep_poplibs_tile_estimate() -> None:
    # Poplibs' tile estimate ceildiv(bytes x 5, rate x f1) against the tile's time: its
    # slowest worker's thread cycles (less the entry) x 6 contexts; a worker's chunk is
    # at most 8 B over a sixth of the bytes and rounds up once, so the tile is over
    # Poplibs by less than 6 x (8 B at the rate + 1 cycle)
    cfg = load_config("tiny")
    for name, n in (("half", 4800), ("float", 1202), ("int", 999)):
        total = n * BYTES[name]
        _, cycles = on_tile_copy_vertices(cfg, [0], [total], [False], None, name)
        f1 = 4 if n % GRAIN[name] == 0 else 3
        poplibs = -(-(total * 5) // (min(MEMCPY, BYTES[name]) * f1))
        tile = 6 * int(cycles.max() - entry())
        assert 0 <= tile - poplibs <= 6 + 8 * 5 * 6 // (min(MEMCPY, BYTES[name]) * f1)


def test_bad_element_types_are_named() -> None:
    cfg = load_config("tiny")
    with pytest.raises(ValueError, match="needs the copied elements' type"):
        on_tile_copy_vertices(cfg, [0], [8], [False])
    with pytest.raises(ValueError, match="'double' is not a Poplar element type"):
        on_tile_copy_vertices(cfg, [0], [8], [False], None, "double")
    with pytest.raises(ValueError, match="a piece of 6 bytes of float"):
        on_tile_copy_vertices(cfg, [0, 0], [8, 6], [False] * 2, None, "float")
    with pytest.raises(ValueError, match="3 element types for 2 pieces"):
        on_tile_copy_vertices(cfg, [0, 0], [8, 8], [False] * 2, None, ["float"] * 3)
    # the other estimates do not need the type
    runtime = load_config("tiny", {"code.copy_estimate": "runtime"})
    assert on_tile_copy_vertices(runtime, [0], [8], [False])[0].tolist() == [0]
