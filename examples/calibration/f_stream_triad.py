"""F: simehaa/IPU STREAM Triad on one Mk2 GC200: ``a = b + q * c`` on every tile.

Rebuilt: float32 arrays ``a``, ``b``, ``c`` of shape ``[tiles, 6, n]``, row ``t`` on
tile ``t``; one plain :class:`TriadVertex` per worker (6 per tile) over ``n`` elements
(``n`` even: the measured vertex works on float2); the measured program
``Repeat(R, Sequence{WriteUndef(a), Execute(cs)})``, data already on the device
(written before the run, not timed).

The kernel is the measured assembly variant (``TriadVertexAssembly`` of simehaa/IPU
``STREAMTriad/codelets.cpp``) written with :mod:`poplar_api.ipu_intrinsics`: a first
``ld2x64pace`` and ``f32v2axpy``, then an ``rpt`` loop of one bundle per two floats
(``ld2xst64pace``: the next float2 of ``b`` and ``c`` loaded and the previous result
stored, with ``f32v2axpy``), then the last store. Counted (``debug.vertexCycles``,
docs/counted_cycles.md) it takes what those instructions take. The estimate (IPU
Model) is the same loop by hand: :data:`BUNDLES_PER_ELEMENT` = 1/2 issue slot per
element, plus :data:`FIXED_INSTRUCTIONS` (estimate: argument loads, ``rpt`` set-up,
return) per vertex. No per-repeat fixed cost is added by the workload: whatever the repeat costs
beyond the loop comes from the machine model (the compute set runs without an
exchange, so lowering inserts no sync between repeats).

The measured run repeated 100,000 times; the metrics only need the cycles per repeat,
so the points use ``repeats`` = :data:`POINT_REPEATS` (the simulated cycles are exactly
linear in the repeat count). Metrics as the CSV rows define them: ``throughput``
(TFLOPS, 2 flop per element), ``min_bandwidth`` (TB/s, 12 B per element) and
``pct_of_theoretical_bandwidth`` (bandwidth / (24 B x clock x tiles), in %).
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, Device, Engine, Graph, Input, Output, Vector, Vertex
from poplar_api import program as prog
from poplar_api.ipu_intrinsics import (
    RPT_MAX_COUNT,
    f32v2axpy,
    ld2x64pace,
    ld2xst64pace,
    rpt,
    store_float2,
)
from poplar_api.lowering.emit import END_OF_RUN_SYNC
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
NAME = "triad"
#: The scalar of the triad (the benchmark's ``q``).
Q = 3.0
#: Workers per tile, one vertex each (as measured).
VERTICES_PER_TILE = 6
#: estimate: issue slots per element of the assembly loop (one bundle per 2 floats).
BUNDLES_PER_ELEMENT = 0.5
#: estimate: instructions of a vertex outside its loop.
FIXED_INSTRUCTIONS = 10
#: Repeats of the points (the measurement used 100,000; cycles are linear in it).
POINT_REPEATS = 2
#: Bytes moved per element (load b, load c, store a) and flop per element.
BYTES_PER_ELEMENT = 12
FLOP_PER_ELEMENT = 2
#: Bytes per cycle per tile the benchmark calls theoretical (2 x 64-bit loads + store).
THEORETICAL_BYTES_PER_CYCLE = 24

POINTS: dict[str, dict] = {
    row: {"n": 7500, "repeats": POINT_REPEATS} for row in ("F1.tflops", "F1.bw", "F1.pct")
}


class TriadVertex(Vertex):
    """``a[i] = b[i] + Q * c[i]``, two floats per instruction (the assembly variant)."""

    a = Output(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    c = Input(Vector(FLOAT))

    @staticmethod
    def compute(a, b, c):
        pairs = a.shape[0] >> 1
        q = np.float32(Q)  # uput $TAS: the scalar of f32v2axpy
        x = ld2x64pace(b, c, 0)
        r = f32v2axpy(q, x[1], x[0])
        for i in rpt(pairs - 1):  # one bundle per float2
            x = ld2xst64pace(b, c, i + 1, a, i, r)
            r = f32v2axpy(q, x[1], x[0])
        store_float2(a, pairs - 1, r)
        return True


def vertex_cycles(n: int) -> int:
    """Thread cycles of the estimate for ``n`` elements (see module doc)."""
    return int(np.ceil(BUNDLES_PER_ELEMENT * n)) + FIXED_INSTRUCTIONS


def workload(device: Device, n: int = 64, repeats: int = 2, tiles: int = 0) -> Workload:
    """The triad over ``n`` floats per worker on ``tiles`` tiles (0 = all), ``repeats`` times."""
    if n < 2 or n % 2 or repeats < 1:
        raise ValueError(
            f"f_stream_triad: n={n}, repeats={repeats}; n must be even and >= 2 (the "
            "vertex works on float2) and repeats >= 1 (the measured run had n=7500, "
            "repeats=100000)"
        )
    if n // 2 - 1 > RPT_MAX_COUNT:
        raise ValueError(
            f"f_stream_triad: n={n} floats per vertex make {n // 2 - 1} iterations of the "
            f"vertex's rpt loop; at most {RPT_MAX_COUNT} (the 12-bit repeat count); hint: "
            f"n <= {2 * (RPT_MAX_COUNT + 1)}"
        )
    graph = Graph(device.getTarget())
    tiles = tiles or graph.getTarget().getNumTiles()
    graph.addCodelets(TriadVertex)
    shape = [tiles, VERTICES_PER_TILE, n]
    a, b, c = (graph.addVariable(FLOAT, shape, name) for name in ("a", "b", "c"))
    cs = graph.addComputeSet(NAME)
    for t in range(tiles):
        for x in (a, b, c):
            graph.setTileMapping(x[t], t)
        for w in range(VERTICES_PER_TILE):
            v = graph.addVertex(cs, "TriadVertex", {"a": a[t][w], "b": b[t][w], "c": c[t][w]})
            graph.setTileMapping(v, t)
            graph.setPerfEstimate(v, vertex_cycles(n))
    graph.createHostWrite("b", b)
    graph.createHostWrite("c", c)
    graph.createHostRead("a", a)
    program = prog.Repeat(repeats, prog.Sequence(prog.WriteUndef(a), prog.Execute(cs)))
    rng = np.random.default_rng(7)
    hb = rng.standard_normal(shape).astype(np.float32)
    hc = rng.standard_normal(shape).astype(np.float32)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("b", hb)
        engine.writeTensor("c", hc)

    def check(engine: Engine) -> bool:
        return bool(np.array_equal(engine.readTensor("a"), hb + np.float32(Q) * hc))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        # the repeats, up to the sync that ends the run (not part of the timed loop)
        cycles = max(r.last_cycle for r in trace.records if r.name != END_OF_RUN_SYNC)
        seconds = cycles / trace.clock_hz
        elements = tiles * VERTICES_PER_TILE * n * repeats
        bandwidth = BYTES_PER_ELEMENT * elements / seconds
        theoretical = THEORETICAL_BYTES_PER_CYCLE * trace.clock_hz * tiles
        return {
            "throughput": FLOP_PER_ELEMENT * elements / seconds / 1e12,
            "min_bandwidth": bandwidth / 1e12,
            "pct_of_theoretical_bandwidth": 100.0 * bandwidth / theoretical,
            "cycles_per_repeat": cycles / repeats,
        }

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
