"""The ``Copy`` program's on-tile part: copy vertices, one per worker context, each
costed by Poplibs' planner rule (the default), the runtime copy model fitted on H or
Poplibs' ``LongMemcpy`` estimate (ipusim.machine_copies); the expected cycles are
written out here from the formulas."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine_copies import on_tile_copy_vertices, poplibs_memcpy_cycles
from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, concat
from poplar_api import program as prog

FIELDS = {
    "code.copy_estimate": "runtime",
    "code.copy_gather_fixed_cycles": 100.0,
    "code.copy_gather_region_cycles": 10.5,
    "code.copy_scatter_fixed_cycles": 3.0,
    "code.copy_scatter_region_cycles": 20.0,
}


def runtime(pieces: list[int], gather: bool, regions: int | None = None) -> int:
    """Thread cycles of one runtime copy vertex over ``pieces`` bytes in ``regions``
    regions (default one per piece): FIELDS, 8 B per thread cycle per piece, rounded up."""
    kind = "gather" if gather else "scatter"
    fixed, per = FIELDS[f"code.copy_{kind}_fixed_cycles"], FIELDS[f"code.copy_{kind}_region_cycles"]
    regions = len(pieces) if regions is None else regions
    return round(fixed + regions * per) + sum(math.ceil(p / 8) for p in pieces)


def planner(segments: list[tuple[int, int]], size: int = 4, grain: int = 2) -> int:
    """Poplibs' planner rule (ConvModel.cpp addTransformCycleEstimate) for one vertex
    over ``segments`` ``(bytes, bytes of the whole piece)`` of elements of ``size``
    bytes (FLOAT by default, granularity 2): each segment at min(8, size) x f1 / 5 bytes
    a cycle, f1 4 when its piece's elements are a multiple of the granularity else 3,
    the sum rounded up once, with the vertex's entry and exit (the scatter's fixed part
    of FIELDS)."""
    cycles = Fraction(0)
    for seg, piece in segments:
        f1 = 4 if (piece // size) % grain == 0 else 3
        cycles += Fraction(seg * 5, min(8, size) * f1)
    return round(FIELDS["code.copy_scatter_fixed_cycles"]) + math.ceil(cycles)


def poplibs(pieces: list[int]) -> int:
    """Poplibs' LongMemcpy estimate (BroadcastSelectorSelectCycles), written out."""
    return 12 + sum(12 + 23 + p // 4 + (p % 4) * 5 for p in pieces)


def test_regions_are_cut_into_one_chunk_per_worker() -> None:
    cfg = load_config("tiny", FIELDS)
    # tile 3: regions 100 B and 20 B (a gather): 120 B in chunks of ceil(120 / 48) x 8 =
    # 24 B, so five vertices: [24], [24], [24], [24], [4 | 20] (the chunk boundary at
    # 96 splits the first region); tile 1: one region of 8 B (a scatter), one vertex.
    tiles, cycles = on_tile_copy_vertices(cfg, [3, 1, 3], [100, 8, 20], [True, False, True])
    got = sorted(zip(tiles.tolist(), cycles.tolist(), strict=True))
    want = sorted(
        [(1, runtime([8], False))] + [(3, runtime([24], True))] * 4 + [(3, runtime([4, 20], True))]
    )
    assert got == want
    estimate = load_config("tiny", {**FIELDS, "code.copy_estimate": "poplibs"})
    tiles, cycles = on_tile_copy_vertices(estimate, [3, 1, 3], [100, 8, 20], [True] * 3)
    got = sorted(zip(tiles.tolist(), cycles.tolist(), strict=True))
    assert got == sorted([(1, poplibs([8]))] + [(3, poplibs([24]))] * 4 + [(3, poplibs([4, 20]))])
    assert poplibs_memcpy_cycles([4, 20, 7]) == poplibs([4, 20, 7])
    rule = load_config("tiny", {**FIELDS, "code.copy_estimate": "planner"})
    tiles, cycles = on_tile_copy_vertices(rule, [3, 1, 3], [100, 8, 20], [True] * 3, None, "float")
    got = sorted(zip(tiles.tolist(), cycles.tolist(), strict=True))
    # FLOAT: 25 and 5 elements (odd: factor 5/3), 2 elements (even: 5/4)
    want = [(1, planner([(8, 8)]))] + [(3, planner([(24, 100)]))] * 4
    assert got == sorted([*want, (3, planner([(4, 100), (20, 20)]))])


def test_no_regions_no_vertices() -> None:
    tiles, cycles = on_tile_copy_vertices(load_config("tiny"), [], [], [])
    assert tiles.size == 0 and cycles.size == 0


def _copy_step(cfg_overrides: dict, build) -> ir.Compute:
    device = IPUModel(load_config("tiny", {**FIELDS, **cfg_overrides})).createDevice()
    graph = Graph(device.getTarget())
    program = build(graph)
    engine = Engine(graph, program)
    (step,) = [
        s
        for s in ir.iter_steps(engine.ir_program)
        if isinstance(s, ir.Compute) and s.name.endswith("/OnTileCopy")
    ]
    return step


def _vertices(step: ir.Compute) -> list[tuple[int, int]]:
    return sorted(zip(step.vertex_tile.tolist(), step.vertex_cycles.tolist(), strict=True))


def test_a_strided_source_is_a_gather_and_a_strided_destination_a_scatter() -> None:
    def gather(graph: Graph) -> prog.Program:
        a = graph.addVariable(FLOAT, [8, 10], "a")  # rows of 10, the first 4 of each read
        b = graph.addVariable(FLOAT, [8, 4], "b")
        graph.setTileMapping(a, 2)
        graph.setTileMapping(b, 2)
        return prog.Copy(a.slice([0, 0], [8, 4]), b)

    # 8 pieces of 16 B (source strided, destination one run), one strided region (the
    # rows step by 40 B in the source and 16 B in the destination): 128 B in chunks of
    # ceil(128 / 48) x 8 = 24 B: 6 vertices, each cut where the 16 B rows and 24 B
    # chunks fall: [16, 8], [8, 16], [16, 8], [8, 16], [16, 8], [8]; each vertex sets
    # the region up once (its part of it), and moves each piece
    pieces = [[16, 8], [8, 16], [16, 8], [8, 16], [16, 8], [8]]
    step = _copy_step({}, gather)
    assert _vertices(step) == sorted((2, runtime(p, True, 1)) for p in pieces)

    def scatter(graph: Graph) -> prog.Program:
        a = graph.addVariable(FLOAT, [8, 4], "a")
        b = graph.addVariable(FLOAT, [8, 10], "b")
        graph.setTileMapping(a, 2)
        graph.setTileMapping(b, 2)
        return prog.Copy(a, b.slice([0, 0], [8, 4]))

    step = _copy_step({}, scatter)
    assert _vertices(step) == sorted((2, runtime(p, False, 1)) for p in pieces)
    step = _copy_step({"code.copy_estimate": "poplibs"}, scatter)
    assert _vertices(step) == sorted((2, poplibs(p)) for p in pieces)
    step = _copy_step({"code.copy_estimate": "planner"}, scatter)
    assert _vertices(step) == sorted((2, planner([(b, 16) for b in p])) for p in pieces)


def test_pieces_at_changing_strides_are_regions_of_their_own() -> None:
    def build(graph: Graph) -> prog.Program:
        a = graph.addVariable(FLOAT, [30], "a")
        b = graph.addVariable(FLOAT, [6], "b")
        graph.setTileMapping(a, 1)
        graph.setTileMapping(b, 1)
        # single elements 0, 5, 10 (stride 5), then 11, 17, 23 (stride 6 after a step
        # of 1): the destination is one run, so the tile gathers
        picks = [a[i : i + 1] for i in (0, 5, 10, 11, 17, 23)]
        return prog.Copy(concat(picks), b)

    # 10 and 11 are one 8 B piece (consecutive on both sides); pieces 4, 4, 8, 4, 4 B;
    # 24 B in chunks of 8 B, three vertices: [0, 5] one region (5 continues 0 at the
    # same length); [10-11] a new region (another length); [17, 23] one region (17:
    # another length; 23 continues it, the second piece setting the region's stride:
    # the step of 7 from 10-11 to 17 is between two regions)
    step = _copy_step({}, build)
    want = [runtime([4, 4], True, 1), runtime([8], True, 1), runtime([4, 4], True, 1)]
    assert _vertices(step) == sorted((1, c) for c in want)


def test_only_elements_already_on_their_tile_are_copied_on_tile() -> None:
    def build(graph: Graph) -> prog.Program:
        a = graph.addVariable(HALF, [64], "a")
        b = graph.addVariable(HALF, [64], "b")
        graph.setTileMapping(a[:40], 0)
        graph.setTileMapping(a[40:], 1)
        graph.setTileMapping(b, 0)  # 40 halves on tile 0 stay, 24 come by exchange
        return prog.Copy(a, b)

    step = _copy_step({}, build)
    # 80 B, chunks of ceil(80 / 48) x 8 = 16 B: five workers of 16 B, one region
    assert _vertices(step) == [(0, runtime([16], False))] * 5


def copy_total_cycles(overrides: dict, n: int) -> int:
    """Total cycles of ``Copy(a, b)`` of ``n`` floats, both on tile 0 of ``tiny`` with
    ``overrides``."""
    device = IPUModel(load_config("tiny", overrides)).createDevice()
    graph = Graph(device.getTarget())
    a = graph.addVariable(FLOAT, [n], "a")
    b = graph.addVariable(FLOAT, [n], "b")
    graph.setTileMapping(a, 0)
    graph.setTileMapping(b, 0)
    engine = Engine(graph, [prog.Copy(a, b)])
    engine.load(device)
    engine.run(0)
    return engine.getTrace().total_cycles


@pytest.mark.parametrize("estimate", ["planner", "runtime", "poplibs"])
def test_the_copy_lasts_the_slowest_worker_times_the_contexts(estimate: str) -> None:
    # 960 B and 1,920 B of float on tile 0
    cycles = [copy_total_cycles({**FIELDS, "code.copy_estimate": estimate}, n) for n in (240, 480)]
    # six workers of 160 B, then of 320 B: the tile's time grows by 6 x the bytes added
    # to one worker at the vertex's rate (planner: FLOAT, an even number of elements,
    # min(8, 4) x 4 / 5 bytes a cycle)
    per_worker = {"planner": 160 * 5 // 16, "runtime": 160 // 8, "poplibs": 160 // 4}[estimate]
    assert cycles[1] - cycles[0] == 6 * per_worker
    assert np.all(np.diff(cycles) > 0)
