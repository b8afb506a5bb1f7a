"""PopART's pipelining feature example (graphcore/tutorials
``feature_examples/popart/pipelining/pipelining.py``), ported: two dense layers on two
IPUs, trained with pipelining over one step of ``batchesPerStep`` batches (no gradient
accumulation: PopART updates each stage's weights after every backward).

A PopART script: only ``import popart_api as popart`` differs from what runs on
Graphcore's SDK. The model, with weights and biases drawn from ``np.random.normal``
after ``np.random.seed(1971)``::

    IPU 0: x [B, 784] -> Gemm(W0 [784, H], b0) -> Relu
    IPU 1:            -> Gemm(W1 [H, 10], b1) -> Relu -> Softmax -> nllloss (Sum)

The loss and the gradient of the input (``popart.reservedGradientPrefix() + x``) are
anchored. ``--no_pipelining`` runs the same sharded model without pipelining, so the
cycles of the two (``session.getReport().execution.totalCycles.total``) can be
compared. The device is ``DeviceManager().acquireAvailableDevice(2)`` (set
``IPUSIM_IPU_PRESET`` to simulate a smaller IPU).

Run::

    python examples/popart/pipelining.py [--no_pipelining] [--export FILE]
        [--batch-size 8] [--hidden 512] [--batches-per-step 64]
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


def create_pipelined_model(num_features: int, num_classes: int, batch_size: int, hidden: int):
    """The two-stage model; returns ``(x, labels, proto, anchors, loss)``."""
    builder = popart.Builder()

    def weights(rows: int, cols: int) -> np.ndarray:
        return np.random.normal(0, 1, [rows, cols]).astype(np.float32)

    def biases(size: int) -> np.ndarray:
        return np.random.normal(0, 1, [size]).astype(np.float32)

    labels = builder.addInputTensor(popart.TensorInfo("INT32", [batch_size]))
    x0 = builder.addInputTensor(popart.TensorInfo("FLOAT", [batch_size, num_features]))
    w0 = builder.addInitializedInputTensor(weights(num_features, hidden))
    b0 = builder.addInitializedInputTensor(biases(hidden))
    with builder.virtualGraph(0):
        x1 = builder.aiOnnx.gemm([x0, w0, b0], debugContext="gemm_x1")
        x2 = builder.aiOnnx.relu([x1], debugContext="relu_x2")
    w1 = builder.addInitializedInputTensor(weights(hidden, num_classes))
    b1 = builder.addInitializedInputTensor(biases(num_classes))
    with builder.virtualGraph(1):
        x3 = builder.aiOnnx.gemm([x2, w1, b1], debugContext="gemm_x3")
        x4 = builder.aiOnnx.relu([x3], debugContext="relu_x4")
        probs = builder.aiOnnx.softmax([x4], axis=1, debugContext="softmax_output")
    builder.addOutputTensor(probs)
    loss = builder.aiGraphcore.nllloss(
        [probs, labels], popart.ReductionType.Sum, debugContext="loss"
    )
    builder.virtualGraph(loss, 1)
    every = popart.AnchorReturnType("ALL")
    anchors = {loss: every, popart.reservedGradientPrefix() + x0: every}
    return x0, labels, builder.getModelProto(), anchors, loss


def main(args: argparse.Namespace):
    """Build, compile and run one step; returns the session when ``args.test``."""
    np.random.seed(1971)
    batch_size = getattr(args, "batch_size", 8)
    depth = getattr(args, "batches_per_step", 64)
    input_shape = [batch_size, ROWS * COLS]
    labels_shape = [batch_size]
    x0, labels, proto, anchor_map, loss = create_pipelined_model(
        ROWS * COLS, CLASSES, batch_size, getattr(args, "hidden", 512)
    )
    if args.export:
        with open(args.export, "wb") as f:
            f.write(proto)
    opts = popart.SessionOptions()
    opts.enablePipelining = not args.no_pipelining
    opts.virtualGraphMode = popart.VirtualGraphMode.Manual
    session = popart.TrainingSession(
        fnModel=proto,
        dataFlow=popart.DataFlow(depth, anchor_map),
        loss=loss,
        optimizer=popart.ConstSGD(0.01),
        userOptions=opts,
        deviceInfo=popart.DeviceManager().acquireAvailableDevice(2),
    )
    anchors = session.initAnchorArrays()
    session.prepareDevice()
    if depth > 1:
        input_shape.insert(0, depth)
        labels_shape.insert(0, depth)
    data = np.random.uniform(0.0, 1.0, input_shape).astype(np.float32)
    label_data = np.random.randint(0, CLASSES, labels_shape).astype(np.int32)
    session.weightsFromHost()
    session.run(popart.PyStepIO({x0: data, labels: label_data}, anchors))
    LAST_RUN.update(x=x0, data=data, labels=label_data, anchors=anchors, loss=loss)
    if args.test:
        return session
    return None


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The original's switches, plus the model's sizes."""
    p = argparse.ArgumentParser(description="Pipelining in PopART (ported)")
    p.add_argument("--export", help="write the ONNX model to FILE", metavar="FILE")
    p.add_argument("--no_pipelining", action="store_true", help="deactivate pipelining")
    p.add_argument("--test", action="store_true", help="return the session")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--batches-per-step", type=int, default=64)
    return p.parse_args(argv)


if __name__ == "__main__":
    main(parse())
