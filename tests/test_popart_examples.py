"""The popart_api examples (``examples/popart/``) against independent numpy results."""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
from examples_common import load_example


def _load(name: str) -> ModuleType:
    """``examples/popart/<name>.py`` as a module (loaded by path, once per session)."""
    return load_example(f"popart/{name}.py")


_common = _load("popart_common")
add = _load("add")
cnn_digits = _load("cnn_digits")
mlp_digits = _load("mlp_digits")
two_ipu_model = _load("two_ipu_model")


def test_add_matches_numpy(capsys: pytest.CaptureFixture[str]) -> None:
    result = add.main([])
    np.testing.assert_array_equal(result.output, np.array([4.0, 6.0], np.float32))
    assert result.cycles > 0
    assert "Result:  [4. 6.]" in capsys.readouterr().out


def test_two_ipu_model_matches_numpy_and_uses_both_ipus() -> None:
    result = two_ipu_model.main(["--batch", "3", "--batches-per-step", "2", "--seed", "5"])
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal([64, 128]) / np.sqrt(64)
    w2 = rng.standard_normal([128, 10]) / np.sqrt(128)
    x = rng.standard_normal([2, 3, 64]).astype(np.float32).astype(np.float64)
    z = np.maximum(x @ w1.astype(np.float32), 0) @ w2.astype(np.float32)
    expected = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    np.testing.assert_allclose(result.output, expected, rtol=1e-5, atol=1e-6)
    assert result.cycles > 0
    assert len(result.memory_per_ipu) == 2
    assert all(m > 0 for m in result.memory_per_ipu)


def _numpy_mlp_steps(
    steps: int, batch: int, accumulation: int, replicas: int, lr: float
) -> tuple[dict[str, np.ndarray], list[float]]:
    """SGD on the MLP in float64: per step, the gradients of the mean NLL of each
    micro-batch summed over micro-batches and replicas (PopART's Sum reduction)."""
    images, labels = _common.load_digits()
    flat = images.reshape(len(images), -1).astype(np.float64)
    w = {k: v.astype(np.float64) for k, v in mlp_digits.initial_weights(0).items()}
    per_step = batch * accumulation * replicas
    losses = []
    for step in range(steps):
        total = {k: np.zeros_like(v) for k, v in w.items()}
        step_losses = []
        for m in range(accumulation * replicas):
            lo = step * per_step + m * batch
            x, y = flat[lo : lo + batch], labels[lo : lo + batch]
            z1 = x @ w["w1"] + w["b1"]
            h = np.maximum(z1, 0)
            z2 = h @ w["w2"] + w["b2"]
            p = np.exp(z2 - z2.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            step_losses.append(-np.mean(np.log(p[np.arange(batch), y])))
            d2 = p.copy()
            d2[np.arange(batch), y] -= 1
            d2 /= batch
            dh = d2 @ w["w2"].T * (z1 > 0)
            for k, g in (("w2", h.T @ d2), ("b2", d2.sum(0)), ("w1", x.T @ dh), ("b1", dh.sum(0))):
                total[k] += g
        w = {k: w[k] - lr * total[k] for k in w}
        losses.append(float(np.mean(step_losses)))
    return w, losses


@pytest.mark.parametrize(("accumulation", "replicas"), [(1, 1), (2, 1), (1, 2)])
def test_mlp_steps_match_numpy(accumulation: int, replicas: int) -> None:
    result = mlp_digits.run(
        steps=3, accumulation=accumulation, replicas=replicas, do_evaluate=False, verbose=False
    )
    weights, losses = _numpy_mlp_steps(3, 32, accumulation, replicas, mlp_digits.LEARNING_RATE)
    np.testing.assert_allclose(result.losses, losses, rtol=1e-5)
    for name in mlp_digits.WEIGHT_NAMES:
        np.testing.assert_allclose(result.weights[name], weights[name], atol=1e-5, err_msg=name)
    assert result.step_cycles > 0


def test_mlp_evaluation_accuracy_matches_numpy() -> None:
    """The accuracy of the saved (modelToHost) model equals numpy's with the weights
    readWeights returned."""
    result = mlp_digits.run(steps=10, verbose=False)
    images, labels = _common.load_digits()
    w = {k: v.astype(np.float64) for k, v in result.weights.items()}
    h = np.maximum(images.reshape(len(images), -1) @ w["w1"] + w["b1"], 0)
    expected = float(np.mean((h @ w["w2"] + w["b2"]).argmax(1) == labels))
    assert result.accuracy == pytest.approx(expected, abs=1.5 / len(labels))
    assert result.accuracy > 0.5  # measured: 0.70 after 10 steps


def test_cnn_two_steps_match_numpy() -> None:
    result = cnn_digits.main(["--check-numpy"])
    assert result.max_error is not None
    assert result.max_error < 1e-4  # measured: 4.9e-8
    assert len(result.losses) == 2
    assert result.losses[1] < result.losses[0]


@pytest.mark.slow  # a whole training epoch
def test_cnn_one_epoch_accuracy() -> None:
    """One epoch (56 steps; ~15 s on an idle host, so not marked slow): measured
    89.15 % on all 1,797 images, the same 1,602 images as the poplar_api example
    examples/cnn/cnn_digits.py (chance is 10 %)."""
    result = cnn_digits.run(verbose=False)
    assert result.accuracy is not None
    assert result.accuracy > 0.8
    assert result.losses[-1] < result.losses[0]
    assert result.step_cycles > 0
