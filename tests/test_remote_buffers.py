"""Remote buffers: values, host access, errors and the Streaming Memory timing.

Machine for the timing tests: ``tests/conftest.py``'s test-small (1 GHz, 8 tiles,
4 exchange bytes per cycle, no sync delays, static exchange without fixed latency)
with Streaming Memory of 2 bytes per cycle and 30 cycles of latency per IPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim import ir
from ipusim.machine import Machine
from poplar_api import FLOAT, INT, UNSIGNED_INT, Engine, Graph, IPUModel, RemoteBuffer
from poplar_api import program as prog
from poplar_api.device import Device
from poplar_api.errors import EngineError, GraphError, GraphValidationError
from tests.conftest import assert_same_timing, build_config

REMOTE = {"model": "streaming_memory", "bandwidth_bytes_per_s": 2e9, "latency_s": 30e-9}
SM_BPC, SM_LATENCY = 2, 30


def device(**overrides) -> Device:
    return IPUModel(build_config(remote=REMOTE, **overrides)).createDevice()


def rows_graph(dev: Device, repeats: int = 4, n: int = 6, rows: int = 2):
    """x [rows, n] spread over tiles 0 and 1, an offset of ``rows`` indices, a buffer."""
    g = Graph(dev.getTarget())
    x = g.addVariable(FLOAT, [rows, n], "x")
    g.setTileMapping(x[0], 0)
    for r in range(1, rows):
        g.setTileMapping(x[r], 1)
    off = g.addVariable(UNSIGNED_INT, [rows], "off")
    g.setTileMapping(off, 2)
    buf = g.addRemoteBuffer("rb", FLOAT, n, repeats=repeats)
    g.createHostWrite("x", x)
    g.createHostRead("x", x)
    g.createHostWrite("off", off)
    return g, x, off, buf


# ----------------------------------------------------------------------- values
def test_rows_round_trip_against_numpy():
    dev = device()
    g, x, off, buf = rows_graph(dev)
    assert isinstance(buf, RemoteBuffer)
    assert (buf.handle(), buf.numElements(), buf.getRepeats()) == ("rb", 6, 4)
    write = prog.Copy(x, buf, off, "write")
    read = prog.Copy(buf, x, off, "read")
    engine = Engine(g, [write, read])
    engine.load(dev)
    memory = np.zeros((4, 6), np.float32)  # numpy model of the remote buffer
    rng = np.random.default_rng(1)
    for rows in ([3, 0], [1, 2]):
        values = rng.standard_normal((2, 6)).astype(np.float32)
        engine.writeTensor("x", values)
        engine.writeTensor("off", np.array(rows, np.uint32))
        engine.run(0)
        memory[rows] = values
    for r in range(4):  # host reads agree with the model
        out = np.empty(6, np.float32)
        engine.copyFromRemoteBuffer("rb", out, r)
        np.testing.assert_array_equal(out, memory[r])
    engine.copyToRemoteBuffer(np.arange(6, dtype=np.float32), "rb", 2)
    memory[2] = np.arange(6)
    engine.writeTensor("off", np.array([2, 3], np.uint32))
    engine.run(1)
    np.testing.assert_array_equal(engine.readTensor("x"), memory[[2, 3]])


def test_copy_without_offset_moves_row_zero_on_a_cpu_too():
    for dev in (device(), Device.createCPUDevice(build_config(remote=REMOTE))):
        g = Graph(dev.getTarget())
        y = g.addVariable(INT, [3], "y")
        g.setTileMapping(y, 5)
        g.createHostRead("y", y)
        buf = g.addRemoteBuffer("ints", INT, 3, repeats=2)
        engine = Engine(g, prog.Copy(buf, y))
        engine.load(dev)
        engine.copyToRemoteBuffer([7, 8, 9], "ints", 0)
        engine.copyToRemoteBuffer([1, 2, 3], "ints", 1)
        engine.run(0)
        np.testing.assert_array_equal(engine.readTensor("y"), [7, 8, 9])


# ----------------------------------------------------------------------- errors
def test_offset_out_of_range_names_buffer_offset_and_repeats():
    dev = device()
    g, x, off, buf = rows_graph(dev, repeats=4)
    engine = Engine(g, prog.Copy(x, buf, off))
    engine.load(dev)
    engine.writeTensor("off", np.array([1, 4], np.uint32))
    with pytest.raises(EngineError, match=r"offset 4 \(element 1 of 'off'\).*'rb' has 4 repeat"):
        engine.run(0)


def test_size_and_type_mismatches_are_listed_at_compile_time():
    dev = device()
    g, x, off, buf = rows_graph(dev)
    ints = g.addVariable(INT, [2, 6], "ints")
    g.setTileMapping(ints, 3)
    fl = g.addVariable(FLOAT, [1], "fl")
    g.setTileMapping(fl, 3)
    with pytest.raises(GraphValidationError) as info:
        Engine(g, [prog.Copy(ints, buf, off), prog.Copy(buf, x), prog.Copy(x, buf, fl)])
    text = str(info.value)
    assert "element types differ (remote buffer float, tensor int)" in text
    assert "the tensor has 12 elements" in text and "no offset: one row" in text
    assert "offset 'fl' has element type float" in text


def test_host_access_errors():
    dev = device()
    g, _, _, _ = rows_graph(dev)
    engine = Engine(g, prog.Sequence())
    engine.load(dev)
    with pytest.raises(EngineError, match=r"repeatIndex 4 is out of range.*4 repeat"):
        engine.copyToRemoteBuffer(np.zeros(6, np.float32), "rb", 4)
    with pytest.raises(EngineError, match=r"has 5 elements.*numElements 6"):
        engine.copyToRemoteBuffer(np.zeros(5, np.float32), "rb", 0)
    with pytest.raises(EngineError, match=r"unknown remote buffer handle 'nope'"):
        engine.copyFromRemoteBuffer("nope", np.zeros(6, np.float32), 0)
    with pytest.raises(EngineError, match=r"dtype int16 cannot hold"):
        engine.copyFromRemoteBuffer("rb", np.zeros(6, np.int16), 0)
    with pytest.raises(EngineError, match=r"replicationIndex 1"):
        engine.copyToRemoteBuffer(np.zeros(6, np.float32), "rb", 0, 1)
    with pytest.raises(EngineError, match=r"dtype <U1 cannot be written to remote buffer 'rb'"):
        engine.copyToRemoteBuffer(np.array(list("abcdef")), "rb", 0)


def test_graph_errors():
    g = Graph(device().getTarget())
    g.addRemoteBuffer("rb", FLOAT, 4)
    with pytest.raises(GraphError, match="already used by a remote buffer"):
        g.addRemoteBuffer("rb", FLOAT, 4)
    with pytest.raises(GraphError, match=r"repeats is 0; it must be an int >= 1"):
        g.addRemoteBuffer("other", FLOAT, 4, repeats=0)
    with pytest.raises(GraphError, match="fits no Copy overload"):
        prog.Copy(g.addRemoteBuffer("third", FLOAT, 4), g.addVariable(FLOAT, [4]), 3.5)


# ----------------------------------------------------------------------- timing
def _remote_records(trace):
    return [r for r in trace.records if r.kind == "remote_buffer_copy"]


def test_copy_cycles_follow_the_streaming_memory_formula():
    """Read of 2 rows of 6 floats (48 bytes) into tiles 0 and 1: an internal sync (0
    here), the Streaming Memory transfer ``latency + ceil(48 / 2)`` on the IPU's own
    link, then the on-chip exchange: each tile receives 24 bytes, ``ceil(24 / 4)``."""
    dev = device()
    g, x, off, buf = rows_graph(dev)
    engine = Engine(g, prog.Copy(buf, x, off))
    engine.load(dev)
    engine.writeTensor("off", np.array([0, 1], np.uint32))
    engine.run(0)
    trace = engine.getTrace()
    transfer = SM_LATENCY + math.ceil(48 / SM_BPC)  # 54
    (rec,) = _remote_records(trace)
    assert int(rec.tile_cycles.max()) == transfer
    assert int(trace.tile_end_cycles.max()) == transfer + math.ceil(24 / 4)
    assert engine.timing.stream_copy_cycles(rec.step).tolist() == [transfer]


def test_streaming_memory_does_not_share_the_host_link():
    """A remote copy and a host stream copy in flight at once do not slow each other
    (machine program on two IPUs, one copy each), unlike two host copies."""
    cfg = build_config(num_ipus=2, remote=REMOTE)

    def program(remote: bool):
        kind = ir.RemoteBufferCopy if remote else ir.StreamCopy
        return ir.Sequence([
            ir.StreamCopy(name="h", direction="host_to_device", tile=[0], num_bytes=[400],
                          exchanged=True),
            kind(name="r", direction="host_to_device", tile=[8], num_bytes=[400],
                 exchanged=True),
        ])  # fmt: skip

    both_host = Machine(cfg).run(program(False))
    mixed = Machine(cfg).run(program(True))
    host = 400 // 4  # host link: 4 bytes per cycle, no latency
    remote = SM_LATENCY + 400 // SM_BPC
    assert [int(r.tile_cycles.max()) for r in mixed.records] == [host, remote]
    assert [int(r.tile_cycles.max()) for r in both_host.records] == [2 * host, 2 * host]


def test_host_link_model_is_kept_for_mk1():
    from ipusim.config import load_config
    from ipusim.timing import HostLinkRemote, StreamingMemory, TimingModel

    assert isinstance(TimingModel(load_config("mk1")).remote, HostLinkRemote)
    assert isinstance(TimingModel(load_config("mk2")).remote, StreamingMemory)


def test_granularities_agree_with_remote_copies():
    traces = []
    for granularity in ("ipu", "tile"):
        dev = device(sim={"granularity": granularity})
        g, x, off, buf = rows_graph(dev)
        engine = Engine(g, prog.Sequence(prog.Copy(x, buf, off), prog.Copy(buf, x, off)))
        engine.load(dev)
        engine.writeTensor("off", np.array([2, 0], np.uint32))
        engine.run(0)
        traces.append(engine.getTrace())
    a, b = traces
    assert_same_timing(a, b)
