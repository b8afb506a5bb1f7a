"""Host speed of popart_api: a small ResNet (inference and a training step) and the
MLP training step of ``examples/popart/mlp_digits.py``.

The ResNet (FLOAT, built with ``popart.Builder``; ``--small`` divides the channels by
4)::

    x [B, 3, 32, 32] -> Conv 3x3 3->64 + BatchNormalization + Relu
    stage 1: 2 basic blocks of 64 channels (32x32)
    stage 2: 2 basic blocks of 128 channels, the first with stride 2 (16x16)
    stage 3: 2 basic blocks of 256 channels, the first with stride 2 (8x8)
    GlobalAveragePool -> Reshape [B, 256] -> Gemm 256->10 -> Softmax
    (training: aiGraphcore.nllloss, Mean; SGD, learning rate 0.01)

A basic block is ``Conv 3x3 -> BN -> Relu -> Conv 3x3 -> BN``, plus the block's input
(through a 1x1 stride-2 Conv + BN where the shape changes), then ``Relu``: about 2.8
million parameters (0.18 million with ``--small``, which also takes 16x16
images). Convolutions have no bias (the
BN follows). Weights are He-normal draws from ``default_rng(0)``.

Each row: host seconds of building the model with the Builder (``getModelProto``
included), of ``prepareDevice`` (lowering and compiling) and of one ``run`` (one
batch), and the simulated cycles of that run.

Run::

    python benchmarks/bench_popart.py [--small] [--batch 4] [--tiles 64]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "popart"))

import mlp_digits
import popart_common as _common

import popart_api as popart

CLASSES = 10
SIDE = 32
#: Image side of ``--small``.
SMALL_SIDE = 16
STAGES = (64, 128, 256)
BLOCKS_PER_STAGE = 2


@dataclass
class Row:
    """One line of the table."""

    what: str
    params: int
    build: float
    compile: float
    run: float
    cycles: int
    error: str = ""


class ResNetBuilder:
    """Adds the ResNet's layers to a ``popart.Builder``, counting the parameters."""

    def __init__(self, seed: int = 0) -> None:
        self.builder = popart.Builder()
        self.rng = np.random.default_rng(seed)
        self.params = 0
        self.layers = 0

    def weight(self, array: np.ndarray, name: str) -> str:
        """An initialized weight."""
        self.params += array.size
        return self.builder.addInitializedInputTensor(array.astype(np.float32), name)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        """Conv k x k (no bias, same padding) -> BatchNormalization [-> Relu]."""
        self.layers += 1
        n = self.layers
        on = self.builder.aiOnnx
        w = self.weight(_common.he_normal(self.rng, (cout, cin, k, k), cin * k * k), f"conv{n}/w")
        pad = k // 2
        y = on.conv([x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4)
        scale = self.weight(np.ones(cout), f"bn{n}/scale")
        bias = self.weight(np.zeros(cout), f"bn{n}/bias")
        mean = self.weight(np.zeros(cout), f"bn{n}/mean")
        var = self.weight(np.ones(cout), f"bn{n}/var")
        y = on.batchnormalization([y, scale, bias, mean, var], num_outputs=1, epsilon=1e-5)[0]
        return on.relu([y]) if relu else y

    def block(self, x: str, cin: int, cout: int, stride: int) -> str:
        """A basic residual block."""
        y = self.conv_bn(x, cin, cout, 3, stride, True)
        y = self.conv_bn(y, cout, cout, 3, 1, False)
        skip = x if stride == 1 and cin == cout else self.conv_bn(x, cin, cout, 1, stride, False)
        return self.builder.aiOnnx.relu([self.builder.aiOnnx.add([y, skip])])


def build_resnet(
    batch: int, width_divisor: int, side: int = SIDE
) -> tuple[bytes, str, str, str, str, int]:
    """The ResNet with its loss: ``(proto, x, labels, probs, loss, parameters)``."""
    rb = ResNetBuilder()
    b = rb.builder
    on = b.aiOnnx
    widths = [c // width_divisor for c in STAGES]
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [batch, 3, side, side]), "x")
    labels = b.addInputTensor(popart.TensorInfo("INT32", [batch]), "labels")
    y = rb.conv_bn(x, 3, widths[0], 3, 1, True)
    cin = widths[0]
    for s, cout in enumerate(widths):
        for k in range(BLOCKS_PER_STAGE):
            y = rb.block(y, cin, cout, 2 if (s > 0 and k == 0) else 1)
            cin = cout
    y = on.globalaveragepool([y])
    y = on.reshape([y, on.constant(np.array([batch, cin], np.int64))])
    wd = rb.weight(_common.he_normal(rb.rng, (cin, CLASSES), cin), "fc/w")
    bd = rb.weight(np.zeros(CLASSES), "fc/b")
    probs = on.softmax([on.gemm([y, wd, bd])], axis=1)
    b.addOutputTensor(probs)
    loss = b.aiGraphcore.nllloss([probs, labels], reduction=popart.ReductionType.Mean)
    return b.getModelProto(), x, labels, probs, loss, rb.params


def resnet_rows(batch: int, tiles: int, small: bool) -> list[Row]:
    """Inference and one training step of the ResNet (a row with ``error`` set when
    ``prepareDevice`` fails, e.g. out of tile memory)."""
    rows = []
    divisor, side = (4, SMALL_SIDE) if small else (1, SIDE)
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
    ys = rng.integers(0, CLASSES, batch).astype(np.int32)
    for training in (False, True):
        t0 = time.perf_counter()
        proto, x, labels, probs, loss, params = build_resnet(batch, divisor, side)
        build = time.perf_counter() - t0
        t0 = time.perf_counter()
        device = _common.ipu_model(1, tiles)
        if training:
            session = popart.TrainingSession(
                fnModel=proto,
                dataFlow=popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")}),
                deviceInfo=device,
                loss=loss,
                optimizer=popart.SGD({"defaultLearningRate": (0.01, False)}),
            )
        else:
            session = popart.InferenceSession(
                fnModel=proto,
                dataFlow=popart.DataFlow(1, {probs: popart.AnchorReturnType("ALL")}),
                deviceInfo=device,
            )
        what = f"ResNet {'training step' if training else 'inference'} (B={batch}, {side}x{side})"
        try:
            session.prepareDevice()
        except popart.popart_exception as exc:
            first = str(exc).splitlines()[0]
            rows.append(Row(what, params, build, time.perf_counter() - t0, 0.0, 0, first))
            continue
        compile_ = time.perf_counter() - t0
        session.weightsFromHost()
        anchors = session.initAnchorArrays()
        t0 = time.perf_counter()
        session.run(popart.PyStepIO({x: xs, labels: ys}, anchors))
        run = time.perf_counter() - t0
        rows.append(Row(what, params, build, compile_, run, _common.last_run_cycles(session)))
    return rows


def mlp_row(tiles: int) -> Row:
    """One MLP training step (batch 32) of ``examples/popart/mlp_digits.py``."""
    result = mlp_digits.run(steps=1, tiles=tiles, do_evaluate=False, verbose=False)
    seconds = result.host_seconds
    params = sum(w.size for w in result.weights.values())
    return Row(
        "MLP training step (B=32)", params, seconds["build"], seconds["compile"],
        seconds["train"], result.step_cycles,
    )  # fmt: skip


def print_table(rows: Sequence[Row], tiles: int) -> None:
    """The table of the rows."""
    print(f"IPU Model ipu2, 1 IPU x {tiles} tiles")
    print(
        f"{'workload':<32} {'params':>10} {'build s':>8} {'compile s':>10} {'run s':>8} "
        f"{'sim cycles':>13} {'cycles/host s':>14}"
    )
    for r in rows:
        if r.error:
            print(f"{r.what:<32} {r.params:>10,} {r.build:>8.2f} {r.compile:>10.2f}  {r.error}")
            continue
        rate = r.cycles / r.run if r.run else 0.0
        print(
            f"{r.what:<32} {r.params:>10,} {r.build:>8.2f} {r.compile:>10.2f} {r.run:>8.2f} "
            f"{r.cycles:>13,} {rate:>14,.0f}"
        )


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Command-line entry point; returns the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="channels / 4, 16x16 images")
    parser.add_argument("--batch", type=int, default=4, help="ResNet batch (default 4)")
    parser.add_argument("--tiles", type=int, help="tiles of the IPU (default 1472; 128 small)")
    args = parser.parse_args(argv)
    tiles = args.tiles or (128 if args.small else 1472)
    rows = [*resnet_rows(args.batch, tiles, args.small), mlp_row(tiles)]
    print_table(rows, tiles)
    return rows


if __name__ == "__main__":
    main()
