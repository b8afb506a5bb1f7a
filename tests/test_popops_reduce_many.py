"""popops.reduceMany, reduce/reduceWithOutput into a list of compute sets, allTrue.

Values against numpy. Scheduling as graphcore/poplibs @
7eac0f266ced5b064b3284a3cd90d491745b387c ``lib/popops/reduction/Reduction.cpp``
(``reduceMany``: outputs created and mapped linearly when none are given, mergeable
reductions concatenated, every reduction's stage ``i`` in the shared compute set
``i`` of one ``ComputeSetList``) and ``lib/popops/AllTrue.cpp`` (a LOGICAL_AND
reduce of the flattened input).
"""

from __future__ import annotations

import numpy as np
import pytest
from popops_harness import Harness, random_shape, random_values

from poplar_api import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, popops
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.popops import Operation, ReduceParams, SingleReduceOp
from poplar_api.program import Execute

NP_OPS = {
    Operation.ADD: np.sum,
    Operation.MUL: np.prod,
    Operation.MAX: np.max,
    Operation.MIN: np.min,
    Operation.SQUARE_ADD: lambda x, axis: np.sum(x * x, axis=axis),
    Operation.LOGICAL_AND: np.all,
    Operation.LOGICAL_OR: np.any,
}


def ref(op, t, x, dims):
    k = x.astype(np.float32) if t is HALF else x
    with np.errstate(all="ignore"):
        return np.asarray(NP_OPS[op](k, axis=tuple(dims))).astype(t.numpy)


def check(t, got, want):
    if t in (FLOAT, HALF):
        np.testing.assert_allclose(got, want, rtol=2e-3 if t is HALF else 1e-5, atol=1e-3)
    else:
        np.testing.assert_array_equal(got, want)


def executes(h):
    return [p for p in h.seq.programs if isinstance(p, Execute)]


CASES = [
    (FLOAT, Operation.ADD), (HALF, Operation.MAX), (INT, Operation.MIN),
    (UNSIGNED_INT, Operation.ADD), (BOOL, Operation.LOGICAL_OR), (FLOAT, Operation.SQUARE_ADD),
]  # fmt: skip


@pytest.mark.parametrize("seed", [0, 1])
def test_reduce_many_equals_numpy_and_shares_compute_sets(seed):
    h = Harness()
    reductions, expect = [], []
    for i, (t, op) in enumerate(CASES):
        shape = random_shape(seed * 10 + i, rank_max=3, dim_max=7)
        x = random_values(t, shape, seed + i, 0 if t is UNSIGNED_INT else None, 9)
        tx = h.var(t, x, f"x{i}")
        dims = sorted({int(d) for d in np.random.default_rng(i).integers(0, len(shape), 2)})
        reductions.append(SingleReduceOp(tx, dims, ReduceParams(op)))
        expect.append(ref(op, t, x, dims))
    # the same 2-D problem twice: merged into one reduction
    same = random_values(FLOAT, [4, 6], seed + 50)
    ts = [h.var(FLOAT, same + k, f"m{k}") for k in range(2)]
    reductions += [SingleReduceOp(t, [0], Operation.ADD) for t in ts]
    expect += [ref(Operation.ADD, FLOAT, same + k, [0]) for k in range(2)]
    outputs: list = []
    result = popops.reduceMany(h.graph, reductions, outputs, h.seq, "many")
    assert result is outputs and len(outputs) == len(reductions)
    for k, o in enumerate(outputs):
        h.read(o, f"o{k}")
    # at most two stages: every reduction's stage i shares the compute set i
    assert 1 <= len(executes(h)) <= 2
    got = h.run()
    for k, (want, red) in enumerate(zip(expect, reductions, strict=True)):
        assert list(got[f"o{k}"].shape) == list(want.shape)
        check(red.in_.elementType(), got[f"o{k}"], want)


def test_reduce_many_with_outputs_and_update():
    h = Harness()
    x = random_values(FLOAT, [5, 8], 1)
    y = random_values(INT, [3, 4, 2], 2)
    tx, ty = h.var(FLOAT, x, "x"), h.var(INT, y, "y")
    ox = h.var(FLOAT, np.full([8], 10.0), "ox")
    oy = h.var(INT, np.zeros([4]), "oy")
    reductions = [
        SingleReduceOp(tx, [0], ReduceParams(Operation.ADD, update=True, scale=0.5)),
        SingleReduceOp(ty, [0, 2], Operation.MAX, debugName="ymax"),
    ]
    popops.reduceMany(h.graph, reductions, [ox, oy], h.seq)
    h.read(ox, "ox")
    h.read(oy, "oy")
    got = h.run()
    np.testing.assert_allclose(got["ox"], 10 + 0.5 * x.sum(0), rtol=1e-5)
    np.testing.assert_array_equal(got["oy"], y.max(axis=(0, 2)))


def test_reduce_into_a_list_of_compute_sets():
    h = Harness()
    # each input spread over tiles, so every reduction has two stages
    a = random_values(FLOAT, [16, 3], 3)
    b = random_values(INT, [16, 5], 4)
    ta, tb = h.var(FLOAT, a, "a"), h.var(INT, b, "b")
    css: list = []
    ra = popops.reduce(h.graph, ta, [0], Operation.ADD, css, "ra")
    assert len(css) == 2 and h.seq.programs == []
    ob = h.graph.addVariable(INT, [5], "ob")
    h.graph.setTileMapping(ob, 1)
    popops.reduceWithOutput(h.graph, tb, ob, [0], Operation.MAX, css, "rb")
    assert len(css) == 2  # the second reduction's stages went into the same sets
    for cs in css:
        h.seq.add(Execute(cs))
    h.read(ra, "ra")
    h.read(ob, "ob")
    got = h.run()
    np.testing.assert_allclose(got["ra"], a.sum(0), rtol=1e-5)
    np.testing.assert_array_equal(got["ob"], b.max(0))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_all_true_equals_numpy(seed):
    h = Harness()
    shape = random_shape(seed)
    x = np.ones(shape, bool)
    if seed % 2:
        x.reshape(-1)[np.random.default_rng(seed).integers(0, x.size)] = False
    tx = h.var(BOOL, x, "x")
    out = popops.allTrue(h.graph, tx, h.seq)
    assert out.elementType() is BOOL and out.shape() == []
    h.read(out, "all")
    names = {v.vtype.name for v in h.graph._state.vertices}
    got = h.run()
    assert bool(got["all"]) == bool(x.all())
    assert all(n.startswith("popops::Reduce<popops::ReduceAnd,bool,bool") for n in names)


def test_bad_reduce_many_and_all_true_input_is_explained():
    h = Harness()
    f = h.var(FLOAT, np.zeros([4, 3]), "f")
    with pytest.raises(TypeMismatchError, match=r"allTrue: A 'f' is float.*BOOL.*hint"):
        popops.allTrue(h.graph, f, h.seq)
    with pytest.raises(GraphError, match=r"2 outputs for 1 reductions"):
        popops.reduceMany(h.graph, [SingleReduceOp(f, [0], Operation.ADD)], [f, f], h.seq)
    with pytest.raises(GraphError, match=r"update=True but no outputs"):
        popops.reduceMany(
            h.graph, [SingleReduceOp(f, [0], ReduceParams(Operation.ADD, True))], [], h.seq
        )
    with pytest.raises(GraphError, match=r"reductions\[0\] is tuple, not a SingleReduceOp"):
        popops.reduceMany(h.graph, [(f, [0])], [], h.seq)
    with pytest.raises(GraphError, match=r"output type half from a float input"):
        popops.reduceMany(h.graph, [SingleReduceOp(f, [0], Operation.ADD, HALF)], [], h.seq)
    with pytest.raises(GraphError, match=r"list of ComputeSets"):
        popops.reduce(h.graph, f, [0], Operation.ADD, "not a program")
