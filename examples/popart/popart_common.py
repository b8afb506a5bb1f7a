"""Helpers the popart_api examples share: the digits data, devices and report numbers.

Kept out of ``popart_api`` on purpose: these are what a user script of PopART would
write for itself (data loading, reading cycles and memory from the reports).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tutorials"))

import mnist

import popart_api as popart

#: Side of the (MNIST-sized) digit images.
SIDE = mnist.MNIST_SIDE
IMAGE_SIZE = SIDE * SIDE
NUM_CLASSES = 10
#: Tiles per IPU of the examples' IPU Model devices (small: quick to build and simulate).
DEFAULT_TILES = 16


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """The bundled digits as ``float32 [N, 28, 28]`` (pixel / 255) and ``int32 [N]``."""
    images, labels = mnist.load_digits_as_mnist()
    return (images.astype(np.float32) / 255.0, labels.astype(np.int32))


@dataclass
class TrainingResult:
    """What a training example's ``run`` produced.

    Attributes
    ----------
    initial, weights
        Weights before and after training (``{id: float32 array}``).
    losses
        Mean loss of every step (over the micro-batches and replicas).
    accuracy
        Fraction of all images classified right by the trained model (None when not
        evaluated).
    step_cycles, eval_cycles
        Simulated cycles of the first training step and of the evaluation run.
    host_seconds
        ``build``, ``compile`` (training ``prepareDevice``), ``train``, ``eval``
        (inference compile and run).
    """

    initial: dict[str, np.ndarray]
    weights: dict[str, np.ndarray]
    losses: list[float] = field(default_factory=list)
    accuracy: float | None = None
    step_cycles: int = 0
    eval_cycles: int = 0
    host_seconds: dict[str, float] = field(default_factory=dict)


def ipu_model(num_ipus: int = 1, tiles: int = DEFAULT_TILES) -> popart.DeviceInfo:
    """An IPU Model device of ``num_ipus`` IPUs of ``tiles`` tiles each."""
    return popart.DeviceManager().createIpuModelDevice({"numIPUs": num_ipus, "tilesPerIPU": tiles})


def last_run_cycles(session: Any) -> int:
    """Simulated cycles of the session's last ``run`` (from ``getExecutionReport``).

    ``session.getCycleCount()`` is not used: it returns the cycles of all runs so far.
    """
    runs = session.getExecutionReport()["runs"]
    if not runs:
        return 0
    return int(runs[-1]["cyclesTo"] - runs[-1]["cyclesFrom"])


def memory_per_ipu(session: Any) -> list[int]:
    """Bytes used on each IPU (``getGraphReport()["memory"]["byTile"]``, gaps
    included), one entry per IPU of the device."""
    report = session.getGraphReport()
    per_tile = report["memory"]["byTile"]["totalIncludingGaps"]
    tiles = int(report["target"]["tilesPerIPU"])
    return [int(sum(per_tile[i : i + tiles])) for i in range(0, len(per_tile), tiles)]


def he_normal(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
    """He-normal draws (std ``sqrt(2 / fan_in)``) as float32."""
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


@contextmanager
def timed(seconds: dict[str, float], phase: str) -> Iterator[None]:
    """Record the host (wall) seconds the ``with`` block takes as ``seconds[phase]``."""
    start = time.perf_counter()
    yield
    seconds[phase] = time.perf_counter() - start


def train_steps(
    session: Any,
    model: Any,
    steps: int,
    batch_of: Callable[[int], tuple[np.ndarray, np.ndarray]],
    result: TrainingResult,
    verbose: bool = True,
) -> None:
    """Run ``steps`` training steps of a prepared ``session`` on ``model`` (its ``x``,
    ``labels`` and ``loss`` ids), step ``i`` on the images and labels ``batch_of(i)``.

    Sets ``result.step_cycles`` to the simulated cycles of the first step and appends
    each step's mean loss to ``result.losses``; prints it when ``verbose``.
    """
    anchors = session.initAnchorArrays()
    for step in range(steps):
        xs, ys = batch_of(step)
        session.run(popart.PyStepIO({model.x: xs, model.labels: ys}, anchors))
        if step == 0:
            result.step_cycles = last_run_cycles(session)
        result.losses.append(float(np.mean(anchors[model.loss])))
        if verbose:
            print(f"step {step + 1}/{steps}: loss {result.losses[-1]:.4f}")


def print_training(result: TrainingResult) -> None:
    """Print a training example's accuracy, cycles and host seconds."""
    if result.accuracy is not None:
        print(f"Accuracy on all images: {100 * result.accuracy:.2f}%")
        print(f"Cycles of the evaluation run: {result.eval_cycles:,}")
    print(f"Cycles per training step: {result.step_cycles:,}")
    print("Host seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in result.host_seconds.items()))
