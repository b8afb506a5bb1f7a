"""Data-parallel training of a small MLP on replicas, with the gradients all-reduced.

The model (FLOAT), on the bundled digits as MNIST-sized images (pixel / 256, the
inputs of tutorial 5)::

    x [B, 784] -> dense 784 -> H (+ bias) -> ReLU -> dense H -> 10 (+ bias) -> softmax

The graph is replicated (``Graph(target, replication_factor=R)``): every replica
holds the whole model and trains on its own ``B`` images of each step, streamed from
one host buffer that holds every replica's images (replica-major, a ``REPLICATE``
stream). A step is the forward pass, ``popnn.calcLoss`` (softmax cross-entropy:
``delta = p - onehot(label)`` per image), the backward pass, then one
``gcl.allReduceInPlaceCrossReplica`` with ``MEAN`` of all four gradients (weights and
biases of both layers, one fused collective over the IPU-Links) and plain SGD,
``P += (-eta / B) * mean over replicas of sum_b dL_b/dP``. So a step of ``R``
replicas on ``B`` images each is the step of one replica on the ``R·B`` images
together, up to float rounding: ``tests/test_replication.py`` checks exactly that.

Initial weights are He-normal draws from ``numpy.random.default_rng(--seed)``, biases
0, written to every replica. After the steps the parameters of every replica are
read back (they are equal: every replica applies the same averaged gradients).

Run::

    python examples/multi_ipu/data_parallel_mlp.py [--replicas 4] [--batch 16]
        [--steps 5] [--eta 0.1] [--hidden 32] [--tiles 16] [--cpu]

It prints the mean loss of every step (over all replicas' images), the cycles of the
last step and how many of them the gradient all-reduce took.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cnn"))

import cnn_digits
import mnist
import tut5

from poplar_api import (
    FLOAT,
    UNSIGNED_INT,
    Device,
    Engine,
    Graph,
    IPUModel,
    gcl,
    poplin,
    popnn,
    popops,
)
from poplar_api import program as prog
from poplar_api.poputil import mapTensorLinearly

IMAGE_SIZE = tut5.IMAGE_SIZE
NUM_CLASSES = tut5.NUM_CLASSES
REPLICAS = 4
BATCH = 16
HIDDEN = 32
ETA = 0.1
STEPS = 5
DEFAULT_SEED = 3
#: Tiles per IPU of the default device (a few dozen keep building and simulating quick).
DEFAULT_TILES = 16
#: Parameter names, in the order of the fused all-reduce.
PARAMETER_NAMES = ("w1", "b1", "w2", "b2")


@dataclass
class Outcome:
    """What a run produced: every replica's final parameters (``[replicas, ...]``), the
    mean loss of each step, and the engine."""

    parameters: dict[str, np.ndarray]
    losses: list[float] = field(default_factory=list)
    engine: Engine | None = None


def parameter_shapes(hidden: int = HIDDEN) -> dict[str, tuple[int, ...]]:
    """Shapes of the parameters, by name."""
    return {
        "w1": (IMAGE_SIZE, hidden),
        "b1": (hidden,),
        "w2": (hidden, NUM_CLASSES),
        "b2": (NUM_CLASSES,),
    }


def initial_parameters(seed: int = DEFAULT_SEED, hidden: int = HIDDEN) -> dict[str, np.ndarray]:
    """He-normal weights (std ``sqrt(2 / fan_in)``) from ``default_rng(seed)``, zero biases."""
    rng = np.random.default_rng(seed)
    shapes = parameter_shapes(hidden)
    out = {}
    for name, shape in shapes.items():
        if name.startswith("w"):
            std = np.sqrt(2.0 / shape[0])
            out[name] = (rng.standard_normal(shape) * std).astype(np.float32)
        else:
            out[name] = np.zeros(shape, np.float32)
    return out


def build(graph: Graph, batch: int, eta: float, hidden: int = HIDDEN) -> prog.Sequence:
    """Add the model and one training step to ``graph``; return the step program.

    Streams: ``images`` (``batch·784`` floats) and ``labels`` (``batch`` unsigned ints)
    in, ``loss`` (``batch`` floats) out, each per replica. Host handles ``w1 b1 w2 b2``
    write the parameters and ``<name>-read`` read them. With more than one replica the
    gradients are averaged across replicas before the update.
    """
    replicas = graph.getReplicationFactor()
    scale = -float(eta) / batch
    x = graph.addVariable(FLOAT, [batch, IMAGE_SIZE], "x")
    labels = graph.addVariable(UNSIGNED_INT, [batch], "labels")
    params = {
        name: graph.addVariable(FLOAT, list(shape), name)
        for name, shape in parameter_shapes(hidden).items()
    }
    for t in (x, labels, *params.values()):
        mapTensorLinearly(graph, t)
    for name, t in params.items():
        graph.createHostWrite(name, t)
        graph.createHostRead(f"{name}-read", t)
    w1, b1, w2, b2 = (params[n] for n in PARAMETER_NAMES)

    step = prog.Sequence()
    images_in = graph.addHostToDeviceFIFO("images", FLOAT, batch * IMAGE_SIZE)
    labels_in = graph.addHostToDeviceFIFO("labels", UNSIGNED_INT, batch)
    loss_out = graph.addDeviceToHostFIFO("loss", FLOAT, batch)
    step.add(prog.Copy(images_in, x))
    step.add(prog.Copy(labels_in, labels))
    # forward
    h = poplin.matMul(graph, x, w1, step, "dense1")
    popops.addInPlace(graph, h, b1.reshape([1, hidden]).broadcast(batch, 0), step, "dense1/bias")
    popnn.nonLinearityInPlace(graph, popnn.NonLinearityType.RELU, h, step, "dense1/relu")
    logits = poplin.matMul(graph, h, w2, step, "dense2")
    popops.addInPlace(
        graph, logits, b2.reshape([1, NUM_CLASSES]).broadcast(batch, 0), step, "dense2/bias"
    )
    probs = popnn.nonLinearity(
        graph, popnn.NonLinearityType.SOFTMAX_STABLE, logits, step, "softmax"
    )
    loss = graph.addVariable(FLOAT, [batch], "loss")
    deltas = graph.addVariable(FLOAT, [batch, NUM_CLASSES], "deltas")
    mapTensorLinearly(graph, loss)
    mapTensorLinearly(graph, deltas)
    popnn.calcLoss(
        graph, probs, labels, loss, deltas, None, None, popnn.LossType.CROSS_ENTROPY_LOSS,
        step, "loss",
    )  # fmt: skip
    # backward: every gradient from the weights before the step
    grad_w2 = poplin.matMul(graph, h.transpose(), deltas, step, "dense2/wgrad")
    grad_b2 = popops.reduce(graph, deltas, [0], popops.Operation.ADD, step, "dense2/bgrad")
    grad_h = poplin.matMul(graph, deltas, w2.transpose(), step, "dense2/igrad")
    grad_a1 = popnn.nonLinearityInputGradient(
        graph, popnn.NonLinearityType.RELU, h, grad_h, step, "dense1/relu-grad"
    )
    grad_w1 = poplin.matMul(graph, x.transpose(), grad_a1, step, "dense1/wgrad")
    grad_b1 = popops.reduce(graph, grad_a1, [0], popops.Operation.ADD, step, "dense1/bgrad")
    grads = [grad_w1, grad_b1, grad_w2, grad_b2]
    if replicas > 1:  # the data-parallel part: average the gradients of all replicas
        gcl.allReduceInPlaceCrossReplica(
            graph, grads, gcl.CollectiveOperator.MEAN, step, "gradients/allReduce"
        )
    for name, grad in zip(PARAMETER_NAMES, grads, strict=True):
        popops.scaledAddTo(graph, params[name], grad, scale, step, f"{name}/update")
    step.add(prog.Copy(loss, loss_out))
    return step


def create_device(
    replicas: int = REPLICAS, tiles: int = DEFAULT_TILES, cpu: bool = False
) -> Device:
    """An IPU Model (``ipu2``) of ``replicas`` IPUs of ``tiles`` tiles, or a CPU device
    with the same IPUs and tiles (values only, no timing)."""
    model = IPUModel("ipu2")
    model.numIPUs = int(replicas)
    model.tilesPerIPU = int(tiles)
    device = model.createDevice()
    return Device.createCPUDevice(device.getTarget().config) if cpu else device


def replica_batches(
    inputs: np.ndarray, labels: np.ndarray, replicas: int, batch: int, steps: int
) -> tuple[np.ndarray, np.ndarray]:
    """The host buffers of the ``images`` and ``labels`` streams, replica-major.

    Step ``s`` uses images ``[s·R·B, (s+1)·R·B)``; replica ``k`` gets the ``k``-th
    ``B`` of them. Returns ``float32[R, steps·B·784]`` and ``uint32[R, steps·B]``.
    """
    used = steps * replicas * batch
    x = inputs[:used].reshape(steps, replicas, batch * IMAGE_SIZE).transpose(1, 0, 2)
    y = labels[:used].reshape(steps, replicas, batch).transpose(1, 0, 2)
    return (
        np.ascontiguousarray(x.reshape(replicas, -1), np.float32),
        np.ascontiguousarray(y.reshape(replicas, -1), np.uint32),
    )


def run(
    device: Device,
    images: np.ndarray,
    labels: np.ndarray,
    replicas: int = REPLICAS,
    batch: int = BATCH,
    eta: float = ETA,
    steps: int = STEPS,
    seed: int = DEFAULT_SEED,
    hidden: int = HIDDEN,
    out: Callable[[str], None] = print,
) -> Outcome:
    """Train for ``steps`` steps on ``replicas`` replicas of ``batch`` images each.

    Raises
    ------
    cnn_digits.CnnArgumentError
        A bad batch, learning rate or step count, or fewer images than the steps use.
    """
    cnn_digits.check_arguments(batch, eta, 1, steps, len(images))
    need = steps * replicas * batch
    if need > len(images):
        raise cnn_digits.CnnArgumentError(
            f"{steps} step(s) of {replicas} x {batch} images need {need} images; the data "
            f"set has {len(images)}; hint: fewer steps or a smaller batch"
        )
    inputs = tut5.prepare_inputs(images[:need])
    x_buf, y_buf = replica_batches(inputs, labels, replicas, batch, steps)
    graph = Graph(device.getTarget(), replication_factor=replicas)
    step = build(graph, batch, eta, hidden)
    engine = Engine(graph, step)
    engine.load(device)
    for name, value in initial_parameters(seed, hidden).items():
        engine.writeTensor(name, value)  # the same values in every replica
    engine.connectStream("images", x_buf)
    engine.connectStream("labels", y_buf)
    loss = np.zeros((replicas, batch), np.float32)
    engine.connectStream("loss", loss)
    losses = []
    for s in range(steps):
        engine.run(0)
        losses.append(float(loss.mean()))
        out(f"step {s + 1}/{steps}: mean loss {cnn_digits.format_float(losses[-1])}")
    shapes = parameter_shapes(hidden)
    parameters = {  # readTensor of a replicated graph gives [replicas, *shape]
        name: engine.readTensor(f"{name}-read").reshape(replicas, *shapes[name])
        for name in PARAMETER_NAMES
    }
    trace = engine.getTrace()
    if trace is not None:
        reduce = sum(r.last_cycle - r.first_cycle for r in trace.records if r.kind == "collective")
        out(
            f"cycles of the last step: {trace.total_cycles:,}, of which the gradient "
            f"all-reduce: {reduce:,}"
        )
    return Outcome(parameters, losses, engine)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code (2 for bad arguments)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=REPLICAS, help="replicas (one IPU each)")
    parser.add_argument("--batch", type=int, default=BATCH, help="images per replica and step")
    parser.add_argument("--steps", type=int, default=STEPS, help="training steps")
    parser.add_argument("--eta", type=float, default=ETA, help="learning rate")
    parser.add_argument("--hidden", type=int, default=HIDDEN, help="hidden units")
    parser.add_argument("--tiles", type=int, default=DEFAULT_TILES, help="tiles per IPU")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="weight init seed")
    parser.add_argument("--cpu", action="store_true", help="values only, no timing")
    args = parser.parse_args(argv)
    if args.replicas < 1 or args.hidden < 1 or args.tiles < 1:
        parser.error("--replicas, --hidden and --tiles must be >= 1")
    images, labels = mnist.load_digits_as_mnist()
    device = create_device(args.replicas, args.tiles, args.cpu)
    try:
        outcome = run(
            device, images, labels, args.replicas, args.batch, args.eta, args.steps,
            args.seed, args.hidden,
        )  # fmt: skip
    except cnn_digits.CnnArgumentError as exc:
        parser.error(str(exc))
    spread = max(float(np.ptp(v, axis=0).max()) for v in outcome.parameters.values())
    print(f"largest difference between replicas' parameters: {spread:.3g}")
    return 0 if spread == 0.0 else 1


if __name__ == "__main__":
    sys.exit(main())
