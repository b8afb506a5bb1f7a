"""Backward-pass outlining with recomputation: the recomputed segments are replayed
before the gradients that read them, so an outlined gradient function, whose operands
are copied in at each call, must see the replayed values. The weights' gradients are
bit-identical with outlining on and off, and equal to those without recomputation."""

from __future__ import annotations

import numpy as np
import pytest
from test_outline_grads import _mlp, _step


def _grads(mode: str, outline: bool) -> dict[str, np.ndarray]:
    bd, loss, data, weights = _mlp(np.random.default_rng(3))
    return _step(bd.getModelProto(), loss, data, weights, 8, outline, mode)[0]


@pytest.mark.parametrize("mode", ["Standard", "RecomputeAll"])
def test_outlined_gradients_with_recomputation_equal_outlining_off(mode: str) -> None:
    on, off = _grads(mode, True), _grads(mode, False)
    plain = _grads("NoRecompute", False)
    for w in on:
        assert np.array_equal(on[w], off[w]), w
        assert np.array_equal(on[w], plain[w]), w
