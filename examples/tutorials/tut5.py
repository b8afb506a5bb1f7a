"""Tutorial 5: logistic regression (softmax regression) on MNIST, trained by SGD.

One training step per image: ``t = W·x``, ``y = t + b``, ``p = softmax(yᵀ)``, then the
cross-entropy loss gives ``delta = p - onehot(label)`` and the number of correct
predictions; ``b -= eta·deltaᵀ`` and ``W -= eta·(deltaᵀ·xᵀ)``. The host streams images
(pixel / 256) and labels; the device repeats the step over a batch of 300 images and
sends the correct count back, and the host prints ``Epoch <e> (<p>%), accuracy <a>%``
after every batch.

With ``--images`` and ``--labels`` the MNIST IDX files are read; without them the
bundled scikit-learn digits are used (see :mod:`mnist`). An epoch runs
``len(images) // 300`` batches (the remainder is not used). ``W`` starts as N(0, 1)
draws from ``numpy.random.default_rng(--seed)`` and ``b`` as zeros.

Run::

    python examples/tutorials/tut5.py [--images PATH --labels PATH] [--epochs N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mnist

from poplar_api import (
    FLOAT,
    UNSIGNED_INT,
    Device,
    Engine,
    Graph,
    IPUModel,
    poplin,
    popnn,
    popops,
    poputil,
)
from poplar_api import program as prog
from poplar_api.workload import Workload

IMAGE_SIZE = mnist.MNIST_SIDE * mnist.MNIST_SIDE
NUM_CLASSES = 10
BATCH_SIZE = 300
ETA = 0.0009
DEFAULT_SEED = 42
#: Pixel scale of the tutorial: input = pixel / 256.
PIXEL_SCALE = 256.0


@dataclass
class Outcome:
    """What a run produced: final parameters, per-batch accuracies (%) and the engine."""

    weights: np.ndarray
    bias: np.ndarray
    accuracies: list[float] = field(default_factory=list)
    engine: Engine | None = None


def initial_parameters(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``W`` ~ N(0, 1) as float32 from ``default_rng(seed)``; ``b`` = 0."""
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((NUM_CLASSES, IMAGE_SIZE)).astype(np.float32)
    return weights, np.zeros((NUM_CLASSES, 1), np.float32)


def prepare_inputs(images: np.ndarray) -> np.ndarray:
    """``uint8[n, 28, 28]`` images -> ``float32[n, 784]`` pixel / 256."""
    return (images.reshape(len(images), IMAGE_SIZE).astype(np.float32) / PIXEL_SCALE).astype(
        np.float32
    )


def build(graph: Graph, eta: float) -> prog.Sequence:
    """Add the model, the SGD step and the batch program; return the training program."""
    x = graph.addVariable(FLOAT, [IMAGE_SIZE, 1], "x")
    poputil.mapTensorLinearly(graph, x)
    W = graph.addVariable(FLOAT, [NUM_CLASSES, IMAGE_SIZE], "W")
    poputil.mapTensorLinearly(graph, W)
    b = graph.addVariable(FLOAT, [NUM_CLASSES, 1], "b")
    poputil.mapTensorLinearly(graph, b)
    num_correct = graph.addVariable(UNSIGNED_INT, [1], "numCorrect")
    graph.setTileMapping(num_correct, 0)
    expected = graph.addVariable(UNSIGNED_INT, [1], "expected")
    graph.setTileMapping(expected, 0)
    graph.createHostWrite("W", W)
    graph.createHostWrite("b", b)
    graph.createHostRead("W-read", W)
    graph.createHostRead("b-read", b)

    step = prog.Sequence()
    t = poplin.matMul(graph, W, x, step, "Wx")
    y = popops.add(graph, t, b, step, "Wx+b")
    softmax_y = popnn.nonLinearity(
        graph, popnn.NonLinearityType.SOFTMAX, y.transpose(), step, "softmax(Wx+b)"
    )
    loss = graph.addVariable(FLOAT, [1], "loss")
    graph.setTileMapping(loss, 0)
    delta = graph.addVariable(FLOAT, [1, NUM_CLASSES], "delta")
    graph.setTileMapping(delta, 0)
    popnn.calcLoss(
        graph, softmax_y, expected, loss, delta, None, num_correct,
        popnn.LossType.CROSS_ENTROPY_LOSS, step, "loss",
    )  # fmt: skip
    popops.scaledSubtractFrom(graph, b, delta.transpose(), eta, step, "b += -eta * delta")
    w_grad = poplin.matMul(graph, delta.transpose(), x.transpose(), step, "dE/dW")
    popops.scaledSubtractFrom(graph, W, w_grad, eta, step, "W += -eta * dE/dW")

    data_stream = graph.addHostToDeviceFIFO("data", FLOAT, IMAGE_SIZE)
    label_stream = graph.addHostToDeviceFIFO("labels", UNSIGNED_INT, 1)
    host_num_correct = graph.addDeviceToHostFIFO("hostNumCorrect", UNSIGNED_INT, 1)
    zero = graph.addConstant(UNSIGNED_INT, [1], 0, "zero")
    graph.setTileMapping(zero, 0)
    train = prog.Sequence()
    train.add(prog.Copy(zero, num_correct))
    body = prog.Sequence(prog.Copy(data_stream, x), prog.Copy(label_stream, expected), step)
    train.add(prog.Repeat(BATCH_SIZE, body))
    train.add(prog.Copy(num_correct, host_num_correct))
    return train


def format_float(value: float) -> str:
    """A float as C++ ``operator<<`` prints it (6 significant digits, shortest form)."""
    return f"{value:.6g}"


def run(
    device: Device,
    images: np.ndarray,
    labels: np.ndarray,
    epochs: int = 1,
    eta: float = ETA,
    seed: int = DEFAULT_SEED,
    batches: int | None = None,
    out: Callable[[str], None] = print,
) -> Outcome:
    """Train on ``images``/``labels`` and return the outcome.

    Parameters
    ----------
    batches
        Batches per epoch; default (and maximum) ``len(images) // 300``.
    out
        Receives each progress line.
    """
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels; they must match")
    per_epoch = len(images) // BATCH_SIZE
    if per_epoch == 0:
        raise ValueError(f"need at least {BATCH_SIZE} images for one batch, got {len(images)}")
    per_epoch = per_epoch if batches is None else min(int(batches), per_epoch)
    used = per_epoch * BATCH_SIZE
    inputs = np.ascontiguousarray(prepare_inputs(images[:used]))
    label_buf = np.ascontiguousarray(labels[:used].astype(np.uint32))
    graph = Graph(device.getTarget())
    train = build(graph, eta)
    engine = Engine(graph, train)
    engine.load(device)
    weights, bias = initial_parameters(seed)
    engine.writeTensor("W", weights)
    engine.writeTensor("b", bias)
    engine.connectStream("data", inputs)
    engine.connectStream("labels", label_buf)
    correct = np.zeros(1, np.uint32)
    engine.connectStream("hostNumCorrect", correct)
    accuracies = []
    for epoch in range(1, epochs + 1):
        for batch in range(per_epoch):
            engine.run(0)
            accuracy = 100.0 * int(correct[0]) / BATCH_SIZE
            accuracies.append(accuracy)
            done = 100 * (batch + 1) // per_epoch
            out(f"Epoch {epoch} ({done}%), accuracy {format_float(accuracy)}%")
    final_w = np.zeros((NUM_CLASSES, IMAGE_SIZE), np.float32)
    final_b = np.zeros((NUM_CLASSES, 1), np.float32)
    engine.readTensor("W-read", final_w)
    engine.readTensor("b-read", final_b)
    return Outcome(final_w, final_b, accuracies, engine)


def workload(
    device: Device, batches: int = 1, eta: float = ETA, seed: int = DEFAULT_SEED
) -> Workload:
    """The training step as a workload: ``batches`` runs of the program on the bundled
    digits (scikit-learn), one batch of 300 images each.

    Metric ``accuracy`` is the percentage of correct predictions in the last batch;
    the check replays the first batch's per-image SGD steps in numpy (float32) and
    compares the count of correct predictions (within 2, for rounding near ties).
    """
    images, labels = mnist.load_digits_as_mnist()
    used = int(batches) * BATCH_SIZE
    if batches < 1 or used > len(images):
        raise ValueError(
            f"tut5 workload: batches={batches} needs {used} images; the bundled digits "
            f"have {len(images)} (at most {len(images) // BATCH_SIZE} batches)"
        )
    inputs = np.ascontiguousarray(prepare_inputs(images[:used]))
    label_buf = np.ascontiguousarray(labels[:used].astype(np.uint32))
    correct = np.zeros(1, np.uint32)
    first: list[int] = []
    graph = Graph(device.getTarget())
    train = build(graph, eta)
    weights, bias = initial_parameters(seed)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("W", weights)
        engine.writeTensor("b", bias)
        engine.connectStream("data", inputs)
        engine.connectStream("labels", label_buf)
        engine.connectStreamToCallback(
            "hostNumCorrect", lambda v: (correct.__setitem__(0, v[0]), first.append(int(v[0])))
        )

    def check(engine: Engine) -> bool:
        w, b = weights.copy(), bias.reshape(-1).copy()
        hits = 0
        for x, label in zip(inputs[:BATCH_SIZE], label_buf[:BATCH_SIZE], strict=True):
            y = w @ x + b
            p = np.exp(y - y.max())
            p /= p.sum()
            hits += int(np.argmax(p) == label)
            delta = p.astype(np.float32)
            delta[label] -= 1.0
            b -= np.float32(eta) * delta
            w -= np.float32(eta) * np.outer(delta, x)
        return bool(first) and abs(first[0] - hits) <= 2

    def metrics(engine: Engine, trace: object) -> dict[str, float]:
        return {"accuracy": 100.0 * int(correct[0]) / BATCH_SIZE}

    return Workload(
        graph, train, prepare=prepare, check=check, run=(0,) * int(batches), metrics=metrics
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", help="MNIST IDX images file (magic 2051)")
    parser.add_argument("--labels", help="MNIST IDX labels file (magic 2049)")
    parser.add_argument("--epochs", type=int, default=1, help="epochs to train (default 1)")
    parser.add_argument("--eta", type=float, default=ETA, help=f"learning rate (default {ETA})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="weight init seed")
    parser.add_argument("--batches", type=int, help="batches per epoch (default: all)")
    parser.add_argument("--cpu", action="store_true", help="values only, no timing")
    args = parser.parse_args(argv)
    if (args.images is None) != (args.labels is None):
        parser.error("give both --images and --labels, or neither (bundled digits)")
    try:
        if args.images is None:
            images, labels = mnist.load_digits_as_mnist()
        else:
            images = mnist.read_idx_images(args.images)
            labels = mnist.read_idx_labels(args.labels)
    except mnist.IdxFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if images.shape[1:] != (mnist.MNIST_SIDE, mnist.MNIST_SIDE):
        print(f"error: images are {images.shape[1:]}, tutorial 5 needs 28x28", file=sys.stderr)
        return 2
    device = Device.createCPUDevice("ipu2") if args.cpu else IPUModel("ipu2").createDevice()
    run(device, images, labels, args.epochs, args.eta, args.seed, args.batches)
    return 0


if __name__ == "__main__":
    sys.exit(main())
