"""PopART's recomputing feature example (graphcore/tutorials
``feature_examples/popart/recomputing/recomputing.py``), ported: seven dense layers
trained for one step with activations recomputed in the backward pass, chosen by hand
(``Builder.recomputeOutputInBackwardPass``) or by PopART (``autoRecomputation``).

A PopART script: only ``import popart_api as popart`` differs from what runs on
Graphcore's SDK. The model, weights and biases from ``np.random.normal`` after
``np.random.seed(1971)``, widths scaled by ``--width-scale`` (1: the original's)::

    x [B, 784] -> dense 512 -> dense 512 -> dense 2048 -> dense 512 -> dense 128
               -> dense 128 -> dense 10 -> Softmax -> nllloss (Sum)

each ``dense`` a Gemm and a Relu. ``--recomputing ON`` marks the Gemm and Relu outputs
of layers 1, 2, 4, 6 and 7 for recomputation (layers 3 and 5 are checkpoints);
``AUTO`` sets ``SessionOptions.autoRecomputation = RecomputationType.Standard``;
``OFF`` recomputes nothing. The memory of the compiled graph
(``session.getReport().compilation.tiles[i].memory.total.excludingGaps``) is what the
original's test compares. The device is ``DeviceManager().acquireAvailableDevice(1)``
(set ``IPUSIM_IPU_PRESET`` to simulate a smaller IPU).

Run::

    python examples/popart/recomputing.py [--recomputing ON|AUTO|OFF] [--export FILE]
        [--batch-size 512] [--width-scale 1] [--show-logs]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

import popart_api as popart

ROWS = COLS = 28
CLASSES = 10
#: The last run's input and loss ids, data and anchors (for tests; a PopART session
#: object takes no new attributes).
LAST_RUN: dict = {}
#: Output width of each dense layer and whether ``--recomputing ON`` recomputes it.
LAYERS = [(512, True), (512, True), (2048, False), (512, True), (128, False), (128, True)]


def create_model(features: int, classes: int, batch_size: int, recompute: bool, scale: float):
    """The seven-layer model; returns ``(x, labels, proto, anchors, loss)``."""
    builder = popart.Builder()

    def dense(x: str, rows: int, cols: int, again: bool, suffix: str) -> str:
        w = builder.addInitializedInputTensor(
            np.random.normal(0, 1, [rows, cols]).astype(np.float32)
        )
        b = builder.addInitializedInputTensor(np.random.normal(0, 1, [cols]).astype(np.float32))
        x = builder.aiOnnx.gemm([x, w, b], debugContext="gemm_" + suffix)
        if again:
            builder.recomputeOutputInBackwardPass(x)
        x = builder.aiOnnx.relu([x], debugContext="relu_" + suffix)
        if again:
            builder.recomputeOutputInBackwardPass(x)
        return x

    labels = builder.addInputTensor(popart.TensorInfo("INT32", [batch_size]))
    x0 = builder.addInputTensor(popart.TensorInfo("FLOAT", [batch_size, features]))
    x, width = x0, features
    for k, (cols, again) in enumerate(LAYERS, start=1):
        cols = max(1, int(cols * scale))
        x = dense(x, width, cols, recompute and again, str(k))
        width = cols
    out = dense(x, width, classes, recompute, "7")
    probs = builder.aiOnnx.softmax([out], axis=1, debugContext="softmax_output")
    builder.addOutputTensor(probs)
    loss = builder.aiGraphcore.nllloss(
        [probs, labels], popart.ReductionType.Sum, debugContext="loss"
    )
    every = popart.AnchorReturnType("ALL")
    anchors = {loss: every, popart.reservedGradientPrefix() + x0: every}
    return x0, labels, builder.getModelProto(), anchors, loss


def main(args: argparse.Namespace):
    """Build, compile and run one training step; returns the session when ``args.test``."""
    np.random.seed(1971)
    batch_size = getattr(args, "batch_size", 512)
    x0, labels, proto, anchor_map, loss = create_model(
        ROWS * COLS,
        CLASSES,
        batch_size,
        args.recomputing == "ON",
        getattr(args, "width_scale", 1.0),
    )
    if args.export:
        with open(args.export, "wb") as f:
            f.write(proto)
    opts = popart.SessionOptions()
    if args.recomputing == "AUTO":
        opts.autoRecomputation = popart.RecomputationType.Standard
    session = popart.TrainingSession(
        fnModel=proto,
        dataFlow=popart.DataFlow(1, anchor_map),
        loss=loss,
        optimizer=popart.ConstSGD(0.01),
        userOptions=opts,
        deviceInfo=popart.DeviceManager().acquireAvailableDevice(1),
    )
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    data = np.random.uniform(0.0, 1.0, [batch_size, ROWS * COLS]).astype(np.float32)
    label_data = np.random.randint(0, CLASSES, [batch_size]).astype(np.int32)
    session.weightsFromHost()
    session.run(popart.PyStepIO({x0: data, labels: label_data}, anchors))
    LAST_RUN.update(x=x0, anchors=anchors, loss=loss)
    if args.test:
        return session
    return None


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The original's switches, plus the model's sizes."""
    p = argparse.ArgumentParser(description="Recomputing in PopART (ported)")
    p.add_argument("--export", help="write the ONNX model to FILE", metavar="FILE")
    p.add_argument("--test", action="store_true", help="return the session")
    p.add_argument("--recomputing", default="ON", choices=["ON", "AUTO", "OFF"])
    p.add_argument("--show-logs", action="store_true", help="PopART's log at DEBUG")
    p.add_argument("--batch-size", type=int, default=512)
    p.add_argument("--width-scale", type=float, default=1.0, help="layer widths x this")
    return p.parse_args(argv)


if __name__ == "__main__":
    arguments = parse()
    if arguments.show_logs:
        popart.getLogger().setLevel("DEBUG")
    main(arguments)
