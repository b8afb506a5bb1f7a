"""N: ``gc-hosttraffictest`` on one IPU of an IPU-M2000: tile transfers to and from 32 tiles.

Rebuilt: a float32 tensor ``[tiles, bytes_per_tile / 4]``, row ``t`` on tile ``t``
(``tiles`` = 32, as measured), and ``Repeat(iterations, Copy(stream, tensor))`` (data
to the tiles) or ``Repeat(iterations, Copy(tensor, stream))`` (data from the tiles).
``bytes_per_tile`` = 4096 is the row's ``tile_bytes / (iterations x tiles)``
(13,107,200,000 / (100,000 x 32)). Each copy is what ipusim makes of a host stream
copy: a host sync, the host-link transfer and the on-chip exchange to or from the
tiles.

Approximated: the tool moves tile data through remote buffers in Streaming Memory
while the host moves other data to or from those buffers at the same time. The tile
traffic is modelled as host stream copies (each with its host sync), not as ipusim's
remote-buffer copies (``remote.model: streaming_memory`` on ``mk2``, whose gateway
link figures are estimates and which no host traffic shares; docs/machine.md,
"Streaming Memory"), and the concurrent host traffic is not modelled. The rows
therefore check the host-link fit rather than set it (docs/calibration.md, "The host
link fitted on T7 and N1 together"). **Not covered**: the ``N1.*.host`` rows (host <->
buffer traffic never reaches the IPU). ``N2`` (IPU-Link traffic between two IPUs) is
its own workload, ``n2_ipu_link_traffic.py``.

Metric, as the CSV rows define it: ``tile_transfer_speed`` = tile bytes x 8 / run
seconds / 1e9 (Gbit/s). The points use :data:`POINT_ITERATIONS` iterations (the
simulated cycles are linear in the count; the tool ran 100,000).
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, Device, Engine, Graph
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
#: The tool's tile traffic goes through remote buffers, which have no host work around
#: each copy (StreamCopyBegin/End, ``host.copy_begin_s``/``copy_end_s``: the host
#: prepares a Poplar stream copy, not a remote-buffer one); the stream copies standing
#: in for them here therefore take none either.
CONFIG_OVERRIDES = {"host.copy_begin_s": 0.0, "host.copy_end_s": 0.0}
#: Tiles of the measured runs.
TILES = 32
#: Bytes per tile per iteration of the measured runs (see module doc).
BYTES_PER_TILE = 4096
#: Iterations of the points.
POINT_ITERATIONS = 20

POINTS: dict[str, dict] = {
    "N1.host_to_buffer_to_tile.tile": {
        "direction": "to_tile",
        "iterations": POINT_ITERATIONS,
    },
    "N1.host_from_buffer_from_tile.tile": {
        "direction": "from_tile",
        "iterations": POINT_ITERATIONS,
    },
    "N1.host_to_buffer_from_tile.tile": {
        "direction": "from_tile",
        "iterations": POINT_ITERATIONS,
    },
}


def workload(
    device: Device,
    direction: str = "to_tile",
    iterations: int = 4,
    tiles: int = 0,
    bytes_per_tile: int = BYTES_PER_TILE,
) -> Workload:
    """``iterations`` host copies of ``bytes_per_tile`` bytes to or from each of ``tiles``
    tiles (0: the measured 32, or every tile of a smaller device)."""
    if direction not in ("to_tile", "from_tile"):
        raise ValueError(
            f"n_host_traffic: direction={direction!r}; expected 'to_tile' or 'from_tile'"
        )
    available = device.getTarget().getNumTiles()
    tiles = tiles or min(TILES, available)
    if not 1 <= tiles <= available:
        raise ValueError(
            f"n_host_traffic: tiles={tiles}; expected 1..{available} (the device's tiles); "
            "hint: -p tiles=N"
        )
    if bytes_per_tile < 4 or bytes_per_tile % 4:
        raise ValueError(
            f"n_host_traffic: bytes_per_tile={bytes_per_tile}; expected a multiple of 4 (floats)"
        )
    graph = Graph(device.getTarget())
    per_tile = bytes_per_tile // 4
    data = graph.addVariable(FLOAT, [tiles, per_tile], "data")
    for t in range(tiles):
        graph.setTileMapping(data[t], t)
    count = tiles * per_tile
    if direction == "to_tile":
        stream = graph.addHostToDeviceFIFO("to_tile", FLOAT, count)
        body = prog.Copy(stream, data)
    else:
        stream = graph.addDeviceToHostFIFO("from_tile", FLOAT, count)
        body = prog.Copy(data, stream)
    graph.createHostWrite("data", data)
    graph.createHostRead("data-read", data)
    program = prog.Repeat(iterations, body)
    host = np.arange(count, dtype=np.float32).reshape(tiles, per_tile)
    received = np.zeros(count, np.float32)

    def prepare(engine: Engine) -> None:
        if direction == "to_tile":
            engine.connectStream("to_tile", host.reshape(-1))
        else:
            engine.writeTensor("data", host)
            engine.connectStream("from_tile", received)

    def check(engine: Engine) -> bool:
        got = engine.readTensor("data-read") if direction == "to_tile" else received
        return bool(np.array_equal(np.asarray(got).reshape(tiles, per_tile), host))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        seconds = trace.total_cycles / trace.clock_hz
        moved = tiles * bytes_per_tile * iterations
        return {"tile_transfer_speed": moved * 8 / seconds / 1e9}

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
