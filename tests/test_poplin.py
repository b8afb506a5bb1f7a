"""poplin: matMul values against numpy, its plan, the ReduceAdd estimator and the peak bound.

References are float64 numpy products. Every run also checks, from the trace, that no
tile of a product's Convolve compute set did its flops faster than the target's peak
allows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, Engine, Graph, IPUModel, poplin, poputil
from poplar_api import program as prog
from poplar_api.codelet import vertex_type
from poplar_api.errors import PoplarError, TensorError, TypeMismatchError
from poplar_api.poplin.estimators import exchange_cycles, reduce_add_cycles
from poplar_api.poplin.vertices import reduce_add_vertex

RNG = np.random.default_rng(1234)


def tile_flops(graph: Graph, cs_name: str, num_tiles: int) -> np.ndarray:
    """Flops per tile of the partial-sum vertices of compute set ``cs_name``.

    A matMul is a 1-wide convolution: each (conv group, input group, output group)
    triple of a vertex multiplies ``in`` [m, ic] by ``weights`` [oc, ic] into ``out``
    [m, oc], so m = sqrt(|in| |out| / |weights|) etc., and it does 2 m ic oc flops.
    """
    st = graph._state
    cs = next(c for c in st.compute_sets if c.name == cs_name)
    flops = np.zeros(num_tiles, np.int64)
    for vid in cs.vertices:
        v = st.vertices[vid]
        if v.vtype.name.startswith("poplin::OuterProduct"):  # one multiply per output
            flops[v.tile] += sum(ids.size for ids in v.fields["out"])
            continue
        ins, ws, outs = ([ids.size for ids in v.fields[f]] for f in ("in", "weights", "out"))
        ncg = len(ins) * len(outs) // len(ws)
        nig, nog = len(ins) // ncg, len(outs) // ncg
        for cg in range(ncg):
            for og in range(nog):
                for ig in range(nig):
                    a, b = ins[cg * nig + ig], ws[(cg * nog + og) * nig + ig]
                    c = outs[cg * nog + og]
                    m, k, n = math.isqrt(a * c // b), math.isqrt(a * b // c), math.isqrt(b * c // a)
                    assert (m * k, k * n, m * n) == (a, b, c)
                    flops[v.tile] += 2 * m * k * n
    return flops


def check_never_faster_than_peak(engine: Engine, graph: Graph, in_type) -> int:
    """Every MatMul compute step: tile cycles x peak flops/cycle >= that tile's flops."""
    target = graph.getTarget()
    peak = target.getFpFlopsPerCycle(in_type)
    checked = 0
    for rec in engine.getTrace().records:
        if rec.kind != "compute" or not rec.name.endswith("/Convolve"):
            continue
        flops = tile_flops(graph, rec.name, target.getNumTiles())
        assert np.all(rec.tile_cycles.astype(np.int64) * peak >= flops), rec.name
        slowest = int(np.argmax(rec.tile_cycles))
        assert int(rec.tile_cycles[slowest]) * peak >= int(flops.max())
        checked += 1
    assert checked >= 1
    return checked


#: How :func:`run_product` lays out its operands.
OPERAND_LAYOUTS = ("ends", "linear", "created")


def run_product(
    preset,
    a,
    b,
    in_type=FLOAT,
    out_type=None,
    make=None,
    grouped=False,
    opts=None,
    layout="ends",
):
    """Multiply host arrays ``a`` and ``b`` on a device; return (C, engine, graph).

    ``layout`` places the operands: ``"ends"`` A whole on tile 0 and B on the last tile,
    ``"linear"`` each mapped linearly over the tiles (``poputil.mapTensorLinearly``),
    ``"created"`` made by ``createMatMulInputLHS``/``RHS`` with ``opts``, as the plan
    lays them out. ``make(graph)`` may replace the operands by views of other tensors;
    it returns (A_view, B_view, [(tensor, values)] to write).
    """
    if layout not in OPERAND_LAYOUTS:
        raise ValueError(f"layout={layout!r}: required one of {OPERAND_LAYOUTS}")
    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    nt = graph.getTarget().getNumTiles()
    if make is None:
        a_shape, b_shape = list(a.shape), list(b.shape)
        if layout == "created":
            A = poplin.createMatMulInputLHS(graph, in_type, a_shape, b_shape, "A", opts)
            B = poplin.createMatMulInputRHS(graph, in_type, a_shape, b_shape, "B", opts)
        else:
            A = graph.addVariable(in_type, a_shape, "A")
            B = graph.addVariable(in_type, b_shape, "B")
        if layout == "linear":
            poputil.mapTensorLinearly(graph, A)
            poputil.mapTensorLinearly(graph, B)
        elif layout == "ends":
            graph.setTileMapping(A, 0)
            graph.setTileMapping(B, nt - 1)
        writes = [(A, a), (B, b)]
    else:
        A, B, writes = make(graph)
    seq = prog.Sequence()
    fn = poplin.matMulGrouped if grouped else poplin.matMul
    C = fn(graph, A, B, seq, "mm", opts, out_type)
    for i, (t, _) in enumerate(writes):
        graph.createHostWrite(f"w{i}", t)
    graph.createHostRead("C", C)
    engine = Engine(graph, seq)
    engine.load(device)
    for i, (_, vals) in enumerate(writes):
        engine.writeTensor(f"w{i}", vals)
    engine.run(0)
    check_never_faster_than_peak(engine, graph, in_type)
    return engine.readTensor("C"), engine, graph


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 5, 3), (33, 17, 65)])
def test_float_matmul_matches_numpy(shape):
    m, k, n = shape
    a = RNG.uniform(0.5, 1.5, (m, k)).astype(np.float32)
    b = RNG.uniform(0.5, 1.5, (k, n)).astype(np.float32)
    c, _, _ = run_product("tiny", a, b)
    assert c.shape == (m, n) and c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_half_matmul_rounds_once_to_half():
    a = RNG.uniform(-1, 1, (33, 17)).astype(np.float16)
    b = RNG.uniform(-1, 1, (17, 65)).astype(np.float16)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    c, _, _ = run_product("tiny", a, b, HALF)
    assert c.dtype == np.float16
    # float32 accumulation, then one rounding to half: error <= half an ulp of the
    # result plus the float32 sum's own bound K * 2^-24 * (|a| @ |b|), K = 17
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    f32_bound = 17 * 2.0**-24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(c.astype(np.float64) - ref) <= 0.5 * ulp + f32_bound)


def test_half_inputs_float_output_accumulate_in_float32():
    a = RNG.uniform(0.5, 1.5, (20, 40)).astype(np.float16)
    b = RNG.uniform(0.5, 1.5, (40, 9)).astype(np.float16)
    c, _, _ = run_product("tiny", a, b, HALF, out_type=FLOAT)
    assert c.dtype == np.float32
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5)


def test_transposed_and_sliced_views_as_operands():
    # A = X^T with X [5, 7]; B = columns 2..5 and rows 1..6 of Y [8, 9] (a strided view)
    x = RNG.uniform(0.5, 1.5, (5, 7)).astype(np.float32)
    y = RNG.uniform(0.5, 1.5, (8, 9)).astype(np.float32)

    def make(graph):
        X = graph.addVariable(FLOAT, [5, 7], "X")
        Y = graph.addVariable(FLOAT, [8, 9], "Y")
        graph.setTileMapping(X, 1)
        graph.setTileMapping(Y, 2)
        return X.transpose(), Y.slice([1, 2], [6, 5]), [(X, x), (Y, y)]

    c, _, _ = run_product("tiny", None, None, make=make)
    ref = x.T.astype(np.float64) @ y[1:6, 2:5].astype(np.float64)
    np.testing.assert_allclose(c, ref, rtol=1e-5)


def test_grouped_matmul():
    a = RNG.uniform(0.5, 1.5, (3, 7, 5)).astype(np.float32)
    b = RNG.uniform(0.5, 1.5, (3, 5, 4)).astype(np.float32)
    c, _, _ = run_product("tiny", a, b, grouped=True)
    assert c.shape == (3, 7, 4)
    np.testing.assert_allclose(c, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5)


def test_k_split_with_half_partials_option():
    # force K splits with a deep K; half partials lose precision only at half level
    a = RNG.uniform(0.5, 1.5, (4, 256)).astype(np.float16)
    b = RNG.uniform(0.5, 1.5, (256, 4)).astype(np.float16)
    # the AMP (whose 16-channel grouping pads the 4 output channels, which the planner
    # charges rearrangements for) is asked for by name
    opts = {"partialsType": "half", "planConstraints": '{"method": "AMP"}'}
    c, _, graph = run_product("tiny", a, b, HALF, opts=opts)
    plan = poplin.getPlan(graph, (1, 4, 256, 4), HALF, None, opts)
    assert plan.parts[-1] > 1  # K is split, so partials exist
    names = {v.vtype.name for v in graph._state.vertices}
    assert names == {
        f"poplin::ConvPartial1x1Out<half,half,true,true,{plan.num_conv_units},4,false>",
        "poplin::ReduceAdd<half,half,false,false>",  # chunks not a multiple of 8
    }
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=4e-3)


@pytest.mark.parametrize("scale_as_tensor", [False, True])
def test_matmul_acc(scale_as_tensor):
    a = RNG.uniform(0.5, 1.5, (9, 6)).astype(np.float32)
    b = RNG.uniform(0.5, 1.5, (6, 5)).astype(np.float32)
    c0 = RNG.uniform(-1, 1, (9, 5)).astype(np.float32)
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    A = graph.addVariable(FLOAT, [9, 6], "A")
    B = graph.addVariable(FLOAT, [6, 5], "B")
    C = graph.addVariable(FLOAT, [9, 5], "C")
    for i, t in enumerate((A, B, C)):
        graph.setTileMapping(t, i)
    k = -0.5
    if scale_as_tensor:
        k = graph.addConstant(FLOAT, [1], [-0.5], "k")
        graph.setTileMapping(k, 3)
    seq = prog.Sequence()
    poplin.matMulAcc(graph, C, k, A, B, seq)
    for name, t in (("A", A), ("B", B), ("C", C)):
        graph.createHostWrite(name, t)
    graph.createHostRead("Cout", C)
    engine = Engine(graph, seq)
    engine.load(device)
    for name, v in (("A", a), ("B", b), ("C", c0)):
        engine.writeTensor(name, v)
    engine.run(0)
    ref = c0.astype(np.float64) - 0.5 * (a.astype(np.float64) @ b.astype(np.float64))
    np.testing.assert_allclose(engine.readTensor("Cout"), ref, rtol=1e-5, atol=1e-6)
    check_never_faster_than_peak(engine, graph, FLOAT)


def test_create_matmul_inputs_reduce_exchange():
    a = RNG.uniform(0.5, 1.5, (48, 32)).astype(np.float32)
    b = RNG.uniform(0.5, 1.5, (32, 24)).astype(np.float32)

    def planned(graph):
        A = poplin.createMatMulInputLHS(graph, FLOAT, [48, 32], [32, 24], "A")
        B = poplin.createMatMulInputRHS(graph, FLOAT, [48, 32], [32, 24], "B")
        return A, B, [(A, a), (B, b)]

    c1, e1, _ = run_product("tiny", None, None, make=planned)
    c2, e2, _ = run_product("tiny", a, b)  # operands on tiles 0 and 7
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c1, ref, rtol=1e-5)
    np.testing.assert_allclose(c2, ref, rtol=1e-5)

    def exchange_in(engine):
        (rec,) = [r for r in engine.getTrace().records if r.name == "mm/Convolve/ExchangeIn"]
        return rec.last_cycle - rec.first_cycle

    assert exchange_in(e1) < exchange_in(e2)


@pytest.mark.parametrize("grouped", [False, True])
def test_matmul_on_mk2(grouped):
    shape_a, shape_b = ((2, 40, 64), (2, 64, 30)) if grouped else ((70, 64), (64, 50))
    a = RNG.uniform(0.5, 1.5, shape_a).astype(np.float32)
    b = RNG.uniform(0.5, 1.5, shape_b).astype(np.float32)
    c, _, _ = run_product("mk2", a, b, grouped=grouped)
    np.testing.assert_allclose(c, np.matmul(a.astype(np.float64), b.astype(np.float64)), rtol=1e-5)


# ----------------------------------------------------------------------- planner
def test_planner_choice_worked_by_hand():
    # tiny: 8 tiles, 6 workers, 4 exchange bytes/cycle. [480,16] x [16,8] FLOAT is a
    # 1-wide convolution of 480 positions, 16 -> 8 channels: one AMP group each way
    # (float: 8 input channels x 2 groups, 8 conv units). Splitting M over the 8 tiles
    # gives 60 rows per tile, 10 per worker, on ConvPartial1x1Out (Poplibs
    # getConvPartial1x1SupervisorCycleEstimate, float acts and partials):
    #   worker(10, zeroing) = 46 + (2 + 4*10) + 7*8 = 144; without zeroing 46 + 56 = 102
    #   inner = max(slowest, fastest + 14) over workers x 6 (all equal here):
    #     6 * 144 + 14 = 878 (first input group), 6 * 102 + 14 = 626 (second)
    #   weight loads = 8 units * 32 B / 16 B per cycle = 16; common path (float partials)
    #   second in-group: 15 - 1 + 1 + (19 + (6 + 16 + 626)) = 682
    #   first in-group: 10 + 1 + (19 - 1 + (7 + 16 + 878)) = 930
    #   total = 50 + (12 + 1 + 682 + 930) = 1675
    # (tiny's float peak also allows 16 conv units, but with 8 output channels padded to
    #  16: zpg 8, worker 46 + (2 + 80) + 56 = 184, loads 32 -> 50 + 13 + 698 + 1186 = 1947.)
    # Exchange: each tile holds its 60 rows of A; it lacks 7/8 of B's 128 floats:
    #   112 floats = 448 B -> 448 / 4 = 112 cycles + 190 phase = 302.
    # Poplibs' transform estimate of an unswapped product (addTransformCycleEstimate):
    #   inputs, weights and output rearranged, each tensor's bytes over the 8 tiles,
    #   copied at min(8 B memcpy, 4 B) per cycle times 4/5 (128 and 8 channels are
    #   multiples of 2) and exchanged at 4 B per cycle:
    #   in 480*16*4/8 = 3840 B: 3840*5/16 = 1200 + 960; weights 16*8*4/8 = 64 B: 20 + 16;
    #   out 480*8*4/8 = 1920 B: 600 + 480 -> 3276.
    # (Asked for unswapped: the swapped product pays no rearrangement and is cheaper.)
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    unswapped = {"planConstraints": '{"transform": {"swapOperands": false}}'}
    plan = poplin.getPlan(graph, (1, 480, 16, 8), FLOAT, options=unswapped)
    assert plan.method == "AMP" and not plan.swapped
    assert plan.parts == (1, 1, 8, 1, 1)
    assert plan.blocks == (1, 1, 60, 8, 16)
    # (one pass: no serial slices, updates or sums)
    assert plan.cost == {
        "compute": 1675, "exchange": 302, "reduce": 0, "transform": 3276, "serial_copy": 0,
        "total": 5253,
    }  # fmt: skip
    assert sorted(plan.tiles.reshape(-1).tolist()) == list(range(8))


def test_planner_respects_memory_proportion():
    # [8,4096] x [4096,1] FLOAT on 8 tiles of 64 KiB: the A block alone is 128 KiB, so
    # only splits of K bring the working set under 0.6 * 64 KiB = 39,321 bytes.
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    plan = poplin.getPlan(graph, (1, 8, 4096, 1), FLOAT)
    assert plan.memory_bytes <= 0.6 * 65536
    assert plan.parts[-1] > 1


# -------------------------------------------------------------------- estimators
def test_reduce_add_estimates_follow_the_formula():
    # getReduceCycleEstimate, lib/poplin/PerformanceEstimation.hpp at poplibs 7eac0f26
    target = IPUModel("ipu2").createDevice().getTarget()
    # single input, FLOAT->FLOAT, 4 exchanged partials of 100 (and the tile's own): accVW
    #   4, cpl 4/min(4,2) = 2, outer 8, vectors 25 -> 5 per worker: (20 + (2*4 + 8)*5)*6
    #   + 33 = 633
    vt = vertex_type(reduce_add_vertex(FLOAT, FLOAT, single_input=True))
    assert vt.estimate({"partials": 400, "initialPartial": 100, "out": 100}, target) == 633
    # HALF->HALF single input, 3 partials of 64: accVW 8, cpl 8/min(8,4) = 2, outer 9
    #   (HALF output), vectors 8 -> 2 per worker: (20 + (6 + 9)*2)*6 + 33 = 333
    assert reduce_add_cycles(3, 64, 2, 2, 6) == 333
    # constrained partials load 8 halves a cycle: cpl 1: (20 + (3 + 9)*2)*6 + 33 = 297
    assert reduce_add_cycles(3, 64, 2, 2, 6, constrain_partials=True) == 297
    # scaled update adds 2 per vector to the outer cost: (20 + (8 + 10)*5)*6 + 33 = 693
    up = vertex_type(reduce_add_vertex(FLOAT, FLOAT, update=True, single_input=True))
    assert up.estimate({"partials": 400, "initialPartial": 100, "out": 100, "scale": 1},
                       target) == 693  # fmt: skip
    # several inputs, FLOAT->FLOAT, 4 partials of 100: cpl 4/2 + 1 = 3, loops 25 (100
    #   has no bit below 4), 25 = 4*6 + 1 and 100 % 4 == 0 -> 5 per worker:
    #   (32 + (3*4 + 7)*5)*6 = 762
    mv = vertex_type(reduce_add_vertex(FLOAT, FLOAT))
    assert mv.estimate({"partials": [100] * 4, "out": 100}, target) == 762
    # several inputs, HALF->FLOAT, 2 partials of 13: accVW 8, loops 1 + bits 1 and 4
    #   of 13 = 3, under 6 workers and 13 % 8 != 0: the remainder term 2*2 + 11 and
    #   0 loops per worker: (32 + 15)*6 = 282
    assert reduce_add_cycles(2, 13, 2, 4, 6, single_input=False) == 282


def test_exchange_estimator():
    assert exchange_cycles(448, 4.0) == 112  # 448*16 / 64
    assert exchange_cycles(5, 4.0) == 2  # ceil(80 / 64)
    assert exchange_cycles(7, 2.5) == 3  # ceil(112 / 40)


# ------------------------------------------------------------------------ errors
def _graph():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    return graph, prog.Sequence()


def test_inner_dimension_mismatch_names_both_shapes():
    graph, seq = _graph()
    A = graph.addVariable(FLOAT, [7, 5], "A")
    B = graph.addVariable(FLOAT, [4, 3], "B")
    with pytest.raises(TensorError, match=r"inner dimensions differ.*\[7, 5\].*\[4, 3\]"):
        poplin.matMul(graph, A, B, seq)


def test_rank_mismatch_and_type_mismatch():
    graph, seq = _graph()
    A = graph.addVariable(FLOAT, [7, 5], "A")
    B3 = graph.addVariable(FLOAT, [2, 5, 3], "B3")
    with pytest.raises(TensorError, match="rank mismatch"):
        poplin.matMul(graph, A, B3, seq)
    Bh = graph.addVariable(HALF, [5, 3], "Bh")
    with pytest.raises(TypeMismatchError, match=r"float.*half"):
        poplin.matMul(graph, A, Bh, seq)
    Ai = graph.addVariable(INT, [7, 5], "Ai")
    Bi = graph.addVariable(INT, [5, 3], "Bi")
    with pytest.raises(TypeMismatchError, match="FLOAT or HALF"):
        poplin.matMul(graph, Ai, Bi, seq)
    with pytest.raises(PoplarError, match="not recognised"):
        poplin.matMul(graph, A, graph.addVariable(FLOAT, [5, 3]), seq, options={"bogus": 1})
    assert issubclass(TensorError, ValueError) and issubclass(TypeMismatchError, TypeError)
