"""Pipelined training over three stages: the main phase repeated as one cycle, with
each stage's stash (depth ``2 (S - s)``: 6, 4 and 2 entries) addressed by counters that
wrap within a step and carry over to the next step.

The reference is a numpy replay, in float64, of PopART's static schedule
(graphcore/popart ``willow/src/transforms/pipeline.cpp``: stage ``s`` runs the forward
of batch ``k`` in pipeline cycle ``k + s`` and its backward in ``k + 2S - 1 - s``;
within a cycle the forwards run last stage first, then the backwards first stage first),
each stage updating its weights right after its backward (no gradient accumulation).
"""

from __future__ import annotations

import numpy as np
from test_popart_pipeline_bps import LR, _session

import popart_api as popart

B, D, C = 4, 5, 3
STAGES = 3


def _model():
    """A chain of ``STAGES`` matmuls, one per stage (Relu after all but the last), then
    Softmax and a summed Nll loss on the last stage."""
    rng = np.random.default_rng(11)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [B]), "label")
    w = {}
    t = x
    for s in range(STAGES):
        cols = C if s == STAGES - 1 else D
        w[f"W{s}"] = (rng.standard_normal((D, cols)) * 0.5).astype(np.float32)
        with bd.virtualGraph(s):
            t = bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w[f"W{s}"], f"W{s}")])
            if s < STAGES - 1:
                t = bd.aiOnnx.relu([t])
            else:
                p = bd.aiOnnx.softmax([t], axis=1)
                loss = bd.aiGraphcore.nllloss([p, lab], reduction=popart.ReductionType.Sum)
    return bd, x, lab, loss, w


def _replay(w, X, L):
    """The schedule in float64: (weights after the step, per-batch losses)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    n, S = len(X), STAGES
    acts: dict = {}  # (stage, batch) -> (input, pre-activation)
    grads: dict = {}  # (stage, batch) -> gradient of the stage's output
    losses = [0.0] * n
    for c in range(n + 2 * S - 1):
        for s in reversed(range(S)):
            k = c - s
            if not 0 <= k < n:
                continue
            a = X[k].astype(np.float64) if s == 0 else acts["out", s - 1, k]
            z = a @ w[f"W{s}"]
            acts[s, k] = (a, z)
            if s < S - 1:
                acts["out", s, k] = np.maximum(z, 0)
            else:
                e = np.exp(z - z.max(1, keepdims=True))
                p = e / e.sum(1, keepdims=True)
                losses[k] = -np.log(p[np.arange(B), L[k]]).sum()
                d = p.copy()
                d[np.arange(B), L[k]] -= 1
                grads[s, k] = d  # d loss / d z of the last stage
        for s in range(S):
            k = c - (2 * S - 1 - s)
            if not 0 <= k < n:
                continue
            a, z = acts[s, k]
            dz = grads[s, k] if s == S - 1 else grads[s, k] * (z > 0)
            if s > 0:
                grads[s - 1, k] = dz @ w[f"W{s}"].T
            w[f"W{s}"] -= LR * (a.T @ dz)
    return w, losses


def test_three_stage_pipeline_with_repeated_main_cycle_equals_numpy_over_two_steps():
    """7 batches per step over 3 stages: fill 5 cycles, the main cycle repeated twice,
    flush 5. After the first step the stage stashes' counters stand at 7 mod 6, 7 mod 4
    and 7 mod 2 (not 0), so the second step's values check that the stash and restore
    counters stay in step across steps."""
    bd, x, lab, loss, w0 = _model()
    s = _session(bd, loss, 7, ipus=4)
    rng = np.random.default_rng(5)
    w_ref = dict(w0)
    for _step in range(2):
        X = rng.standard_normal((7, B, D)).astype(np.float32)
        L = rng.integers(0, C, (7, B)).astype(np.int32)
        anchors = s.initAnchorArrays()
        s.run(popart.PyStepIO({x: X, lab: L}, anchors))
        w_ref, losses = _replay(w_ref, X, L)
        np.testing.assert_allclose(anchors[loss], losses, rtol=1e-4)
    s.weightsToHost()
    got = {k: np.zeros_like(v) for k, v in w0.items()}
    s.readWeights(popart.PyWeightsIO(got))
    for k in w0:
        np.testing.assert_allclose(got[k], w_ref[k], atol=5e-5, err_msg=k)
    names = {cs.name for cs in s.getReport().compilation.computeSets}
    for stage in range(STAGES - 1):  # the last stage's backward follows its forward
        assert any(n.startswith(f"stash/stage{stage}/") for n in names), stage
