"""popnn vertices against the Poplibs source (graphcore/poplibs @7eac0f26).

Expectations are typed here from ``lib/popnn/popnnCycleEstimators.cpp``,
``lib/popnn/PerformanceEstimation.hpp`` and ``lib/popops/popopsCycleEstimators.cpp``
(``EncodeOneHot``); never computed with the project's estimator functions.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import VertexError
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.popnn import (
    NonLinearityType,
    encodeOneHot,
    nonLinearity,
    nonLinearityInPlace,
    nonLinearityInputGradient,
)

W = 6
OP = {  # getNonLinearityOpCycles: (float scalar, float vector, half scalar, half vector)
    "GELU": (10, 10, 5, 5),
    "SWISH": (6, 11, 3, 5),
}
GRAD = {  # getNonLinearityGradOpCycles
    "RELU": (3, 3, 3, 3),
    "SIGMOID": (3, 3, 3, 3),
    "TANH": (3, 3, 3, 3),
    "GELU": (10, 10, 5, 5),
    "SWISH": (10, 15, 7, 9),
}


def _ops(table, op, half):
    f_s, f_v, h_s, h_v = table[op]
    return (h_s, h_v) if half else (f_s, f_v)


def src_nl_1d(op, n, half, in_place):
    vw = 4 if half else 2
    opc, vec = _ops(OP, op, half)
    vectors, rem = n // vw, n % vw
    pw = (vectors + W - 1) // W
    worker = 3 + (op == "SWISH" and in_place) + 5 + 2 + 2 + 5 + 3
    worker += (2 + opc + (pw - 1) * vec + 1 + opc) if pw else 0
    if half:
        worker += 4 + (2 + opc) * bool(rem & 2) + (3 + opc) * bool(rem & 1)
    else:
        worker += 3 + (2 + opc) * bool(rem & 1)
    return 9 + worker * W


def src_grad_1d(op, n, half):
    vw = 4 if half else 2
    opc, vec = _ops(GRAD, op, half)
    vectors, rem = n // vw, n % vw
    pw = (vectors + W - 1) // W
    worker = 20 + ((4 + (pw - 1) * vec + 1) if pw else 0)
    if half:
        worker += 4 + (opc + 2) * bool(rem & 2) + 2 + (opc + 4) * bool(rem & 1)
    else:
        worker += 4 + (opc + 1) * bool(rem)
    return 9 + worker * W


def src_grad_2d(op, rows, half):
    vw = 4 if half else 2
    opc, vec = _ops(GRAD, op, half)
    c = 5 + 12
    for n1 in rows:
        v, rem = n1 // vw, n1 % vw
        c += 9 + ((4 + (v - 1) * vec + 1) if v else 0)
        if half:
            c += 2 + (2 + opc) * bool(rem & 2) + 2 + (4 + opc) * bool(rem & 1)
        else:
            c += 2 + (1 + opc) * bool(rem)
        c += 1
    return c


def _run(build, preset="tiny"):
    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    seq = prog.Sequence()
    build(graph, seq)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    return engine


def _record(engine, name):
    return next(r for r in engine.getTrace().records if r.name == name)


@pytest.mark.parametrize("type_", [FLOAT, HALF])
@pytest.mark.parametrize("n", [100, 1001])
@pytest.mark.parametrize("op", ["GELU", "SWISH"])
def test_nonlinearity_1d_in_place(op, n, type_):
    def build(graph, seq):
        x = graph.addVariable(type_, [n], "x")
        graph.setTileMapping(x, 3)
        nonLinearityInPlace(graph, NonLinearityType[op], x, seq, "nl")

    engine = _run(build)
    assert _record(engine, "nl/Nonlinearity").active_cycles[3] == src_nl_1d(
        op, n, type_ == HALF, True
    )
    names = engine.getGraphProfile()["vertexTypes"]["names"]
    assert f"popnn::NonLinearity1DInPlace<{type_.name},popnn::NonLinearityType::{op}>" in names


@pytest.mark.parametrize("type_", [FLOAT, HALF])
@pytest.mark.parametrize("n", [100, 1001])
@pytest.mark.parametrize("op", ["RELU", "SIGMOID", "TANH", "GELU", "SWISH"])
def test_nonlinearity_grad_1d(op, n, type_):
    def build(graph, seq):
        x = graph.addVariable(type_, [n], "x")
        graph.setTileMapping(x, 2)
        nonLinearityInputGradient(graph, NonLinearityType[op], x, x, seq, "g")

    engine = _run(build)
    want = src_grad_1d(op, n, type_ == HALF)
    assert _record(engine, "g/NonLinearityGrad").active_cycles[2] == want


@pytest.mark.parametrize("type_", [FLOAT, HALF])
def test_nonlinearity_grad_2d_over_two_regions(type_):
    # two regions on tile 1 -> splitRegionsBetweenWorkers(grain VW, min 2 VW)
    def build(graph, seq):
        x = graph.addVariable(type_, [3, 40], "x")
        graph.setTileMapping(x, 0)
        graph.setTileMapping(x[0], 1)
        graph.setTileMapping(x[2], 1)
        nonLinearityInputGradient(graph, NonLinearityType.TANH, x, x, seq, "g")

    engine = _run(build)
    rec = _record(engine, "g/NonLinearityGrad")
    vw = 4 if type_ == HALF else 2
    # 80 elements = 80/vw grains over 6 workers: grains split as evenly as the source
    grains = 80 // vw
    nv = -(-grains // -(-grains // W))  # vertices of ceil(grains / W) grains at most
    per = [((v + 1) * grains) // nv - (v * grains) // nv for v in range(nv)]
    pieces, offset = [], 0
    for g in per:  # each vertex's rows: cut at the 40-element region boundary
        lo, hi = offset * vw, (offset + g) * vw
        pieces.append([e - s for s, e in ((lo, min(hi, 40)), (max(lo, 40), hi)) if e > s])
        offset += g
    thread = [src_grad_2d("TANH", rows, type_ == HALF) for rows in pieces]
    assert rec.active_cycles[1] == sum(thread)
    names = engine.getGraphProfile()["vertexTypes"]["names"]
    assert f"popnn::NonLinearityGrad2D<{type_.name},popnn::NonLinearityType::TANH>" in names
    assert f"popnn::NonLinearityGrad1D<{type_.name},popnn::NonLinearityType::TANH>" in names


def test_relu_forward_is_a_popops_unary_vertex():
    def build(graph, seq):
        x = graph.addVariable(FLOAT, [64], "x")
        graph.setTileMapping(x, 0)
        nonLinearity(graph, NonLinearityType.RELU, x, seq, "r")
        nonLinearity(graph, NonLinearityType.GELU, x, seq, "g")

    names = _run(build).getGraphProfile()["vertexTypes"]["names"]
    assert "popops::UnaryOp1D<popops::expr::UnaryOpType::RELU,float>" in names
    assert "popnn::NonLinearity1DInPlace<float,popnn::NonLinearityType::GELU>" in names


# --------------------------------------------------------------------------- one-hot


@pytest.mark.parametrize(
    ("index_type", "out_type"),
    [(UNSIGNED_INT, HALF), (UNSIGNED_INT, FLOAT), (INT, FLOAT), (INT, INT)],
)
@pytest.mark.parametrize(("rows", "classes"), [(5, 7), (12, 40)])
def test_encode_one_hot_values_and_estimate(index_type, out_type, rows, classes):
    rng = np.random.default_rng(rows * classes)
    idx = rng.integers(0, classes, size=rows).astype(np.int64)
    idx[2] = 0xFFFFFFFF if index_type == UNSIGNED_INT else -1  # MASKED_LABEL_CODE: zeros
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    ind = graph.addVariable(index_type, [rows], "ind")
    graph.setTileMapping(ind, 0)
    enc = graph.addVariable(out_type, [rows, classes], "enc")
    graph.setTileMapping(enc, 1)
    graph.createHostWrite("ind", ind)
    graph.createHostRead("enc", enc)
    seq = prog.Sequence()
    encodeOneHot(graph, ind, enc, seq, "oh")
    engine = Engine(graph, seq)
    engine.load(device)
    engine.writeTensor("ind", idx.astype(index_type.numpy))
    engine.run(0)
    got = np.zeros((rows, classes), out_type.numpy)
    engine.readTensor("enc", got)
    want = np.zeros((rows, classes))
    ok = (idx >= 0) & (idx < classes)
    want[np.flatnonzero(ok), idx[ok]] = 1
    np.testing.assert_array_equal(got, want)
    # EncodeOneHot: unsigned -> half is the supervisor, 11 + (62 + 12) per index;
    # else the C++ worker, 100 per index. Tiny: 8 tiles, grain VW, 4 grains minimum.
    rec = _record(engine, "oh/OneHotEncode")
    sup = (index_type, out_type) == (UNSIGNED_INT, HALF)
    vw = 4 if out_type == HALF else 2
    tiles = 8
    # Encoding.cpp blocks: index groups of ceil(ceil(rows / vw) / tiles) grains, classes
    # in blocks of max(ceil(ceil(classes / vw) / max(tiles // groups, 1)), 4) grains
    ig = -(-rows // vw)
    per_group = -(-ig // tiles)
    groups = -(-ig // per_group)
    cls_grains = -(-classes // vw)
    cls_block = max(-(-cls_grains // max(tiles // groups, 1)), 4) * vw
    want_tiles = np.zeros(tiles, np.int64)
    tile = 0
    for g in range(groups):
        n_idx = min((g + 1) * per_group * vw, rows) - g * per_group * vw
        for _ in range(-(-classes // cls_block)):
            want_tiles[tile] += 11 + 74 * n_idx if sup else 100 * n_idx
            tile = (tile + 1) % tiles
    np.testing.assert_array_equal(rec.active_cycles, want_tiles)
    name = f"popops::EncodeOneHot<{index_type.name},{out_type.name}>"
    assert name in engine.getGraphProfile()["vertexTypes"]["names"]


@pytest.mark.parametrize(
    ("index_type", "bad", "shown"),
    [(UNSIGNED_INT, 7, "7"), (UNSIGNED_INT, 0xFFFFFFFE, "4294967294"), (INT, -2, "-2"),
     (INT, 9, "9")],
)  # fmt: skip
def test_encode_one_hot_out_of_range_index_is_a_clear_error(index_type, bad, shown):
    # Deviation from the codelet (which writes an all-zero row): any index outside
    # [0, classes) other than MASKED_LABEL_CODE fails the run, naming field, value,
    # position and range. Rows span two index groups (12 rows, grain 2 on 8 tiles).
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    ind = graph.addVariable(index_type, [12], "ind")
    graph.setTileMapping(ind, 0)
    enc = graph.addVariable(FLOAT, [12, 7], "enc")
    graph.setTileMapping(enc, 1)
    graph.createHostWrite("ind", ind)
    seq = prog.Sequence()
    encodeOneHot(graph, ind, enc, seq, "oh")
    engine = Engine(graph, seq)
    engine.load(device)
    idx = np.zeros(12, np.int64)
    idx[3] = 0xFFFFFFFF if index_type == UNSIGNED_INT else -1  # masked: fine
    idx[9] = bad
    engine.writeTensor("ind", idx.astype(index_type.numpy))
    with pytest.raises(VertexError) as info:
        engine.run(0)
    msg = str(info.value)
    assert f"'indices' holds {shown} at position 9" in msg
    assert "valid range [0, 7)" in msg and "EncodeOneHot" in msg
    assert (info.value.field, info.value.index, info.value.size) == ("indices", 9, 7)


def test_encode_one_hot_shape_and_type_errors():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    seq = prog.Sequence()
    ind = graph.addVariable(UNSIGNED_INT, [4], "ind")
    enc = graph.addVariable(FLOAT, [3, 5], "enc")
    with pytest.raises(GraphError, match=r"'enc' has 3 rows but indices 'ind' has 4"):
        encodeOneHot(graph, ind, enc, seq)
    with pytest.raises(GraphError, match=r"encoded 'flat' has shape \[15\]; it must be 2-D"):
        encodeOneHot(graph, ind, graph.addVariable(FLOAT, [15], "flat"), seq)
    with pytest.raises(TypeMismatchError, match="indices 'f' is float; the index type"):
        encodeOneHot(graph, graph.addVariable(FLOAT, [3], "f"), enc, seq)
