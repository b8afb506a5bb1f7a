"""Each replica of the data-parallel MLP step computes its own values exactly.

Four replicas get four different batches. Each replica's per-image losses (streamed
out before the gradient all-reduce, so they depend on that replica's data alone) must
be numpy's softmax cross-entropy of its own images (float64, to float32 rounding) and,
bit for bit, the losses of a one-replica run of the same step on that replica's batch:
the replicated run's kernels (the convolution partials' stacked products, reductions,
copies of every replica at once) give each replica the values of its vertices run
alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from poplar_api import Engine, Graph

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "multi_ipu"))

import data_parallel_mlp as dp  # noqa: E402
import mnist  # noqa: E402

BATCH, HIDDEN, TILES = 8, 16, 16


def _losses(images: np.ndarray, labels: np.ndarray, replicas: int) -> np.ndarray:
    """``[replicas, BATCH]`` losses of one step, replica ``k`` on ``images[k]``."""
    device = dp.create_device(replicas, TILES)
    graph = Graph(device.getTarget(), replication_factor=replicas)
    step = dp.build(graph, BATCH, dp.ETA, HIDDEN)
    engine = Engine(graph, step)
    engine.load(device)
    for name, value in dp.initial_parameters(dp.DEFAULT_SEED, HIDDEN).items():
        engine.writeTensor(name, value)
    engine.connectStream("images", images.reshape(replicas, -1).astype(np.float32))
    engine.connectStream("labels", labels.reshape(replicas, -1).astype(np.uint32))
    loss = np.zeros((replicas, BATCH), np.float32)
    engine.connectStream("loss", loss)
    engine.run(0)
    return loss


def _numpy_losses(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    p = {k: v.astype(np.float64) for k, v in dp.initial_parameters(dp.DEFAULT_SEED, HIDDEN).items()}
    h = np.maximum(x.astype(np.float64) @ p["w1"] + p["b1"], 0.0)
    logits = h @ p["w2"] + p["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(y)), y]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    images, labels = mnist.load_digits_as_mnist()
    r = 4
    x = dp.tut5.prepare_inputs(images[: r * BATCH]).reshape(r, BATCH, dp.IMAGE_SIZE)
    return x.astype(np.float32), labels[: r * BATCH].reshape(r, BATCH)


def test_each_replica_loss_is_numpys_and_a_one_replica_runs(data):
    x, y = data
    got = _losses(x, y, 4)
    assert not np.array_equal(got[0], got[1])  # the replicas' data differ
    for k in range(4):
        np.testing.assert_allclose(got[k], _numpy_losses(x[k], y[k]), rtol=2e-5, atol=1e-6)
    for k in (0, 3):  # replica k's batch alone on one replica: the same bits
        alone = _losses(x[k : k + 1], y[k : k + 1], 1)
        np.testing.assert_array_equal(got[k], alone[0], err_msg=f"replica {k}")
