"""An MLP trained with a PopART ``TrainingSession`` on the bundled digits.

The model (FLOAT), built with ``popart.Builder``::

    x [B, 784] (pixel / 255) -> MatMul w1 [784, 64] + b1 -> Relu
                             -> MatMul w2 [64, 10] + b2 -> Softmax -> probs
    loss = aiGraphcore.nllloss([probs, labels], reduction=Mean)

Weights are He-normal draws from ``default_rng(--seed)`` (w1 then w2), biases 0. One
``session.run`` is one training step: ``--accumulation`` micro-batches per replica
(``SessionOptions.enableGradientAccumulation``/``accumulationFactor``) on each of
``--replicas`` replicas (``enableReplicatedGraphs``/``replicatedGraphCount``, an IPU
Model of ``R`` IPUs), ``B`` images each; the weight gradients are summed over the
micro-batches and replicas (PopART's default reduction, ``Sum``) and the optimizer
(``SGD`` with a non-constant learning rate, or ``--optimizer adam``) updates the
weights once. An epoch takes the images in their bundled order, ``N // (B·A·R)``
steps; the remainder is not trained on.

After training, ``session.modelToHost(path)`` writes the trained ONNX model; an
``InferenceSession`` reads that file and computes the probabilities of all 1,797
images (the last batch padded) in one run of ``ceil(N / B)`` batches per step, from
which the accuracy is counted on the host.

Run::

    python examples/popart/mlp_digits.py [--batch 32] [--lr 0.1] [--epochs 1]
        [--steps N] [--optimizer sgd|adam] [--accumulation A] [--replicas R]
        [--tiles 16] [--seed 0]

It prints the mean loss of every step, the accuracy on all images, the simulated
cycles of one training step and of the evaluation run, and host seconds of building
the model, compiling (``prepareDevice``), training and evaluating.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import popart_common as _common

import popart_api as popart

HIDDEN = 64
BATCH = 32
LEARNING_RATE = 0.1
ADAM_LEARNING_RATE = 0.001
DEFAULT_SEED = 0
#: Weight ids of the model, in the order they are drawn.
WEIGHT_NAMES = ("w1", "b1", "w2", "b2")


@dataclass
class Model:
    """The built model: its ONNX bytes and tensor ids."""

    proto: bytes
    x: str
    labels: str
    probs: str
    loss: str


#: What :func:`run` produced.
Result = _common.TrainingResult


def initial_weights(seed: int = DEFAULT_SEED, hidden: int = HIDDEN) -> dict[str, np.ndarray]:
    """He-normal weights from ``default_rng(seed)`` (w1, then w2), zero biases."""
    rng = np.random.default_rng(seed)
    w1 = _common.he_normal(rng, (_common.IMAGE_SIZE, hidden), _common.IMAGE_SIZE)
    w2 = _common.he_normal(rng, (hidden, _common.NUM_CLASSES), hidden)
    return {
        "w1": w1,
        "b1": np.zeros(hidden, np.float32),
        "w2": w2,
        "b2": np.zeros(_common.NUM_CLASSES, np.float32),
    }


def build_model(weights: dict[str, np.ndarray], batch: int) -> Model:
    """The MLP and its NLL loss with the Builder (weight ids as :data:`WEIGHT_NAMES`)."""
    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [batch, _common.IMAGE_SIZE]), "x")
    labels = builder.addInputTensor(popart.TensorInfo("INT32", [batch]), "labels")
    ids = {name: builder.addInitializedInputTensor(weights[name], name) for name in WEIGHT_NAMES}
    on = builder.aiOnnx
    h = on.relu([on.add([on.matmul([x, ids["w1"]]), ids["b1"]])])
    probs = on.softmax([on.add([on.matmul([h, ids["w2"]]), ids["b2"]])], axis=1)
    loss = builder.aiGraphcore.nllloss([probs, labels], reduction=popart.ReductionType.Mean)
    builder.addOutputTensor(probs)
    return Model(builder.getModelProto(), x, labels, probs, loss)


def make_optimizer(name: str, lr: float) -> popart.Optimizer:
    """``SGD`` (non-constant learning rate ``lr``) or ``Adam`` (``lr``, PopART's betas)."""
    if name == "sgd":
        return popart.SGD({"defaultLearningRate": (lr, False)})
    if name == "adam":
        return popart.Adam({"defaultLearningRate": (lr, False)})
    raise ValueError(f"optimizer must be 'sgd' or 'adam', got {name!r}")


def evaluate(
    model_path: str, batch: int, images: np.ndarray, labels: np.ndarray, tiles: int
) -> tuple[float, int]:
    """Accuracy of the ONNX model in ``model_path`` on all ``images`` and the cycles of
    the inference run (one step of ``ceil(N / batch)`` batches; padding ignored)."""
    model = onnx.load(model_path)
    probs = model.graph.output[0].name
    x_id, labels_id = (i.name for i in model.graph.input[:2])
    n = len(images)
    batches = math.ceil(n / batch)
    pad = batches * batch - n
    xs = np.concatenate([images.reshape(n, -1), np.zeros((pad, images[0].size), np.float32)])
    ys = np.concatenate([labels, np.zeros(pad, np.int32)])
    session = popart.InferenceSession(
        fnModel=model_path,
        dataFlow=popart.DataFlow(batches, {probs: popart.AnchorReturnType("ALL")}),
        deviceInfo=_common.ipu_model(1, tiles),
    )
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    feeds = {
        x_id: xs.reshape(batches, batch, -1),
        labels_id: ys.reshape(batches, batch),
    }
    session.run(popart.PyStepIO(feeds, anchors))
    predicted = anchors[probs].reshape(batches * batch, -1)[:n].argmax(axis=1)
    return float(np.mean(predicted == labels)), _common.last_run_cycles(session)


def run(
    batch: int = BATCH,
    lr: float | None = None,
    epochs: int = 1,
    steps: int | None = None,
    optimizer: str = "sgd",
    accumulation: int = 1,
    replicas: int = 1,
    tiles: int = _common.DEFAULT_TILES,
    seed: int = DEFAULT_SEED,
    do_evaluate: bool = True,
    verbose: bool = True,
) -> Result:
    """Train (``epochs`` epochs, or ``steps`` steps) and evaluate; see the module doc."""
    if lr is None:
        lr = LEARNING_RATE if optimizer == "sgd" else ADAM_LEARNING_RATE
    images, labels = _common.load_digits()
    per_step = batch * accumulation * replicas
    per_epoch = len(images) // per_step
    if per_epoch < 1:
        raise ValueError(f"one step needs {per_step} images; the data set has {len(images)}")
    total = per_epoch * epochs if steps is None else int(steps)
    seconds: dict[str, float] = {}

    with _common.timed(seconds, "build"):
        initial = initial_weights(seed)
        model = build_model(initial, batch)

    options = popart.SessionOptions()
    if accumulation > 1:
        options.enableGradientAccumulation = True
        options.accumulationFactor = accumulation
    if replicas > 1:
        options.enableReplicatedGraphs = True
        options.replicatedGraphCount = replicas
    with _common.timed(seconds, "compile"):
        session = popart.TrainingSession(
            fnModel=model.proto,
            dataFlow=popart.DataFlow(1, {model.loss: popart.AnchorReturnType("ALL")}),
            deviceInfo=_common.ipu_model(replicas, tiles),
            loss=model.loss,
            optimizer=make_optimizer(optimizer, lr),
            userOptions=options,
        )
        session.prepareDevice()
    session.weightsFromHost()

    lead = [n for n in (accumulation, replicas) if n > 1]
    flat = images.reshape(len(images), -1)

    def batch_of(step: int) -> tuple[np.ndarray, np.ndarray]:
        start = (step % per_epoch) * per_step
        xs = flat[start : start + per_step].reshape([*lead, batch, _common.IMAGE_SIZE])
        return xs, labels[start : start + per_step].reshape([*lead, batch])

    result = Result(initial=initial, weights={})
    with _common.timed(seconds, "train"):
        _common.train_steps(session, model, total, batch_of, result, verbose)

    session.weightsToHost()
    result.weights = {name: np.zeros_like(initial[name]) for name in WEIGHT_NAMES}
    session.readWeights(popart.PyWeightsIO(result.weights))
    if do_evaluate:
        with _common.timed(seconds, "eval"), tempfile.TemporaryDirectory() as tmp:
            path = str(Path(tmp) / "mlp_digits.onnx")
            session.modelToHost(path)
            saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
            for name in WEIGHT_NAMES:  # the file holds the weights readWeights gave
                np.testing.assert_array_equal(saved[name], result.weights[name])
            result.accuracy, result.eval_cycles = evaluate(path, batch, images, labels, tiles)
    result.host_seconds = seconds
    return result


def main(argv: Sequence[str] | None = None) -> Result:
    """Command-line entry point; returns the :class:`Result`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=BATCH, help=f"default {BATCH}")
    parser.add_argument(
        "--lr", type=float, help=f"learning rate (default {LEARNING_RATE} SGD, "
        f"{ADAM_LEARNING_RATE} Adam)"
    )  # fmt: skip
    parser.add_argument("--epochs", type=int, default=1, help="default 1")
    parser.add_argument("--steps", type=int, help="stop after this many steps")
    parser.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    parser.add_argument("--accumulation", type=int, default=1, help="micro-batches per step")
    parser.add_argument("--replicas", type=int, default=1, help="data-parallel replicas")
    parser.add_argument("--tiles", type=int, default=_common.DEFAULT_TILES, help="tiles per IPU")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="weight init seed")
    parser.add_argument("--no-eval", action="store_true", help="skip the accuracy run")
    args = parser.parse_args(argv)
    for name in ("batch", "epochs", "accumulation", "replicas", "tiles"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    result = run(
        args.batch, args.lr, args.epochs, args.steps, args.optimizer, args.accumulation,
        args.replicas, args.tiles, args.seed, not args.no_eval,
    )  # fmt: skip
    _common.print_training(result)
    return result


if __name__ == "__main__":
    main()
    sys.exit(0)
