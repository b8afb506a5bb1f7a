"""PopART's first example on the simulator: add two tensors of shape [2].

The model is built with ``popart.Builder`` (two FLOAT inputs of shape ``[2]``, one
``Add``), run by an ``InferenceSession`` on an IPU Model device (one step of one
batch), and the result is checked against numpy.

Run::

    python examples/popart/add.py [--tiles 4]

It prints the inputs, the result and the simulated cycles of the run; the exit code
is 1 when the result differs from numpy.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import popart_common as _common

import popart_api as popart


@dataclass
class Result:
    """The inputs, the device's sum, numpy's sum and the cycles of the run."""

    a: np.ndarray
    b: np.ndarray
    output: np.ndarray
    expected: np.ndarray
    cycles: int

    @property
    def ok(self) -> bool:
        """Whether the device's sum equals numpy's."""
        return bool(np.array_equal(self.output, self.expected))


def run(a: np.ndarray, b: np.ndarray, tiles: int = 4) -> Result:
    """Build the model, run it once on an IPU Model of ``tiles`` tiles."""
    builder = popart.Builder()
    shape = popart.TensorInfo("FLOAT", [2])
    a_id = builder.addInputTensor(shape, "a")
    b_id = builder.addInputTensor(shape, "b")
    out_id = builder.aiOnnx.add([a_id, b_id])
    builder.addOutputTensor(out_id)

    data_flow = popart.DataFlow(1, {out_id: popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(
        fnModel=builder.getModelProto(),
        dataFlow=data_flow,
        deviceInfo=_common.ipu_model(1, tiles),
    )
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({a_id: a, b_id: b}, anchors))
    output = np.array(anchors[out_id])
    return Result(a, b, output, a + b, _common.last_run_cycles(session))


def main(argv: Sequence[str] | None = None) -> Result:
    """Command-line entry point; returns the :class:`Result`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=4, help="tiles of the IPU (default 4)")
    args = parser.parse_args(argv)
    a = np.array([1.0, 2.0], np.float32)
    b = np.array([3.0, 4.0], np.float32)
    result = run(a, b, args.tiles)
    print(f"Input a: {result.a}")
    print(f"Input b: {result.b}")
    print(f"Result:  {result.output}")
    print(f"numpy:   {result.expected} ({'match' if result.ok else 'MISMATCH'})")
    print(f"Cycles:  {result.cycles:,}")
    return result


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
