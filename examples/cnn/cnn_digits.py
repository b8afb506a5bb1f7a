"""A small CNN trained by SGD on the bundled digits, one batch per training step.

The model (all FLOAT, activations ``[batch, channels, height, width]``)::

    x [B, 1, 28, 28]
    conv1 3x3, 1 -> 8 channels, padding 1, + bias -> ReLU      [B, 8, 28, 28]
    max-pool 2x2 stride 2                                      [B, 8, 14, 14]
    conv2 3x3, 8 -> 16 channels, padding 1, + bias -> ReLU     [B, 16, 14, 14]
    average-pool 2x2 stride 2                                  [B, 16, 7, 7]
    dense 784 -> 10 (+ bias) -> softmax, cross-entropy loss

One engine run of the training program (program 0) streams a batch of ``B`` images
(pixel / 255) and labels in, runs the forward pass, ``popnn.calcLoss`` (softmax
cross-entropy: ``delta = p - onehot(label)`` per image), the backward pass and plain
SGD on the mean loss of the batch: every parameter ``P += (-eta / B) * sum_b dL_b/dP``.
The backward pass uses ``popnn.nonLinearityInputGradient`` (ReLU),
``popnn.pooling.poolInputGradient`` (average, and max with ``useScaledVariant``: inputs
tied for a window's maximum share its gradient), ``poplin.convolution`` with
``poplin.getGradientParams`` (conv2's input gradient; conv1 needs none),
``poplin.convolutionWeightUpdate``/``convolutionBiasUpdate`` and ``poplin.matMul`` for
the dense layer. Every gradient is computed from the weights before the step.

Program 1 evaluates the model on all the images (forward pass and
``popnn.calcAccuracy``; the last batch is padded with masked labels, which never
count). The images are used in their bundled order; an epoch is ``len // B`` steps
(the remainder is not trained on). Initial weights are He-normal draws from
``numpy.random.default_rng(--seed)`` (conv1, conv2, dense in that order); biases 0.

Run::

    python examples/cnn/cnn_digits.py [--batch 32] [--eta 0.05] [--epochs 1]
        [--device model-ipu2|model-ipu1|model-ipu21] [--tiles N] [--steps N]

It prints the loss and accuracy of every step, then the accuracy on all 1,797 images,
the cycles of one training step and the percentage of the device's peak FLOAT flops
that step reaches (flops of ``poplin.getFwdFlops/getBwdFlops/getWuFlops`` for the
convolutions plus ``2·B·784·10`` per dense pass; peak ``getFpFlopsPerCycle(FLOAT) x
tiles`` per cycle), and the host seconds spent building, compiling and running.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))

import mnist
from tut5 import format_float  # 6 significant digits, as the tutorials print

from poplar_api import FLOAT, UNSIGNED_INT, Device, Engine, Graph, IPUModel, poplin, popnn, popops
from poplar_api import program as prog
from poplar_api.popnn import pooling
from poplar_api.poputil import mapTensorLinearly
from poplar_api.tensor import Tensor
from poplar_api.workload import Workload

SIDE = mnist.MNIST_SIDE
NUM_CLASSES = 10
CONV1_CHANNELS = 8
CONV2_CHANNELS = 16
#: Side of the field after the two 2x2 stride-2 poolings.
POOLED_SIDE = SIDE // 4
DENSE_INPUTS = CONV2_CHANNELS * POOLED_SIDE * POOLED_SIDE
BATCH = 32
ETA = 0.1
DEFAULT_SEED = 7
#: Pixel scale: input = pixel / 255.
PIXEL_SCALE = 255.0
#: ``--device`` choices and the IPU Model preset each names.
DEVICES = {
    "model-ipu1": "ipu1",
    "model-ipu2": "ipu2",
    "model-ipu21": "ipu21",
}
DEFAULT_DEVICE = "model-ipu2"
#: Names of the parameters, in the order of :class:`Parameters`.
PARAMETER_NAMES = ("w1", "b1", "w2", "b2", "wd", "bd")
#: Program indices.
TRAIN_PROGRAM = 0
EVAL_PROGRAM = 1


class CnnArgumentError(ValueError):
    """A bad argument of the example (batch, eta, epochs, steps, device)."""


@dataclass
class Parameters:
    """The trainable parameters (float32).

    Attributes
    ----------
    w1, b1
        conv1 kernel ``[1, 8, 1, 3, 3]`` (``[groups, out, in, kh, kw]``) and bias ``[8]``.
    w2, b2
        conv2 kernel ``[1, 16, 8, 3, 3]`` and bias ``[16]``.
    wd, bd
        Dense weights ``[10, 784]`` (inputs in ``[channel, row, col]`` order of the
        pooled ``[16, 7, 7]`` activations) and bias ``[10]``.
    """

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    wd: np.ndarray
    bd: np.ndarray

    def as_dict(self) -> dict[str, np.ndarray]:
        """``{name: array}`` in :data:`PARAMETER_NAMES` order."""
        return {name: getattr(self, name) for name in PARAMETER_NAMES}

    def copy(self) -> Parameters:
        """A deep copy."""
        return Parameters(*(getattr(self, n).copy() for n in PARAMETER_NAMES))


@dataclass
class Layers:
    """The layer descriptions of one batch size."""

    batch: int
    conv1: poplin.ConvParams
    pool1: pooling.PoolParams
    conv2: poplin.ConvParams
    pool2: pooling.PoolParams


@dataclass
class Outcome:
    """What :func:`run` produced.

    Attributes
    ----------
    parameters
        Parameters after the last step.
    losses, accuracies
        Mean loss and accuracy (%) of every training step.
    eval_accuracy
        Accuracy (%) on all images after training (None when not evaluated).
    step_cycles
        Cycles of the first training step (None on a CPU device).
    flops_per_step
        Flops of one training step.
    percent_of_peak
        ``flops_per_step / (step_cycles x peak flops per cycle)`` in % (None on a CPU).
    host_seconds
        ``build``, ``compile``, ``first_step`` (first training run), ``train`` (all
        training runs) and ``eval``.
    engine
        The engine, for profiles and traces.
    """

    parameters: Parameters
    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)
    eval_accuracy: float | None = None
    step_cycles: int | None = None
    flops_per_step: int = 0
    percent_of_peak: float | None = None
    host_seconds: dict[str, float] = field(default_factory=dict)
    engine: Engine | None = None


# ------------------------------------------------------------------------ set-up
def check_arguments(
    batch: int, eta: float, epochs: int = 1, steps: int | None = None, images: int = 1797
) -> None:
    """Raise :class:`CnnArgumentError` naming the first bad argument.

    ``batch`` must be in ``1..images``, ``eta`` a finite number > 0, ``epochs`` >= 1
    and ``steps`` (when given) >= 1.
    """
    if isinstance(batch, bool) or not isinstance(batch, int | np.integer) or batch < 1:
        raise CnnArgumentError(f"batch must be an integer >= 1, got {batch!r}")
    if batch > images:
        raise CnnArgumentError(
            f"batch {batch} is larger than the data set ({images} images); one step needs "
            f"a full batch"
        )
    if (
        isinstance(eta, bool)
        or not isinstance(eta, int | float | np.floating)
        or not np.isfinite(eta)
        or eta <= 0
    ):
        raise CnnArgumentError(f"eta (learning rate) must be a finite number > 0, got {eta!r}")
    if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1:
        raise CnnArgumentError(f"epochs must be an integer >= 1, got {epochs!r}")
    if steps is not None and (
        isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1
    ):
        raise CnnArgumentError(f"steps must be an integer >= 1, got {steps!r}")


def create_device(
    device: str = DEFAULT_DEVICE, cpu: bool = False, tiles: int | None = None
) -> Device:
    """The device to run on.

    Parameters
    ----------
    device
        A key of :data:`DEVICES`: the IPU Model of that IPU version.
    cpu
        A CPU device with the same tiles instead (values only, no timing).
    tiles
        Use only this many tiles of the IPU (``IPUModel.tilesPerIPU``); a few dozen
        tiles make the graph much quicker to build and simulate.

    Raises
    ------
    CnnArgumentError
        Unknown ``device``, or ``tiles`` not in ``1..tiles of the IPU``.
    """
    if device not in DEVICES:
        raise CnnArgumentError(
            f"unknown device {device!r}; choose one of {', '.join(sorted(DEVICES))}"
        )
    model = IPUModel(DEVICES[device])
    if tiles is not None:
        full = model.config.tile.tiles_per_ipu
        if (
            isinstance(tiles, bool)
            or not isinstance(tiles, int | np.integer)
            or not (1 <= tiles <= full)
        ):
            raise CnnArgumentError(
                f"tiles must be an integer in 1..{full} for {device}, got {tiles!r}"
            )
        model.tilesPerIPU = int(tiles)
    device_ = model.createDevice()
    return Device.createCPUDevice(device_.getTarget().config) if cpu else device_


def layers(batch: int) -> Layers:
    """The convolution and pooling parameters for batch size ``batch``."""
    conv1 = poplin.ConvParams(
        FLOAT, batch, [SIDE, SIDE], [3, 3], 1, CONV1_CHANNELS,
        paddingLower=[1, 1], paddingUpper=[1, 1],
    )  # fmt: skip
    pool1 = pooling.PoolParams(
        pooling.PoolingType.MAX, [SIDE, SIDE], [2, 2], [2, 2], [0, 0], [0, 0],
        CONV1_CHANNELS, batch, FLOAT,
    )  # fmt: skip
    half = SIDE // 2
    conv2 = poplin.ConvParams(
        FLOAT, batch, [half, half], [3, 3], CONV1_CHANNELS, CONV2_CHANNELS,
        paddingLower=[1, 1], paddingUpper=[1, 1],
    )  # fmt: skip
    pool2 = pooling.PoolParams(
        pooling.PoolingType.AVG, [half, half], [2, 2], [2, 2], [0, 0], [0, 0],
        CONV2_CHANNELS, batch, FLOAT,
    )  # fmt: skip
    return Layers(batch, conv1, pool1, conv2, pool2)


def step_flops(batch: int) -> int:
    """Flops of one training step of batch ``batch``.

    conv1: forward and weight update (its input gradient is not computed); conv2:
    forward, backward-data and weight update (``poplin.get*Flops``); dense: forward,
    input gradient and weight gradient, ``2·B·784·10`` each. Biases, activations,
    pooling and the loss are not counted.
    """
    ly = layers(batch)
    conv = (
        poplin.getFwdFlops(ly.conv1)
        + poplin.getWuFlops(ly.conv1)
        + poplin.getFwdFlops(ly.conv2)
        + poplin.getBwdFlops(ly.conv2)
        + poplin.getWuFlops(ly.conv2)
    )
    return int(conv + 3 * 2 * batch * DENSE_INPUTS * NUM_CLASSES)


def peak_flops_per_cycle(device: Device) -> int:
    """``getFpFlopsPerCycle(FLOAT) x tiles`` of the device's target."""
    target = device.getTarget()
    return int(target.getFpFlopsPerCycle(FLOAT) * target.getNumTiles())


def initial_parameters(seed: int = DEFAULT_SEED) -> Parameters:
    """He-normal weights (std ``sqrt(2 / fan_in)``) from ``default_rng(seed)``, zero biases."""
    rng = np.random.default_rng(seed)

    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return Parameters(
        w1=he((1, CONV1_CHANNELS, 1, 3, 3), 9),
        b1=np.zeros(CONV1_CHANNELS, np.float32),
        w2=he((1, CONV2_CHANNELS, CONV1_CHANNELS, 3, 3), 9 * CONV1_CHANNELS),
        b2=np.zeros(CONV2_CHANNELS, np.float32),
        wd=he((NUM_CLASSES, DENSE_INPUTS), DENSE_INPUTS),
        bd=np.zeros(NUM_CLASSES, np.float32),
    )


def prepare_inputs(images: np.ndarray) -> np.ndarray:
    """``uint8[n, 28, 28]`` images -> ``float32[n, 1, 28, 28]`` pixel / 255."""
    x = images.astype(np.float32) / np.float32(PIXEL_SCALE)
    return np.ascontiguousarray(x.reshape(len(images), 1, SIDE, SIDE), np.float32)


def padded_eval_data(
    images: np.ndarray, labels: np.ndarray, batch: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """All images and labels padded to whole batches (zero images, masked labels).

    Returns ``(inputs, labels, batches)``.
    """
    n = len(images)
    batches = -(-n // batch)
    inputs = np.zeros((batches * batch, 1, SIDE, SIDE), np.float32)
    inputs[:n] = prepare_inputs(images)
    lab = np.full(batches * batch, popnn.MASKED_LABEL_CODE, np.uint32)
    lab[:n] = labels
    return inputs, lab, batches


# ------------------------------------------------------------------------ the graph
def _relu_in_place(graph: Graph, t: Tensor, seq: prog.Sequence, name: str) -> None:
    popnn.nonLinearityInPlace(graph, popnn.NonLinearityType.RELU, t, seq, name)


def build(graph: Graph, batch: int, eta: float, eval_batches: int) -> list[prog.Program]:
    """Add the model, its training step and the evaluation to ``graph``.

    Returns ``[train, evaluate]``: ``train`` is one SGD step on a streamed batch
    (streams ``images``, ``labels`` in; ``loss`` — the ``[B]`` losses — and
    ``correct`` out); ``evaluate`` runs the forward pass on ``eval_batches`` streamed
    batches (``eval-images``, ``eval-labels``) and sends the correct count
    (``eval-correct``). Host handles ``w1 b1 w2 b2 wd bd`` write the parameters and
    ``<name>-read`` read them.
    """
    ly = layers(batch)
    scale = -float(eta) / batch
    x = poplin.createInput(graph, ly.conv1, "x", {"pass": "TRAINING_FWD"})
    w1 = poplin.createWeights(graph, ly.conv1, "w1", {"pass": "TRAINING_FWD"})
    w2 = poplin.createWeights(graph, ly.conv2, "w2", {"pass": "TRAINING_FWD"})
    wd = graph.addVariable(FLOAT, [NUM_CLASSES, DENSE_INPUTS], "wd")
    mapTensorLinearly(graph, wd)
    bd = graph.addVariable(FLOAT, [NUM_CLASSES], "bd")
    mapTensorLinearly(graph, bd)
    labels = graph.addVariable(UNSIGNED_INT, [batch], "labels")
    mapTensorLinearly(graph, labels)

    # ---- forward (shared by training and evaluation)
    fwd = prog.Sequence()
    a1 = poplin.convolution(graph, x, w1, ly.conv1, False, fwd, "conv1", {"pass": "TRAINING_FWD"})
    b1 = poplin.createBiases(graph, a1, "b1")
    poplin.addBias(graph, a1, b1, fwd, "conv1/bias")
    _relu_in_place(graph, a1, fwd, "conv1/relu")
    p1 = pooling.pool(graph, ly.pool1, a1, fwd, "pool1")
    a2 = poplin.convolution(graph, p1, w2, ly.conv2, False, fwd, "conv2", {"pass": "TRAINING_FWD"})
    b2 = poplin.createBiases(graph, a2, "b2")
    poplin.addBias(graph, a2, b2, fwd, "conv2/bias")
    _relu_in_place(graph, a2, fwd, "conv2/relu")
    p2 = pooling.pool(graph, ly.pool2, a2, fwd, "pool2")
    flat = p2.reshape([batch, DENSE_INPUTS])
    logits = poplin.matMul(graph, flat, wd.transpose(), fwd, "dense")
    popops.addInPlace(
        graph, logits, bd.reshape([1, NUM_CLASSES]).broadcast(batch, 0), fwd, "dense/bias"
    )
    probs = popnn.nonLinearity(graph, popnn.NonLinearityType.SOFTMAX_STABLE, logits, fwd, "softmax")

    params = {"w1": w1, "b1": b1, "w2": w2, "b2": b2, "wd": wd, "bd": bd}
    for name, t in params.items():
        graph.createHostWrite(name, t)
        graph.createHostRead(f"{name}-read", t)

    # ---- training step
    loss = graph.addVariable(FLOAT, [batch], "loss")
    mapTensorLinearly(graph, loss)
    deltas = graph.addVariable(FLOAT, [batch, NUM_CLASSES], "deltas")
    mapTensorLinearly(graph, deltas)
    num_correct = graph.addVariable(UNSIGNED_INT, [1], "numCorrect")
    graph.setTileMapping(num_correct, 0)
    zero = graph.addConstant(UNSIGNED_INT, [1], 0, "zero")
    graph.setTileMapping(zero, 0)
    images_in = graph.addHostToDeviceFIFO("images", FLOAT, batch * SIDE * SIDE)
    labels_in = graph.addHostToDeviceFIFO("labels", UNSIGNED_INT, batch)
    loss_out = graph.addDeviceToHostFIFO("loss", FLOAT, batch)
    correct_out = graph.addDeviceToHostFIFO("correct", UNSIGNED_INT, 1)

    train = prog.Sequence()
    train.add(prog.Copy(images_in, x))
    train.add(prog.Copy(labels_in, labels))
    train.add(prog.Copy(zero, num_correct))
    train.add(fwd)
    popnn.calcLoss(
        graph, probs, labels, loss, deltas, None, num_correct,
        popnn.LossType.CROSS_ENTROPY_LOSS, train, "loss",
    )  # fmt: skip
    # dense: gradients from the weights before the step, then the update
    grad_wd = poplin.matMul(graph, deltas.transpose(), flat, train, "dense/wgrad")
    grad_flat = poplin.matMul(graph, deltas, wd, train, "dense/igrad")
    grad_bd = popops.reduce(graph, deltas, [0], popops.Operation.ADD, train, "dense/bgrad")
    popops.scaledAddTo(graph, wd, grad_wd, scale, train, "dense/update")
    popops.scaledAddTo(graph, bd, grad_bd, scale, train, "dense/bias-update")
    # pool2 (average) and conv2
    grad_p2 = grad_flat.reshape([batch, CONV2_CHANNELS, POOLED_SIDE, POOLED_SIDE])
    grad_r2 = pooling.poolInputGradient(graph, ly.pool2, a2, p2, grad_p2, False, train, "pool2")
    grad_a2 = popnn.nonLinearityInputGradient(
        graph, popnn.NonLinearityType.RELU, a2, grad_r2, train, "conv2/relu-grad"
    )
    grad_p1 = poplin.convolution(
        graph, grad_a2, w2, poplin.getGradientParams(ly.conv2), True, train, "conv2/bwd",
        {"pass": "TRAINING_BWD"},
    )  # fmt: skip
    poplin.convolutionWeightUpdate(
        graph, grad_a2, w2, p1, ly.conv2, scale, train, "conv2/wu", {"pass": "TRAINING_WU"}
    )
    poplin.convolutionBiasUpdate(graph, grad_a2, b2, scale, train, "conv2/bias-update")
    # pool1 (max) and conv1
    # useScaledVariant: inputs tied for a window's maximum share its gradient. Ties are
    # common here (the digits are 8x8 images upsampled to 28x28, so neighbouring
    # activations are often bit-for-bit equal); without it each tied input would get
    # the whole gradient, which is not the derivative of the loss.
    grad_r1 = pooling.poolInputGradient(graph, ly.pool1, a1, p1, grad_p1, True, train, "pool1")
    grad_a1 = popnn.nonLinearityInputGradient(
        graph, popnn.NonLinearityType.RELU, a1, grad_r1, train, "conv1/relu-grad"
    )
    poplin.convolutionWeightUpdate(
        graph, grad_a1, w1, x, ly.conv1, scale, train, "conv1/wu", {"pass": "TRAINING_WU"}
    )
    poplin.convolutionBiasUpdate(graph, grad_a1, b1, scale, train, "conv1/bias-update")
    train.add(prog.Copy(loss, loss_out))
    train.add(prog.Copy(num_correct, correct_out))

    # ---- evaluation
    eval_images = graph.addHostToDeviceFIFO("eval-images", FLOAT, batch * SIDE * SIDE)
    eval_labels = graph.addHostToDeviceFIFO("eval-labels", UNSIGNED_INT, batch)
    eval_out = graph.addDeviceToHostFIFO("eval-correct", UNSIGNED_INT, 1)
    eval_correct = graph.addVariable(UNSIGNED_INT, [1], "evalCorrect")
    graph.setTileMapping(eval_correct, 0)
    body = prog.Sequence(prog.Copy(eval_images, x), prog.Copy(eval_labels, labels), fwd)
    popnn.calcAccuracy(graph, probs, labels, eval_correct, body, "accuracy")
    evaluate = prog.Sequence(
        prog.Copy(zero, eval_correct),
        prog.Repeat(int(eval_batches), body),
        prog.Copy(eval_correct, eval_out),
    )
    return [train, evaluate]


def read_parameters(engine: Engine) -> Parameters:
    """The parameters now on the device."""
    shapes = parameter_shapes()
    values = {}
    for name in PARAMETER_NAMES:
        buf = np.zeros(shapes[name], np.float32)
        engine.readTensor(f"{name}-read", buf)
        values[name] = buf
    return Parameters(**values)


def parameter_shapes() -> dict[str, tuple[int, ...]]:
    """Shapes of the parameters, by name."""
    return {
        "w1": (1, CONV1_CHANNELS, 1, 3, 3),
        "b1": (CONV1_CHANNELS,),
        "w2": (1, CONV2_CHANNELS, CONV1_CHANNELS, 3, 3),
        "b2": (CONV2_CHANNELS,),
        "wd": (NUM_CLASSES, DENSE_INPUTS),
        "bd": (NUM_CLASSES,),
    }


def write_parameters(engine: Engine, parameters: Parameters) -> None:
    """Write ``parameters`` to the device (shapes checked)."""
    shapes = parameter_shapes()
    for name, value in parameters.as_dict().items():
        value = np.ascontiguousarray(value, np.float32)
        if value.shape != shapes[name]:
            raise CnnArgumentError(
                f"parameter {name} has shape {value.shape}, needs {shapes[name]}"
            )
        engine.writeTensor(name, value)


# ------------------------------------------------------------------------ running
def run(
    device: Device,
    images: np.ndarray,
    labels: np.ndarray,
    batch: int = BATCH,
    eta: float = ETA,
    epochs: int = 1,
    steps: int | None = None,
    seed: int = DEFAULT_SEED,
    initial: Parameters | None = None,
    evaluate: bool = True,
    out: Callable[[str], None] = print,
) -> Outcome:
    """Train for ``epochs`` epochs (or ``steps`` steps in all) and evaluate.

    Parameters
    ----------
    device
        IPU Model or CPU device.
    images, labels
        ``uint8[n, 28, 28]`` and ``[n]`` (0..9).
    batch, eta
        Batch size and learning rate of the mean-loss SGD.
    epochs
        Passes over the ``n // batch`` whole batches.
    steps
        Stop after this many training steps in all (default: every step of ``epochs``).
    initial
        Starting parameters; default :func:`initial_parameters` of ``seed``.
    evaluate
        Run the evaluation program on all ``n`` images at the end.
    out
        Receives each printed line.

    Raises
    ------
    CnnArgumentError
        Bad batch, eta, epochs or steps, or images and labels of different lengths.
    """
    if len(images) != len(labels):
        raise CnnArgumentError(f"{len(images)} images but {len(labels)} labels; they must match")
    check_arguments(batch, eta, epochs, steps, len(images))
    per_epoch = len(images) // batch
    total = per_epoch * epochs if steps is None else int(steps)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    eval_inputs, eval_labels, eval_batches = padded_eval_data(images, labels, batch)
    graph = Graph(device.getTarget())
    programs = build(graph, batch, eta, eval_batches)
    seconds["build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine = Engine(graph, programs)
    engine.load(device)
    seconds["compile"] = time.perf_counter() - t0
    used = per_epoch * batch
    train_inputs = prepare_inputs(images[:used])
    train_labels = np.ascontiguousarray(labels[:used].astype(np.uint32))
    start = initial if initial is not None else initial_parameters(seed)
    write_parameters(engine, start)
    engine.connectStream("images", train_inputs)
    engine.connectStream("labels", train_labels)
    engine.connectStream("eval-images", eval_inputs)
    engine.connectStream("eval-labels", eval_labels)
    loss_buf = np.zeros(batch, np.float32)
    correct = np.zeros(1, np.uint32)
    eval_correct = np.zeros(1, np.uint32)
    engine.connectStream("loss", loss_buf)
    engine.connectStream("correct", correct)
    engine.connectStream("eval-correct", eval_correct)
    outcome = Outcome(parameters=start, engine=engine, flops_per_step=step_flops(batch))
    t_train = time.perf_counter()
    for step in range(total):
        t0 = time.perf_counter()
        engine.run(TRAIN_PROGRAM)
        if step == 0:
            seconds["first_step"] = time.perf_counter() - t0
            trace = engine.getTrace()
            if trace is not None:
                outcome.step_cycles = int(trace.total_cycles)
                peak = peak_flops_per_cycle(device)
                outcome.percent_of_peak = (
                    100.0 * outcome.flops_per_step / (outcome.step_cycles * peak)
                )
        mean_loss = float(loss_buf.astype(np.float64).mean())
        accuracy = 100.0 * int(correct[0]) / batch
        outcome.losses.append(mean_loss)
        outcome.accuracies.append(accuracy)
        epoch, within = divmod(step, per_epoch)
        out(
            f"Epoch {epoch + 1} step {within + 1}/{per_epoch}: loss {format_float(mean_loss)}, "
            f"accuracy {format_float(accuracy)}%"
        )
    seconds["train"] = time.perf_counter() - t_train
    if evaluate:
        t0 = time.perf_counter()
        engine.run(EVAL_PROGRAM)
        seconds["eval"] = time.perf_counter() - t0
        outcome.eval_accuracy = 100.0 * int(eval_correct[0]) / len(images)
        out(
            f"Accuracy on all {len(images)} images: {format_float(outcome.eval_accuracy)}% "
            f"({int(eval_correct[0])} correct)"
        )
    outcome.parameters = read_parameters(engine)
    outcome.host_seconds = seconds
    if outcome.step_cycles is not None:
        out(
            f"Cycles per training step (batch {batch}): {outcome.step_cycles:,}; "
            f"{outcome.flops_per_step:,} flops, {format_float(outcome.percent_of_peak or 0.0)}% "
            f"of peak ({peak_flops_per_cycle(device):,} flops/cycle)"
        )
    out("Host seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in seconds.items()))
    return outcome


def workload(
    device: Device,
    batch: int = BATCH,
    steps: int = 1,
    eta: float = ETA,
    seed: int = DEFAULT_SEED,
) -> Workload:
    """``steps`` training steps of batch ``batch`` as a workload
    (``ipusim run examples/cnn/cnn_digits.py -p batch=32``).

    Metrics: ``cycles_per_step`` and ``percent_of_peak`` of the last step, its mean
    ``loss`` and ``accuracy`` (%). The check: every step's loss is finite, and the
    parameters moved from their initial values but stayed finite.
    """
    images, labels = mnist.load_digits_as_mnist()
    check_arguments(batch, eta, 1, steps, len(images))
    used = (len(images) // batch) * batch
    train_inputs = prepare_inputs(images[:used])
    train_labels = np.ascontiguousarray(labels[:used].astype(np.uint32))
    eval_inputs, eval_labels, eval_batches = padded_eval_data(images, labels, batch)
    graph = Graph(device.getTarget())
    programs = build(graph, batch, eta, eval_batches)
    start = initial_parameters(seed)
    loss_buf = np.zeros(batch, np.float32)
    correct = np.zeros(1, np.uint32)
    losses: list[float] = []

    def prepare(engine: Engine) -> None:
        write_parameters(engine, start)
        engine.connectStream("images", train_inputs)
        engine.connectStream("labels", train_labels)
        engine.connectStream("eval-images", eval_inputs)
        engine.connectStream("eval-labels", eval_labels)
        engine.connectStream("eval-correct", np.zeros(1, np.uint32))

        def on_loss(values: np.ndarray) -> None:
            loss_buf[:] = values
            losses.append(float(np.asarray(values, np.float64).mean()))

        engine.connectStreamToCallback("loss", on_loss)
        engine.connectStreamToCallback("correct", lambda v: correct.__setitem__(0, v[0]))

    def check(engine: Engine) -> bool:
        final = read_parameters(engine)
        moved = any(
            not np.array_equal(getattr(final, n), getattr(start, n)) for n in PARAMETER_NAMES
        )
        finite = all(np.isfinite(getattr(final, n)).all() for n in PARAMETER_NAMES)
        return len(losses) == steps and bool(np.isfinite(losses).all()) and moved and finite

    def metrics(engine: Engine, trace: object) -> dict[str, float]:
        cycles = int(getattr(trace, "total_cycles", 0))
        peak = peak_flops_per_cycle(device)
        return {
            "cycles_per_step": float(cycles),
            "percent_of_peak": 100.0 * step_flops(batch) / (cycles * peak) if cycles else 0.0,
            "loss": losses[-1] if losses else float("nan"),
            "accuracy": 100.0 * int(correct[0]) / batch,
        }

    return Workload(
        graph, programs, prepare=prepare, check=check, run=(TRAIN_PROGRAM,) * int(steps),
        metrics=metrics,
    )  # fmt: skip


# ------------------------------------------------------------------------ CLI
def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code (2 for bad arguments)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=BATCH, help=f"batch size (default {BATCH})")
    parser.add_argument("--eta", type=float, default=ETA, help=f"learning rate (default {ETA})")
    parser.add_argument("--epochs", type=int, default=1, help="epochs to train (default 1)")
    parser.add_argument("--steps", type=int, help="stop after this many steps in all")
    parser.add_argument(
        "--device", choices=sorted(DEVICES), default=DEFAULT_DEVICE,
        help=f"IPU Model preset (default {DEFAULT_DEVICE})",
    )  # fmt: skip
    parser.add_argument(
        "--tiles", type=int, help="use only this many tiles of the IPU (default: all)"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="weight init seed")
    parser.add_argument(
        "--no-eval", action="store_true", help="skip the accuracy on all images at the end"
    )
    parser.add_argument("--cpu", action="store_true", help="values only, no timing")
    args = parser.parse_args(argv)
    images, labels = mnist.load_digits_as_mnist()
    try:
        check_arguments(args.batch, args.eta, args.epochs, args.steps, len(images))
    except CnnArgumentError as exc:
        parser.error(str(exc))
    try:
        device = create_device(args.device, args.cpu, args.tiles)
    except CnnArgumentError as exc:
        parser.error(str(exc))
    run(
        device, images, labels, args.batch, args.eta, args.epochs, args.steps, args.seed,
        evaluate=not args.no_eval,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
