"""PopART's callbacks feature example (graphcore/tutorials
``feature_examples/popart/callbacks/callbacks.py``), ported: a ``PyStepIOCallback``
feeds the inputs and takes the outputs of an ``InferenceSession`` one callback at a
time, and the script times each output's round trip.

A PopART script: only ``import popart_api as popart`` differs from what runs on
Graphcore's SDK. The model adds and multiplies two FLOAT vectors of ``--data-size``
elements (random, from numpy's global generator); both results are anchored. The
input callback is called with ``is_prefetch`` True and False, as PopART's; the example
answers only the second. ``output_complete_callback`` records, per anchor id, the host
seconds from the first input to that output, and the script prints the dict of them
(keys ``Add:0`` and ``Mul:0``).

Run::

    python examples/popart/callbacks.py [--data-size 1000] [--tiles 0]

``--tiles 0`` (the default) is the IPU Model's full tile count, as the original's
``createIpuModelDevice({})``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np

import popart_api as popart


class IntervalTimer:
    """Seconds since ``reset`` (``time.perf_counter``)."""

    def __init__(self) -> None:
        self.start: float | None = None

    def reset(self) -> None:
        """Start counting now."""
        self.start = time.perf_counter()

    def interval(self) -> float:
        """Seconds since :meth:`reset`."""
        return time.perf_counter() - (self.start or 0.0)


def build_and_run_graph(data_size: int, tiles: int = 0) -> tuple[dict[str, float], dict]:
    """Build the add/multiply model, run it once with callbacks; returns the round
    trip seconds per output and the anchors (``{id: array}``)."""
    builder = popart.Builder()
    spec = popart.TensorInfo("FLOAT", [data_size])
    a = builder.addInputTensor(spec)
    b = builder.addInputTensor(spec)
    total = builder.aiOnnx.add([a, b])
    product = builder.aiOnnx.mul([a, b])
    builder.addOutputTensor(total)
    builder.addOutputTensor(product)
    flow = popart.DataFlow(
        1, {total: popart.AnchorReturnType("ALL"), product: popart.AnchorReturnType("ALL")}
    )
    device_options = {"tilesPerIPU": tiles} if tiles else {}
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(),
        dataFlow=flow,
        deviceInfo=popart.DeviceManager().createIpuModelDevice(device_options),
    )
    session.prepareDevice()
    inputs = {
        a: np.random.rand(data_size).astype(np.float32),
        b: np.random.rand(data_size).astype(np.float32),
    }
    anchors = session.initAnchorArrays()
    timer = IntervalTimer()
    round_trips: dict[str, float] = {}

    def input_callback(tensor_id: str, is_prefetch: bool):
        if is_prefetch:
            return None  # nothing ahead of time: the data is given when asked for
        if timer.start is None:
            timer.reset()
        return inputs[tensor_id]

    def input_complete_callback(tensor_id: str) -> None:
        return None

    def output_callback(tensor_id: str):
        return anchors[tensor_id]

    def output_complete_callback(tensor_id: str) -> None:
        round_trips[tensor_id] = timer.interval()

    stepio = popart.PyStepIOCallback(
        input_callback, input_complete_callback, output_callback, output_complete_callback
    )
    session.run(stepio, "AddAndMulCallback")
    print(round_trips)
    return round_trips, {**anchors, **inputs}


def main(argv: Sequence[str] | None = None) -> tuple[dict[str, float], dict]:
    """Parse the command line and run the example."""
    parser = argparse.ArgumentParser(description="Callbacks in PopART (ported)")
    parser.add_argument("--data-size", type=int, default=1000, help="elements per input")
    parser.add_argument("--tiles", type=int, default=0, help="tiles of the IPU Model (0: all)")
    args = parser.parse_args(argv)
    return build_and_run_graph(args.data_size, args.tiles)


if __name__ == "__main__":
    main()
