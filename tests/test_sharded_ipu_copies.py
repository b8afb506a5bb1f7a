"""Sharded (not pipelined) training: no compute set reads another IPU's memory; what a
weight's update needs from another IPU (the optimizer's scalars on tile 0, a gradient
left elsewhere) is copied there first, as PopART's ``InterIpuCopy`` transform inserts
``IpuCopyOp``s (popart_api.pipeline.scalar_copies, on_weight_ipu)."""

from __future__ import annotations

import numpy as np
import pytest
from test_popart_training import _data, _device, _np_stack_grads, _session, _two_stage

import popart_api as popart
import poplar_api.lowering.crossing as crossing
import poplar_api.lowering.emit as emit

LR, MOMENTUM = 0.05, 0.9


@pytest.fixture
def cross_ipu_reads(monkeypatch):
    """Counts, by compute set, the references that compute sets' exchanges take from
    another IPU while a graph is compiled."""
    reads: dict[str, int] = {}
    inside: list[str] = []
    lower = emit.lower_execute

    def lower_execute(em, prog):
        inside.append(prog.computeSet.name)
        try:
            return lower(em, prog)
        finally:
            inside.pop()

    plan = crossing.plan_references

    def plan_references(planner, element_type, ids, src, dst):
        if inside and planner.num_ipus > 1:
            src_a, dst_a = np.asarray(src).reshape(-1), np.asarray(dst).reshape(-1)
            tpi = planner.tiles_per_ipu
            n = int(np.count_nonzero(src_a // tpi != dst_a // tpi))
            if n:
                reads[inside[-1]] = reads.get(inside[-1], 0) + n
        return plan(planner, element_type, ids, src, dst)

    far_of = crossing.receivers_from_other_ipus

    def receivers_from_other_ipus(*args, **kw):
        far = far_of(*args, **kw)
        if inside and np.asarray(far).any():
            reads[inside[-1]] = reads.get(inside[-1], 0) + int(np.count_nonzero(far))
        return far

    monkeypatch.setattr(emit, "lower_execute", lower_execute)
    monkeypatch.setattr(crossing, "plan_references", plan_references)
    monkeypatch.setattr(crossing, "receivers_from_other_ipus", receivers_from_other_ipus)
    return reads


def _sharded(optimizer):
    bd, x, lab, loss, weights = _two_stage()
    o = popart.SessionOptions()
    o.virtualGraphMode = popart.VirtualGraphMode.Manual
    s = _session(bd, loss, optimizer, options=o, device=_device(8, ipus=2))
    return s, x, lab, weights


def _weights_after(s, x, lab, weights, steps):
    batches = [_data(1, seed=1 + k) for k in range(steps)]
    for X, L in batches:
        s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
    s.weightsToHost()
    got = {k: np.zeros_like(v) for k, v in weights.items()}
    s.readWeights(popart.PyWeightsIO(got))
    return got, batches


def test_sharded_update_reads_only_its_own_ipu(cross_ipu_reads):
    """The weights of the second IPU are updated with the learning rate and momentum
    copied there: no compute set reads across IPUs, and two steps of SGD with momentum
    give numpy's weights."""
    sgd = popart.SGD({"defaultLearningRate": (LR, False), "defaultMomentum": (MOMENTUM, False)})
    s, x, lab, w0 = _sharded(sgd)
    assert cross_ipu_reads == {}
    got, batches = _weights_after(s, x, lab, w0, 2)
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    v = {k: np.zeros_like(a) for k, a in w.items()}
    for X, L in batches:  # v <- mm v + g; w <- w - lr v (no dampening, decay, scaling)
        g = _np_stack_grads(w, X[0], L[0], 1)
        for k in w:
            v[k] = MOMENTUM * v[k] + g[k]
            w[k] = w[k] - LR * v[k]
    for k in w0:
        np.testing.assert_allclose(got[k], w[k], atol=3e-5, err_msg=k)


def test_without_the_copies_the_update_reads_tile_0(cross_ipu_reads, monkeypatch):
    """The check above can fail: with the scalars read where they are, the updates of
    the second IPU's weights read tile 0 of the first."""
    import popart_api.training as training

    monkeypatch.setattr(training, "scalar_copies", lambda session, prog: None)
    _sharded(popart.SGD({"defaultLearningRate": (LR, False)}))
    assert {"update/W10", "update/Wout"} <= set(cross_ipu_reads)


def test_gradient_on_another_ipu_is_copied_to_its_weight():
    """A gradient whose elements lie on another IPU than its weight is copied into a
    tensor mapped as the weight; one already there is used as it is."""
    from popart_api.pipeline import on_weight_ipu
    from poplar_api import program as pprog
    from poplar_api.poputil import mapTensorLinearly

    s, *_ = _sharded(popart.ConstSGD(0.0))
    weight = s.lowered.weight_vars["Wout"]  # on IPU 1
    elsewhere = s.lowered.graphs[0].addVariable(weight.elementType(), weight.shape(), "g0")
    mapTensorLinearly(s.lowered.graphs[0], elsewhere)
    prog = pprog.Sequence()
    local = on_weight_ipu(s, "Wout", elsewhere, prog)
    assert local is not elsewhere
    np.testing.assert_array_equal(s.graph.elementTiles(local), s.graph.elementTiles(weight))
    assert [type(p).__name__ for p in prog.programs] == ["Copy"]
    assert on_weight_ipu(s, "Wout", weight, prog) is weight
    assert len(prog.programs) == 1


def test_sharded_adam_reads_its_step_on_each_ipu(cross_ipu_reads):
    """Adam's step counter and scalars are copied as well: no compute set reads
    across IPUs, and two steps give the weights of the same model unsharded."""
    adam = popart.Adam({"defaultLearningRate": (0.01, False)})
    s, x, lab, w0 = _sharded(adam)
    assert cross_ipu_reads == {}
    got, _ = _weights_after(s, x, lab, w0, 2)
    bd, x1, lab1, loss, _ = _two_stage()
    o = popart.SessionOptions()
    o.virtualGraphMode = popart.VirtualGraphMode.Off
    whole = _session(bd, loss, popart.Adam({"defaultLearningRate": (0.01, False)}), options=o,
                     device=_device(8, ipus=2))  # fmt: skip
    want, _ = _weights_after(whole, x1, lab1, w0, 2)
    for k in w0:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
        assert not np.array_equal(got[k], w0[k])
