"""Stream callbacks (Poplar's protocol and plain functions), prefetch and its timing.

Machine for the timing tests: ``tests/conftest.py``'s test-small (1 GHz, 8 tiles,
4 exchange bytes per cycle, no sync delays, static exchange without fixed latency)
with a host link of 4 bytes per cycle and 50 cycles of latency.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim import ir
from ipusim.machine import Machine
from poplar_api import FLOAT, Engine, Graph, IPUModel, StreamCallback
from poplar_api import program as prog
from poplar_api.codelet import Input, Vector, Vertex
from poplar_api.device import Device
from poplar_api.errors import EngineError
from tests.conftest import assert_same_timing, build_config

N = 8  # floats per copy: 32 bytes
LATENCY = 50  # host latency cycles (50 ns at 1 GHz)
BPC = 4  # host bytes per cycle
CONTEXTS = 6


class Consume(Vertex):
    """Reads its input; its cost is set per test with setPerfEstimate."""

    in_ = Input(Vector(FLOAT))

    @staticmethod
    def compute(in_):
        return True


def device(granularity: str = "ipu") -> Device:
    cfg = build_config(
        host={"bandwidth_bytes_per_s": 4e9, "latency_s": 50e-9, "max_copy_bytes": 1 << 20},
        sim={"granularity": granularity},
    )
    return IPUModel(cfg).createDevice()


class Recorder(StreamCallback):
    """Serves 0, 1, 2, ... (one value per copy, in every element) and records calls.

    ``available``: what successive prefetches answer (True: Success); default always.
    ``invalidatePrefetched`` rewinds, so the unused value is served again.
    """

    def __init__(self, available: list[bool] | None = None) -> None:
        self.calls: list[str] = []
        self.next = 0
        self.available = available

    def prefetch(self, buffer):
        ok = True if self.available is None else self.available.pop(0)
        self.calls.append(f"prefetch->{'Success' if ok else 'NotAvailable'}")
        if not ok:
            return StreamCallback.Result.NotAvailable
        buffer[:] = self.next
        self.next += 1
        return StreamCallback.Result.Success

    def fetch(self, buffer):
        self.calls.append("fetch")
        buffer[:] = self.next
        self.next += 1

    def complete(self):
        self.calls.append("complete")

    def invalidatePrefetched(self):
        self.calls.append("invalidatePrefetched")
        self.next -= 1


def echo_graph(dev: Device, copies: int, compute_cycles: int = 0):
    """``copies`` times: stream 'in' -> x, (compute), x -> stream 'out'."""
    g = Graph(dev.getTarget())
    g.addCodelets(Consume)
    x = g.addVariable(FLOAT, [N], "x")
    g.setTileMapping(x, 0)
    s_in = g.addHostToDeviceFIFO("in", FLOAT, N)
    s_out = g.addDeviceToHostFIFO("out", FLOAT, N)
    body = [prog.Copy(s_in, x)]
    if compute_cycles:
        cs = g.addComputeSet("work")
        v = g.addVertex(cs, "Consume", {"in": x})
        g.setTileMapping(v, 0)
        g.setPerfEstimate(v, compute_cycles)
        body.append(prog.Execute(cs))
    else:
        body.append(prog.Copy(x, s_out))
    return g, prog.Repeat(copies, prog.Sequence(*body))


def run(copies: int, callback=None, options=None, dev=None, runs: int = 1):
    dev = dev or device()
    g, p = echo_graph(dev, copies)
    engine = Engine(g, p, options or {})
    engine.load(dev)
    seen: list[float] = []
    engine.connectStreamToCallback("in", callback)
    engine.connectStreamToCallback("out", lambda b: seen.append(float(b[0])))
    for _ in range(runs):
        engine.run(0)
    return engine, seen


# ------------------------------------------------------------------ call order
def test_call_order_with_prefetch():
    """fetch (nothing prefetched yet), complete, then prefetch of the next copy's data;
    later copies use the prefetched data (no fetch); at the end of the run the last
    prefetch, which no copy used, is invalidated."""
    cb = Recorder()
    _, seen = run(3, cb)
    assert cb.calls == [
        "fetch", "complete", "prefetch->Success",  # copy 1
        "complete", "prefetch->Success",  # copy 2: prefetched data
        "complete", "prefetch->Success",  # copy 3: prefetched data
        "invalidatePrefetched",  # end of run: the 4th value was never used
    ]  # fmt: skip
    assert seen == [0.0, 1.0, 2.0]


def test_call_order_without_prefetch():
    cb = Recorder()
    _, seen = run(3, cb, {"exchange.enablePrefetch": "false"})
    assert cb.calls == ["fetch", "complete"] * 3
    assert seen == [0.0, 1.0, 2.0]


def test_not_available_leaves_the_copy_to_fetch():
    cb = Recorder(available=[False, True, False])
    _, seen = run(3, cb)
    assert cb.calls == [
        "fetch", "complete", "prefetch->NotAvailable",
        "fetch", "complete", "prefetch->Success",
        "complete", "prefetch->NotAvailable",  # nothing prefetched: nothing to invalidate
    ]  # fmt: skip
    assert seen == [0.0, 1.0, 2.0]


def test_invalidation_lets_the_next_run_serve_the_same_data():
    cb = Recorder()
    _, seen = run(2, cb, runs=2)
    assert seen == [0.0, 1.0, 2.0, 3.0]
    assert cb.calls.count("invalidatePrefetched") == 2
    assert cb.calls[-1] == "invalidatePrefetched"


def test_cpu_device_calls_in_the_same_order():
    cb_model, cb_cpu = Recorder(), Recorder()
    _, seen_model = run(3, cb_model)
    _, seen_cpu = run(3, cb_cpu, dev=Device.createCPUDevice(build_config()))
    assert cb_cpu.calls == cb_model.calls
    assert seen_cpu == seen_model


def test_plain_functions_fill_and_receive_buffers():
    values = iter(range(10))

    def fill(buffer):
        buffer[:] = next(values)

    _, seen = run(3, fill)
    assert seen == [0.0, 1.0, 2.0]


def test_replicated_index_form_and_errors():
    dev = device()
    g, p = echo_graph(dev, 1)
    engine = Engine(g, p)
    engine.connectStreamToCallback("in", 0, Recorder())  # replica 0: accepted
    with pytest.raises(EngineError, match=r"replica index 1 is out of range.*must be 0"):
        engine.connectStreamToCallback("in", 1, Recorder())

    class Partial:
        def fetch(self, buffer): ...

        def complete(self): ...

    with pytest.raises(EngineError, match=r"has fetch, complete but not prefetch.*hint"):
        engine.connectStreamToCallback("in", Partial())
    with pytest.raises(EngineError, match="not callable"):
        engine.connectStreamToCallback("in", 42)
    with pytest.raises(EngineError, match=r"unknown handle 'nope'"):
        engine.connectStreamToCallback("nope", Recorder())


def test_prefetch_must_return_a_result():
    class Bad(Recorder):
        def prefetch(self, buffer):
            return True

    with pytest.raises(EngineError, match=r"prefetch of Bad returned True.*Result.Success"):
        run(2, Bad())


# ---------------------------------------------------------------------- timing
def _timed(copies: int, compute: int, options=None, callback=None):
    """End cycle of ``copies`` x (copy of N floats from 'in' into tile 0, compute)."""
    dev = device()
    g, p = echo_graph(dev, copies, compute_cycles=compute)
    engine = Engine(g, p, options or {})
    engine.load(dev)
    if callback is None:
        engine.connectStream("in", np.arange(4 * N, dtype=np.float32))
    else:
        engine.connectStreamToCallback("in", callback)
    engine.run(0)
    return engine.getTrace()


T = LATENCY + math.ceil(4 * N / BPC)  # host link part of one copy: 50 + 8 = 58
X = math.ceil(4 * N / 4)  # on-chip part (StreamExchange) into tile 0: 8


@pytest.mark.parametrize("compute", [4, 40])  # C = 6 x estimate: 24 (< T - X), 240
def test_prefetch_overlaps_the_host_link_with_compute(compute):
    """Without prefetch every iteration costs T + X + C (the syncs cost 0 here).

    With prefetch the host link moves copy k+1's data from the end of copy k, so copy
    k+1 waits only for what is left: copy k ends at e_k, e_1 = T and
    e_{k+1} = e_k + max(X + C, T); the run ends at e_n + X + C.
    """
    n, C = 4, CONTEXTS * compute
    off = _timed(n, compute, {"exchange.enablePrefetch": "false"})
    on = _timed(n, compute)
    assert int(off.tile_end_cycles.max()) == n * (T + X + C)
    assert int(on.tile_end_cycles.max()) == T + (n - 1) * max(X + C, T) + X + C
    copies = [r for r in on.records if r.kind == "stream_copy"]
    assert copies[0].details is None  # the first copy of a run is never prefetched
    assert all(r.details == {"prefetched_ipus": [0]} for r in copies[1:])
    assert [int(r.tile_cycles[0]) for r in copies[1:]] == [max(0, T - X - C)] * (n - 1)


def test_a_plain_function_is_never_prefetched_so_it_costs_in_full():
    n, compute = 3, 40
    C = CONTEXTS * compute
    trace = _timed(n, compute, callback=lambda b: b.fill(1.0))
    assert int(trace.tile_end_cycles.max()) == n * (T + X + C)


def test_a_not_available_prefetch_costs_in_full():
    n, compute = 3, 40
    C = CONTEXTS * compute
    trace = _timed(n, compute, callback=Recorder(available=[False, True, True]))
    # copy 2 fetches (full cost); copy 3 was prefetched at the end of copy 2
    assert int(trace.tile_end_cycles.max()) == (T + X + C) + T + max(X + C, T) + X + C


def test_prefetch_contends_for_the_host_link():
    """A prefetch transfer uses the link only while no copy the tiles wait for needs
    it (a machine program without a data plane: the host's data is always ready; the
    copies' on-chip side is left out, ``exchanged=True``, so only the link counts)."""

    def copy(stream):
        return ir.StreamCopy(
            name=stream, stream=stream, direction="host_to_device", tile=[0], num_bytes=[400],
            prefetch=True, exchanged=True,
        )  # fmt: skip

    a, b = copy("a"), copy("b")
    work = ir.Compute(name="work", vertex_tile=[0], vertex_cycles=[1])
    body = ir.Sequence([a, b, work])
    cfg = build_config(host={"bandwidth_bytes_per_s": 4e9, "max_copy_bytes": 1 << 20})
    trace = Machine(cfg).run(ir.Repeat(2, body))
    ends = [r.last_cycle for r in trace.records]
    # 400 bytes are 100 cycles of link work (no latency in this config).
    # Iteration 1: a 0..100; b 100..200 at full rate (a's prefetch, started at 100,
    # waits); work 200..206 (6 contexts x 1). From 200 the prefetches of a (100 left)
    # and b (100) share the link: both done at 400.
    assert ends[:3] == [100, 200, 206]
    # Iteration 2: a waits for its prefetch until 400; b's is done: b costs 0.
    assert ends[3:] == [400, 400, 406]


def test_granularities_agree_with_prefetch():
    traces = []
    for granularity in ("ipu", "tile"):
        dev = device(granularity)
        g, p = echo_graph(dev, 3, compute_cycles=10)
        engine = Engine(g, p)
        engine.load(dev)
        engine.connectStreamToCallback("in", Recorder(available=[True, False, True]))
        engine.run(0)
        traces.append(engine.getTrace())
    a, b = traces
    assert_same_timing(a, b)
    assert a.decisions == b.decisions
