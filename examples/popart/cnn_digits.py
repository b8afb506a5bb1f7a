"""The CNN of ``examples/cnn/cnn_digits.py`` built with the PopART Builder and trained
by a ``TrainingSession`` on the bundled digits.

The model (FLOAT, activations ``[batch, channels, height, width]``)::

    x [B, 1, 28, 28] (pixel / 255)
    Conv 3x3, 1 -> 8, pads 1, + bias -> Relu                  [B, 8, 28, 28]
    MaxPool 2x2 stride 2                                      [B, 8, 14, 14]
    Conv 3x3, 8 -> 16, pads 1, + bias -> Relu                 [B, 16, 14, 14]
    AveragePool 2x2 stride 2                                  [B, 16, 7, 7]
    Reshape [B, 784] -> Gemm (wd [10, 784], transB=1) + bd -> Softmax
    loss = aiGraphcore.nllloss([probs, labels], reduction=Mean)

Initial weights are those of the poplar_api example (``cnn_digits.initial_parameters
(--seed)``: He-normal, conv1, conv2, dense in that order; biases 0), the conv kernels
reshaped to ONNX's ``[out, in, kh, kw]``. One ``session.run`` is one SGD step on one
batch (``ConstSGD(--lr)``, or ``--optimizer sgd`` for ``SGD`` with a non-constant
learning rate); an epoch is ``N // B`` steps in the bundled order. After training the
weights are read back (``weightsToHost`` + ``readWeights``) into an inference model
(the same graph without the loss) that classifies all 1,797 images in one run.

``--check-numpy`` instead runs two training steps and compares every weight with a
float64 numpy implementation of the same forward pass, backward pass (max-pool
gradient shared between the inputs tied for a window's maximum, as popart_api's
MaxPool gradient does) and SGD update; it fails when a weight differs by more than
``--tolerance`` (1e-4).

Run::

    python examples/popart/cnn_digits.py [--batch 32] [--lr 0.1] [--epochs 1]
        [--steps N] [--optimizer constsgd|sgd] [--tiles 16] [--seed 7]
    python examples/popart/cnn_digits.py --check-numpy [--tolerance 1e-4]

It prints the loss of every step, the accuracy on all images, the simulated cycles
of one training step and host seconds of build, compile, training and evaluation.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import popart_common as _common

import popart_api as popart


def _load_poplar_cnn() -> ModuleType:
    """``examples/cnn/cnn_digits.py`` as module ``poplar_cnn_digits`` (this file has
    the same name, so it is loaded by path, not imported)."""
    name = "poplar_cnn_digits"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "cnn" / "cnn_digits.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


poplar_cnn = _load_poplar_cnn()

SIDE = _common.SIDE
C1 = poplar_cnn.CONV1_CHANNELS
C2 = poplar_cnn.CONV2_CHANNELS
DENSE_INPUTS = poplar_cnn.DENSE_INPUTS
NUM_CLASSES = _common.NUM_CLASSES
BATCH = poplar_cnn.BATCH
LEARNING_RATE = poplar_cnn.ETA
DEFAULT_SEED = poplar_cnn.DEFAULT_SEED
WEIGHT_NAMES = ("w1", "b1", "w2", "b2", "wd", "bd")


@dataclass
class Model:
    """The built model: its ONNX bytes and tensor ids."""

    proto: bytes
    x: str
    labels: str | None
    probs: str
    loss: str | None


@dataclass
class Result(_common.TrainingResult):
    """What :func:`run` produced (see :class:`popart_common.TrainingResult`), and in
    ``--check-numpy`` ``max_error``, the largest weight difference from numpy, and
    ``check_passed``, whether it is within the tolerance."""

    max_error: float | None = None
    check_passed: bool | None = None


def initial_weights(seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """The poplar_api example's initial parameters, in ONNX layouts."""
    p = poplar_cnn.initial_parameters(seed)
    return {
        "w1": p.w1.reshape(C1, 1, 3, 3).copy(),
        "b1": p.b1.copy(),
        "w2": p.w2.reshape(C2, C1, 3, 3).copy(),
        "b2": p.b2.copy(),
        "wd": p.wd.copy(),
        "bd": p.bd.copy(),
    }


def build_model(weights: dict[str, np.ndarray], batch: int, with_loss: bool = True) -> Model:
    """The CNN (and its loss when ``with_loss``) with the Builder."""
    builder = popart.Builder()
    on = builder.aiOnnx
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [batch, 1, SIDE, SIDE]), "x")
    ids = {name: builder.addInitializedInputTensor(weights[name], name) for name in WEIGHT_NAMES}
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [1, 1]}
    pool = {"kernel_shape": [2, 2], "strides": [2, 2]}
    a1 = on.relu([on.conv([x, ids["w1"], ids["b1"]], **conv)])
    (p1,) = on.maxpool([a1], num_outputs=1, **pool)
    a2 = on.relu([on.conv([p1, ids["w2"], ids["b2"]], **conv)])
    p2 = on.averagepool([a2], **pool)
    flat = on.reshape([p2, on.constant(np.array([batch, DENSE_INPUTS], np.int64))])
    probs = on.softmax([on.gemm([flat, ids["wd"], ids["bd"]], transB=1)], axis=1)
    builder.addOutputTensor(probs)
    labels = loss = None
    if with_loss:
        labels = builder.addInputTensor(popart.TensorInfo("INT32", [batch]), "labels")
        loss = builder.aiGraphcore.nllloss([probs, labels], reduction=popart.ReductionType.Mean)
    return Model(builder.getModelProto(), x, labels, probs, loss)


# --------------------------------------------------------------------- numpy model
def _conv_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3x3 convolution, padding 1, stride 1 (ONNX Conv: cross-correlation)."""
    _, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((x.shape[0], w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            y += np.einsum("bchw,oc->bohw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return y + b.reshape(1, -1, 1, 1)


def _conv_backward(
    x: np.ndarray, w: np.ndarray, dy: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`_conv_forward` w.r.t. x, w and b given dL/dy."""
    _, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for i in range(3):
        for j in range(3):
            dw[:, :, i, j] = np.einsum("bohw,bchw->oc", dy, xp[:, :, i : i + h, j : j + wd])
            dxp[:, :, i : i + h, j : j + wd] += np.einsum("bohw,oc->bchw", dy, w[:, :, i, j])
    return dxp[:, :, 1:-1, 1:-1], dw, dy.sum(axis=(0, 2, 3))


def _windows(x: np.ndarray) -> np.ndarray:
    """``[B, C, H, W]`` -> ``[B, C, H/2, W/2, 4]``: the 2x2 stride-2 windows."""
    b, c, h, w = x.shape
    return (
        x.reshape(b, c, h // 2, 2, w // 2, 2)
        .transpose(0, 1, 2, 4, 3, 5)
        .reshape(b, c, h // 2, w // 2, 4)
    )


def _unwindows(win: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_windows`."""
    b, c, h2, w2, _ = win.shape
    return win.reshape(b, c, h2, w2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(b, c, 2 * h2, 2 * w2)


def numpy_step(
    weights: dict[str, np.ndarray], x: np.ndarray, labels: np.ndarray, lr: float
) -> tuple[dict[str, np.ndarray], float]:
    """One SGD step of the model in float64 numpy; returns new weights and the loss."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    x = np.asarray(x, np.float64)
    batch = len(x)
    z1 = _conv_forward(x, w["w1"], w["b1"])
    a1 = np.maximum(z1, 0.0)
    win1 = _windows(a1)
    p1 = win1.max(axis=-1)
    z2 = _conv_forward(p1, w["w2"], w["b2"])
    a2 = np.maximum(z2, 0.0)
    p2 = _windows(a2).mean(axis=-1)
    flat = p2.reshape(batch, -1)
    logits = flat @ w["wd"].T + w["bd"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    rows = np.arange(batch)
    loss = float(-np.mean(np.log(probs[rows, labels])))
    # backward: softmax + mean NLL
    dlogits = probs.copy()
    dlogits[rows, labels] -= 1.0
    dlogits /= batch
    grads = {"wd": dlogits.T @ flat, "bd": dlogits.sum(axis=0)}
    dp2 = (dlogits @ w["wd"]).reshape(p2.shape)
    da2 = _unwindows(np.repeat(dp2[..., None] / 4.0, 4, axis=-1))
    dz2 = da2 * (z2 > 0)
    dp1, grads["w2"], grads["b2"] = _conv_backward(p1, w["w2"], dz2)
    ties = win1 == p1[..., None]  # the window's maxima share its gradient
    da1 = _unwindows(ties * (dp1 / ties.sum(axis=-1))[..., None])
    dz1 = da1 * (z1 > 0)
    _, grads["w1"], grads["b1"] = _conv_backward(x, w["w1"], dz1)
    return {k: w[k] - lr * grads[k] for k in w}, loss


# --------------------------------------------------------------------- running
def make_optimizer(name: str, lr: float) -> popart.Optimizer:
    """``ConstSGD(lr)`` or ``SGD`` with a non-constant learning rate ``lr``."""
    if name == "constsgd":
        return popart.ConstSGD(lr)
    if name == "sgd":
        return popart.SGD({"defaultLearningRate": (lr, False)})
    raise ValueError(f"optimizer must be 'constsgd' or 'sgd', got {name!r}")


def evaluate(
    weights: dict[str, np.ndarray], batch: int, images: np.ndarray, labels: np.ndarray,
    tiles: int,
) -> tuple[float, int]:  # fmt: skip
    """Accuracy of the inference model with ``weights`` on all ``images`` (one run of
    ``ceil(N / batch)`` batches, the last padded) and the cycles of that run."""
    model = build_model(weights, batch, with_loss=False)
    n = len(images)
    batches = math.ceil(n / batch)
    xs = np.zeros((batches * batch, 1, SIDE, SIDE), np.float32)
    xs[:n, 0] = images
    session = popart.InferenceSession(
        fnModel=model.proto,
        dataFlow=popart.DataFlow(batches, {model.probs: popart.AnchorReturnType("ALL")}),
        deviceInfo=_common.ipu_model(1, tiles),
    )
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({model.x: xs.reshape(batches, batch, 1, SIDE, SIDE)}, anchors))
    predicted = anchors[model.probs].reshape(batches * batch, -1)[:n].argmax(axis=1)
    return float(np.mean(predicted == labels)), _common.last_run_cycles(session)


def run(
    batch: int = BATCH,
    lr: float = LEARNING_RATE,
    epochs: int = 1,
    steps: int | None = None,
    optimizer: str = "constsgd",
    tiles: int = _common.DEFAULT_TILES,
    seed: int = DEFAULT_SEED,
    do_evaluate: bool = True,
    verbose: bool = True,
) -> Result:
    """Train (``epochs`` epochs, or ``steps`` steps) and evaluate; see the module doc."""
    images, labels = _common.load_digits()
    per_epoch = len(images) // batch
    total = per_epoch * epochs if steps is None else int(steps)
    seconds: dict[str, float] = {}
    with _common.timed(seconds, "build"):
        initial = initial_weights(seed)
        model = build_model(initial, batch)
    with _common.timed(seconds, "compile"):
        session = popart.TrainingSession(
            fnModel=model.proto,
            dataFlow=popart.DataFlow(1, {model.loss: popart.AnchorReturnType("ALL")}),
            deviceInfo=_common.ipu_model(1, tiles),
            loss=model.loss,
            optimizer=make_optimizer(optimizer, lr),
        )
        session.prepareDevice()
    session.weightsFromHost()

    def batch_of(step: int) -> tuple[np.ndarray, np.ndarray]:
        start = (step % per_epoch) * batch
        xs = images[start : start + batch].reshape(batch, 1, SIDE, SIDE)
        return xs, labels[start : start + batch]

    result = Result(initial=initial, weights={})
    with _common.timed(seconds, "train"):
        _common.train_steps(session, model, total, batch_of, result, verbose)
    session.weightsToHost()
    result.weights = {k: np.zeros_like(v) for k, v in initial.items()}
    session.readWeights(popart.PyWeightsIO(result.weights))
    if do_evaluate:
        with _common.timed(seconds, "eval"):
            result.accuracy, result.eval_cycles = evaluate(
                result.weights, batch, images, labels, tiles
            )
    result.host_seconds = seconds
    return result


def check_numpy(
    steps: int = 2, batch: int = BATCH, lr: float = LEARNING_RATE, tiles: int = 16,
    seed: int = DEFAULT_SEED, optimizer: str = "constsgd",
) -> Result:  # fmt: skip
    """``steps`` training steps on the device and in numpy; ``max_error`` is the
    largest absolute weight difference."""
    result = run(batch, lr, 1, steps, optimizer, tiles, seed, do_evaluate=False, verbose=False)
    images, labels = _common.load_digits()
    weights = {k: v.astype(np.float64) for k, v in result.initial.items()}
    losses = []
    for step in range(steps):
        xs = images[step * batch : (step + 1) * batch].reshape(batch, 1, SIDE, SIDE)
        weights, loss = numpy_step(weights, xs, labels[step * batch : (step + 1) * batch], lr)
        losses.append(loss)
    result.max_error = max(float(np.max(np.abs(result.weights[k] - weights[k]))) for k in weights)
    for step, (dev, ref) in enumerate(zip(result.losses, losses, strict=True)):
        print(f"step {step + 1}: loss device {dev:.6f}, numpy {ref:.6f}")
    for k in WEIGHT_NAMES:
        err = float(np.max(np.abs(result.weights[k] - weights[k])))
        print(f"{k}: max |device - numpy| {err:.3g}")
    return result


def main(argv: Sequence[str] | None = None) -> Result:
    """Command-line entry point; returns the :class:`Result`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=BATCH, help=f"default {BATCH}")
    parser.add_argument("--lr", type=float, default=LEARNING_RATE, help="learning rate")
    parser.add_argument("--epochs", type=int, default=1, help="default 1")
    parser.add_argument("--steps", type=int, help="stop after this many steps")
    parser.add_argument("--optimizer", choices=("constsgd", "sgd"), default="constsgd")
    parser.add_argument("--tiles", type=int, default=_common.DEFAULT_TILES, help="tiles per IPU")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="weight init seed")
    parser.add_argument("--no-eval", action="store_true", help="skip the accuracy run")
    parser.add_argument("--check-numpy", action="store_true", help="two steps compared with numpy")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="for --check-numpy")
    args = parser.parse_args(argv)
    for name in ("batch", "epochs", "tiles"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if args.check_numpy:
        result = check_numpy(2, args.batch, args.lr, args.tiles, args.seed, args.optimizer)
        ok = result.max_error is not None and result.max_error <= args.tolerance
        result.check_passed = ok
        print(f"max weight error {result.max_error:.3g}: {'OK' if ok else 'FAILED'}")
        return result
    result = run(
        args.batch, args.lr, args.epochs, args.steps, args.optimizer, args.tiles, args.seed,
        not args.no_eval,
    )  # fmt: skip
    _common.print_training(result)
    return result


if __name__ == "__main__":
    outcome = main()
    sys.exit(1 if outcome.check_passed is False else 0)
