"""N2: ``gc-iputraffictest`` between two IPUs of an IPU-M2000, both directions at once.

Rebuilt: a float32 tensor ``src[2, tiles, bytes_per_tile / 4]`` and a tensor ``dst`` of
the same shape; ``src[0]`` and ``dst[1]`` on IPU ``ipu_a``, ``src[1]`` and ``dst[0]`` on
IPU ``ipu_b``, row ``t`` of each on tile ``t`` of its IPU. One ``Copy(src, dst)`` sends
``src[0]`` from ``ipu_a`` to ``ipu_b`` and ``src[1]`` from ``ipu_b`` to ``ipu_a``: the
lowering makes it an external sync of the two IPUs and one ``GlobalExchange`` holding
both directions (docs/poplar_api.md, "Graphs spanning several IPUs"), which the link
fabric times on the topology's hops ``ipu_a -> ipu_b`` and ``ipu_b -> ipu_a``
(docs/machine.md, "Several IPUs"). The program is ``Repeat(iterations, Copy)``.

Sizes, from the row's parameters (``transfers=1000 x 64 KB per tile (default);
total=4096000 KB``, KB = 1024 B: 4,096,000 x 1024 B x 8 / 0.0793 s = 423.31 Gbit/s,
the row's value): the total is 4,096,000 / (1000 x 64) = 64 tile transfers per round,
both directions together; we take them as :data:`TILES` = 32 tiles on each IPU sending
:data:`BYTES_PER_TILE` = 65,536 B each per round (an even split between the directions
is our reading; the tool's tile choice is not stated). ``ipu_a``, ``ipu_b`` default to
the device's last two IPUs: IPUs 2 and 3 of an ``m2000``, the measured devices 2 and 3
(one rung of the preset's ladder).

Not modelled: the tool's own per-transfer bookkeeping on the tiles and the host's
start and stop of the timed run.

Metrics: ``bidirectional_bandwidth`` (the row's metric) = bytes moved in both
directions x 8 / run seconds / 1e9 (Gbit/s, as the tool prints); ``gbytes_per_s_per_direction``
= bytes of one direction / run seconds / 1e9. The points use :data:`POINT_ITERATIONS`
= 1000 rounds, as the tool ran: every round costs the same cycles, but the run also
ends with a sync of its own (126 cycles on ``m2000``), which a run of a few rounds
would weigh several hundred times more than the measured run did (4 rounds:
465.64 Gbit/s, 1000 rounds: 465.79).
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, Device, Engine, Graph
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "m2000"
TEST_CONFIG = "tiny"
#: ``tiny`` has one IPU; the quick test run needs two.
TEST_OVERRIDES: dict[str, object] = {"num_ipus": 2}
#: Tiles per IPU sending in the measured run (see module doc).
TILES = 32
#: Bytes per tile per transfer of the measured run (64 KB, KB = 1024 B).
BYTES_PER_TILE = 64 * 1024
#: Rounds of the points: the measured run's 1000 transfers.
POINT_ITERATIONS = 1000

POINTS: dict[str, dict] = {
    "N2.ipu2_ipu3": {
        "tiles": TILES,
        "bytes_per_tile": BYTES_PER_TILE,
        "iterations": POINT_ITERATIONS,
    },
}


def workload(
    device: Device,
    tiles: int = 0,
    bytes_per_tile: int = 4096,
    iterations: int = 2,
    ipu_a: int = -1,
    ipu_b: int = -1,
) -> Workload:
    """``iterations`` copies of ``bytes_per_tile`` bytes from each of ``tiles`` tiles of
    IPU ``ipu_a`` to IPU ``ipu_b`` and back at the same time (``tiles`` 0: the measured
    32, or every tile of a smaller IPU; IPUs -1: the device's last two)."""
    target = device.getTarget()
    ipus, per_ipu = target.getNumIPUs(), target.getTilesPerIPU()
    if ipus < 2:
        raise ValueError(
            f"n2_ipu_link_traffic: the device has {ipus} IPU; it needs 2 or more; "
            "hint: --set num_ipus=2"
        )
    ipu_a = ipus - 2 if ipu_a < 0 else ipu_a
    ipu_b = ipus - 1 if ipu_b < 0 else ipu_b
    if not (0 <= ipu_a < ipus and 0 <= ipu_b < ipus and ipu_a != ipu_b):
        raise ValueError(
            f"n2_ipu_link_traffic: ipu_a={ipu_a}, ipu_b={ipu_b}; expected two different "
            f"IPUs of 0..{ipus - 1}"
        )
    tiles = tiles or min(TILES, per_ipu)
    if not 1 <= tiles <= per_ipu:
        raise ValueError(
            f"n2_ipu_link_traffic: tiles={tiles}; expected 1..{per_ipu} (tiles per IPU); "
            "hint: -p tiles=N"
        )
    if bytes_per_tile < 4 or bytes_per_tile % 4:
        raise ValueError(
            f"n2_ipu_link_traffic: bytes_per_tile={bytes_per_tile}; expected a multiple of "
            "4 (floats)"
        )
    graph = Graph(target)
    per_tile = bytes_per_tile // 4
    src = graph.addVariable(FLOAT, [2, tiles, per_tile], "src")
    dst = graph.addVariable(FLOAT, [2, tiles, per_tile], "dst")
    for t in range(tiles):
        graph.setTileMapping(src[0, t], ipu_a * per_ipu + t)
        graph.setTileMapping(src[1, t], ipu_b * per_ipu + t)
        graph.setTileMapping(dst[0, t], ipu_b * per_ipu + t)
        graph.setTileMapping(dst[1, t], ipu_a * per_ipu + t)
    graph.createHostWrite("src", src)
    graph.createHostRead("dst-read", dst)
    program = prog.Repeat(iterations, prog.Copy(src, dst, "ipu link traffic"))
    host = np.arange(2 * tiles * per_tile, dtype=np.float32).reshape(2, tiles, per_tile)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("src", host)

    def check(engine: Engine) -> bool:
        got = np.asarray(engine.readTensor("dst-read")).reshape(host.shape)
        return bool(np.array_equal(got, host))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        if not any(r.kind == "global_exchange" for r in trace.records):
            raise ValueError(
                "n2_ipu_link_traffic: the run has no global exchange; found "
                f"{sorted({r.name for r in trace.records})}"
            )
        seconds = trace.total_cycles / trace.clock_hz
        one_way = tiles * bytes_per_tile * iterations
        return {
            "bidirectional_bandwidth": 2 * one_way * 8 / seconds / 1e9,
            "gbytes_per_s_per_direction": one_way / seconds / 1e9,
        }

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
