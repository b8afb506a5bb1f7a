"""popops reductions: values against numpy, the two-stage plan, estimators, errors."""

from __future__ import annotations

import numpy as np
import pytest
from popops_harness import run_graph

from poplar_api import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import GraphError, PoplarError, TensorIndexError, TypeMismatchError
from poplar_api.popops.reduce import (
    Operation,
    ReduceParams,
    reduce,
    reduce_vertex,
    reduceWithOutput,
)

NUMPY = {
    Operation.ADD: lambda a, ax: a.sum(axis=ax),
    Operation.SQUARE_ADD: lambda a, ax: (a * a).sum(axis=ax),
    Operation.MUL: lambda a, ax: a.prod(axis=ax),
    Operation.MAX: lambda a, ax: a.max(axis=ax),
    Operation.MIN: lambda a, ax: a.min(axis=ax),
    Operation.LOGICAL_AND: lambda a, ax: a.all(axis=ax),
    Operation.LOGICAL_OR: lambda a, ax: a.any(axis=ax),
}


def _device(preset: str = "tiny"):
    return IPUModel(preset).createDevice()


def _scatter_map(graph: Graph, t, num_tiles: int, stride: int = 3) -> None:
    """Map flat element i of ``t`` to tile (i * stride // 5) % num_tiles: ragged runs."""
    flat = t.flatten()
    for i in range(flat.numElements()):
        graph.setTileMapping(flat[i], (i * stride // 5) % num_tiles)


def _data(shape, type_, rng):
    if type_ == BOOL:
        return rng.random(shape) < 0.8
    if type_ in (INT, UNSIGNED_INT):
        low = 0 if type_ == UNSIGNED_INT else -3
        return rng.integers(low, 4, size=shape).astype(type_.numpy)
    return rng.uniform(0.5, 1.5, size=shape).astype(type_.numpy)


CASES = [
    (Operation.ADD, FLOAT, (5, 7, 3), [1]),
    (Operation.ADD, FLOAT, (5, 7, 3), [0, 2]),
    (Operation.ADD, HALF, (9, 11), [0]),
    (Operation.SQUARE_ADD, FLOAT, (6, 13), [1]),
    (Operation.MUL, FLOAT, (4, 5), [1]),
    (Operation.MAX, FLOAT, (3, 17), [0, 1]),
    (Operation.MIN, HALF, (7, 3, 2), [2, 0]),
    (Operation.ADD, INT, (10, 9), [1]),
    (Operation.MAX, UNSIGNED_INT, (10, 9), [0]),
    (Operation.LOGICAL_AND, BOOL, (6, 5), [1]),
    (Operation.LOGICAL_OR, BOOL, (6, 5), [0]),
]


@pytest.mark.parametrize(("op", "type_", "shape", "dims"), CASES)
def test_reduce_matches_numpy(op, type_, shape, dims):
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(type_, list(shape), "x")
    _scatter_map(graph, x, 8)
    seq = prog.Sequence()
    out = reduce(graph, x, dims, ReduceParams(op), seq, "r")
    kept = [d for d in range(len(shape)) if d not in dims]
    assert out.shape() == [shape[d] for d in kept]
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    data = _data(shape, type_, rng)
    expected = NUMPY[op](data.astype(np.float64) if type_.is_floating else data, tuple(dims))
    res, _ = run_graph(graph, seq, device, {"x": data}, {"out": (out.shape(), type_.numpy)})
    if type_.is_floating:
        rtol = 2e-3 if type_ == HALF else 1e-5
        np.testing.assert_allclose(res["out"], expected, rtol=rtol)
    else:
        np.testing.assert_array_equal(res["out"], expected.astype(type_.numpy))


def test_reduce_of_a_view_with_scale():
    rng = np.random.default_rng(1)
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [6, 9], "x")
    _scatter_map(graph, x, 8, stride=7)
    view = x.transpose().slice(1, 8, 0)  # shape [7, 6]: columns 1..7 of x
    seq = prog.Sequence()
    out = reduce(graph, view, [1], ReduceParams(Operation.ADD, scale=-0.25), seq)
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    data = rng.normal(size=(6, 9)).astype(np.float32)
    res, _ = run_graph(graph, seq, device, {"x": data}, {"out": ([7], np.float32)})
    np.testing.assert_allclose(res["out"], -0.25 * data[:, 1:8].sum(axis=0), rtol=1e-5)


def test_reduce_with_output_update_adds_scaled_squares():
    rng = np.random.default_rng(2)
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [4, 10], "x")
    _scatter_map(graph, x, 8)
    acc = graph.addVariable(FLOAT, [4], "acc")
    graph.setTileMapping(acc, 5)
    seq = prog.Sequence()
    params = ReduceParams(Operation.SQUARE_ADD, update=True, scale=2.0)
    reduceWithOutput(graph, x, acc, [1], params, seq)
    graph.createHostWrite("x", x)
    graph.createHostWrite("acc", acc)
    graph.createHostRead("acc-read", acc)
    data = rng.normal(size=(4, 10)).astype(np.float32)
    start = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    res, _ = run_graph(
        graph, seq, device, {"x": data, "acc": start}, {"acc-read": ([4], np.float32)}
    )
    np.testing.assert_allclose(res["acc-read"], start + 2.0 * (data**2).sum(axis=1), rtol=1e-5)


def test_local_rows_need_one_stage_and_stay_on_their_tile():
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [8, 13], "x")
    for row in range(8):
        graph.setTileMapping(x[row], row)
    seq = prog.Sequence()
    out = reduce(graph, x, [1], Operation.ADD, seq, "rows")
    names = [cs.name for cs in graph._state.compute_sets]
    # every column on one tile: Poplibs' inputToOutputNoExchange, one compute set
    assert names == ["rows/ReduceOnTile/Reduce"]
    mapping = graph.getTileMapping(out)
    assert [[(iv.begin(), iv.end()) for iv in m] for m in mapping] == [
        [(row, row + 1)] for row in range(8)
    ]


def test_spread_columns_need_two_stages_and_a_linear_output():
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [4, 8], "x")
    for col in range(8):
        graph.setTileMapping(x.slice(col, col + 1, 1), col)
    seq = prog.Sequence()
    out = reduce(graph, x, [1], Operation.ADD, seq, "cols")
    names = [cs.name for cs in graph._state.compute_sets]
    # one element of a column per tile: the input is the first set of partials (no
    # on-tile stage), and the final stage reduces at the output, which Poplibs maps
    # linearly with at least 4 * vectorWidth(float) = 8 elements per tile: all on tile 0.
    assert names == ["cols/ReduceFinalStage/Reduce"]
    tiles = graph._state.space(FLOAT).tile[out.flat_index()]
    assert tiles.tolist() == [0, 0, 0, 0]
    data = np.arange(32, dtype=np.float32).reshape(4, 8)
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    res, _ = run_graph(graph, seq, device, {"x": data}, {"out": ([4], np.float32)})
    np.testing.assert_array_equal(res["out"], data.sum(axis=1))


def test_reduce_on_mk2_spread_over_many_tiles():
    device = _device("mk2")
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [3, 2000], "x")
    for block in range(10):
        graph.setTileMapping(x.slice(block * 200, (block + 1) * 200, 1), block * 140)
    seq = prog.Sequence()
    out = reduce(graph, x, [1], ReduceParams(Operation.MAX), seq)
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    data = np.random.default_rng(3).normal(size=(3, 2000)).astype(np.float32)
    res, _ = run_graph(graph, seq, device, {"x": data}, {"out": ([3], np.float32)})
    np.testing.assert_array_equal(res["out"], data.max(axis=1))


# ------------------------------------------------------------------------ estimators


def _stage1_record(engine, name):
    trace = engine.getTrace()
    found = [r for r in trace.records if r.kind == "compute" and r.name == name]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize(("type_", "n"), [(FLOAT, 10), (FLOAT, 7), (HALF, 10)])
def test_single_output_reduction_is_a_continuous_reduce(type_, n):
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(type_, [1, n], "x")
    graph.setTileMapping(x, 3)
    seq = prog.Sequence()
    reduce(graph, x, [1], Operation.ADD, seq, "s")
    _, engine = run_graph(graph, seq, device, {}, {})
    rec = _stage1_record(engine, "s/ReduceOnTile/Reduce")
    names = {v.vtype.name for v in graph._state.vertices}
    assert names == {f"popops::ContinuousReduce<popops::ReduceAdd,{type_.name},{type_.name},false>"}
    # getReductionVertexSpecialisation tries ALL_REGIONS_CONTINUOUS first, so one output
    # is a ContinuousReduce. Its estimator is called with numOutputsM1 = 0 as numOutputs:
    # cpo * 0 * (...) + (n odd ? 2 : 0) + 12 * 0 + 10 + 7.
    expected = (2 if n % 2 else 0) + 10 + 7
    assert rec.active_cycles[3] == expected
    assert rec.active_cycles.sum() == expected


@pytest.mark.parametrize(("type_", "n"), [(FLOAT, 10), (FLOAT, 7), (HALF, 10), (INT, 5)])
def test_scalar_output_single_input_estimate(type_, n):
    target = _device().getTarget()
    cls = reduce_vertex(Operation.ADD, type_, type_, False, False, "SCALAR_OUTPUT_SINGLE_INPUT")
    # getCyclesEstimateForSingleInput, ADD: opVW = accVW (half 8, float 4, int 1),
    # dpw = 64 / (8 * size); perCycle = min(opVW, dpw); loads = opVW / perCycle;
    # cyclesPerLoop = max(loads, 1); elemsPerLoop = perCycle * loads.
    acc_vw = {FLOAT: 4, HALF: 8, INT: 1}[type_]
    dpw = 8 // type_.size
    per_cycle = min(acc_vw, dpw)
    loads = acc_vw // per_cycle
    per_loop, elems = max(loads, 1), per_cycle * loads
    expected = 3 + 6 + (per_loop * n) // elems + 5 + n % elems + 3
    expected += 0 if type_ == FLOAT else 5
    assert cls.getCycleEstimate({"partials": [n], "out": 1}, target) == expected


def test_all_regions_continuous_estimate_and_worker_split():
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [12, 5], "x")
    graph.setTileMapping(x, 0)
    seq = prog.Sequence()
    reduce(graph, x, [1], Operation.ADD, seq, "c")
    _, engine = run_graph(graph, seq, device, {}, {})
    rec = _stage1_record(engine, "c/ReduceOnTile/Reduce")
    # 12 outputs on tile 0 split over 6 workers -> 6 vertices of 2 outputs x 5 partials.
    # cpo * nOut * (nPartials // min(accVW=4, dpw=2)) + (odd ? 2 : 0) + 12 nOut + 10 + 7,
    # with nOut the field numOutputsM1 = 2 - 1 (as the source passes it).
    n_out = 2 - 1
    per_vertex = 1 * n_out * (5 // 2) + 2 + 12 * n_out + 10 + 7
    assert rec.active_cycles[0] == 6 * per_vertex
    # one vertex per context: the tile takes W x the busiest context.
    assert rec.tile_cycles[0] == 6 * per_vertex


def test_generic_reduce_estimate_formula():
    target = _device().getTarget()
    cls = reduce_vertex(Operation.ADD, FLOAT, FLOAT, False, False, "SCALAR_OUTPUT_REGIONS")
    assert cls.typeName == (
        "popops::Reduce<popops::ReduceAdd,float,float,false,"
        "popops::ReductionSpecialisation::SCALAR_OUTPUT_REGIONS>"
    )
    sizes = {"partials": [3, 5], "out": 2}
    # getCyclesEstimateForReduce, outputs of one element (not padded to a vector):
    # float ADD: opVW = 4 (2 remainder checks), dpw = 2, outVW = 2, accumulators.
    # No vector loop (1 // 4 = 0); remainder bit 1: (3 + 1) + store(1) + (7 + 3) with
    # store(1) = (2 + 0) * min(1, 2) + 1; per partial element 2 + 1 // min(1, 2) + 3.
    region = 16 + 6 + 2 * 2 + 2 + (3 + 1) + (2 * 1 + 1) + (7 + 3)
    expected = 5 + 1 + 1 + 3 + 23 + (region + 3 * 6) + (region + 5 * 6)
    assert cls.getCycleEstimate(sizes, target) == expected

    upd = reduce_vertex(Operation.MAX, INT, INT, False, False, "SCALAR_OUTPUT_REGIONS")
    # INT MAX: opVW = VW(int) = 2 (1 remainder check), dpw = 2, not an accumulator op:
    # remainder bit 1: 2 + store(1) = 2 * min(1, 2) + 0, plus (7 + 3); per element 2+1+3.
    region = 16 + 6 + 2 * 1 + 2 + 2 + 2 + (7 + 3)
    assert upd.getCycleEstimate({"partials": [4], "out": 1}, target) == 7 + 26 + region + 4 * 6


def test_logical_reduce_estimate_formula():
    target = _device().getTarget()
    cls = reduce_vertex(Operation.LOGICAL_AND, BOOL, BOOL, False, False, "DEFAULT")
    # 7 + 24 + sum_r (8 + 22 + (24 + cpo 1 + conv 0) * size_r)
    expected = 7 + 24 + (8 + 22 + 25 * 3) + (8 + 22 + 25 * 5)
    assert cls.getCycleEstimate({"partials": [3, 5], "out": 2}, target) == expected


# ---------------------------------------------------------------------------- errors


def _graph_and_x(type_=FLOAT, shape=(3, 4)):
    graph = Graph(_device().getTarget())
    x = graph.addVariable(type_, list(shape), "x")
    graph.setTileMapping(x, 0)
    return graph, x


def test_dimension_out_of_range_is_a_clear_error():
    graph, x = _graph_and_x()
    with pytest.raises(TensorIndexError, match=r"dimension 2 is out of range; valid .*0\.\.1"):
        reduce(graph, x, [2], Operation.ADD, prog.Sequence())
    assert issubclass(TensorIndexError, IndexError)


def test_unsupported_type_is_a_clear_error():
    graph, x = _graph_and_x(BOOL)
    with pytest.raises(TypeMismatchError, match="ADD does not support element type bool"):
        reduce(graph, x, [0], Operation.ADD, prog.Sequence())
    graph, y = _graph_and_x(FLOAT)
    with pytest.raises(TypeMismatchError, match="LOGICAL_OR does not support element type float"):
        reduce(graph, y, [0], Operation.LOGICAL_OR, prog.Sequence())


def test_bad_params_and_outputs_are_clear_errors():
    with pytest.raises(GraphError, match="only supported with ADD and SQUARE_ADD"):
        ReduceParams(Operation.MAX, scale=2.0)
    with pytest.raises(GraphError, match="update must be True or False"):
        ReduceParams(Operation.ADD, 0.5)
    graph, x = _graph_and_x()
    with pytest.raises(GraphError, match="repeat a dimension"):
        reduce(graph, x, [0, 0], Operation.ADD, prog.Sequence())
    with pytest.raises(GraphError, match="reduceWithOutput"):
        reduce(graph, x, [0], ReduceParams(Operation.ADD, update=True), prog.Sequence())
    out = graph.addVariable(FLOAT, [3], "out")
    graph.setTileMapping(out, 1)
    with pytest.raises(GraphError, match=r"gives shape \[4\]"):
        reduceWithOutput(graph, x, out, [0], Operation.ADD, prog.Sequence())
    unmapped = graph.addVariable(FLOAT, [2, 2], "u")
    with pytest.raises(PoplarError, match="unmapped elements"):
        reduce(graph, unmapped, [0], Operation.ADD, prog.Sequence())


def test_empty_reduction_gives_the_identity_and_no_dims_is_a_scaled_copy():
    device = _device()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [3, 0], "x")
    y = graph.addVariable(FLOAT, [2, 3], "y")
    graph.setTileMapping(y, 6)
    seq = prog.Sequence()
    zeros = reduce(graph, x, [1], Operation.ADD, seq, "e-add")
    ones = reduce(graph, x, [1], Operation.MUL, seq, "e-mul")
    copy = reduce(graph, y, [], ReduceParams(Operation.ADD, scale=3.0), seq, "copy")
    assert copy.shape() == [2, 3]
    for name, t in (("zeros", zeros), ("ones", ones), ("copy", copy)):
        graph.createHostRead(name, t)
    graph.createHostWrite("y", y)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    res, _ = run_graph(
        graph,
        seq,
        device,
        {"y": data},
        {"zeros": ([3], np.float32), "ones": ([3], np.float32), "copy": ([2, 3], np.float32)},
    )
    np.testing.assert_array_equal(res["zeros"], np.zeros(3))  # sum of nothing
    np.testing.assert_array_equal(res["ones"], np.ones(3))  # product of nothing
    np.testing.assert_array_equal(res["copy"], 3.0 * data)
