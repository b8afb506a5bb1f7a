"""popops.select / clamp (and their in-place forms, and the Select/Clamp expressions).

Values against numpy (``np.where``, ``np.minimum(np.maximum(...))``) on random shapes
for every supported type; vertex choice as ``ternaryOp`` in graphcore/poplibs @
7eac0f266ced5b064b3284a3cd90d491745b387c ``lib/popops/ElementWise.cpp``; estimates
written out here from ``lib/popops/popopsCycleEstimators.cpp`` (``selectCycles``,
``Select``, ``SelectInPlace``, ``BroadcastSelect``, ``BroadcastSelectorSelectCycles``,
``clampCycles``, ``Clamp*``), never from the project's estimator.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from popops_harness import VW, Harness, random_shape, random_values

from poplar_api import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Engine, IPUModel, popops
from poplar_api.codelet import vertex_type
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.popops import expr as pe
from poplar_api.popops import vertices as vx

SELECT_TYPES = [FLOAT, HALF, INT, UNSIGNED_INT, BOOL]
CLAMP_TYPES = [FLOAT, HALF, INT]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("t", SELECT_TYPES)
def test_select_equals_numpy_for_every_vertex_kind(t, seed):
    h = Harness()
    shape = [*random_shape(seed), 3]
    a, b = random_values(t, shape, seed), random_values(t, shape, seed + 1)
    p = random_values(BOOL, shape, seed + 2)
    ta, tb, tp = h.var(t, a, "a"), h.var(t, b, "b"), h.var(BOOL, p, "p")
    h.read(popops.select(h.graph, ta, tb, tp, h.seq), "select")
    # one-element a and b: BroadcastSelect
    a1, b1 = a.reshape(-1)[:1], b.reshape(-1)[1:2]
    ta1, tb1 = h.var(t, a1, "a1"), h.var(t, b1, "b1")
    h.read(popops.select(h.graph, ta1, tb1, tp, h.seq), "bselect")
    # one-element pred: BroadcastSelectorSelect (and in place)
    p1 = p.reshape(-1)[:1]
    tp1 = h.var(BOOL, p1, "p1")
    h.read(popops.select(h.graph, ta, tb, tp1, h.seq), "selector")
    ti = h.var(t, a, "ip")
    popops.selectInPlace(h.graph, ti, tb, tp, h.seq)
    h.read(ti, "ip")
    ti1 = h.var(t, a, "ip1")
    popops.selectInPlace(h.graph, ti1, tb, tp1, h.seq)
    h.read(ti1, "ip1")
    # numpy broadcasting of all three: a column, a row, a full pred
    col, row = a[..., :1], b[..., :1, :] if len(shape) > 1 else b
    tcol, trow = h.var(t, col, "col"), h.var(t, row, "row")
    h.read(popops.select(h.graph, tcol, trow, tp, h.seq), "bcast")
    names = h.vertex_names()
    got = h.run()
    np.testing.assert_array_equal(got["select"], np.where(p, a, b))
    np.testing.assert_array_equal(got["bselect"], np.where(p, a1[0], b1[0]))
    np.testing.assert_array_equal(got["selector"], np.where(p1[0], a, b))
    np.testing.assert_array_equal(got["ip"], np.where(p, a, b))
    np.testing.assert_array_equal(got["ip1"], np.where(p1[0], a, b))
    np.testing.assert_array_equal(got["bcast"], np.where(p, col, row))
    for kind in ("Select", "BroadcastSelect", "BroadcastSelectorSelect", "SelectInPlace",
                 "BroadcastSelectorSelectInPlace"):  # fmt: skip
        assert f"popops::{kind}<{t.name}>" in names


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("t", CLAMP_TYPES)
def test_clamp_equals_numpy(t, seed):
    h = Harness()
    shape = random_shape(seed)
    x = random_values(t, shape, seed)
    lo = random_values(t, shape, seed + 1, -10 if t is not INT else -500, 0)
    hi = random_values(t, shape, seed + 2, 0, 10 if t is not INT else 500)
    tx, tlo, thi = h.var(t, x, "x"), h.var(t, lo, "lo"), h.var(t, hi, "hi")
    h.read(popops.clamp(h.graph, tx, tlo, thi, h.seq), "clamp")
    s_lo, s_hi = h.var(t, [-1], "slo"), h.var(t, [2], "shi")
    h.read(popops.clamp(h.graph, tx, s_lo, s_hi, h.seq), "bclamp")
    h.read(popops.clamp(h.graph, tx, -2, 1, h.seq), "numbers")
    ti = h.var(t, x, "ip")
    popops.clampInPlace(h.graph, ti, tlo, thi, h.seq)
    h.read(ti, "ip")
    tj = h.var(t, x, "ipb")
    popops.clampInPlace(h.graph, tj, s_lo, 3, h.seq)
    h.read(tj, "ipb")
    names = h.vertex_names()
    got = h.run()
    np.testing.assert_array_equal(got["clamp"], np.minimum(np.maximum(x, lo), hi))
    np.testing.assert_array_equal(got["bclamp"], np.clip(x, -1, 2))
    np.testing.assert_array_equal(got["numbers"], np.clip(x, -2, 1))
    np.testing.assert_array_equal(got["ip"], np.minimum(np.maximum(x, lo), hi))
    np.testing.assert_array_equal(got["ipb"], np.clip(x, -1, 3))
    for kind in ("Clamp", "BroadcastClamp", "ClampInPlace", "BroadcastClampInPlace"):
        assert f"popops::{kind}<{t.name}>" in names


def test_select_and_clamp_expressions_in_map():
    h = Harness()
    x = random_values(FLOAT, [4, 5], 3)
    y = random_values(FLOAT, [4, 5], 4)
    tx, ty = h.var(FLOAT, x, "x"), h.var(FLOAT, y, "y")
    h.read(popops.map(h.graph, pe.Select(pe._1, pe._2, pe._1 > pe._2), [tx, ty], h.seq), "max")
    h.read(popops.map(h.graph, pe.Clamp(pe._1, -1.0, 1.0), [tx], h.seq), "clip")
    h.read(popops.map(h.graph, pe.Clamp(pe._1 * 2.0, pe._2, 3.0), [tx, ty], h.seq), "fused")
    tz = h.var(FLOAT, x, "z")
    popops.mapInPlace(h.graph, pe.Select(pe._1, 0.0, pe._1 > 0.0), [tz], h.seq)
    h.read(tz, "relu")
    names = h.vertex_names()
    got = h.run()
    np.testing.assert_array_equal(got["max"], np.maximum(x, y))
    np.testing.assert_array_equal(got["clip"], np.clip(x, -1, 1))
    np.testing.assert_array_equal(got["fused"], np.minimum(np.maximum(x * 2, y), 3))
    np.testing.assert_array_equal(got["relu"], np.where(x > 0, x, 0))
    assert "popops::BroadcastClamp<float>" in names  # Clamp(_1, c, c): op by op


# ------------------------------------------------------------------ estimators
def select_cycles(n):
    return 6 + 5 * n  # overhead 6 + basicOpLoopCycles(n, 1, 5)


def clamp_cycles(t, n):
    vw, cpv = {FLOAT: (2, 2), HALF: (4, 2), INT: (1, 7)}[t]
    return 6 + cpv * (n + vw - 1) // vw


def broadcast_select_row(t, n):
    if t.size == 4:
        return 5 + 4 * n + 3
    if t.size == 2:
        return (23 if n % 2 else 30) + 4 * n
    return 40 + (n // 4) * 17 + 26


@pytest.fixture(scope="module")
def target():
    return IPUModel("ipu2").createDevice().getTarget()


@pytest.mark.parametrize("rows", [[5, 8], [64, 3, 100]])
@pytest.mark.parametrize("t", SELECT_TYPES)
def test_select_estimates(target, t, rows):
    sel = vertex_type(vx.ternary_vertex("Select", t))
    sizes = {"in1": rows, "in2": rows, "in3": rows, "out": rows}
    assert sel.name == f"popops::Select<{t.name}>" and not sel.is_multi
    assert sel.estimate(sizes, target) == 5 + sum(select_cycles(n) for n in rows)
    ip = vertex_type(vx.ternary_vertex("Select", t, in_place=True))
    # the source costs every row with the number of rows (in1.size())
    r = len(rows)
    assert ip.estimate({"in1Out": rows, "in2": rows, "in3": rows}, target) == 5 + r * (6 + 5 * r)
    bs = vertex_type(vx.ternary_vertex("BroadcastSelect", t))
    bsizes = {"in1": 1, "in2": 1, "in3": rows, "out": rows}
    assert bs.estimate(bsizes, target) == 10 + sum(broadcast_select_row(t, n) for n in rows)
    bss = vertex_type(vx.ternary_vertex("BroadcastSelectorSelect", t))
    expect = 12 + sum(35 + (n * t.size) // 4 + (n * t.size % 4) * 5 for n in rows)
    assert bss.estimate({"in1": rows, "in2": rows, "in3": 1, "out": rows}, target) == expect
    bssip = vertex_type(vx.ternary_vertex("BroadcastSelectorSelect", t, in_place=True))
    assert bssip.name == f"popops::BroadcastSelectorSelectInPlace<{t.name}>"
    assert bssip.estimate({"in1Out": rows, "in2": rows, "in3": 1}, target) == expect


@pytest.mark.parametrize("rows", [[7], [33, 2, 90]])
@pytest.mark.parametrize("t", CLAMP_TYPES)
def test_clamp_estimates(target, t, rows):
    expect = 5 + sum(clamp_cycles(t, n) for n in rows)
    for kind, scalar in (("Clamp", False), ("BroadcastClamp", True)):
        for in_place in (False, True):
            v = vertex_type(vx.ternary_vertex(kind, t, in_place))
            assert v.name == f"popops::{kind}{'InPlace' if in_place else ''}<{t.name}>"
            sizes = {"in1Out" if in_place else "in1": rows, "in2": 1 if scalar else rows}
            sizes["in3"] = sizes["in2"]
            if not in_place:
                sizes["out"] = rows
            assert v.estimate(sizes, target) == expect


def _tile_cycles(h, name, tile=0):
    engine = Engine(h.graph, h.seq)
    engine.load(h.device)
    engine.run(0)
    rec = next(r for r in engine.getTrace().records if r.kind == "compute" and r.name == name)
    return int(rec.tile_cycles[tile])


@pytest.mark.parametrize(("t", "n"), [(FLOAT, 100), (HALF, 100), (INT, 37)])
def test_select_work_is_split_over_workers(t, n):
    # splitRegionsBetweenWorkers: grain max(VW, 4), at least 2 grains per vertex
    h = Harness("ipu2")
    a = h.var(t, np.zeros(n), "a", tile=0)
    b = h.var(t, np.ones(n), "b", tile=0)
    p = h.var(BOOL, np.zeros(n), "p", tile=0)
    popops.select(h.graph, a, b, p, h.seq, "sel")
    grain = max(VW[t.name], 4)
    grains = -(-n // grain)
    per = max(-(-grains // 6), -(-(2 * grain) // grain))
    count = -(-grains // per)
    bounds = [min(n, (v * grains // count) * grain) for v in range(count + 1)]
    sizes = [b - a for a, b in itertools.pairwise(bounds)]
    verts = [v for v in h.graph._state.vertices if v.vtype.name == f"popops::Select<{t.name}>"]
    assert sorted(v.fields["out"][0].size for v in verts) == sorted(sizes)
    assert _tile_cycles(h, "sel") == 6 * max(5 + select_cycles(s) for s in sizes)


# ------------------------------------------------------------------ bad input
def test_bad_select_and_clamp_input_is_explained():
    h = Harness()
    a = h.var(FLOAT, np.zeros([3, 4]), "a")
    b = h.var(FLOAT, np.zeros([3, 4]), "b")
    i = h.var(INT, np.zeros([3, 4]), "i")
    u = h.var(UNSIGNED_INT, np.zeros([3, 4]), "u")
    p = h.var(BOOL, np.zeros([3, 4]), "p")
    with pytest.raises(TypeMismatchError, match=r"pred 'i' is int; it must be bool; hint"):
        popops.select(h.graph, a, b, i, h.seq)
    with pytest.raises(TypeMismatchError, match=r"B 'i' is int, the other is float; hint"):
        popops.select(h.graph, a, i, p, h.seq)
    with pytest.raises(TensorError, match=r"A \[3, 4\], B \[5\], pred \[3, 4\]"):
        popops.select(h.graph, a, h.var(FLOAT, np.zeros(5), "b5"), p, h.seq)
    with pytest.raises(TypeMismatchError, match=r"CLAMP does not support element type unsigned"):
        popops.clamp(h.graph, u, 0, 5, h.seq)
    with pytest.raises(TypeMismatchError, match=r"upper 'i' is int; it must be float"):
        popops.clamp(h.graph, a, b, i, h.seq)
    a1 = h.var(FLOAT, [1.0], "a1")
    with pytest.raises(TensorError, match=r"no in-place BroadcastSelect.*popops.select"):
        popops.selectInPlace(h.graph, a1, 2.0, p, h.seq)
    with pytest.raises(TensorError, match=r"in-place operand A 'col' \[3, 1\].*\[3, 4\]"):
        popops.clampInPlace(h.graph, h.var(FLOAT, np.zeros([3, 1]), "col"), b, b, h.seq)
    with pytest.raises(GraphError, match=r"pred must be a Tensor, got list"):
        popops.select(h.graph, a, b, [True], h.seq)
