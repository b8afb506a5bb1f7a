"""Prefetching callbacks: a host-to-device stream served by a prefetching callback.

Port of ``tutorials/feature_examples/poplar/prefetch/prefetch.cpp`` of the public
``graphcore/examples`` repository (Poplar SDK 3.4). One program,
``Repeat(5, {Copy(in, data), Execute(Increment), Copy(data, out)})``, runs five times;
the stream ``in`` is connected to a :class:`FillCallback` that fills every transfer
with one value, and a new callback is connected whenever the value changes (1, 3, 3,
9, 9). Every callback method prints its name and value, so the output shows Poplar's
protocol: a copy fetches its data unless a prefetch already provided it, ``complete``
follows each transfer and, with ``exchange.enablePrefetch`` (on by default), the next
transfer is prefetched at once. After each run the program checks that every output
element is the input plus one, as the original does.

Printed lines: ``Set input callback`` and ``Running`` as in the original, and one
``<method> (value: <v>)`` line per callback call. The original's README documents no
output beyond these words (its test looks for ``Running``, ``complete`` and
``prefetch``), so the exact sequence of calls on hardware is not known here; ipusim
makes them in the order given in ``docs/poplar_api.md`` ("Stream callbacks"), at the
simulated copy times, so its output is deterministic. ``invalidatePrefetched`` (not
overridden by the original, so silent) is called at the end of each run for the
speculative prefetch of a sixth transfer; the next run therefore fetches again.

Run::

    python examples/poplar/prefetch.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import FLOAT, DeviceManager, Engine, Graph, StreamCallback, TargetType
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex

#: Elements of the ``data`` tensor and of each stream transfer.
ELEMENTS = 8
#: Iterations of the device-side loop in one run.
REPEAT = 5
#: IPUs of the device.
NUM_IPUS = 1
#: The input value of each of the host's runs.
INPUTS = (1.0, 3.0, 3.0, 9.0, 9.0)


class Increment(Vertex):
    """``y[i] = x[i] + 1``; fails when the two fields differ in size."""

    x = Input(Vector(FLOAT))
    y = Output(Vector(FLOAT))

    @staticmethod
    def compute(x, y):
        if x.shape[0] != y.shape[0]:
            return False
        for i in range(x.shape[0]):
            y[i] = x[i] + 1
        return True


def _g(value: float) -> str:
    """``value`` as C's ``%g`` prints it."""
    return f"{value:g}"


class FillCallback(StreamCallback):
    """Fills every transfer of a stream with ``value``, printing each call."""

    def __init__(self, value: float, elements: int) -> None:
        self.value = value
        self.size = elements

    def prefetch(self, buffer: np.ndarray) -> StreamCallback.Result:
        print(f"prefetch (value: {_g(self.value)})")
        buffer[: self.size] = self.value
        return StreamCallback.Result.Success

    def fetch(self, buffer: np.ndarray) -> None:
        print(f"fetch (value: {_g(self.value)})")
        buffer[: self.size] = self.value

    def complete(self) -> None:
        print(f"complete (value: {_g(self.value)})")


def _format(values: np.ndarray) -> str:
    """``[a, b, ...]`` as the original's ``operator<<`` for a vector prints it."""
    return "[" + ", ".join(_g(float(v)) for v in values) + "]"


def main(argv: Sequence[str] | None = None) -> int:
    """Build, compile and run the example; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)

    # Obtain the list of available devices and attach to the first free one.
    manager = DeviceManager.createDeviceManager()
    devices = manager.getDevices(TargetType.IPU, NUM_IPUS)
    if not devices:
        raise RuntimeError("No devices found")
    device = next((d for d in devices if d.attach()), None)
    if device is None:
        raise RuntimeError("Could not attach to any device")

    # Graph elements.
    graph = Graph(device)
    t = graph.addVariable(FLOAT, [ELEMENTS], "data")
    graph.setTileMapping(t, 0)

    graph.addCodelets(__file__)  # the codelet is defined in this file, as in the original

    cs = graph.addComputeSet()
    v1 = graph.addVertex(cs, "Increment")
    graph.setTileMapping(v1, 0)
    graph.connect(v1["x"], t)
    graph.connect(v1["y"], t)
    graph.setPerfEstimate(v1, 20)

    # Streams.
    in_stream = graph.addHostToDeviceFIFO("in", FLOAT, t.numElements())
    out_stream = graph.addDeviceToHostFIFO("out", FLOAT, t.numElements())

    # Program.
    program = prog.Repeat(
        REPEAT, prog.Sequence(prog.Copy(in_stream, t), prog.Execute(cs), prog.Copy(t, out_stream))
    )

    # Compile the program.
    options = {"exchange.streamBufferOverlap": "none"}
    eng = Engine(graph, program, options)
    eng.load(device)

    # Connect the output.
    h_out = np.zeros(t.numElements(), np.float32)
    eng.connectStream("out", h_out)

    # Run the program several times, connecting a new input callback when the value
    # changes.
    previous: float | None = None
    for value in INPUTS:
        if previous != value:
            print("Set input callback")
            eng.connectStreamToCallback("in", FillCallback(value, t.numElements()))

        print("Running")
        eng.run(0)

        # Every output element must be the input plus one.
        expected = np.float32(value + 1)
        if not np.all(h_out == expected):
            raise RuntimeError(
                f"Unexpected result. Expected: {_g(float(expected))};\nActual : {_format(h_out)}"
            )
        previous = value
    device.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main())
