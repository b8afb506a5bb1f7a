"""A Select-based custom op: Leaky ReLU as a PopLibs ``map`` expression.

Port of the Leaky ReLU custom operator of the public ``graphcore/examples``
repository (Poplar SDK 3.4), ``tutorials/feature_examples/pytorch/custom_op/
leaky_relu_example/leaky_relu_custom_op.cpp`` with its driver ``run_leaky_relu.py``.
The operator's Poplar code is its two ``grow`` functions: the forward op maps
``Select(Mul(Const(alpha), _1), _1, Lt(_1, Const(0.0)))`` over its input in place
(``x < 0 ? alpha * x : x``) and the gradient op maps ``Mul(Select(Const(alpha),
Const(1.0), Lt(_2, Const(0.0))), _1)`` over ``(grad, input)``. PopART itself (the op
registry, ``Builder.customOp``, ``InferenceSession``) is not part of ipusim, so
:func:`build_and_run_graph` does what the inference session does around the forward
op: the input tensor (mapped linearly) is written from a host stream, the op grows
into the program, and the output is read back into the anchor array named after the
op's output tensor, ``LeakyRelu:0``. :func:`build_and_run_grad_graph` runs the
gradient op the same way.

Printed lines, as the original script prints them: ``Running on IPU Model`` (or ``IPU
hardware device acquired`` with ``--ipu``, a device of the simulated IPU system),
``alpha=<alpha>``, ``X=<input array>``, ``RESULT X`` and the anchors dict, e.g.
``{'LeakyRelu:0': array([ 0.3       , -0.054     ,  1.2       , -0.09999999],
dtype=float32)}`` (one line) for ``0.3 -2.7 1.2 -5``, the README's example input
(``float32(0.02) * -5`` rounds to the float just below -0.1, as IEEE single precision
does on the IPU). PopART's own log lines are not printed.

Run::

    python examples/poplar/leaky_relu.py 0.3 -2.7 1.2 -5
    python examples/poplar/leaky_relu.py --alpha 0.01 0.3 -2.7 1.2 -5
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import (
    FLOAT,
    Device,
    DeviceManager,
    Engine,
    Graph,
    IPUModel,
    TargetType,
    Tensor,
    popops,
    poputil,
)
from poplar_api import program as prog
from poplar_api.popops import expr as pe

#: The anchor name of the op's output, as PopART names the first output of ``LeakyRelu``.
OUTPUT_NAME = "LeakyRelu:0"
#: The name of the gradient op's output.
GRAD_OUTPUT_NAME = "LeakyReluGrad:0"


def grow(graph: Graph, input: Tensor, alpha: float, seq: prog.Sequence) -> Tensor:
    """The forward op's ``grow``: ``x < 0 ? alpha * x : x`` in place; returns ``input``."""
    expression = pe.Select(
        pe.Mul(pe.Const(float(alpha)), pe._1), pe._1, pe.Lt(pe._1, pe.Const(0.0))
    )
    popops.mapInPlace(graph, expression, [input], seq, "LeakyRelu")
    return input


def grow_grad(
    graph: Graph, grad: Tensor, input: Tensor, alpha: float, seq: prog.Sequence
) -> Tensor:
    """The gradient op's ``grow``: ``grad * (x < 0 ? alpha : 1)`` as a new tensor."""
    expression = pe.Mul(
        pe.Select(pe.Const(float(alpha)), pe.Const(1.0), pe.Lt(pe._2, pe.Const(0.0))), pe._1
    )
    return popops.map(graph, expression, [grad, input], seq, "LeakyReluGrad")


def _device(run_on_ipu: bool) -> Device:
    if run_on_ipu:
        device = next(
            (d for d in DeviceManager().getDevices(TargetType.IPU, 1) if d.attach()), None
        )
        if device is None:
            raise RuntimeError("no IPU device of 1 IPU is available")
        print("IPU hardware device acquired")
        return device
    print("Running on IPU Model")
    return IPUModel().createDevice()


def _input(graph: Graph, name: str, n: int, seq: prog.Sequence) -> Tensor:
    """A FLOAT input of ``n`` elements, mapped linearly, written from stream ``name``."""
    t = graph.addVariable(FLOAT, [n], name)
    poputil.mapTensorLinearly(graph, t)
    seq.add(prog.Copy(graph.addHostToDeviceFIFO(name, FLOAT, n), t))
    return t


def _run(graph: Graph, device: Device, seq: prog.Sequence, feeds: dict, name: str, out: Tensor):
    stream = graph.addDeviceToHostFIFO(name, FLOAT, out.numElements())
    seq.add(prog.Copy(out, stream))
    engine = Engine(graph, seq)
    engine.load(device)
    result = {name: np.zeros(out.numElements(), np.float32)}
    for handle, values in feeds.items():
        engine.connectStream(handle, values)
    engine.connectStream(name, result[name])
    engine.run(0)
    device.detach()
    return result


def build_and_run_graph(
    input_data: Sequence[float], alpha: float, run_on_ipu: bool
) -> dict[str, np.ndarray]:
    """Run the forward op on ``input_data``; return the anchors ``{"LeakyRelu:0": out}``."""
    device = _device(run_on_ipu)
    print(f"alpha={alpha}")
    graph = Graph(device.getTarget())
    seq = prog.Sequence()
    X = np.array(input_data).astype(np.float32)
    print(f"X={X}")
    x = _input(graph, "input", X.size, seq)
    out = grow(graph, x, alpha, seq)
    return _run(graph, device, seq, {"input": X}, OUTPUT_NAME, out)


def build_and_run_grad_graph(
    grad_data: Sequence[float], input_data: Sequence[float], alpha: float
) -> dict[str, np.ndarray]:
    """Run the gradient op on the IPU Model; return ``{"LeakyReluGrad:0": out}``."""
    device = IPUModel().createDevice()
    graph = Graph(device.getTarget())
    seq = prog.Sequence()
    G = np.array(grad_data).astype(np.float32)
    X = np.array(input_data).astype(np.float32)
    if G.size != X.size:
        raise ValueError(f"grad has {G.size} elements and input {X.size}; they must match")
    g = _input(graph, "grad", G.size, seq)
    x = _input(graph, "input", X.size, seq)
    out = grow_grad(graph, g, x, alpha, seq)
    return _run(graph, device, seq, {"grad": G, "input": X}, GRAD_OUTPUT_NAME, out)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", help="sets the lrelu alpha attribute", type=float, default=0.02)
    parser.add_argument("--ipu", help="run on available IPU hardware device", action="store_true")
    parser.add_argument("input_data", metavar="X", type=float, nargs="+", help="input tensor data")
    args = parser.parse_args(argv)

    result = build_and_run_graph(args.input_data, args.alpha, args.ipu)

    print("RESULT X")
    print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
