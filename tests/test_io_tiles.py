"""I/O tiles: a stream made on a virtual graph of some tiles is copied by those tiles
only, so the other tiles compute meanwhile (Poplar's overlapped I/O, as in
markp-gc/poplar_explorer ``src/tools/OverlappedIO.cpp``: an I/O graph and a compute
graph over disjoint tiles, whose copy and compute programs in one ``Sequence`` run in
parallel; PopART's ``numIOTiles`` builds the same split).

The machine is ``tiny`` with round numbers (1 GHz, 4 bytes per cycle on the host link
and on chip, a host sync of 50 cycles, no latencies or sync delays), so every time is
written out below from the config:

* compute: one worker vertex of estimate ``E`` thread cycles on each compute tile,
  ``6 E`` tile cycles (the barrel: six contexts, each issuing every sixth cycle);
* the copy of ``B`` bytes to the I/O tiles: host sync 50, the link ``B / 4``, then
  the on-chip exchange of each I/O tile's ``B / 2`` bytes at 4 per cycle.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import CopyVec, vertex_on

from ipusim.config import load_config
from poplar_api import FLOAT, Engine, Graph, IPUModel, concat
from poplar_api import program as prog

E = 100  # thread cycles of the compute vertex
N = 256  # floats per copy: B = 1024 bytes
IO = (6, 7)  # the I/O tiles; tiles 0..5 compute
HOST_SYNC = 50
ROUND = {
    "tile.clock_hz": 1e9,
    "exchange.bytes_per_cycle": 4,
    "exchange.fixed_latency_cycles": 0,
    "exchange.cycles_per_message": 0,
    "exchange.cycles_per_hop": 0,
    "sync.min_sync_delay_cycles": 0,
    "sync.relative_delay": "none",
    "sync.host_sync_cycles": HOST_SYNC,
    "host.latency_s": 0.0,
    "host.bandwidth_bytes_per_s": 4e9,
}
COMPUTE = 6 * E
COPY = HOST_SYNC + 4 * N // 4 + (4 * N // len(IO)) // 4


def _run(io_graph: bool, granularity: str = "ipu", copies: int = 1, pipeline: bool = False):
    """A program ``Repeat(copies, [compute on tiles 0..5, copy into the I/O tiles])``;
    the stream is made on the I/O tiles' virtual graph, or on the top-level graph.
    ``pipeline``: the steady state of OverlappedIO.cpp instead, ``[copy into the I/O
    tiles, compute, copy from the I/O tiles to the compute tiles]``."""
    cfg = load_config("tiny", {**ROUND, "sim.granularity": granularity})
    device = IPUModel(cfg).createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets(CopyVec)
    io = graph.createVirtualGraph(IO[0], IO[-1] + 1)
    compute = graph.createVirtualGraph(0, IO[0])
    landing = io.addVariable(FLOAT, [len(IO), N // len(IO)], "io_in")
    for i in range(len(IO)):
        io.setTileMapping(landing[i], i)
    graph.createHostRead("io_in", landing)
    cs = compute.addComputeSet("work")
    inputs = []
    for tile in range(IO[0]):
        x = compute.addVariable(FLOAT, [4], f"x{tile}")
        y = compute.addVariable(FLOAT, [4], f"y{tile}")
        compute.setTileMapping(x, tile)
        compute.setTileMapping(y, tile)
        vertex_on(compute, cs, "CopyVec", {"src": x, "dst": y}, tile, E)
        inputs.append(x)
    owner = io if io_graph else graph
    stream = owner.addHostToDeviceFIFO("in", FLOAT, N)
    host_in = prog.Copy(stream, landing)
    if pipeline:  # the compute tiles take 4 floats each of what the I/O tiles hold
        hand_over = prog.Copy(landing.flatten()[: 4 * IO[0]], concat(inputs))
        body = prog.Sequence([host_in, prog.Execute(cs), hand_over])
    else:
        body = prog.Sequence([prog.Execute(cs), host_in])
    engine = Engine(graph, prog.Repeat(copies, body), {"exchange.enablePrefetch": "false"})
    engine.load(device)
    data = np.arange(N * copies, dtype=np.float32)
    engine.connectStream("in", data)
    engine.run(0)
    return engine


def test_copy_on_io_tiles_overlaps_compute() -> None:
    """With the stream on the I/O tiles the step lasts max(compute, copy); with it on
    the top-level graph every tile syncs with the host first: compute + copy."""
    overlapped = _run(io_graph=True).getTrace()
    serial = _run(io_graph=False).getTrace()
    assert COPY < COMPUTE
    assert int(overlapped.tile_end_cycles.max()) == max(COMPUTE, COPY)
    assert int(serial.tile_end_cycles.max()) == COMPUTE + COPY
    # the I/O tiles took the copy while the compute tiles computed
    ends = overlapped.tile_end_cycles
    assert ends[list(IO)].tolist() == [max(COMPUTE, COPY)] * len(IO)  # the run's end sync


def test_io_tiles_hold_the_landing_buffer_and_the_values_arrive() -> None:
    """The I/O tiles hold the landing tensor (half of it each) and the copy's host
    exchange code; the compute tiles hold neither."""
    engine = _run(io_graph=True)
    memory = engine.memory.by_category
    compute_tiles = list(range(IO[0]))
    assert memory["variable"][list(IO)].tolist() == [4 * N // len(IO)] * len(IO)
    assert (memory["hostExchangeCode"][list(IO)] > 0).all()
    assert not memory["hostExchangeCode"][compute_tiles].any()
    got = np.zeros((len(IO), N // len(IO)), np.float32)
    engine.readTensor("io_in", got)
    np.testing.assert_array_equal(got.ravel(), np.arange(N, dtype=np.float32))


def test_double_buffered_pipeline_period() -> None:
    """OverlappedIO.cpp's steady state, [host copy into the I/O tiles, compute, hand
    24 floats over from I/O tile 6 to the compute tiles (4 each)]. The hand-over
    takes ``S`` = 96 B / 4 cycles on the sending I/O tile and ``R`` = 16 B / 4 on each
    compute tile. With I/O tiles an iteration lasts max(S + copy, R + compute); with
    the stream on the top-level graph every tile waits for the host sync and the link
    first: S + host sync + link + max(on-chip delivery, compute)."""
    send, receive = 4 * 24 // 4, 4 * 4 // 4
    link, on_chip = 4 * N // 4, (4 * N // len(IO)) // 4
    expected = {
        True: max(send + COPY, receive + COMPUTE),
        False: send + HOST_SYNC + link + max(on_chip, COMPUTE),
    }
    for io_graph, period in expected.items():
        trace = _run(io_graph=io_graph, copies=3, pipeline=True).getTrace()
        ends = [r.last_cycle for r in trace.records if r.name.endswith("/Exchange")]
        assert len(ends) == 3
        assert [ends[2] - ends[1], ends[1] - ends[0]] == [period, period]


@pytest.mark.parametrize("copies", [1, 3])
def test_tile_granularity_gives_the_same_trace(copies: int) -> None:
    a = _run(io_graph=True, copies=copies).getTrace()
    b = _run(io_graph=True, granularity="tile", copies=copies).getTrace()
    np.testing.assert_array_equal(a.tile_end_cycles, b.tile_end_cycles)
    assert [r.tile_cycles.tolist() for r in a.records] == [
        r.tile_cycles.tolist() for r in b.records
    ]


def test_a_copy_whose_bytes_leave_its_tiles_is_refused() -> None:
    from ipusim import ir
    from ipusim.errors import IRValidationError
    from ipusim.ir_validation import validate_program

    copy = ir.StreamCopy(
        name="in", direction="host_to_device", tile=[5, 6], num_bytes=[4, 4], tiles=[6, 7]
    )
    external = ir.Sync(name="s", sync_kind="external", tiles=[6])
    with pytest.raises(IRValidationError, match="tile 5 moves bytes") as info:
        validate_program(ir.Program((ir.Sequence([copy, external]),)), 8, 8)
    assert "external sync" in str(info.value)
