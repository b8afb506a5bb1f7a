"""Convolution partials read an operand every replica holds alike in replica 0 only.

Where the images' record (:mod:`poplar_api.replica_alike`) knows that every replica
holds a partials operand alike (a layer's weights, updated alike after the gradients'
all-reduce), ``conv_vertices._run_in_place`` reads replica 0's copy for every replica
(``ImageField.read_first``: a stride of 0 on the replicas) instead of every replica's.
Checked on four replicas of the data-parallel MLP step, each its own batch:

* with the weights alike, the shortcut is taken, and the losses of three steps and the
  parameters after them are bit for bit those of the path that reads every replica;
* with the first layer's weights differing in one replica, its partials read every
  replica's weights (fewer shortcuts), and the bits are again those of that path, and
  differ from the run with the weights alike (the differing replica's values are its
  own).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from poplar_api import Engine, Graph
from poplar_api.poplin import conv_chain, conv_vertices

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "multi_ipu"))

import data_parallel_mlp as dp  # noqa: E402
import mnist  # noqa: E402

R, BATCH, HIDDEN = 4, 4, 16


def _step(monkeypatch, shared: bool, w1_differs: bool) -> tuple[bytes, int]:
    """Three runs of the MLP step: the losses and parameters as bytes, and how many
    partials passes read their input operand in replica 0 only."""
    monkeypatch.setattr(conv_vertices, "SHARED_OPERANDS", shared)
    first_only = [0]
    real = conv_chain._run

    def spy(x, w, *args):
        first_only[0] += x.shape[0] > 1 and x.strides[0] == 0
        real(x, w, *args)

    monkeypatch.setattr(conv_chain, "_run", spy)
    images, labels = mnist.load_digits_as_mnist()
    x = np.asarray(images[: 3 * R * BATCH], np.float32).reshape(R, -1) / 16.0
    y = np.asarray(labels[: 3 * R * BATCH], np.uint32).reshape(R, -1)
    device = dp.create_device(R, 16)
    graph = Graph(device.getTarget(), replication_factor=R)
    e = Engine(graph, dp.build(graph, BATCH, dp.ETA, HIDDEN))
    e.load(device)
    params = dp.initial_parameters(dp.DEFAULT_SEED, HIDDEN)
    for name, value in params.items():
        e.writeTensor(name, value)
    if w1_differs:  # replica 2's first layer scaled: its own forward values
        w1 = np.tile(params["w1"], (R, 1, 1))
        w1[2] *= np.float32(1.25)
        e.writeTensor("w1", w1)
    e.connectStream("images", x)
    e.connectStream("labels", y)
    loss = np.zeros((R, BATCH), np.float32)
    e.connectStream("loss", loss)
    out = b""
    for _ in range(3):
        e.run(0)
        out += loss.tobytes()
    out += b"".join(
        np.asarray(e.readTensor(n + "-read")).tobytes() for n in ("w1", "b1", "w2", "b2")
    )
    return out, first_only[0]


def test_alike_operands_read_in_replica_0_give_the_bits_of_every_replica(monkeypatch):
    alike, taken = _step(monkeypatch, True, False)
    alike_off, none = _step(monkeypatch, False, False)
    assert taken > 0 and none == 0
    assert alike == alike_off
    differs, fewer = _step(monkeypatch, True, True)
    differs_off, _ = _step(monkeypatch, False, True)
    assert 0 < fewer < taken  # the second layer's weights are still alike
    assert differs == differs_off
    assert differs != alike
