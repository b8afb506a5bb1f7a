"""popart_api's RNN, GRU and LSTM (popart_api/ops_rnn.py): values against ONNX's
reference evaluator (directions, biases, initial states, peepholes, reset variants)."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_forward

OPSET14 = {"ai.onnx": 14, "ai.graphcore": 1}
RNG = np.random.default_rng(31)
SEQ, BATCH, INPUT, HIDDEN = 3, 2, 4, 5


def _r(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.5).astype(np.float32)


CASES = {
    "rnn_forward_bias": ("rnn", 1, "forward", {}),
    "rnn_bidirectional": ("rnn", 1, "bidirectional", {}),
    "gru_reverse": ("gru", 3, "reverse", {}),
    "gru_linear_before_reset": ("gru", 3, "forward", {"linear_before_reset": 1}),
    "lstm_bidirectional": ("lstm", 4, "bidirectional", {}),
    "lstm_reverse": ("lstm", 4, "reverse", {}),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("output", [0, 1])
def test_recurrent_against_reference(case: str, output: int) -> None:
    op, gates, direction, attrs = CASES[case]
    dirs = 2 if direction == "bidirectional" else 1
    x = _r(SEQ, BATCH, INPUT)
    w = _r(dirs, gates * HIDDEN, INPUT)
    r = _r(dirs, gates * HIDDEN, HIDDEN)
    b = _r(dirs, 2 * gates * HIDDEN)
    outs = 3 if op == "lstm" else 2

    def build(bld, ids):
        res = getattr(bld.aiOnnx, op)(
            ids, num_outputs=outs, hidden_size=HIDDEN, direction=direction, **attrs
        )
        return res[output]

    check_forward(build, [x, w, r, b], opsets=OPSET14, rtol=1e-4, atol=1e-5)


def test_lstm_initial_state_and_peepholes() -> None:
    x = _r(SEQ, BATCH, INPUT)
    w, r, b = _r(1, 4 * HIDDEN, INPUT), _r(1, 4 * HIDDEN, HIDDEN), _r(1, 8 * HIDDEN)
    h0, c0, p = _r(1, BATCH, HIDDEN), _r(1, BATCH, HIDDEN), _r(1, 3 * HIDDEN)

    def build(bld, ids):
        xi, wi, ri, bi, hi, ci, pi = ids
        res = bld.aiOnnx.lstm([xi, wi, ri, bi, "", hi, ci, pi], num_outputs=3,
                              hidden_size=HIDDEN)  # fmt: skip
        return res[2]

    check_forward(build, [x, w, r, b, h0, c0, p], opsets=OPSET14, rtol=1e-4, atol=1e-5)


def test_rnn_relu_with_clip_against_numpy() -> None:
    """onnx.reference's RNN ignores ``clip`` and the activations: the recurrence in
    numpy, ``h = relu(clip(x·Wᵀ + h·Rᵀ + Wb + Rb))``."""
    x = _r(SEQ, BATCH, INPUT)
    w, r, b = _r(1, HIDDEN, INPUT), _r(1, HIDDEN, HIDDEN), _r(1, 2 * HIDDEN)
    from test_popart_ops_shape import _run

    def build(bld, ids):
        return bld.aiOnnx.rnn(ids, num_outputs=2, hidden_size=HIDDEN, activations=["Relu"],
                              clip=0.3)[0]  # fmt: skip

    got = _run(build, [x, w, r, b])
    h = np.zeros([BATCH, HIDDEN], np.float64)
    want = []
    for t in range(SEQ):
        pre = x[t] @ w[0].T + h @ r[0].T + b[0, :HIDDEN] + b[0, HIDDEN:]
        h = np.maximum(np.clip(pre, -0.3, 0.3), 0)
        want.append(h)
    np.testing.assert_allclose(got[:, 0], np.stack(want), rtol=1e-5, atol=1e-6)
