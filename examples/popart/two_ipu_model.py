"""A small model split over two IPUs with ``builder.virtualGraph`` (model sharding).

The model (FLOAT)::

    x [B, 64] -> MatMul w1 [64, 128] -> Relu          on IPU 0
              -> MatMul w2 [128, 10] -> Softmax      on IPU 1

built with ``with builder.virtualGraph(ipu):`` blocks and run for inference with
``SessionOptions().virtualGraphMode = popart.VirtualGraphMode.Manual`` on an IPU
Model device of two IPUs: the activations ``Relu`` produces on IPU 0 are copied to
IPU 1 (PopART's IpuCopy) before the second matmul. Weights are normal draws from
``default_rng(seed)`` scaled by ``1/sqrt(fan_in)``; the output is checked against
numpy (float64) to ``rtol=1e-5, atol=1e-6``.

Run::

    python examples/popart/two_ipu_model.py [--batch 4] [--batches-per-step 2]
        [--tiles 16] [--seed 0]

It prints the largest difference from numpy, the simulated cycles of the step and
the memory used on each IPU; the exit code is 1 when the output differs from numpy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import popart_common as _common

import popart_api as popart

IN_FEATURES = 64
HIDDEN = 128
CLASSES = 10


@dataclass
class Result:
    """Outputs of the run, numpy's, the step's cycles and bytes used per IPU."""

    output: np.ndarray
    expected: np.ndarray
    cycles: int
    memory_per_ipu: list[int] = field(default_factory=list)

    @property
    def max_error(self) -> float:
        """Largest absolute difference from numpy."""
        return float(np.max(np.abs(self.output - self.expected)))

    @property
    def ok(self) -> bool:
        """Whether the outputs match numpy (``rtol=1e-5, atol=1e-6``)."""
        return bool(np.allclose(self.output, self.expected, rtol=1e-5, atol=1e-6))


def numpy_forward(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """The model in float64 numpy: ``softmax(relu(x @ w1) @ w2)`` over the last axis."""
    h = np.maximum(x.astype(np.float64) @ w1.astype(np.float64), 0.0)
    z = h @ w2.astype(np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run(batch: int = 4, batches_per_step: int = 2, tiles: int = 16, seed: int = 0) -> Result:
    """Build, compile and run one step of ``batches_per_step`` batches on two IPUs."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal([IN_FEATURES, HIDDEN]) / np.sqrt(IN_FEATURES)).astype(np.float32)
    w2 = (rng.standard_normal([HIDDEN, CLASSES]) / np.sqrt(HIDDEN)).astype(np.float32)
    x = rng.standard_normal([batches_per_step, batch, IN_FEATURES]).astype(np.float32)

    builder = popart.Builder()
    x_id = builder.addInputTensor(popart.TensorInfo("FLOAT", [batch, IN_FEATURES]), "x")
    with builder.virtualGraph(0):
        w1_id = builder.addInitializedInputTensor(w1, "w1")
        h = builder.aiOnnx.relu([builder.aiOnnx.matmul([x_id, w1_id])])
    with builder.virtualGraph(1):
        w2_id = builder.addInitializedInputTensor(w2, "w2")
        probs = builder.aiOnnx.softmax([builder.aiOnnx.matmul([h, w2_id])], axis=1)
    builder.addOutputTensor(probs)

    options = popart.SessionOptions()
    options.virtualGraphMode = popart.VirtualGraphMode.Manual
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(),
        dataFlow=popart.DataFlow(batches_per_step, {probs: popart.AnchorReturnType("ALL")}),
        deviceInfo=_common.ipu_model(2, tiles),
        userOptions=options,
    )
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    feed = x if batches_per_step > 1 else x[0]
    session.run(popart.PyStepIO({x_id: feed}, anchors))
    output = np.array(anchors[probs]).reshape(batches_per_step, batch, CLASSES)
    return Result(
        output=output,
        expected=numpy_forward(x, w1, w2),
        cycles=_common.last_run_cycles(session),
        memory_per_ipu=_common.memory_per_ipu(session),
    )


def main(argv: Sequence[str] | None = None) -> Result:
    """Command-line entry point; returns the :class:`Result`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4, help="batch size (default 4)")
    parser.add_argument("--batches-per-step", type=int, default=2, help="default 2")
    parser.add_argument("--tiles", type=int, default=16, help="tiles per IPU (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="weights and inputs seed")
    args = parser.parse_args(argv)
    result = run(args.batch, args.batches_per_step, args.tiles, args.seed)
    print(f"Output shape {list(result.output.shape)}; max |device - numpy| {result.max_error:.3g}")
    print(f"Cycles of the step: {result.cycles:,}")
    for ipu, used in enumerate(result.memory_per_ipu):
        print(f"Memory on IPU {ipu}: {used:,} B")
    print("OK" if result.ok else "MISMATCH with numpy")
    return result


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
