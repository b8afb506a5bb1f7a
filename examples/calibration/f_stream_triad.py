"""F: simehaa/IPU STREAM Triad on one Mk2 GC200: ``a = b + q * c`` on every tile.

Rebuilt: float32 arrays ``a``, ``b``, ``c`` of shape ``[tiles, 6, n]``, row ``t`` on
tile ``t``; one plain :class:`TriadVertex` per worker (6 per tile) over ``n`` elements;
the measured program ``Repeat(R, Sequence{WriteUndef(a), Execute(cs)})``, data already
on the device (written before the run, not timed).

Approximated: the cycles of the compiled vertex are not visible to ipusim. The
estimate is the inner loop of the assembly variant, whose figures are the published
ones: one bundle per two floats (two 64-bit loads and a 64-bit store with
``f32v2axpy``), :data:`BUNDLES_PER_ELEMENT` = 1/2 issue slot per element, plus
:data:`FIXED_INSTRUCTIONS` (estimate: argument loads, ``rpt`` set-up, return) per
vertex. No per-repeat fixed cost is added by the workload: whatever the repeat costs
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
    """``a[i] = b[i] + Q * c[i]``."""

    a = Output(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    c = Input(Vector(FLOAT))

    @staticmethod
    def compute(a, b, c):
        for i in range(a.shape[0]):
            a[i] = b[i] + np.float32(3.0) * c[i]
        return True


def vertex_cycles(n: int) -> int:
    """Thread cycles of the estimate for ``n`` elements (see module doc)."""
    return int(np.ceil(BUNDLES_PER_ELEMENT * n)) + FIXED_INSTRUCTIONS


def workload(device: Device, n: int = 64, repeats: int = 2, tiles: int = 0) -> Workload:
    """The triad over ``n`` floats per worker on ``tiles`` tiles (0 = all), ``repeats`` times."""
    if n < 1 or repeats < 1:
        raise ValueError(
            f"f_stream_triad: n={n}, repeats={repeats}; both must be >= 1 (the measured "
            "run had n=7500, repeats=100000)"
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
        seconds = trace.total_cycles / trace.clock_hz
        elements = tiles * VERTICES_PER_TILE * n * repeats
        bandwidth = BYTES_PER_ELEMENT * elements / seconds
        theoretical = THEORETICAL_BYTES_PER_CYCLE * trace.clock_hz * tiles
        return {
            "throughput": FLOP_PER_ELEMENT * elements / seconds / 1e12,
            "min_bandwidth": bandwidth / 1e12,
            "pct_of_theoretical_bandwidth": 100.0 * bandwidth / theoretical,
            "cycles_per_repeat": trace.total_cycles / repeats,
        }

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
