"""PopART's MNIST tutorial (graphcore/tutorials ``simple_applications/popart/mnist/
popart_mnist.py``), ported: a linear model trained with ``nllloss`` and ``ConstSGD``,
sharded, pipelined or replicated by command-line switches.

A PopART script: only ``import popart_api as popart`` differs from what runs on
Graphcore's SDK. The MNIST download is replaced by the bundled digits (scikit-learn's
8x8 digits upsampled to 28x28, ``examples/tutorials/mnist.py``), split into a training
and a test set; ``--syn-data-type`` runs on synthetic data as the original.

The model::

    x [B, 784] -> MatMul W [784, 10] -> Add b -> output -> Softmax -> probs
    loss = nllloss([probs, label], Sum)

What the switches do (the tutorial's):

* ``--num-ipus N`` with ``N > replication``: ``virtualGraphMode = Auto``, the session
  places the nodes on the IPUs;
* ``--pipeline``: ``enablePipelining`` (no gradient accumulation: the pipeline runs
  over the step's ``--batches-per-step`` batches);
* ``--replication-factor R``: ``R`` replicas, ``--batch-size`` split among them.

One device serves a training and a validation session (``with device:``); the trained
weights go from one to the other through an ONNX file (``modelToHost`` and
``resetHostWeights``). Each epoch prints ``Loss=`` and ``Accuracy=`` of the test set.

Run::

    python examples/popart/popart_mnist.py --simulation [--tiles 16] [--batch-size 32]
        [--batches-per-step 100] [--epochs 10] [--num-ipus 1] [--pipeline]
        [--replication-factor 1] [--syn-data-type random_normal|zeros]
        [--validation-final-epoch] [--test-size 297]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import popart_api as popart

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))
import mnist as digits  # the bundled digits, in place of the download

ROWS = COLS = 28
CLASSES = 10
#: The tutorial's constant SGD learning rate.
LEARNING_RATE = 0.01


def load_digits(test_size: int) -> tuple[np.ndarray, ...]:
    """Training and test images (``float32 [N, 784]``, pixel / 255) and labels
    (``int32``): the last ``test_size`` digits are the test set."""
    images, labels = digits.load_digits_as_mnist()
    data = images.reshape(len(images), ROWS * COLS).astype(np.float32) / 255.0
    labels = labels.astype(np.int32)
    return data[:-test_size], labels[:-test_size], data[-test_size:], labels[-test_size:]


def load_synthetic(opts: argparse.Namespace) -> tuple[np.ndarray, ...]:
    """One step of synthetic images and labels, for training and for testing."""
    n = opts.batches_per_step * opts.batch_size
    if opts.syn_data_type == "zeros":
        data, labels = np.zeros([n, ROWS * COLS], np.float32), np.zeros([n], np.int32)
    else:
        data = np.random.normal(0, 1, [n, ROWS * COLS]).astype(np.float32)
        labels = np.random.randint(0, CLASSES, [n]).astype(np.int32)
    return data, labels, data.copy(), labels.copy()


def create_model(samples: int) -> tuple[bytes, str, str, str, str]:
    """The linear model's ONNX protobuf and its input, label, output and loss ids."""
    builder = popart.Builder()
    np.random.seed(0)
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [samples, ROWS * COLS]))
    w = builder.addInitializedInputTensor(
        np.random.normal(0, 1, [ROWS * COLS, CLASSES]).astype(np.float32)
    )
    b = builder.addInitializedInputTensor(np.random.normal(0, 1, [CLASSES]).astype(np.float32))
    output = builder.aiOnnx.add([builder.aiOnnx.matmul([x, w]), b], "output")
    builder.addOutputTensor(output)
    probs = builder.aiOnnx.softmax([output])
    label = builder.addInputTensor(popart.TensorInfo("INT32", [samples]))
    loss = builder.aiGraphcore.nllloss(
        [probs, label], popart.ReductionType.Sum, debugContext="nllLossVal"
    )
    return builder.getModelProto(), x, label, output, loss


class Batches:
    """A data set cut into steps of ``batches_per_step`` batches of ``batch_size``."""

    def __init__(self, batch_size: int, batches_per_step: int, data, labels) -> None:
        self.data, self.labels = data, labels
        self.batch_size = batch_size
        self.batches_per_step = max(1, min(batches_per_step, len(data) // batch_size))
        self.per_step = batch_size * self.batches_per_step
        self.steps = len(data) // self.per_step

    def __len__(self) -> int:
        return self.steps

    def __iter__(self):
        for k in range(self.steps):
            lo, hi = k * self.per_step, (k + 1) * self.per_step
            yield (
                self.data[lo:hi].reshape(self.batches_per_step, self.batch_size, -1),
                self.labels[lo:hi].reshape(self.batches_per_step, self.batch_size),
            )


def get_device(opts: argparse.Namespace) -> popart.DeviceInfo:
    """An IPU Model (``--simulation``) or the first free device of ``--num-ipus``."""
    manager = popart.DeviceManager()
    if opts.simulation:
        return manager.createIpuModelDevice(
            {"compileIPUCode": True, "numIPUs": opts.num_ipus, "tilesPerIPU": opts.tiles}
        )
    device = manager.tryAcquireAvailableDevice(opts.num_ipus)
    if device is None:
        raise RuntimeError(f"no free device of {opts.num_ipus} IPU(s)")
    return device


def make_session(proto, loss, flow, options, device, training: bool):
    """A compiled training or validation session and its anchor arrays."""
    if training:
        session = popart.TrainingSession(
            fnModel=proto,
            loss=loss,
            deviceInfo=device,
            optimizer=popart.ConstSGD(LEARNING_RATE),
            dataFlow=flow,
            userOptions=options,
        )
    else:
        session = popart.InferenceSession(
            fnModel=proto, deviceInfo=device, dataFlow=flow, userOptions=options
        )
    print(f"Compiling the {'training' if training else 'validation'} graph.")
    session.prepareDevice()
    session.setRandomSeed(1)
    return session, session.initAnchorArrays()


def train(opts: argparse.Namespace) -> list[float]:
    """Train and validate; returns the test accuracy (%) of every validated epoch."""
    if opts.syn_data_type in ("random_normal", "zeros"):
        train_x, train_y, test_x, test_y = load_synthetic(opts)
    else:
        train_x, train_y, test_x, test_y = load_digits(opts.test_size)
    training_set = Batches(opts.batch_size, opts.batches_per_step, train_x, train_y)
    test_set = Batches(opts.batch_size, opts.batches_per_step, test_x, test_y)
    if test_set.batches_per_step != training_set.batches_per_step:
        # one DataFlow serves both sessions: use the smaller depth for both
        depth = min(test_set.batches_per_step, training_set.batches_per_step)
        training_set = Batches(opts.batch_size, depth, train_x, train_y)
        test_set = Batches(opts.batch_size, depth, test_x, test_y)
    print("Creating ONNX model.")
    proto, x, label, output, loss = create_model(opts.batch_size // opts.replication_factor)
    flow = popart.DataFlow(
        training_set.batches_per_step,
        {output: popart.AnchorReturnType("ALL"), loss: popart.AnchorReturnType("ALL")},
    )
    options = popart.SessionOptions()
    options.constantWeights = False
    if opts.syn_data_type == "random_normal":
        options.syntheticDataMode = popart.SyntheticDataMode.RandomNormal
    elif opts.syn_data_type == "zeros":
        options.syntheticDataMode = popart.SyntheticDataMode.Zeros
    if opts.num_ipus > opts.replication_factor:
        options.virtualGraphMode = popart.VirtualGraphMode.Auto
    if opts.pipeline:
        options.enablePipelining = True
    if opts.replication_factor > 1:
        options.enableReplicatedGraphs = True
        options.replicatedGraphCount = opts.replication_factor

    accuracies = []
    with get_device(opts) as device:
        training, train_anchors = make_session(proto, loss, flow, options, device, True)
        validation, valid_anchors = make_session(proto, loss, flow, options, device, False)
        handle, weights_file = tempfile.mkstemp(suffix=".onnx")
        os.close(handle)
        print("Running training loop.")
        for epoch in range(opts.epochs):
            if epoch > 0:
                training.resetHostWeights(weights_file)
            training.weightsFromHost()
            for step, (data, labels) in enumerate(training_set):
                start = time.time()
                training.run(
                    popart.PyStepIO({x: data, label: labels}, train_anchors),
                    f"Epoch {epoch} training step {step}",
                )
                if opts.test_mode == "training":
                    print(f"{time.time() - start:<8.3} sec/itr.")
                    print(f"Hardware cycle count per 'run': {training.getCycleCount()}")
            training.modelToHost(weights_file)
            if opts.validation_final_epoch and epoch != opts.epochs - 1:
                continue
            validation.resetHostWeights(weights_file)
            validation.weightsFromHost()
            total_loss = total_acc = 0.0
            for step, (data, labels) in enumerate(test_set):
                validation.run(
                    popart.PyStepIO({x: data, label: labels}, valid_anchors),
                    f"Epoch {epoch} evaluation step {step}",
                )
                total_loss += float(np.mean(valid_anchors[loss]))
                guess = np.argmax(valid_anchors[output].reshape(test_set.per_step, CLASSES), 1)
                total_acc += float(np.mean(guess == labels.reshape(test_set.per_step)))
            accuracies.append(100 * total_acc / len(test_set))
            print(f"Epoch #{epoch + 1}")
            print(f"   Loss={total_loss / len(test_set):.4f}")
            print(f"   Accuracy={accuracies[-1]:.2f}%")
        os.remove(weights_file)
    return accuracies


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The tutorial's command line, plus ``--tiles`` and ``--test-size``."""
    p = argparse.ArgumentParser(description="MNIST training in PopART (ported)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches-per-step", type=int, default=100)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--num-ipus", type=int, default=1)
    p.add_argument("--pipeline", action="store_true")
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--simulation", action="store_true", help="an IPU Model device")
    p.add_argument("--tiles", type=int, default=16, help="tiles per IPU of --simulation")
    p.add_argument("--log-graph-trace", action="store_true")
    p.add_argument("--test-mode", choices=["training", "inference"])
    p.add_argument("--syn-data-type", choices=["random_normal", "zeros", "off"], default="off")
    p.add_argument("--validation-final-epoch", action="store_true")
    p.add_argument("--test-size", type=int, default=297, help="digits kept for testing")
    opts = p.parse_args(argv)
    r = opts.replication_factor
    if opts.batch_size % r or opts.num_ipus % r:
        p.error(f"batch size and IPUs must be multiples of the replication factor ({r})")
    if opts.pipeline and opts.num_ipus != 2 * r:
        p.error("pipelining this model needs two IPUs per replica")
    return opts


def main(argv: Sequence[str] | None = None) -> list[float]:
    """Run the tutorial; returns the accuracy (%) of every validated epoch."""
    opts = parse(argv)
    popart.getLogger("ir").setLevel("TRACE" if opts.log_graph_trace else "CRITICAL")
    popart.getLogger("devicex").setLevel("CRITICAL")
    return train(opts)


if __name__ == "__main__":
    main()
