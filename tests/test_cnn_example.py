"""examples/cnn/cnn_digits.py: SGD steps against an independent numpy CNN, learning,
flop count, workload and CLI errors.

The numpy model below is written from the example's description only (conv 3x3
padding 1 + bias, ReLU, 2x2 max / average pooling, dense, softmax cross-entropy, SGD
on the batch-mean loss), with explicit loops over kernel offsets and pooling windows
and float64 arithmetic; it uses nothing from ``poplar_api``.
"""

from __future__ import annotations

import subprocess
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from examples_common import load_example

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cnn" / "cnn_digits.py"
CHANCE = 10.0  # % for ten classes
BATCH = 16
ETA = 0.05
#: Tiles of the IPU Model used by the quick tests (the full mk2 is slow to build).
TILES = 32


def cnn() -> ModuleType:
    """The example as a module."""
    return load_example("cnn/cnn_digits.py")


@cache
def digits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(uint8 images [n, 28, 28], labels [n], float64 inputs [n, 1, 28, 28])``:
    scikit-learn's digits scaled 0..16 -> 0..255, resized by nearest neighbour,
    then pixel / 255."""
    from sklearn.datasets import load_digits

    d = load_digits()
    src = np.arange(28) * 8 // 28
    pixels = np.round(d.images * 255.0 / 16.0)[:, src][:, :, src].astype(np.uint8)
    x = (pixels.astype(np.float32) / np.float32(255.0)).astype(np.float64)
    return pixels, d.target.astype(np.int64), x[:, None]


def start_parameters(seed: int) -> dict[str, np.ndarray]:
    """Random float32 starting parameters (small non-zero biases, to exercise them)."""
    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    return {
        "w1": normal((1, 8, 1, 3, 3), 0.47),
        "b1": normal((8,), 0.05),
        "w2": normal((1, 16, 8, 3, 3), 0.17),
        "b2": normal((16,), 0.05),
        "wd": normal((10, 784), 0.05),
        "bd": normal((10,), 0.05),
    }


# ---------------------------------------------------------------------- numpy model
def conv3x3(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Cross-correlation with zero padding 1: ``x`` [B, Ci, H, W], ``w`` [Co, Ci, 3, 3]."""
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for dy in range(3):
        for dx in range(3):
            patch = xp[:, :, dy : dy + h, dx : dx + wd]  # [B, Ci, H, W]
            out += np.einsum("bchw,oc->bohw", patch, w[:, :, dy, dx])
    return out + b[None, :, None, None]


def conv3x3_grads(x, w, g):
    """``(dx, dw, db)`` of :func:`conv3x3` for the output gradient ``g``."""
    _, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for dy in range(3):
        for dx in range(3):
            patch = xp[:, :, dy : dy + h, dx : dx + wd]
            dw[:, :, dy, dx] = np.einsum("bohw,bchw->oc", g, patch)
            dxp[:, :, dy : dy + h, dx : dx + wd] += np.einsum("bohw,oc->bchw", g, w[:, :, dy, dx])
    return dxp[:, :, 1:-1, 1:-1], dw, g.sum(axis=(0, 2, 3))


def windows(a: np.ndarray) -> np.ndarray:
    """``a`` [B, C, H, W] as its 2x2 stride-2 windows [B, C, H/2, W/2, 4]."""
    n, c, h, w = a.shape
    return (
        a.reshape(n, c, h // 2, 2, w // 2, 2)
        .transpose(0, 1, 2, 4, 3, 5)
        .reshape(n, c, h // 2, w // 2, 4)
    )


def unwindows(a: np.ndarray) -> np.ndarray:
    """Inverse of :func:`windows`."""
    n, c, h2, w2, _ = a.shape
    return a.reshape(n, c, h2, w2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, 2 * h2, 2 * w2)


def max_pool_grad(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Gradient of 2x2 max pooling: the inputs equal to their window's maximum share
    the output gradient equally (ties are common: the digits are upsampled 8 -> 28)."""
    win = windows(a)
    hit = (win == win.max(axis=-1, keepdims=True)).astype(np.float64)
    return unwindows(hit / hit.sum(axis=-1, keepdims=True) * g[..., None])


def numpy_step(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, eta: float):
    """One SGD step on the batch-mean cross-entropy; returns (new params, losses, correct)."""
    n = len(x)
    w1, b1 = p["w1"][0].astype(np.float64), p["b1"].astype(np.float64)
    w2, b2 = p["w2"][0].astype(np.float64), p["b2"].astype(np.float64)
    wd, bd = p["wd"].astype(np.float64), p["bd"].astype(np.float64)
    r1 = np.maximum(conv3x3(x, w1, b1), 0.0)
    p1 = windows(r1).max(axis=-1)
    r2 = np.maximum(conv3x3(p1, w2, b2), 0.0)
    p2 = windows(r2).mean(axis=-1)
    f = p2.reshape(n, -1)
    z = f @ wd.T + bd
    e = np.exp(z - z.max(axis=1, keepdims=True))
    prob = e / e.sum(axis=1, keepdims=True)
    losses = -np.log(prob[np.arange(n), y])
    correct = int((prob.argmax(axis=1) == y).sum())
    delta = prob.copy()
    delta[np.arange(n), y] -= 1.0
    g_wd, g_bd, g_f = delta.T @ f, delta.sum(axis=0), delta @ wd
    g_r2 = unwindows(np.repeat(g_f.reshape(p2.shape)[..., None], 4, axis=-1) / 4.0)
    g_a2 = g_r2 * (r2 > 0)
    g_p1, g_w2, g_b2 = conv3x3_grads(p1, w2, g_a2)
    g_a1 = max_pool_grad(r1, g_p1) * (r1 > 0)
    _, g_w1, g_b1 = conv3x3_grads(x, w1, g_a1)
    s = eta / n
    new = {
        "w1": (w1 - s * g_w1)[None],
        "b1": b1 - s * g_b1,
        "w2": (w2 - s * g_w2)[None],
        "b2": b2 - s * g_b2,
        "wd": wd - s * g_wd,
        "bd": bd - s * g_bd,
    }
    out_type = p["w1"].dtype  # float32 parameters stay float32, as on the device
    return {k: v.astype(out_type) for k, v in new.items()}, losses, correct


def numpy_accuracy(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> int:
    """Correct predictions of the forward pass (chunks of 256 images)."""
    hits = 0
    for lo in range(0, len(x), 256):
        xs = x[lo : lo + 256]
        r1 = np.maximum(conv3x3(xs, p["w1"][0], p["b1"]), 0.0)
        r2 = np.maximum(conv3x3(windows(r1).max(axis=-1), p["w2"][0], p["b2"]), 0.0)
        f = windows(r2).mean(axis=-1).reshape(len(xs), -1)
        hits += int(
            ((f @ p["wd"].T.astype(np.float64) + p["bd"]).argmax(1) == y[lo : lo + 256]).sum()
        )
    return hits


# ---------------------------------------------------------------------- tests
def test_numpy_reference_gradients_match_finite_differences():
    """The reference's own gradient, checked on a few coordinates (so the comparison
    below compares against a correct model)."""
    _, labels, x = digits()
    p = {k: v.astype(np.float64) for k, v in start_parameters(3).items()}
    xs, ys = x[:3], labels[:3]

    def mean_loss(q):
        return numpy_step(q, xs, ys, 1.0)[1].mean()

    new, _, _ = numpy_step(p, xs, ys, 1.0)
    rng = np.random.default_rng(0)
    for name in ("w1", "b1", "w2", "b2", "wd", "bd"):
        for _ in range(3):
            idx = tuple(int(rng.integers(0, s)) for s in p[name].shape)
            grad = float(p[name][idx] - new[name][idx])  # eta = 1
            h = 1e-5
            up = {k: v.copy() for k, v in p.items()}
            down = {k: v.copy() for k, v in p.items()}
            up[name][idx] += h
            down[name][idx] -= h
            numeric = (mean_loss(up) - mean_loss(down)) / (2 * h)
            assert grad == pytest.approx(numeric, rel=2e-3, abs=2e-5), (name, idx)


#: Images of the two-step test: 12 whole batches and a padded one (as 1,797 are 112 and
#: a padded one), so its evaluation program runs 13 batches, not 113.
EVAL_IMAGES = 200


def test_two_steps_match_numpy_and_evaluation_counts_like_numpy():
    module = cnn()
    images, labels, x = (a[:EVAL_IMAGES] for a in digits())
    start = start_parameters(11)
    device = module.create_device("model-ipu2", tiles=TILES)
    lines: list[str] = []
    outcome = module.run(
        device, images, labels, batch=BATCH, eta=ETA, steps=2,
        initial=module.Parameters(**start), evaluate=True, out=lines.append,
    )  # fmt: skip
    params = dict(start)
    for step in range(2):
        sl = slice(step * BATCH, (step + 1) * BATCH)
        params, losses, correct = numpy_step(params, x[sl], labels[sl], ETA)
        assert outcome.losses[step] == pytest.approx(losses.mean(), abs=1e-5)
        assert outcome.accuracies[step] == pytest.approx(100.0 * correct / BATCH)
    got = outcome.parameters.as_dict()
    for name, want in params.items():
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, atol=1e-4, rtol=0, err_msg=name)
        assert not np.array_equal(want, start[name]), f"{name} did not move"
    hits = numpy_accuracy(params, x, labels)
    assert outcome.eval_accuracy == pytest.approx(100.0 * hits / len(labels), abs=1e-9)
    # the printed lines
    assert lines[0].startswith(f"Epoch 1 step 1/{EVAL_IMAGES // BATCH}: loss ")
    assert any(line.startswith(f"Accuracy on all {EVAL_IMAGES} images: ") for line in lines)
    assert any(line.startswith("Cycles per training step (batch 16): ") for line in lines)


def test_flops_and_percent_of_peak():
    module = cnn()
    b = 4
    # independent count: 2 flops per multiply-add on real (non-padding) data
    taps = np.zeros((28, 28))
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            taps[max(0, -dy) : 28 - max(0, dy), max(0, -dx) : 28 - max(0, dx)] += 1
    taps14 = np.zeros((14, 14))
    for dy in (-1, 0, 1):
        for dx in (-1, 0, 1):
            taps14[max(0, -dy) : 14 - max(0, dy), max(0, -dx) : 14 - max(0, dx)] += 1
    conv1 = 2 * b * 8 * 1 * taps.sum()
    conv2 = 2 * b * 16 * 8 * taps14.sum()
    dense = 2 * b * 784 * 10
    want = 2 * conv1 + 3 * conv2 + 3 * dense
    assert module.step_flops(b) == int(want)
    device = module.create_device("model-ipu2", tiles=TILES)
    target = device.getTarget()
    assert module.peak_flops_per_cycle(device) == TILES * target.getFpFlopsPerCycle(module.FLOAT)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch", "0"], "batch must be an integer >= 1, got 0"),
        (["--batch", "5000"], "batch 5000 is larger than the data set (1797 images)"),
        (["--eta", "0"], "eta (learning rate) must be a finite number > 0, got 0.0"),
        (["--eta", "-0.1"], "eta (learning rate) must be a finite number > 0, got -0.1"),
        (["--eta", "nan"], "eta (learning rate) must be a finite number > 0, got nan"),
        (["--epochs", "0"], "epochs must be an integer >= 1, got 0"),
        (["--steps", "-2"], "steps must be an integer >= 1, got -2"),
        (["--tiles", "0"], "tiles must be an integer in 1..1472 for model-ipu2, got 0"),
        (["--device", "model-ipu9"], "invalid choice: 'model-ipu9'"),
        (["--batch", "x"], "invalid int value: 'x'"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cnn().main(args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.startswith("usage: ")


def test_the_script_reports_a_bad_argument_without_a_traceback():
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--eta", "-1"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "error: eta (learning rate) must be a finite number > 0, got -1.0" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_run_rejects_bad_arguments_by_name():
    module = cnn()
    images, labels, _ = digits()
    device = module.create_device("model-ipu2", cpu=True, tiles=TILES)
    with pytest.raises(module.CnnArgumentError, match="eta"):
        module.run(device, images, labels, batch=4, eta=-1.0)
    with pytest.raises(module.CnnArgumentError, match="3 labels"):
        module.run(device, images[:5], labels[:3], batch=4)
    with pytest.raises(module.CnnArgumentError, match="unknown device 'ipu2'"):
        module.create_device("ipu2")


def test_workload_runs_through_poplar_workload_run():
    from ipusim.config import load_config, with_overrides
    from poplar_api.workload import run

    config = with_overrides(
        load_config("mk2-ipumodel"), {"tile.tiles_per_ipu": TILES, "sync.controller_tile": 0}
    )
    result = run(f"{EXAMPLE}:workload", config, {"batch": 4, "steps": 2})
    assert result.ok is True
    assert result.metrics["cycles_per_step"] > 0
    assert 0 < result.metrics["percent_of_peak"] < 100


@pytest.mark.slow  # a whole training epoch
def test_one_epoch_learns_well_above_chance():
    """Batch 32, eta 0.1 (the defaults): one epoch (56 steps) on 32 tiles."""
    module = cnn()
    images, labels, _ = digits()
    outcome = module.run(
        module.create_device("model-ipu2", tiles=TILES), images, labels, batch=32, eta=0.1,
        out=lambda _line: None,
    )  # fmt: skip
    assert len(outcome.losses) == 1797 // 32
    assert outcome.eval_accuracy is not None and outcome.eval_accuracy > 50.0
    assert np.mean(outcome.losses[-5:]) < 0.5 * np.mean(outcome.losses[:5])
    assert np.mean(outcome.accuracies[-5:]) > 5 * CHANCE


@pytest.mark.slow
def test_one_epoch_on_mk2_learns():
    module = cnn()
    images, labels, _ = digits()
    outcome = module.run(
        module.create_device("model-ipu2"), images, labels, batch=32, eta=module.ETA,
        out=lambda _line: None,
    )  # fmt: skip
    assert len(outcome.losses) == 1797 // 32
    assert outcome.eval_accuracy is not None and outcome.eval_accuracy > 50.0
    assert outcome.step_cycles is not None and outcome.step_cycles > 0
